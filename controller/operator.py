"""The operator process: kopf settings and `python -m controller run`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import datetime as dt
import gc
import importlib
import logging
import os
import random
import sys
import time
from typing import Any

import kopf

import controller.handlers  # noqa: F401  (registers the handlers)
from controller import metrics
from controller.api import FINALIZER, LEGACY_FINALIZERS
from controller.config import CONFIG
from controller.kube.claim_collector import ClaimCollector
from controller.kube.client import release_finalizers
from controller.kube.peering import (
    PRIORITY_STEP,
    PeeringView,
    ensure_peering_object,
    joining_priority,
    live_peers,
    priority_conflicts,
    read_peering,
    watch_leader,
)
from controller.metrics import start_metrics_server
from controller.runtime import PEERING_NAME, RunOptions, Runtime, WriteWatcher

log = logging.getLogger("controller.operator")


def _leader_watcher(runtime: Runtime) -> Any:
    def changed(leader: str | None, previous: str | None) -> None:
        runtime.leader = leader
        metrics.set_active_replica(CONFIG.replica_id, leader == CONFIG.replica_id)
        role = "this replica" if leader == CONFIG.replica_id else "another replica"
        if leader is None:
            log.warning("no active replica (peers share the top priority, or none is alive)")
        else:
            log.info("active replica is now %s (%s; was %s)", leader, role, previous)

    return changed


async def _trim_heap(interval: float = 30.0) -> None:
    """Frees what is unreachable and hands freed heap pages back to the OS. A retired
    SessionSummarizer's clients (chromadb's, openai's) are reference cycles, which only a
    full collection frees (measured before the start was frozen: RSS +87 MiB over 100
    reconfigured and deleted SessionSummarizers with no full collection, tests/integration/
    test_runtime_lifecycle.py); this one comes once an interval, whatever Python's own
    trigger does (it counts the survivors of the last full collection), and walks only what
    was built after the start (freeze_startup_objects). kopf's initial list of every object
    leaves the heap fragmented, and glibc keeps the freed memory unless asked (malloc_trim)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        libc = None

    def trim() -> None:
        gc.collect()
        if libc is not None:
            libc.malloc_trim(0)

    while True:
        await asyncio.sleep(interval)
        await asyncio.to_thread(trim)


def _choose_priority(run: RunOptions) -> int:
    """SSO_PEERING_PRIORITY when set; else below every live replica's (joining_priority),
    so this replica never preempts a live leader."""
    if CONFIG.peering_priority is not None:
        return CONFIG.peering_priority
    if run.standalone:
        return 0
    try:
        status = read_peering(run.peering, run.namespaces)
    except Exception as exc:  # nobody to rank below that we can see: the top
        log.warning("could not read the peering object to choose a priority: %s", exc)
        status = {}
    live = live_peers(status, dt.datetime.now(dt.UTC))
    draw = random.SystemRandom().randint(1, PRIORITY_STEP)
    return joining_priority(live, CONFIG.replica_id, draw)


async def _collect_abandoned_claims(interval: float) -> None:
    """Deletes the claims of writers that died (kube/claims.py:ClaimCollector), on its own
    timer: also when every sweep is off. What it has seen lives in this task only."""
    collector = ClaimCollector(
        default_duration_s=CONFIG.claim_ttl_seconds, grace_s=CONFIG.claim_ttl_seconds
    )
    while True:
        try:
            deleted = await asyncio.to_thread(collector.collect)
        except Exception as exc:  # the API server may be away for a while: next round
            log.warning("collecting abandoned claims failed: %s", exc)
        else:
            if deleted:
                log.info("deleted %d abandoned session claims", deleted)
        await asyncio.sleep(interval)


class StatusDiffBase(kopf.MultiDiffBaseStorage):
    """kopf's record of the last handled spec, in `status.lastHandledConfiguration`: it goes
    with the status a pass writes anyway, one patch and one watch event per pass, not a
    second patch of an annotation. Read from that annotation when the status holds none
    (objects written before): an upgrade starts no pass."""

    def __init__(self, prefix: str) -> None:
        self.status = kopf.StatusDiffBaseStorage(field="status.lastHandledConfiguration")
        legacy = kopf.AnnotationsDiffBaseStorage(prefix=prefix, key="last-handled-configuration")
        super().__init__([self.status, legacy])

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        self.status.store(body=body, patch=patch, essence=essence)


class UnmarkedProgress(kopf.AnnotationsProgressStorage):
    """kopf's progress of a retried handler, in annotations under our prefix, without kopf's
    `<prefix>/kopf-managed` marker: it costs each new object a patch of its own, to tell
    other kopf operators to leave our annotations out of their diffs (ours leave out every
    annotation under our prefix, marker or not: kopf's `clear`). `_store_marker` is kopf's own
    hook for it (tests/unit/test_kopf_records.py fails if kopf renames it)."""

    def _store_marker(self, prefix: str, patch: kopf.Patch, body: kopf.Body) -> None:
        return None


