"""Fact retention: how many planted facts a session summary still holds after many passes.

Real parts: a Chroma server and the whole write path (summarize_session: read the prior
row, the memories after its watermark, one pass, validate, embed, upsert), the model backend
against the OpenAI-compatible test server over real HTTP, and the extractive backend.

Each session grows by one chunk of memories per pass (>= 10 passes), each chunk with two
planted facts (a request and a decision, each with a unique number), and is summarized
after every chunk: an incremental pass over the stored summary. The scripted model is lossy
the way real ones are when asked to summarize what is in front of them: its reply holds
only the facts of the newest chunk. In the same run, the naive baseline summarizes only the
newest chunk (same model replies, same extractive code) and overwrites the summary.

A fact counts as retained when its unique number is in the final stored document. Each
backend's line also gives the share of the agent's actions kept (`agent_actions=<pct>`).

    .venv/bin/python -m bench.fact_retention [--sessions 4] [--passes 12] [--quick]

Last line: fact_retention ours=<pct> naive=<pct> passes=<n>

--long: one long session with the extractive backend: `--requests` requests (200) over
`--passes` passes (40), each request a unique instruction, summarized after every pass
through the whole write path. The share of requests the stored summary keeps (its
ledger's sectionsJson: kept), and the size of the document (chars) agents read against
its bound. Last line:
fact_retention_long requests=<n> passes=<n> kept=<pct> chars=<n> bound=<n>
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):  # `python bench/fact_retention.py` from the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from controller.core.document import render_document
from controller.core.memories import Memory, render_interaction_document
from controller.core.summary import StructuredSummary
from controller.embeddings.remote import OpenAICompatibleEmbedding
from controller.pipeline import Backends, run_pass, summarize_session
from controller.store.connection import StoreLocation, connect
from controller.store.memory_store import MemoryStore
from controller.summarizers.chat_model import ChatModelSummarizer
from controller.summarizers.chat_prompt import ChatModelConfig
from controller.summarizers.contract import Summarizer
from controller.summarizers.extractive import EXTRACTIVE
from devenv.bench import QuickRuns, bench_chroma, parse_bench_args
from tests.support.openai_server import Reply, running_openai_server

# The smoke tier (tests/bench) runs `--quick` plus each argument list and checks that the
# last line has the format documented above (docs/benchmarks.md, "Quick mode").
QUICK_RUNS: QuickRuns = [
    ([], "fact_retention ours=<pct> naive=<pct> passes=<n>"),
    (
        ["--long"],
        "fact_retention_long requests=<n> passes=<n> kept=<pct> chars=<n> bound=<n>",
    ),
]
COMPONENTS = ("exporter", "scheduler", "gateway", "indexer", "cache", "router")


@dataclass(frozen=True)
class Fact:
    marker: str  # unique in the whole run: the fact is retained iff this is in the summary
    request: str | None = None  # what the user asked (a prompt)
    decision: str | None = None  # what was decided (a response)


def chunk_facts(session: int, step: int) -> list[Fact]:
    component = COMPONENTS[(session + step) % len(COMPONENTS)]
    port = 40_000 + session * 100 + step
    timeout = 1_000 + session * 100 + step
    return [
        Fact(f"port {port}", request=f"Please make the {component} listen on port {port}."),
        Fact(
            f"{timeout} ms",
            decision=f"We decided to set the {component} timeout to {timeout} ms.",
        ),
    ]


def action_fact(session: int, step: int) -> Fact:
    """What the agent did in the chunk, said in passing in a response (no decision cue)."""
    component = COMPONENTS[(session + step) % len(COMPONENTS)]
    attempts = 3_000 + session * 100 + step
    said = f"Raised the {component} retry budget to {attempts} attempts; the tests pass."
    return Fact(f"{attempts} attempts", decision=said)


def chunk_rows(sid: str, session: int, step: int) -> list[tuple[str, str, dict[str, Any]]]:
    """The chunk's memories: the three fact-bearing turns and one turn of routine work."""
    request, decision = chunk_facts(session, step)
    action = action_fact(session, step)
    turns = [
        (request.request or "", "Checking the config.", action.decision or ""),
        ("", "Reading the code.", decision.decision or ""),
        ("", "Running the test suite.", "All tests pass."),
        ("", "Looking at the logs.", "Nothing unusual in the logs."),
    ]
    return interaction_rows(sid, session, step, turns)


