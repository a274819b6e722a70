"""The cost of one pass by the session's size: 20 new memories summarized into a session
that already holds 20, 2,000 or 50,000 summarized memories (issue 33).

Real parts: a Chroma server (`chroma run`) and, per session size, a fresh Python process
doing what the operator does for that session: `controller.pipeline.summarize_session`
with the extractive summarizer and the local MiniLM embedding, on a store reached through
`controller.store.connection` and `MemoryStore`, nothing else of the tree under test.

The prior state is built as the operator builds it. A session's older memories (all but
the last `--steps` x `--step`) are loaded at once and summarized by one call: the backlog
the operator meets in a session older than itself (chunks of at most 400 memories,
checkpointed). Then `--steps` increments of `--step` memories are each added and
summarized by one call: the sweeps and sunsets since. The increments hold at most half of
a session (20 memories: 10 at once, then 5 increments of 2; 2,000: 1,000 then 5 x 200;
50,000: 49,000 then 5 x 200). The older memories carry fixed vectors (a pass never reads a
memory's vector; embedding 50,000 texts would take most of an hour) and are loaded once
for both trees (70 to 90 s for 50,000). Chroma's data and log are kept when a run fails
(the bench names the directory), removed otherwise.

Then, `--reps` times, `--new` new memories are added and ONE pass of summarize_session is
timed, in the process that built the history (an operator's process is long-lived: its
model loaded, its store checked): wall time, the process's CPU time (time.process_time
around the call: all its threads) and the Chroma server's CPU time over the call
(/proc/<pid>/stat of the process listening on the server's port, in 10 ms ticks; null
when not found). The session grows by `--new` a rep: the "20" session's five passes start
from 20, 40, ... 100 summarized memories. A line of JSON per size gives every rep, their
medians, the history's seconds and the summary row's size after the last pass: row_bytes =
len(json.dumps(metadata)) of the row, document_chars the length of its document.

    .venv/bin/python -m bench.pass_cost [--sizes 20,2000,50000] [--new 20] [--reps 5]
        [--steps 5] [--step 200] [--before DIR] [--quick]

The last line gives the medians per size, slash-joined in the order of --sizes: wall ms
and process CPU ms of a pass, and the row's metadata bytes after it; ratio_mid is the
second size's wall time over the first's, ratio_large the third's. Every pass adds the
same `--new` memories, so a ratio per pass is the ratio per new memory. Goal: ratio_mid
<= 1.5 (a 2,000-memory session's pass within 1.5x of a 20-memory session's).

Last line:
pass_cost sizes=<text> ms=<text> cpu_ms=<text> row_bytes=<text> ratio_mid=<x> ratio_large=<x>

--before DIR first makes the same measurements with the `controller` package found in DIR
(a copy of an older tree: `git worktree add /tmp/before REV`, or `git archive`), each in a
fresh process whose working directory and PYTHONPATH are DIR, and prints its line:
pass_cost_before sizes=<text> ms=<text> cpu_ms=<text> row_bytes=<text> ratio_mid=<x> ratio_large=<x>
then this tree's, against fresh collections: the memories the first run added are deleted
and every collection but the memory collection (summaries, and whatever else the older
tree made) is dropped, so both start from the same older memories.

--quick: sizes 20, 60 and 120, 5 new memories, 2 reps, 2 increments of at most 10.
"""

from __future__ import annotations

import sys
from pathlib import Path

# The repo root on the path: the benches also run as `python bench/NAME.py`.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import inspect
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from typing import Any
from urllib.parse import urlparse

import numpy as np

from controller.store.connection import StoreLocation, connect
from devenv.bench import QuickRuns, bench_chroma, parse_bench_args
from devenv.controlplane import REPO_ROOT
from devenv.processes import tail