@kopf.on.startup()
async def configure(
    settings: kopf.OperatorSettings, logger: kopf.Logger, memo: kopf.Memo, **_: Any
) -> None:
    runtime = Runtime.of(memo)
    run, tasks = runtime.options, runtime.tasks
    prefix = CONFIG.annotation_prefix
    # Progress annotations under our own group, not kopf's shared prefix; the diff base in
    # the status.
    settings.persistence.progress_storage = UnmarkedProgress(prefix=prefix)
    settings.persistence.diffbase_storage = StatusDiffBase(prefix)
    settings.persistence.finalizer = FINALIZER
    # Events go through the EventRecorder (one per state change, repeats counted).
    settings.posting.enabled = False
    settings.watching.server_timeout = 300
    settings.execution.max_workers = 16
    # Memory with many objects: the initial list comes in pages, not one 10k-object body,
    # and a per-object worker (which holds the object's last body) exits soon after its
    # event instead of 5 s later, so the bodies of a whole listing are never alive at once.
    # Freed, they would leave the heap fragmented: RSS stays at the peak.
    if CONFIG.list_chunk_size > 0:
        settings.watching.chunk_size = CONFIG.list_chunk_size
    settings.queueing.idle_timeout = CONFIG.worker_idle_seconds
    settings.peering.lifetime = CONFIG.peering_lifetime
    # kopf retries a startup handler that raised (the peering object below, say): what
    # this process starts is started once.
    if CONFIG.metrics_port > 0 and runtime.metrics_server is None:
        runtime.metrics_server = start_metrics_server(CONFIG.metrics_port, CONFIG.metrics_address)
    metrics.set_build_info()
    metrics.watch_pools(runtime.scheduler.pools)
    metrics.watch_runtime_parts(runtime.parts.count)
    loop = asyncio.get_running_loop()
    if not tasks:
        tasks.add(loop.create_task(_trim_heap(CONFIG.heap_trim_seconds)))
        tasks.add(loop.create_task(_collect_abandoned_claims(CONFIG.claim_collect_seconds)))
    if run.standalone:
        metrics.set_active_replica(CONFIG.replica_id, True)
    else:
        await asyncio.to_thread(ensure_peering_object, run.peering, run.namespaces)
        await asyncio.to_thread(_warn_priority_conflict, run)
    settings.peering.priority = await asyncio.to_thread(_choose_priority, run)
    logger.info(
        "replica %s starting (peering %s, priority %d, lifetime %ds)",
        CONFIG.replica_id,
        "off (standalone)" if run.standalone else run.peering,
        settings.peering.priority,
        CONFIG.peering_lifetime,
    )
    task = loop.create_task(
        watch_leader(
            CONFIG.replica_id,
            run.peering,
            run.namespaces,
            _leader_watcher(runtime),
            runtime.events,
            standalone=run.standalone,
            grace_s=2.0 * CONFIG.peering_lifetime,
            resync_s=CONFIG.replica_resync_seconds,
            nudged=runtime.summarizers_changed,
            priority=settings.peering.priority,
        )
    )
    tasks.add(task)
    freeze_startup_objects()


# Imported by the first calls, not at the start: the kubernetes client's API modules with
# their models (about 250 modules, 89k objects), httpx's transport, pydantic's validate_call.
FIRST_CALLS_IMPORT = (
    "kubernetes.client.api.core_v1_api",
    "kubernetes.client.api.custom_objects_api",
    "httpcore",
    "pydantic.validate_call_decorator",
)


def freeze_startup_objects() -> int:
    """Takes what the process built to start out of the collector's sight (about 190k
    objects: the modules, classes and functions it imported, the first calls' imports among
    them, kopf's and the runtime's parts), after a last collection of what is garbage
    already. None of it is ever garbage, yet every full collection walked all of it with the
    interpreter held: every thread stopped for it, a sunset's pass too. Measured under the
    sunset bench's load: full collections every 6 to 13 s of 110 to 200 ms each, and the
    slowest sunsets after the first began within 0.5 s before one (docs/benchmarks.md).
    Returns how many objects are frozen."""
    for name in FIRST_CALLS_IMPORT:
        with contextlib.suppress(ImportError):  # renamed by a later release: less frozen
            importlib.import_module(name)
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


@kopf.on.cleanup()
async def begin_stopping(memo: kopf.Memo, **_: Any) -> None:
    """kopf stops (SIGTERM): queued passes are cancelled with their handlers; running ones
    are told to stop at their next chunk boundary (a checkpoint, then the claim released).
    Our own tasks end now (kopf would give them 5 s before cancelling them)."""
    runtime = Runtime.of(memo)
    runtime.stopping.set()
    for task in list(runtime.tasks):
        task.cancel()
    await asyncio.gather(*runtime.tasks, return_exceptions=True)
    runtime.tasks.clear()