def interaction_rows(
    sid: str, session: int, step: int, turns: list[tuple[str, str, str]]
) -> list[tuple[str, str, dict[str, Any]]]:
    """Chroma rows of one chunk's (prompt, thought, response) turns: ids and timestamps
    ordered by session, step and turn (bench/references.py uses it too)."""
    rows = []
    for i, (prompt, thought, response) in enumerate(turns):
        n = step * 10 + i
        meta = {
            "sessionId": sid,
            "timestamp": 1_760_000_000_000 + session * 10_000_000 + n * 1000,
            "type": "agent-interaction",
            "prompt": prompt,
            "thought": thought,
            "response": response,
            "agent": "claude-code",
            "model": "claude-sonnet",
        }
        doc = render_interaction_document(prompt, thought, response)
        rows.append((f"{sid}-{n:05d}", doc, meta))
    return rows


def lossy_model_reply(session: int, step: int) -> dict[str, Any]:
    """What a model that forgets everything before the newest chunk would answer."""
    request, decision = chunk_facts(session, step)
    return {
        "title": f"Service configuration, session {session}",
        "category": "feature",
        "user_requests": [request.request],
        "questions_and_decisions": [decision.decision, action_fact(session, step).decision],
        "design_choices": [],
        "corrections_and_feedback": [],
        "current_state": [f"Pass {step} done; tests pass."],
    }


def retained(document: str, facts: list[Fact]) -> int:
    return sum(1 for f in facts if f.marker in document)


@dataclass
class Tally:
    facts: int = 0
    ours: int = 0
    naive: int = 0
    tokens: int = 0
    actions: int = 0  # of them, what the agent did (action_fact)
    actions_kept: int = 0


def run_backend(
    name: str,
    store: MemoryStore,
    summarizer: Summarizer,
    naive_pass: Callable[[str, list[Memory]], StructuredSummary],
    script: Callable[[int, int], None],
    sessions: int,
    passes: int,
    embed: Callable[[list[str]], list[Any]],
) -> Tally:
    """Ours: one summarize_session per chunk. Naive: the newest chunk alone, overwriting."""
    tally = Tally()
    for session in range(sessions):
        sid = f"facts-{name}-{session}"
        facts: list[Fact] = []
        actions: list[Fact] = []
        naive_document = ""
        for step in range(passes):
            rows = chunk_rows(sid, session, step)
            store.create_memory_collection().add(  # memory vectors are never read: placeholders
                ids=[r[0] for r in rows],
                documents=[r[1] for r in rows],
                metadatas=[r[2] for r in rows],
                embeddings=np.ones((len(rows), 2), dtype=np.float32),
            )
            facts += chunk_facts(session, step)
            actions.append(action_fact(session, step))
            script(session, step)
            outcome = summarize_session(
                Backends(store, embed, summarizer=summarizer), sid, writer="bench", trigger="manual"
            )
            assert outcome.kind == "summarized" and outcome.passes == 1, outcome
            tally.tokens += outcome.tokens_used
            ids = {r[0] for r in rows}
            newest = [m for m in store.session_rows(sid).memories() if m.id in ids]
            script(session, step)
            naive_document = render_document(naive_pass(sid, newest))
        got = store.summaries().get(ids=[f"summary_{sid}"], include=["documents"])
        document = (got["documents"] or [""])[0] or ""
        ours = retained(document, facts + actions)
        naive = retained(naive_document, facts + actions)
        tally.actions += len(actions)
        tally.actions_kept += retained(document, actions)
        tally.facts, tally.ours, tally.naive = (
            tally.facts + len(facts) + len(actions),
            tally.ours + ours,
            tally.naive + naive,
        )
        print(f"backend={name} session={sid} facts={len(facts)} ours={ours} naive={naive}")
    return tally


