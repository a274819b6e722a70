"""The reconciliation: how fast it walks the memory collection, what CPU it takes, and what
it does to sunset latency while it runs.

Real parts: a local etcd + kube-apiserver, a Chroma server, the operator as a local
process (standalone, extractive backend, local MiniLM embedding). The memory collection
holds --rows rows (default 50,000) in --collection-sessions sessions, each already with a
summary row whose memoryCount matches (written directly: the walk then finds nothing to
do, so what is measured is the walk itself), plus --sessions sessions with real memories
to sunset. The SessionSummarizer sweeps with reconcileRowsPerSecond --rate (default
2,000). With the operator up and idle, --sessions sunsets (after one that warms it up) are
measured one at a time (from the sunset call to the row in Chroma, as
bench/sunset_latency.py does) while no walk runs; then a fresh operator is started, whose
first walk starts with it, and the same number of sunsets are measured while it runs.
The operator's CPU (utime + stime from /proc) is read over the first walk, which runs
alone; the sunsets of the second half run during the second operator's first walk.

    .venv/bin/python -m bench.reconcile [--rows 50000] [--rate 2000] [--sessions 40] [--quick]

Last line:
reconcile rows=<n> rows_per_s=<x> cpu_pct=<x> sunset_p99_ms=<n> idle_sunset_p99_ms=<n>
"""

from __future__ import annotations

import sys
from pathlib import Path

# The repo root on the path: the benches also run as `python bench/NAME.py`.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import json
import tempfile
import time
from typing import Any, cast

import numpy as np

from bench.sunset_latency import percentile
from controller.kube import client as kube
from controller.store.connection import StoreLocation, connect
from controller.store.memory_store import MemoryStore
from devenv.bench import (
    POLL_S,
    QuickRuns,
    bench_chroma,
    bench_control_plane,
    create_summarizer,
    parse_bench_args,
    summary_written_at,
)
from devenv.demo_data import SAMPLE_SESSIONS, SampleSession, memory_rows
from devenv.operator import start_operator
from devenv.processes import cpu_seconds, stop, tail, wait_for

NS = "bench-reconcile"
QUICK_RUNS: QuickRuns = [
    (
        [],
        "reconcile rows=<n> rows_per_s=<x> cpu_pct=<x> sunset_p99_ms=<n> idle_sunset_p99_ms=<n>",
    )
]