# The smoke tier (tests/bench) runs `--quick` plus each argument list and checks that the
# last line has the format documented above (docs/benchmarks.md, "Quick mode").
QUICK_RUNS: QuickRuns = [
    (
        ["--before", "."],
        "pass_cost sizes=<text> ms=<text> cpu_ms=<text> row_bytes=<text> ratio_mid=<x> "
        "ratio_large=<x>",
    )
]
LOAD_BATCH = 2000
LOAD_TIMEOUT_S = 300  # a batch of 2,000 rows can take longer than a pass's bound on a busy machine
DIMENSION = 384  # the local MiniLM's, which the summary collection then holds
CHILD_TIMEOUT_S = 1800


def memory_rows(
    session: str, first: int, count: int, origin_ms: int
) -> tuple[list[str], list[str], list[dict[str, Any]]]:
    """(ids, documents, metadatas) of the session's memories first..first+count-1, as neo's
    agents write them: one a second from origin_ms, a request, a thought and a response of
    a few hundred bytes, with the cue words (decisions, corrections, questions) of a real
    session now and then. The same index is the same row in every run and every tree.
    (Its source is also the child's: it uses nothing but its arguments.)"""
    ids, documents, metadatas = [], [], []
    for i in range(first, first + count):
        part, port, page = i % 97, 7000 + i % 500, i % 13 + 1
        if i % 11 == 3:
            prompt = f"Actually, the retry limit for batch {part} is wrong; use {i % 5 + 2}."
        elif i % 7 == 5:
            prompt = f"Should the exporter on port {port} page by {page}00 rows or stream?"
        else:
            prompt = f"Step {i}: make the exporter handle batch {part} on port {port}."
        thought = f"The batch {part} path reads rows in pages; page size {page}00."
        if i % 5 == 2:
            thought += f" We decided to keep one writer per port ({port}) to avoid reorders."
        response = f"Changed exporter.py: batch {part} now retries {i % 5} times. Tests pass."
        ids.append(f"{session}-{i:06d}")
        documents.append(
            f"User Prompt: {prompt}\nAgent Thought: {thought}\nAgent Response: {response}"
        )
        metadatas.append(
            {
                "sessionId": session,
                "timestamp": origin_ms + i * 1000,
                "type": "agent-interaction",
                "prompt": prompt,
                "thought": thought,
                "response": response,
                "agent": "bench",
            }
        )
    return ids, documents, metadatas


# One size's history and measured passes, run by `python -c` in a fresh process whose
# working directory and PYTHONPATH hold the controller package under test; prints one JSON
# line with its figures. It uses only summarize_session, connect and MemoryStore.
CHILD = (
    """
from __future__ import annotations  # memory_rows' annotations are never evaluated
import json, os, sys, time
import numpy as np
from controller.embeddings.minilm import LocalMiniLMEmbedding
from controller.core.naming import summary_row_id
from controller.pipeline import summarize_session
from controller.store.connection import StoreLocation, connect
from controller.store.memory_store import MemoryStore

"""
    + inspect.getsource(memory_rows)
    + """

job = json.loads(sys.argv[1])
session, origin_ms = job["session"], job["origin_ms"]
location = StoreLocation(url=job["url"])
client = connect(location)
memories = client.get_collection(location.memory_collection)
store = MemoryStore(client, location)
embed = LocalMiniLMEmbedding()
vector = np.full(job["dimension"], 1 / np.sqrt(job["dimension"]), dtype=np.float32)
ticks_per_s = os.sysconf("SC_CLK_TCK")

def add(first, count):
    ids, docs, metas = memory_rows(session, first, count, origin_ms)
    memories.upsert(ids=ids, documents=docs, metadatas=metas,
                    embeddings=np.tile(vector, (count, 1)))

def server_cpu_ms():
    if job["server_pid"] is None:
        return None
    fields = open(f"/proc/{job['server_pid']}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / ticks_per_s

def summarize():
    try:
        from controller.pipeline import Backends
    except ImportError:  # --before: a tree whose summarize_session takes its parts as keywords
        return summarize_session(store, session, embed=embed, writer="bench", trigger="bench")
    return summarize_session(Backends(store, embed), session, writer="bench", trigger="bench")

started = time.monotonic()
summarize()  # the older memories, loaded by the parent: one backlog call
at = job["older"]
for _ in range(job["steps"]):
    add(at, job["step"])
    at += job["step"]
    summarize()
history_s = time.monotonic() - started
wall, cpu, server, chunk_passes = [], [], [], []
for _ in range(job["reps"]):
    add(at, job["new"])
    at += job["new"]
    s0, c0, w0 = server_cpu_ms(), time.process_time(), time.perf_counter()
    outcome = summarize()
    w1, c1, s1 = time.perf_counter(), time.process_time(), server_cpu_ms()
    if outcome.kind != "summarized" or outcome.new_memories != job["new"]:
        sys.exit(f"the measured pass summarized {outcome.new_memories} new memories "
                 f"({outcome.kind}), not {job['new']}")
    wall.append((w1 - w0) * 1000)
    cpu.append((c1 - c0) * 1000)
    server.append(None if s0 is None else s1 - s0)
    chunk_passes.append(outcome.passes)
got = client.get_collection(location.summary_collection).get(
    ids=[summary_row_id(outcome.session_id)], include=["metadatas", "documents"])
print(json.dumps({
    "memories": outcome.memory_count, "history_s": round(history_s, 1),
    "wall_ms": [round(w) for w in wall], "cpu_ms": [round(c) for c in cpu],
    "server_cpu_ms": [None if s is None else round(s) for s in server],
    "chunk_passes": chunk_passes,
    "row_bytes": len(json.dumps(got["metadatas"][0])),
    "document_chars": len(got["documents"][0] or ""),
}), flush=True)
"""
)


