"""Peak memory of one pass over a huge session: 50,000 memories summarized in one go.

Real parts: a Chroma server (`chroma run`) holding one session of N memories (default
50,000; each a few hundred bytes of prompt, thought and response, as agents write them),
and a fresh Python process that does what the operator does for that session:
summarize_session with the extractive summarizer and the local MiniLM embedding, checkpoints
included. The process reports its VmRSS once the libraries are imported and the model is
loaded (fresh), and once it has summarized a small session (idle: an operator that has
summarized once, its free heap returned); its peak (VmHWM, reset right before the pass so
the model's loading is not counted) over the pass; its VmRSS after
it; and its VmRSS once the outcome is dropped and glibc has returned its free heap
(malloc_trim): what stays for good.

    .venv/bin/python -m bench.pass_memory [--memories 50000] [--before DIR]
        [--checkpoint-passes N] [--quick]

Last line:
pass_memory memories=<n> peak_rss_mb=<n> after_mb=<n> idle_mb=<n> after_trim_mb=<n> fresh_mb=<n>

--before DIR first runs the same pass with the `controller` package found in DIR (a copy
of an older tree), then deletes the summary it wrote, then runs this tree's: a before/after
pair measured in one session against the same store.

--checkpoint-passes N: a checkpoint every N passes (default: the operator's,
CHECKPOINT_PASSES); given, the tree under test must take summarize_session's
checkpoint_passes. --quick: a checkpoint every 2 passes and the fewest memories that still
make one (2 passes of the extractive backend's largest chunk, and one memory more): the same
pass, checkpoint included, over 801 memories instead of 8,001.
"""

from __future__ import annotations

import sys
from pathlib import Path

# The repo root on the path: the benches also run as `python bench/NAME.py`.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import json
import os
import subprocess
import time

import numpy as np

from controller.core.naming import summary_row_id
from controller.pipeline import CHECKPOINT_PASSES
from controller.store.connection import StoreLocation, connect
from controller.summarizers.extractive import EXTRACTIVE
from devenv.bench import QuickRuns, bench_chroma, parse_bench_args
from devenv.controlplane import REPO_ROOT

# The smoke tier (tests/bench) runs `--quick` plus each argument list and checks that the
# last line has the format documented above (docs/benchmarks.md, "Quick mode").
QUICK_RUNS: QuickRuns = [
    (
        ["--before", "."],
        "pass_memory memories=<n> peak_rss_mb=<n> after_mb=<n> idle_mb=<n> "
        "after_trim_mb=<n> fresh_mb=<n>",
    )
]
SESSION = "pass-memory-session"
WARMUP = "pass-memory-warmup"  # a small session summarized first, as an operator has
LOAD_BATCH = 2000


def load_session(url: str, memories: int, session: str = SESSION) -> None:
    """One session of `memories` rows, written with fixed vectors: the pass never reads a
    memory's vector, and embedding 50,000 texts would take the bench most of an hour."""
    location = StoreLocation(url=url)
    coll = connect(location).get_or_create_collection(location.memory_collection)
    vector = np.full(384, 1 / np.sqrt(384), dtype=np.float32)
    start_ms = int(time.time() * 1000) - memories * 1000 - 3_600_000
    for first in range(0, memories, LOAD_BATCH):
        rows = range(first, min(first + LOAD_BATCH, memories))
        metas = []
        docs = []
        for i in rows:
            prompt = f"Step {i}: make the exporter handle batch {i % 97} on port {7000 + i % 500}."
            thought = f"The batch {i % 97} path reads rows in pages; page size {i % 13 + 1}00."
            response = f"Changed exporter.py: batch {i % 97} now retries {i % 5} times. Tests pass."
            metas.append(
                {
                    "sessionId": session,
                    "timestamp": start_ms + i * 1000,
                    "type": "agent-interaction",
                    "prompt": prompt,
                    "thought": thought,
                    "response": response,
                    "agent": "bench",
                }
            )
            docs.append(
                f"User Prompt: {prompt}\nAgent Thought: {thought}\nAgent Response: {response}"
            )
        coll.upsert(
            ids=[f"{session}-{i:06d}" for i in rows],
            documents=docs,
            metadatas=metas,  # type: ignore[arg-type]
            embeddings=np.tile(vector, (len(docs), 1)),
        )