def load_collection(store: MemoryStore, rows: int, sessions: int, now_ms: int) -> None:
    """rows memory rows in sessions sessions, each with a summary that accounts for all of
    them (placeholder vectors: nothing reads them)."""
    memories = store.create_memory_collection()
    per = -(-rows // sessions)
    for start in range(0, rows, 2000):
        n = range(start, min(rows, start + 2000))
        memories.add(
            ids=[f"walk-{i:07d}" for i in n],
            documents=[f"User Prompt: step {i}" for i in n],
            metadatas=[
                {
                    "sessionId": f"walked-{i // per:05d}",
                    "timestamp": now_ms - 86_400_000 + i,
                    "type": "agent-interaction",
                }
                for i in n
            ],
            embeddings=np.full((len(n), 384), 0.05, dtype=np.float32),
        )
    summaries = store.summaries(create=True)
    for start in range(0, sessions, 500):
        n = range(start, min(sessions, start + 500))
        summaries.upsert(
            ids=[f"summary_walked-{s:05d}" for s in n],
            documents=["A summary."] * len(n),
            metadatas=[
                {
                    "sessionId": f"walked-{s:05d}",
                    "memoryCount": min(per, rows - s * per),
                    "timestamp": now_ms,
                }
                for s in n
            ],
            embeddings=np.full((len(n), 384), 0.05, dtype=np.float32),
        )


def sunsets(
    ns: str, store: MemoryStore, session_ids: list[str], timeout: float, log: Path
) -> list[float]:
    latencies = []
    for sid in session_ids:
        t0, wall0_ms = time.monotonic(), int(time.time() * 1000)
        kube.request_summary(ns, sid, trigger="sunset")
        while True:
            if summary_written_at(store, sid, wall0_ms - 5) >= wall0_ms - 5:
                break
            if time.monotonic() - t0 > timeout:
                raise SystemExit(f"{sid} not summarized in {timeout} s\n{tail(log)}")
            time.sleep(POLL_S)
        latencies.append((time.monotonic() - t0) * 1000)
    return latencies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=50_000, help="memory rows to walk")
    parser.add_argument("--collection-sessions", type=int, default=500)
    parser.add_argument("--rate", type=int, default=2000, help="reconcileRowsPerSecond")
    parser.add_argument("--sessions", type=int, default=40, help="sunsets measured per phase")
    parser.add_argument("--timeout", type=float, default=60, help="seconds per sunset")
    args = parse_bench_args(
        parser, rows=3000, collection_sessions=30, rate=1000, sessions=3, timeout=60
    )
    work = Path(tempfile.mkdtemp(prefix="sso-bench-reconcile-"))
    with bench_control_plane(work / "cp") as cp, bench_chroma(work / "chroma") as chroma_url:
        create_summarizer(
            cp,
            NS,
            {
                "store": {"url": chroma_url},
                "sweep": {
                    "enabled": True,
                    "intervalSeconds": 300,
                    "idleSeconds": 86_400,
                    "reconcileIntervalSeconds": 604_800,
                    "reconcileRowsPerSecond": args.rate,
                },
            },
        )
        loc = StoreLocation(url=chroma_url)
        store = MemoryStore(connect(loc), loc)
        now_ms = int(time.time() * 1000)
        t = time.monotonic()
        load_collection(store, args.rows, args.collection_sessions, now_ms)
        base = SAMPLE_SESSIONS[1]
        # Each phase's first sunset warms the new operator up (it is not measured).
        measured = {
            phase: [f"{phase}-{i:03d}" for i in range(args.sessions + 1)]
            for phase in ("idle", "walk")
        }
        rows = [
            r
            for sids in measured.values()
            for sid in sids
            for r in memory_rows(
                SampleSession(sid, base.agent, base.model, base.turns[:4], base.tools),
                now_ms - 30_000,
                step_ms=1000,
            )
        ]
        store.add_memories([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])
        total = args.rows + len(rows)
        print(f"loaded {total} memory rows in {time.monotonic() - t:.0f}s", file=sys.stderr)

        env = dict(cp.env(), SSO_REPLICA_ID="bench-reconcile", SSO_SWEEP_TICK_SECONDS="1")

        def walked() -> dict[str, Any] | None:
            obj = kube.get_summarizer(NS, "default") or {}
            status = obj.get("status") or {}
            return status if status.get("reconciledAt") else None

        results: dict[str, Any] = {}
        for phase in ("idle", "walk"):
            log = work / f"operator-{phase}.log"
            operator = start_operator(log, env, "--standalone", "--namespace", NS)
            try:
                # The first sweep sets the watermark; the first walk starts on the tick after.
                wait_for(
                    lambda: ((kube.get_summarizer(NS, "default") or {}).get("status") or {}).get(
                        "watermark"
                    ),
                    120,
                    0.2,
                    message="the first sweep",
                    log=log,
                )
                if phase == "idle":
                    # The first walk, alone: its rate and the operator's CPU over it.
                    cpu0, t0 = cpu_seconds(operator.pid), time.monotonic()
                    status = cast(
                        dict[str, Any],
                        wait_for(walked, 600, 0.05, message="the first walk", log=log),
                    )
                    seconds = time.monotonic() - t0
                    results["cpu_pct"] = 100 * (cpu_seconds(operator.pid) - cpu0) / seconds
                    results["rows"], results["seconds"] = int(status["reconciledRows"]), seconds
                    results["idle"] = sunsets(NS, store, measured["idle"], args.timeout, log)[1:]
                else:  # sunsets while this operator's first walk runs
                    results["walk"] = sunsets(NS, store, measured["walk"], args.timeout, log)[1:]
                    results["overlapped"] = walked() is None  # the walk outlasted them
            finally:
                stop(operator)
    rows_per_s = results["rows"] / results["seconds"]
    print(
        json.dumps(
            {
                "idle_sunsets_ms": [round(x) for x in results["idle"]],
                "walk_sunsets_ms": [round(x) for x in results["walk"]],
            }
        ),
        file=sys.stderr,
    )
    if not results["overlapped"]:
        print("note: the walk ended before the last sunset (more rows or a lower --rate)")
    print(
        f"walk: {results['rows']} rows in {results['seconds']:.1f}s (set rate {args.rate}/s); "
        f"sunsets during it p50={percentile(results['walk'], 50):.0f} ms, idle "
        f"p50={percentile(results['idle'], 50):.0f} ms"
    )
    print(
        f"reconcile rows={results['rows']} rows_per_s={rows_per_s:.0f} "
        f"cpu_pct={results['cpu_pct']:.1f} sunset_p99_ms={percentile(results['walk'], 99):.0f} "
        f"idle_sunset_p99_ms={percentile(results['idle'], 99):.0f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