def long_session(
    store: MemoryStore,
    summarizer: Summarizer,
    sid: str,
    requests: int,
    passes: int,
    embed: Callable[[list[str]], list[Any]],
) -> tuple[float, int]:
    """(share of the requests the stored row keeps, its document's length)."""
    per_pass = -(-requests // passes)
    asked = [
        f"Please record outcome number {7_000 + n} in the release notes." for n in range(requests)
    ]
    for step in range(passes):
        turns = [(a, "Noted.", "Recorded.") for a in asked[step * per_pass : (step + 1) * per_pass]]
        if not turns:
            break
        rows = interaction_rows(sid, 0, step * 20, turns)
        store.create_memory_collection().add(
            ids=[r[0] for r in rows],
            documents=[r[1] for r in rows],
            metadatas=[r[2] for r in rows],
            embeddings=np.ones((len(rows), 2), dtype=np.float32),
        )
        outcome = summarize_session(
            Backends(store, embed, summarizer=summarizer), sid, writer="bench", trigger="manual"
        )
        assert outcome.kind == "summarized", outcome
    stored = store.stored_summary(sid)  # the row's document, and the ledger's sections
    assert stored is not None
    document, keys = stored
    sections = str(keys["sectionsJson"])
    kept = sum(1 for n in range(requests) if f"number {7_000 + n} " in sections)
    return 100 * kept / requests, len(document)


def main_long(args: argparse.Namespace) -> int:
    from controller.core.document import DOCUMENT_MAX_CHARS

    work = Path(tempfile.mkdtemp(prefix="sso-bench-facts-long-"))
    with bench_chroma(work / "chroma") as chroma_url, running_openai_server() as server:
        encoder = OpenAICompatibleEmbedding(base_url=server.base_url, model="test-embedding")

        def embed(texts: list[str]) -> list[Any]:
            return list(encoder(texts))

        location = StoreLocation(
            url=chroma_url,
            memory_collection="bench-long-memory",
            summary_collection="bench-long-sessions",
        )
        store = MemoryStore(connect(location), location)
        kept, chars = long_session(store, EXTRACTIVE, "long", args.requests, args.passes, embed)
    print(
        f"fact_retention_long requests={args.requests} passes={args.passes} kept={kept:.1f} "
        f"chars={chars} bound={DOCUMENT_MAX_CHARS}"
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--passes", type=int, default=12, help="incremental passes per session")
    parser.add_argument("--long", action="store_true", help="the long session (see above)")
    parser.add_argument("--requests", type=int, default=200, help="requests (--long)")
    # Two passes: the second is incremental, over the first's stored summary.
    args = parse_bench_args(parser, sessions=1, passes=2, requests=30)
    if args.long:
        if "--passes" not in sys.argv and not args.quick:
            args.passes = 40
        return main_long(args)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    work = Path(tempfile.mkdtemp(prefix="sso-bench-facts-"))
    with bench_chroma(work / "chroma") as chroma_url, running_openai_server() as server:
        # Summaries are embedded through the test server's /embeddings (deterministic
        # vectors): what they are embedded with does not change what they say.
        encoder = OpenAICompatibleEmbedding(base_url=server.base_url, model="test-embedding")

        def embed(texts: list[str]) -> list[Any]:
            return list(encoder(texts))

        model = ChatModelSummarizer(
            ChatModelConfig(base_url=server.base_url, model="test-chat", backoff_seconds=0.1)
        )

        def naive_model(sid: str, newest: list[Memory]) -> StructuredSummary:
            return run_pass(sid, newest, None, model)[0]

        def naive_extractive(sid: str, newest: list[Memory]) -> StructuredSummary:
            return run_pass(sid, newest, None, EXTRACTIVE)[0]

        def script_model(session: int, step: int) -> None:
            server.script_chat(Reply(lossy_model_reply(session, step)))

        def script_nothing(session: int, step: int) -> None:
            return None

        backends: list[tuple[str, Summarizer, Any, Callable[[int, int], None]]] = [
            ("model", model, naive_model, script_model),
            ("extractive", EXTRACTIVE, naive_extractive, script_nothing),
        ]
        totals = []
        for name, summarizer, naive, script in backends:
            location = StoreLocation(
                url=chroma_url,
                memory_collection=f"bench-memory-{name}",
                summary_collection=f"bench-sessions-{name}",
            )
            store = MemoryStore(connect(location), location)
            tally = run_backend(
                name, store, summarizer, naive, script, args.sessions, args.passes, embed
            )
            totals.append(tally)
            print(
                f"backend={name} facts={tally.facts} ours={100 * tally.ours / tally.facts:.1f} "
                f"naive={100 * tally.naive / tally.facts:.1f} model_tokens={tally.tokens} "
                f"agent_actions={100 * tally.actions_kept / max(1, tally.actions):.1f}"
            )
        chat_requests = len(server.requests_to("/chat/completions"))
        expected = 2 * args.sessions * args.passes  # one per pass: ours and naive
        assert chat_requests == expected, f"{chat_requests} model requests, expected {expected}"
    facts = sum(t.facts for t in totals)
    ours = 100 * sum(t.ours for t in totals) / facts
    naive = 100 * sum(t.naive for t in totals) / facts
    print(f"fact_retention ours={ours:.1f} naive={naive:.1f} passes={args.passes}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