def history(size: int, steps: int, step: int) -> tuple[int, int, int]:
    """(older memories loaded at once, increments, memories per increment): increments
    hold at most half the session."""
    per_step = min(step, size // (2 * steps)) if steps else 0
    steps = steps if per_step else 0
    return size - steps * per_step, steps, per_step


def session_name(size: int) -> str:
    return f"pass-cost-{size}"


def load_older(url: str, session: str, count: int, origin_ms: int) -> None:
    """The session's older memories, with fixed vectors (the pass never reads them)."""
    location = StoreLocation(url=url, timeout_seconds=LOAD_TIMEOUT_S)
    coll = connect(location).get_or_create_collection(location.memory_collection)
    vector = np.full(DIMENSION, 1 / np.sqrt(DIMENSION), dtype=np.float32)
    for first in range(0, count, LOAD_BATCH):
        n = min(LOAD_BATCH, count - first)
        ids, docs, metas = memory_rows(session, first, n, origin_ms)
        coll.upsert(
            ids=ids,
            documents=docs,
            metadatas=metas,  # type: ignore[arg-type]
            embeddings=np.tile(vector, (n, 1)),
        )


def listening_pid(url: str) -> int | None:
    """The process listening on the URL's port (the Chroma server), found through
    /proc/net/tcp and the processes' sockets; None if none of ours is."""
    port = urlparse(url).port
    sockets = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                sockets.add(f"socket:[{fields[9]}]")
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) in sockets for fd in (proc / "fd").iterdir()):
                return int(proc.name)
        except OSError:
            continue
    return None


