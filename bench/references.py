"""References recall: does the summary still name, verbatim, every path, URL, issue, hash and
identifier a session used, after many incremental passes?

Real parts: a Chroma server and the whole write path (summarize_session: read the prior
row, the memories after its watermark, one pass, validate, embed, upsert), the model backend
against the OpenAI-compatible test server over real HTTP, and the extractive backend.

The fixture is realistic coding-agent sessions: every chunk of four memories asks about an
issue (URL), names source files, pastes a Python stack trace, commits on a branch (hash,
PR), and reports a CI failure (URL, errno code, environment variable, a config key in a
code span, a values file). Each session grows by one chunk per pass (>= 10 passes) and is
summarized after every chunk. The scripted model paraphrases the way real ones do ("the
crash reported in the issue tracker"), naming none of the identifiers. The expected
references are written down by the fixture, not found by the extractor.

Recall is measured after every pass, over every reference the session has used so far, on
the stored document; the figure reported is the lowest seen. In the same run the naive
baseline summarizes only the newest chunk (same replies, same code) and overwrites, and
"sections" counts what the document names outside its References section (what the
summarizer alone kept).

    .venv/bin/python -m bench.references [--sessions 3] [--passes 12] [--quick]

Last line (recall_pct: the lowest recall after any pass, both backends):
references recall_pct=<pct> passes=<n>
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):  # `python bench/references.py` from the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.fact_retention import interaction_rows
from controller.core.document import REFERENCES_HEADING, render_document
from controller.core.memories import Memory
from controller.pipeline import Backends, run_pass, summarize_session
from controller.store.connection import StoreLocation, connect
from controller.store.memory_store import MemoryStore
from controller.summarizers.chat_model import ChatModelSummarizer
from controller.summarizers.chat_prompt import ChatModelConfig
from controller.summarizers.contract import Summarizer
from controller.summarizers.extractive import EXTRACTIVE
from devenv.bench import QuickRuns, bench_chroma, parse_bench_args
from tests.support.openai_server import Reply, hash_embedding, running_openai_server

# The smoke tier (tests/bench) runs `--quick` plus each argument list and checks that the
# last line has the format documented above (docs/benchmarks.md, "Quick mode").
QUICK_RUNS: QuickRuns = [([], "references recall_pct=<pct> passes=<n>")]

COMPONENTS = ("exporter", "scheduler", "gateway", "indexer", "cache", "router")
REPO = "https://github.com/acme/session-summary-operator"


@dataclass(frozen=True)
class Chunk:
    turns: list[tuple[str, str, str]]  # (prompt, thought, response)
    references: list[str]  # what the chunk names, verbatim, as the fixture wrote it


def chunk(session: int, step: int) -> Chunk:
    comp = COMPONENTS[(session + step) % len(COMPONENTS)]
    issue = 100 + session * 40 + step
    pr = 500 + session * 40 + step
    run = 90_000 + session * 1000 + step * 7
    commit = hashlib.sha1(f"{session}-{step}".encode()).hexdigest()[:12]
    if commit.isdigit() or commit.isalpha():  # a hash has digits and letters
        commit = "a1" + commit[2:]
    src = f"src/{comp}/handlers/batch_{step}.py"
    worker = f"/work/app/src/{comp}/worker.py"
    queue = f"/work/app/src/{comp}/queue_{step}.py"
    error = f"{comp}.errors.QueueEmptyError"
    branch = f"fix/{comp}-empty-queue-{step}"
    env = f"SSO_{comp.upper()}_PORT"
    key = f"{comp}.retry.max_attempts"
    values = f"deploy/values-{comp}-{step}.yaml"
    trace = (
        "Traceback (most recent call last):\n"
        f'  File "{worker}", line {40 + step}, in run\n'
        "    batch = self.queue.pop()\n"
        f'  File "{queue}", line 12, in pop\n'
        "    raise QueueEmptyError(self.name)\n"
        f"{error}: queue 'ingest-{step}' is empty"
    )
    turns = [
        (
            f"The {comp} crashes on empty batches, see {REPO}/issues/{issue}. "
            f"Can you look at {src}?",
            "Reading the handler and the worker loop.",
            f"Reproduced it; the worker dies in the queue. Stack trace:\n{trace}",
        ),
        (
            "",
            "Guarding the pop and adding a test.",
            f"Committed {commit} on branch {branch} and opened PR #{pr}.",
        ),
        (
            "Did CI pass?",
            "Checking the CI run.",
            f"No: {REPO}/actions/runs/{run} failed with ECONNREFUSED because {env} was unset; "
            f"I set `{key}` to 5 in {values}.",
        ),
        ("", "Running the test suite again.", "All tests pass now."),
    ]
    references = [
        f"{REPO}/issues/{issue}",
        src,
        worker,
        queue,
        error,
        commit,
        branch,
        f"PR #{pr}",
        f"{REPO}/actions/runs/{run}",
        "ECONNREFUSED",
        env,
        key,
        values,
    ]
    return Chunk(turns, references)


def paraphrasing_reply(session: int, step: int) -> dict[str, Any]:
    """What a model answers when it summarizes in its own words: no identifier survives."""
    comp = COMPONENTS[(session + step) % len(COMPONENTS)]
    return {
        "title": f"Fixing the {comp} crash on empty batches",
        "category": "bugfix",
        "user_requests": [f"Look into the {comp} crash reported in the issue tracker."],
        "questions_and_decisions": [f"Decided to guard the queue pop in the {comp} worker."],
        "design_choices": [],
        "corrections_and_feedback": [],
        "current_state": [f"Step {step}: fix committed; CI failed on a connection error."],
    }


def rows_of(sid: str, session: int, step: int) -> list[tuple[str, str, dict[str, Any]]]:
    return interaction_rows(sid, session, step, list(chunk(session, step).turns))


def named(document: str, references: list[str]) -> int:
    return sum(1 for ref in references if ref in document)


def sections_only(document: str) -> str:
    return document.split(f"\n{REFERENCES_HEADING}\n")[0]


@dataclass
class Tally:
    references: int = 0  # over the final documents
    ours: int = 0
    naive: int = 0
    sections: int = 0
    lowest_pct: float = 100.0  # ours, over every pass


def run_backend(
    name: str,
    store: MemoryStore,
    summarizer: Summarizer,
    script: Callable[[int, int], None],
    sessions: int,
    passes: int,
    embed: Callable[[list[str]], list[Any]],
) -> Tally:
    tally = Tally()
    for session in range(sessions):
        sid = f"refs-{name}-{session}"
        expected: list[str] = []
        naive_document = document = ""
        for step in range(passes):
            rows = rows_of(sid, session, step)
            store.create_memory_collection().add(  # memory vectors are never read
                ids=[r[0] for r in rows],
                documents=[r[1] for r in rows],
                metadatas=[r[2] for r in rows],
                embeddings=np.ones((len(rows), 2), dtype=np.float32),
            )
            expected += [r for r in chunk(session, step).references if r not in expected]
            script(session, step)
            outcome = summarize_session(
                Backends(store, embed, summarizer=summarizer), sid, writer="bench", trigger="sweep"
            )
            assert outcome.kind == "summarized" and outcome.passes == 1, outcome
            got = store.summaries().get(ids=[f"summary_{sid}"], include=["documents"])
            document = (got["documents"] or [""])[0] or ""
            pct = 100 * named(document, expected) / len(expected)
            tally.lowest_pct = min(tally.lowest_pct, pct)
            ids = {r[0] for r in rows}
            newest: list[Memory] = [m for m in store.session_rows(sid).memories() if m.id in ids]
            script(session, step)
            naive_document = render_document(run_pass(sid, newest, None, summarizer)[0])
        ours, naive = named(document, expected), named(naive_document, expected)
        sections = named(sections_only(document), expected)
        tally.references += len(expected)
        tally.ours += ours
        tally.naive += naive
        tally.sections += sections
        print(
            f"backend={name} session={sid} references={len(expected)} ours={ours} "
            f"naive={naive} sections_only={sections}"
        )
    return tally


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=3)
    parser.add_argument("--passes", type=int, default=12, help="incremental passes per session")
    # Two passes: the second is incremental, over the first's stored summary.
    args = parse_bench_args(parser, sessions=1, passes=2)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    work = Path(tempfile.mkdtemp(prefix="sso-bench-refs-"))
    with bench_chroma(work / "chroma") as chroma_url, running_openai_server() as server:

        def embed(texts: list[str]) -> list[Any]:
            return [hash_embedding(t) for t in texts]

        model = ChatModelSummarizer(
            ChatModelConfig(base_url=server.base_url, model="test-chat", backoff_seconds=0.1)
        )

        def script_model(session: int, step: int) -> None:
            server.script_chat(Reply(paraphrasing_reply(session, step)))

        def script_nothing(session: int, step: int) -> None:
            return None

        backends: list[tuple[str, Summarizer, Callable[[int, int], None]]] = [
            ("model", model, script_model),
            ("extractive", EXTRACTIVE, script_nothing),
        ]
        totals = []
        for name, summarizer, script in backends:
            location = StoreLocation(
                url=chroma_url,
                memory_collection=f"bench-refs-memory-{name}",
                summary_collection=f"bench-refs-sessions-{name}",
            )
            store = MemoryStore(connect(location), location)
            tally = run_backend(name, store, summarizer, script, args.sessions, args.passes, embed)
            totals.append(tally)
            print(
                f"backend={name} references={tally.references} "
                f"ours={100 * tally.ours / tally.references:.1f} "
                f"lowest_after_any_pass={tally.lowest_pct:.1f} "
                f"naive_newest_chunk={100 * tally.naive / tally.references:.1f} "
                f"sections_only={100 * tally.sections / tally.references:.1f}"
            )
        chat_requests = len(server.requests_to("/chat/completions"))
        expected = 2 * args.sessions * args.passes  # one per pass: ours and naive
        assert chat_requests == expected, f"{chat_requests} model requests, expected {expected}"
    references = sum(t.references for t in totals)
    naive = 100 * sum(t.naive for t in totals) / references
    print(f"naive_newest_chunk recall_pct={naive:.1f} passes={args.passes}")
    print(f"references recall_pct={min(t.lowest_pct for t in totals):.1f} passes={args.passes}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