def _warn_priority_conflict(run: RunOptions) -> None:
    """An explicit SSO_PEERING_PRIORITY that a live replica already has: kopf will pause
    both, and nothing will be summarized. Said loudly at start (the ReplicaActive condition
    says it on every SessionSummarizer once kopf sees the tie)."""
    if not os.environ.get("SSO_PEERING_PRIORITY"):
        return
    try:
        status = read_peering(run.peering, run.namespaces)
    except Exception as exc:  # the watcher reports later; this is only an early warning
        log.debug("could not read the peering object at start: %s", exc)
        return
    view = PeeringView(live_peers(status, dt.datetime.now(dt.UTC)))
    assert CONFIG.peering_priority is not None
    others = priority_conflicts(view, CONFIG.replica_id, CONFIG.peering_priority)
    if others:
        log.error(
            "SSO_PEERING_PRIORITY=%d is also the priority of live replica(s) %s: kopf will "
            "pause all of them and nothing will be summarized; give each replica its own "
            "priority or leave SSO_PEERING_PRIORITY unset",
            CONFIG.peering_priority,
            ", ".join(others),
        )


def quiet_timer_successes(record: logging.LogRecord) -> bool:
    message = record.getMessage()
    return not (message.startswith("Timer ") and message.endswith(" succeeded."))


def run(argv: list[str] | None = None, *, watch_writes: WriteWatcher | None = None) -> None:
    """The operator process. watch_writes: sees every store write (upsert.WriteEvent); the
    chaos tests' journal (devenv.operator), nobody in the product."""
    parser = argparse.ArgumentParser(prog="session-summary-operator")
    parser.add_argument(
        "--namespace",
        "-n",
        action="append",
        default=[],
        help="watch this namespace (repeatable); default: SSO_NAMESPACES or all",
    )
    parser.add_argument(
        "--standalone",
        action="store_true",
        help="no peering: this process is the only replica (local use)",
    )
    parser.add_argument(
        "--peering",
        default=PEERING_NAME,
        help="kopf peering object name (dedicated, never kopf's 'default')",
    )
    parser.add_argument(
        "--liveness", default=None, help="liveness endpoint, e.g. http://0.0.0.0:8080/healthz"
    )
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    namespaces = args.namespace or list(CONFIG.namespaces)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    options = RunOptions(
        standalone=args.standalone, peering=args.peering, namespaces=tuple(namespaces)
    )
    os.environ["POD_ID"] = CONFIG.replica_id  # kopf's peering identity = ours
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per Chroma call otherwise
    # kopf logs each timer run that succeeded: every tick of every SessionSummarizer.
    logging.getLogger("kopf.objects").addFilter(quiet_timer_successes)
    runtime = Runtime.start(CONFIG, options=options, watch_writes=watch_writes)
    loop = asyncio.new_event_loop()
    try:
        kopf.run(
            clusterwide=not namespaces,
            namespaces=namespaces,
            standalone=args.standalone,
            # A dedicated peering object (mandatory: without its CRD the operator waits
            # rather than risk a second writer); none at all when standalone.
            peering_name=None if args.standalone else args.peering,
            liveness_endpoint=args.liveness,
            memo=kopf.Memo(runtime=runtime),
            loop=loop,
        )
    finally:
        shut_down(runtime)
        loop.close()  # does not wait for threads still in a call (asyncio.run would)
    # A thread still blocked in a call (a health probe, a Chroma request, an abandoned
    # pass) would hold the interpreter's exit until the call times out: the stop is
    # bounded by SSO_SHUTDOWN_SECONDS, so the process ends here.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def shut_down(runtime: Runtime) -> None:
    """The end of a stop, after kopf has stopped (docs/operations.md, "Shutdown"): running
    passes get SSO_SHUTDOWN_SECONDS to write their checkpoint and release their claims (a
    pass still running then is abandoned: its claim lapses), then, on the replica that led,
    our finalizer is released from every SessionSummarizer it served (the next leader puts
    it back at once; after an uninstall, nothing is left to block their deletion), then the
    queued Events are posted."""
    started = time.monotonic()
    left = runtime.stop_passes(CONFIG.shutdown_seconds)
    if left:
        log.warning(
            "%d summarization(s) still running after %.0fs: abandoned; their session claims "
            "lapse and the next replica resumes them",
            left,
            CONFIG.shutdown_seconds,
        )
    if runtime.options.standalone or runtime.leader == CONFIG.replica_id:
        try:
            released = release_finalizers(
                runtime.options.namespaces, (FINALIZER, *LEGACY_FINALIZERS)
            )
            if released:
                log.info("released the finalizer of %d SessionSummarizer(s)", released)
        except Exception as exc:  # the API server may be gone too: say it, still exit
            log.warning("could not release the SessionSummarizers' finalizer: %s", exc)
    runtime.close(events_timeout_s=2.0)
    log.info("stopped in %.1fs", time.monotonic() - started)