def measure(code: Path, job: dict[str, Any], chroma_log: Path) -> dict[str, Any]:
    """One size's history and measured passes in a fresh process running `code`'s tree."""
    env = {**os.environ, "PYTHONPATH": str(code), "OPENBLAS_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(job)],
        cwd=code,
        env=env,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
    )
    if done.returncode != 0:
        raise SystemExit(
            f"the pass on {job['session']} failed:\n{done.stderr[-4000:]}\n"
            f"chroma log ({chroma_log}):\n{tail(chroma_log)}"
        )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def median(values: list[Any]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if len(known) == len(values) and known else None


def measure_tree(
    code: Path, url: str, args: argparse.Namespace, origin_ms: int, chroma_log: Path
) -> list[dict[str, Any]]:
    server_pid = listening_pid(url)
    results = []
    for size in args.sizes:
        older, steps, step = history(size, args.steps, args.step)
        job = {
            "url": url,
            "session": session_name(size),
            "origin_ms": origin_ms,
            "older": older,
            "steps": steps,
            "step": step,
            "new": args.new,
            "reps": args.reps,
            "dimension": DIMENSION,
            "server_pid": server_pid,
        }
        got = {"size": size, "history": f"{older}+{steps}x{step}", **measure(code, job, chroma_log)}
        got["median_ms"] = median(got["wall_ms"])
        got["median_cpu_ms"] = median(got["cpu_ms"])
        got["median_chroma_cpu_ms"] = median(got["server_cpu_ms"])
        print(json.dumps(got), flush=True)
        results.append(got)
    return results


def figure_line(name: str, results: list[dict[str, Any]]) -> str:
    """The sizes' medians, slash-joined; the ratios of the wall times to the first size's."""

    def joined(key: str) -> str:
        return "/".join("-" if r[key] is None else str(round(r[key])) for r in results)

    wall = [r["median_ms"] for r in results]
    return (
        f"{name} sizes={joined('size')} ms={joined('median_ms')} cpu_ms={joined('median_cpu_ms')} "
        f"row_bytes={joined('row_bytes')} ratio_mid={wall[1] / wall[0]:.2f} "
        f"ratio_large={wall[2] / wall[0]:.2f}"
    )


def fresh_collections(url: str, args: argparse.Namespace) -> None:
    """Back to the older memories alone: the memories a run added are deleted and every
    other collection (summaries, and whatever else the tree made) is dropped."""
    location = StoreLocation(url=url, timeout_seconds=LOAD_TIMEOUT_S)
    client = connect(location)
    memories = client.get_collection(location.memory_collection)
    for size in args.sizes:
        older, _, _ = history(size, args.steps, args.step)
        added = size - older + args.reps * args.new
        ids, _, _ = memory_rows(session_name(size), older, added, 0)
        memories.delete(ids=ids)
    for collection in client.list_collections():
        if collection.name != location.memory_collection:
            client.delete_collection(collection.name)


def sizes(text: str) -> list[int]:
    values = [int(v) for v in text.split(",")]
    if len(values) != 3 or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError("three session sizes, e.g. 20,2000,50000")
    return values


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=sizes, default=[20, 2000, 50_000])
    parser.add_argument("--new", type=int, default=20, help="new memories per measured pass")
    parser.add_argument("--reps", type=int, default=5, help="measured passes per size")
    parser.add_argument("--steps", type=int, default=5, help="increments of each history")
    parser.add_argument("--step", type=int, default=200, help="memories per increment")
    parser.add_argument("--before", type=Path, help="an older tree holding controller/")
    args = parse_bench_args(parser, sizes=[20, 60, 120], new=5, reps=2, steps=2, step=10)
    origin_ms = int(time.time() * 1000) - (max(args.sizes) + args.reps * args.new) * 1000
    origin_ms -= 3_600_000  # every memory is older than neo's 10-minute quiet period
    # Chroma's data and log: removed after a run that ends well, kept (and named) otherwise.
    work = Path(tempfile.mkdtemp(prefix="sso-pass-cost-"))
    chroma_log = work / "chroma" / "chroma.log"
    try:
        with bench_chroma(work / "chroma") as url:
            started = time.monotonic()
            for size in args.sizes:
                older, _, _ = history(size, args.steps, args.step)
                load_older(url, session_name(size), older, origin_ms)
            older_total = sum(history(size, args.steps, args.step)[0] for size in args.sizes)
            print(f"loaded {older_total} older memories in {time.monotonic() - started:.0f}s")
            if args.before:
                before = measure_tree(args.before.resolve(), url, args, origin_ms, chroma_log)
                print(figure_line("pass_cost_before", before), flush=True)
                fresh_collections(url, args)
            after = measure_tree(REPO_ROOT, url, args, origin_ms, chroma_log)
    except BaseException:
        print(f"kept {work} (Chroma's data and log)", file=sys.stderr)
        raise
    shutil.rmtree(work, ignore_errors=True)
    print(figure_line("pass_cost", after))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
