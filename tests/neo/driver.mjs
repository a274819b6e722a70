// The real-client test tier's driver: calls neo's own memory-core code (installed from the npm
// registry by hack/install-neo.sh; none of it is in this repository) on behalf of the Python
// tests (tests/support/neo.py). Reads one JSON array of operations on stdin, runs them in
// order in this one process, and prints one JSON array of results on stdout.
//
// Settings come from the environment, exactly as neo reads them (NEO_CHROMA_HOST,
// NEO_CHROMA_PORT, NEO_EMBEDDING_PROVIDER, NEO_OPENAI_COMPATIBLE_HOST, NEO_VECTOR_DIMENSION,
// NEO_MEMORY_WAL_DIR, NEO_MEMORY_DB_PATH, NEO_MEMORY_SHARING_DEFAULT_POLICY, ...).
// NEO_CLIENT_DIR is the installed neo.mjs package directory.

import path           from 'node:path';
import {pathToFileURL} from 'node:url';

const root = process.env.NEO_CLIENT_DIR;
if (!root) {
    console.error('NEO_CLIENT_DIR is not set (hack/install-neo.sh prints it)');
    process.exit(2);
}
const load = async relative => (await import(pathToFileURL(path.join(root, relative)).href));

// neo's own entry points import these three before any service (ai/daemons/embed/daemon.mjs).
await load('src/Neo.mjs');
await load('src/core/_export.mjs');
await load('src/manager/Instance.mjs');

const aiConfig              = (await load('ai/mcp/server/memory-core/config.mjs')).default;
const MemoryService         = (await load('ai/services/memory-core/MemoryService.mjs')).default;
const SummaryService        = (await load('ai/services/memory-core/SummaryService.mjs')).default;
const SessionService        = (await load('ai/services/memory-core/SessionService.mjs')).default;
const StorageRouter         = (await load('ai/services/memory-core/managers/StorageRouter.mjs')).default;
const {drainWalOnce}        = await load('ai/daemons/embed/drainCycle.mjs');
const requestContext        = await load('ai/mcp/server/shared/services/RequestContextService.mjs');
const identityRoots         = await load('ai/graph/identityRoots.mjs');
const RequestContextService = requestContext.default;

// Runs fn as neo's transport does for an authenticated request (a tenant), or without a
// request context (stdio / daemon: single-tenant mode) when no userId is given.
function asTenant(userId, fn) {
    if (!userId) return fn();
    return RequestContextService.run({userId, agentIdentityNodeId: `@${userId}`, source: 'env-var'}, fn);
}

async function drain() {
    // The embed daemon's drain (ai/daemons/embed/daemon.mjs runs the same drainWalOnce).
    const collection = await StorageRouter.getMemoryCollection();
    const totals     = {embedded: 0, failed: 0, cycles: 0};
    for (let cycle = 0; cycle < 50; cycle++) {
        const summary = await drainWalOnce({
            dir              : aiConfig.memoryWal.dir,
            collection,
            batchSize        : aiConfig.memoryWal.batchSize,
            maxRetries       : 2,
            backoffBaseMs    : 50,
            retentionLimit   : aiConfig.memoryWal.retentionLimit,
            expectedDimension: aiConfig.vectorDimension,
            retryState       : new Map(),
            log              : () => {}
        });
        totals.embedded += summary.embedded;
        totals.failed   += summary.failed + summary.metadataOnly;
        totals.cycles++;
        if (summary.pending === summary.embedded || summary.pending === 0) break;
    }
    return totals;
}

const operations = {
    async config() {
        return {
            memorySharing  : aiConfig.memorySharing.defaultPolicy,
            vectorDimension: aiConfig.vectorDimension,
            provider       : aiConfig.embeddingProvider,
            collections    : {memory: aiConfig.collections.memory, session: aiConfig.collections.session}
        };
    },
    // MemoryService.addMemory, one call per memory (as an agent's per-turn save does).
    async add({memories}) {
        const results = [];
        for (const {userId, ...memory} of memories) {
            results.push(await asTenant(userId, () => MemoryService.addMemory(memory)));
        }
        return results;
    },
    drain,
    async list({userId, ...options}) {
        return asTenant(userId, () => SummaryService.listSummaries(options));
    },
    // listSummaries timed inside this process, so node's start-up is not counted
    // (bench/boot_read.py): one untimed call first (it opens the collection, as a boot
    // does), then `repeats` timed calls; their milliseconds and the last call's count/total.
    async timedList({userId, repeats = 5, ...options}) {
        const call = () => asTenant(userId, () => SummaryService.listSummaries(options));
        let last = await call();
        const ms = [];
        for (let i = 0; i < repeats && !last.error; i++) {
            const started = performance.now();
            last = await call();
            ms.push(performance.now() - started);
        }
        if (last.error) return last;
        return {ms, count: last.count, total: last.total, first: last.summaries[0]?.sessionId ?? null};
    },
    async query({userId, ...options}) {
        return asTenant(userId, () => SummaryService.querySummaries(options));
    },
    // neo's own summary writer (what its orchestrator's summary task runs per session).
    async summarize({sessionId, userId}) {
        await SessionService.ready();
        return asTenant(userId, () => SessionService.summarizeSession(sessionId));
    },
    // neo's provenance and visibility rules, for property tests against ours.
    async provenance({cases}) {
        return cases.map(metadatas => SessionService.constructor.resolveSummarySourceProvenance(metadatas));
    },
    async visibility({cases}) {
        return cases.map(c => requestContext.resolveSummaryVisibilityUserId(c) ?? null);
    },
    async constants() {
        return {
            coreSwarmUserIds: [...requestContext.CORE_SWARM_USER_IDS],
            sharedUserId    : requestContext.SHARED_USER_ID,
            trustTierOrder  : [...identityRoots.TRUST_TIER_ORDER],
            identityTrustTiers: Object.fromEntries(identityRoots.IDENTITIES.map(
                identity => [identity.id, identity.properties?.trustTier || 'unclassified']
            ))
        };
    }
};

// stdin read as a stream: readFileSync(0) fails with EAGAIN when the input is larger than
// the pipe's buffer and the pipe is non-blocking (the writer has not sent it all yet).
const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const input   = JSON.parse(Buffer.concat(chunks).toString('utf8'));
const results = [];
let   status  = 0;
for (const {op, ...args} of input) {
    try {
        if (!operations[op]) throw new Error(`unknown operation ${op}`);
        results.push({ok: true, value: await operations[op](args)});
    } catch (error) {
        status = 1;
        results.push({ok: false, error: String(error?.stack || error)});
        break;
    }
}
process.stdout.write(JSON.stringify(results));
// neo's services keep handles open (timers, the graph database): end explicitly.
process.exit(status);