# The pass, run by `python -c` in a fresh process whose working directory holds the
# controller package under test; prints one JSON line with its figures.
CHILD = """
import json, sys, time
from pathlib import Path
from controller.embeddings.minilm import LocalMiniLMEmbedding
from controller.pipeline import summarize_session
from controller.store.connection import StoreLocation, connect
from controller.store.memory_store import MemoryStore

def rss_mb(field):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024

def trimmed():
    import ctypes, gc
    del globals()["outcome"]
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    return rss_mb("VmRSS")

location = StoreLocation(url=sys.argv[1])
store = MemoryStore(connect(location), location)
embed = LocalMiniLMEmbedding()
embed(["warm the model up"])
every = {"checkpoint_passes": int(sys.argv[4])} if len(sys.argv) > 4 else {}

def summarize(session, **options):
    try:
        from controller.pipeline import Backends
    except ImportError:  # --before: a tree whose summarize_session takes its parts as keywords
        return summarize_session(store, session, embed=embed, writer="bench", trigger="bench",
                                 **options)
    return summarize_session(Backends(store, embed), session, writer="bench", trigger="bench",
                             **options)

fresh = rss_mb("VmRSS")
# Idle is an operator that has summarized once: a 30-memory session first (the first
# summary-sized embedding allocates the BLAS buffers and maps the pages it reads).
summarize(sys.argv[3])
import ctypes, gc
gc.collect()
ctypes.CDLL("libc.so.6").malloc_trim(0)
idle = rss_mb("VmRSS")
# The peak of the pass itself, not of loading the model (which briefly holds the weights
# twice): writing 5 to clear_refs resets VmHWM to the current RSS.
Path("/proc/self/clear_refs").write_text("5")
started = time.monotonic()
outcome = summarize(sys.argv[2], **every)
print(json.dumps({
    "kind": outcome.kind, "memories": outcome.memory_count, "passes": outcome.passes,
    "checkpoints": outcome.checkpoints, "pass_s": round(time.monotonic() - started, 1),
    "fresh_mb": round(fresh), "idle_mb": round(idle),
    "peak_mb": round(rss_mb("VmHWM")), "after_mb": round(rss_mb("VmRSS")),
    "after_trim_mb": round(trimmed()),
}), flush=True)
"""


def run_pass(url: str, code: Path, checkpoint_passes: int | None) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(code), "OPENBLAS_NUM_THREADS": "1"}
    every = [] if checkpoint_passes is None else [str(checkpoint_passes)]
    out = subprocess.run(
        [sys.executable, "-c", CHILD, url, SESSION, WARMUP, *every],
        cwd=code,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=50_000)
    parser.add_argument("--before", type=Path, help="an older tree holding controller/")
    parser.add_argument(
        "--checkpoint-passes", type=int, help=f"default: the operator's, {CHECKPOINT_PASSES}"
    )
    quick_every = 2
    checkpointed = quick_every * EXTRACTIVE.max_memories_per_pass + 1
    args = parse_bench_args(parser, memories=checkpointed, checkpoint_passes=quick_every)
    with bench_chroma() as chroma_url:
        started = time.monotonic()
        load_session(chroma_url, args.memories)
        load_session(chroma_url, 30, WARMUP)
        print(f"loaded {args.memories} memories in {time.monotonic() - started:.0f}s", flush=True)
        if args.before:
            before = run_pass(chroma_url, args.before.resolve(), args.checkpoint_passes)
            print(f"before: {json.dumps(before)}", flush=True)
            location = StoreLocation(url=chroma_url)
            summaries = connect(location).get_collection(location.summary_collection)
            summaries.delete(ids=[summary_row_id(SESSION), summary_row_id(WARMUP)])
        got = run_pass(chroma_url, REPO_ROOT, args.checkpoint_passes)
    print(json.dumps(got), flush=True)
    print(
        f"pass_memory memories={got['memories']} peak_rss_mb={got['peak_mb']} "
        f"after_mb={got['after_mb']} idle_mb={got['idle_mb']} after_trim_mb={got['after_trim_mb']} "
        f"fresh_mb={got['fresh_mb']}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
