"""Sunset latency: from `summaryctl sunset` to the summary visible in Chroma.

Real parts: a local etcd + kube-apiserver, a Chroma server, the operator as a local
process (standalone, extractive backend). For each of N sessions (default 100), the clock
starts right before summaryctl's sunset call (create/patch of the SessionSummary) and stops
when the row summary_<sessionId> in Chroma and its ledger entry carry a write after that
start (devenv.bench.summary_written_at), looked for every 20 ms (devenv.bench.POLL_S: each
figure is late by up to that much).
Sessions are sunset one at a time so each figure is the latency of an idle system.

    .venv/bin/python -m bench.sunset_latency [--sessions 100] [--memories 6] [--quick]

Last line: sunset_latency p50_ms=<n> p99_ms=<n>

--under-load: first N sunsets of other sessions with the same operator idle (its idle p99),
then the same while 100 other sessions (--others) are re-summarized continuously (the
sunsets start once the others' first summaries are written: the first round is 100 first
summaries at once, a burst of sunsets, not a backlog) and a sweep every 5 s finds a backlog
of 500 unsummarized sessions (--backlog), loaded after the idle sunsets; afterwards it waits
for the whole backlog and prints its drain time. Last line (ratio: p99 under load / idle):
sunset_latency_under_load p50_ms=<n> p99_ms=<n> idle_p99_ms=<n> ratio=<x>

--marker: the sunset is a sunset marker memory written straight into Chroma (what an agent
without Kubernetes credentials does: docs/agents.md), found by the sweep's marker scan.
Operator and SessionSummarizer keep their defaults (the timer ticks every 5 s, the sweep
every 300 s with a 900 s idle threshold, and the sessions' memories are seconds old, so only
the marker can summarize them). Each marker is written at a random moment of the tick (a
uniform pause first), as agents' markers are. --sweep-tick 1 (SSO_SWEEP_TICK_SECONDS=1)
measures a shorter tick. Last line:
sunset_marker_latency p50_ms=<n> p99_ms=<n>
"""

from __future__ import annotations

import sys
from pathlib import Path

# The repo root on the path: the benches also run as `python bench/NAME.py`.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import json
import math
import random
import statistics
import tempfile
import threading
import time
from typing import Any

import numpy as np

from controller.config import CONFIG
from controller.core.memories import SUNSET_MARKER_TYPE
from controller.core.naming import summary_object_name
from controller.embeddings.minilm import LocalMiniLMEmbedding
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
from devenv.controlplane import REPO_ROOT
from devenv.demo_data import SAMPLE_SESSIONS, SampleSession, memory_rows
from devenv.operator import start_operator
from devenv.otlp import Receiver, running_receiver
from devenv.processes import stop, tail, wait_for

NS = "bench"  # and bench-load, bench-marker: each mode its own
# The smoke tier (tests/bench) runs `--quick` plus each argument list and checks that the
# last line has the format documented above (docs/benchmarks.md, "Quick mode").
QUICK_RUNS: QuickRuns = [
    ([], "sunset_latency p50_ms=<n> p99_ms=<n>"),
    (
        ["--under-load"],
        "sunset_latency_under_load p50_ms=<n> p99_ms=<n> idle_p99_ms=<n> ratio=<x>",
    ),
    (["--marker"], "sunset_marker_latency p50_ms=<n> p99_ms=<n>"),
]


def percentile(values: list[float], pct: float) -> float:
    """Nearest rank: the smallest value that at least pct% of the values are <= to, i.e.
    the ceil(pct/100 * n)-th smallest (p99 of 100 values is the 99th, not the largest).

    This used round(x + 0.5) for the ceiling, which Python rounds half to even: at
    x = 99.0 it gave 100, so p99 of 100 sunsets was their maximum."""
    ordered = sorted(values)
    rank = math.ceil(pct / 100 * len(ordered))
    return ordered[min(len(ordered), max(1, rank)) - 1]


PHASE_ORDER = ("delivered", "queued", "claimed", "read", "summarized", "embedded", "written")


def phase_lines(
    otlp: Receiver, sessions: list[str], started_ns: list[int], latencies: list[float]
) -> list[str]:
    """The phase breakdown (controller/tracing.py, from the operator's traces) of the p50 and
    p99 sunsets and the mean of all; `other`: the latency no phase accounts for (the bench's
    poll, and for a retried pass the wait between attempts). The status phase comes after
    the row is visible, so it is not in the latency: shown after the bar."""

    def line(label: str, phases: dict[str, float], latency: float) -> str:
        timed = sum(phases.get(p, 0.0) for p in PHASE_ORDER)
        parts = " ".join(f"{p}={phases.get(p, 0.0):.0f}" for p in PHASE_ORDER)
        return (
            f"phases_ms {label} total={latency:.0f} {parts} other={latency - timed:.0f} "
            f"| status={phases.get('status', 0.0):.0f}"
        )

    # spec.requestedAt, the trace's start, is in ms: up to 1 ms before the sunset's start.
    since = {s: t - 10**6 for s, t in zip(sessions, started_ns, strict=False)}
    found = otlp.phases_ms(since)
    per = [found[s] for s in sessions[: len(latencies)]]
    if not any(per):
        return ["phases_ms: no traces received"]
    order = sorted(range(len(latencies)), key=lambda i: latencies[i])
    lines = []
    for pct in (50, 99):
        i = order[min(len(order), max(1, math.ceil(pct / 100 * len(order)))) - 1]
        lines.append(line(f"p{pct}(#{i + 1})", per[i], latencies[i]))
    names = {*PHASE_ORDER, "status"}
    mean = {p: statistics.mean(d.get(p, 0.0) for d in per) for p in names}
    lines.append(line("mean", mean, statistics.mean(latencies)))
    # The slowest tenth (from the p90 up, the first sunset after the load started excluded:
    # it meets the operator's start-up): where the tail's time goes, less noisy than one p99.
    tail = [i for i in order[::-1] if i > 0][: max(1, len(order) // 10)]
    worst = {p: statistics.mean(per[i].get(p, 0.0) for i in tail) for p in names}
    lines.append(line(f"slowest{len(tail)}", worst, statistics.mean(latencies[i] for i in tail)))
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--memories", type=int, default=6, help="memories per session")
    parser.add_argument("--timeout", type=float, default=30, help="seconds per sunset")
    parser.add_argument(
        "--under-load",
        action="store_true",
        help="measure while --others sessions are re-summarized continuously and a sweep "
        "with a backlog of --backlog unsummarized sessions runs every 5 s; afterwards waits "
        "for the whole backlog and prints its drain time",
    )
    parser.add_argument("--others", type=int, default=100, help="re-summarized (--under-load)")
    parser.add_argument("--backlog", type=int, default=500, help="for the sweep (--under-load)")
    parser.add_argument(
        "--sweep-tick",
        type=float,
        default=None,
        help="SSO_SWEEP_TICK_SECONDS of the operator (default: its own, 5 s)",
    )
    parser.add_argument(
        "--marker",
        action="store_true",
        help="sunset by writing a sunset marker memory into Chroma (no Kubernetes call)",
    )
    parser.add_argument(
        "--operator-src",
        type=Path,
        default=REPO_ROOT,
        help="run the operator from this checkout (a git worktree of an earlier commit: "
        "a before/after on the same machine)",
    )
    args = parse_bench_args(
        parser, sessions=3, memories=2, timeout=30, others=4, backlog=10, sweep_tick=1
    )
    if args.marker and args.under_load:
        parser.error("--marker and --under-load measure different things; pick one")
    ns = NS + ("-load" if args.under_load else "-marker" if args.marker else "")
    work = Path(tempfile.mkdtemp(prefix="sso-bench-"))
    with (
        bench_control_plane(work / "cp") as cp,
        bench_chroma(work / "chroma") as chroma_url,
        running_receiver() as otlp,
    ):
        env = cp.env()
        spec: dict[str, Any] = {"store": {"url": chroma_url}}
        if not args.marker:  # --marker: the defaults (on, every 300 s, idle after 900 s)
            spec["sweep"] = {
                "enabled": args.under_load,
                "intervalSeconds": 5,
                "idleSeconds": 900,
                "maxSessionsPerSweep": 50,
            }
            # Idle, nothing in the background: the reconciliation (on by default, whatever
            # the sweep says) would summarize the day-old sessions before their sunsets,
            # which would then be up-to-date no-ops that write nothing.
            spec["reconcile"] = {"enabled": args.under_load}
        create_summarizer(cp, ns, spec)
        loc = StoreLocation(url=chroma_url)
        store = MemoryStore(connect(loc), loc)
        base = SAMPLE_SESSIONS[1]
        turns = (base.turns * ((args.memories // len(base.turns)) + 1))[: args.memories]
        session_ids = [f"bench-{i:04d}" for i in range(args.sessions)]
        # Under load: as many sessions sunset first with the operator idle, in the same run.
        # The first is not measured: it meets the operator's start (the embedder's load).
        idle_ids = [f"idle-{i:04d}" for i in range(args.sessions + 1)] if args.under_load else []
        now_ms = int(time.time() * 1000)
        start_ms = now_ms - 86_400_000
        ids, docs, metas = [], [], []
        for i, sid in enumerate(session_ids + idle_ids):
            session = SampleSession(sid, base.agent, base.model, tuple(turns), base.tools)
            # Under load the measured sessions are just ending (their newest memory is
            # seconds old), as at a real sunset: the sweep leaves active sessions alone
            # (idleSeconds 900: loading takes minutes, and a session the sweep summarized
            # first would make its sunset an up-to-date no-op that writes nothing).
            first = now_ms - 30_000 if args.under_load or args.marker else start_ms + i * 1000
            for row in memory_rows(session, first, step_ms=1000):
                ids.append(row[0])
                docs.append(row[1])
                metas.append(row[2])
        store.add_memories(ids, docs, metas, create=True)
        store.summaries(create=True)
        others = [f"other-{i:03d}" for i in range(args.others)]
        backlog = [f"backlog-{i:03d}" for i in range(args.backlog if args.under_load else 0)]

        def load_backlog() -> None:
            rows = [
                r
                for i, sid in enumerate(backlog)
                for r in memory_rows(
                    SampleSession(sid, base.agent, base.model, tuple(turns[:2]), base.tools),
                    start_ms + i,
                )
            ]
            store.add_memories([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])
            print(
                f"loaded a backlog of {len(backlog)} unsummarized sessions for the sweep",
                file=sys.stderr,
            )

        loaded = len(session_ids) + len(idle_ids)
        print(f"loaded {len(ids)} memories in {loaded} sessions", file=sys.stderr)

        log = work / "operator.log"
        # Each pass's trace goes to the receiver: the phases of the p50 and p99 sunsets.
        op_env = dict(
            env,
            SSO_REPLICA_ID="bench-operator",
            OTEL_EXPORTER_OTLP_ENDPOINT=otlp.url,
            OTEL_BSP_SCHEDULE_DELAY="200",
        )
        if args.sweep_tick:
            op_env["SSO_SWEEP_TICK_SECONDS"] = str(args.sweep_tick)
        operator = start_operator(
            log, op_env, "--standalone", "--namespace", ns, cwd=args.operator_src
        )
        drained: list[str] = []  # the backlog's line (under load)
        latencies: list[float] = []
        started_ns: list[int] = []  # each sunset's start, on the wall clock
        idle: list[float] = []  # under load: the idle sunsets' latencies, first
        stop_load = threading.Event()
        load_rounds = [0]

        def others_done(since_ms: int) -> bool:
            return len(store.written_since(others, since_ms)) == len(others)

        def background_load() -> None:
            """Keeps the other summaries in flight: a new memory each, a sunset each, and the
            next round as soon as all are done. The memories carry one vector computed
            before the load starts (the operator summarizes their text, not their vectors):
            computed each round, 100 MiniLM embeddings with OpenBLAS's threads took this
            process both cores for a moment every round, work the agents do on their own
            machines, not load on the operator's node."""
            while not stop_load.is_set():
                n = load_rounds[0]
                round_ms = int(time.time() * 1000)
                now_ms = round_ms - 120_000
                memories.add(
                    ids=[f"{o}-{n:04d}" for o in others],
                    documents=[f"User Prompt: round {n} of {o}" for o in others],
                    embeddings=np.asarray([load_vector] * len(others)),
                    metadatas=[
                        {
                            "sessionId": o,
                            "timestamp": now_ms + n,
                            "type": "agent-interaction",
                            "prompt": f"Round {n}: refine the exporter.",
                            "response": "Done.",
                        }
                        for o in others
                    ],
                )
                for o in others:
                    kube.request_summary(ns, o, trigger="sunset")
                load_rounds[0] += 1
                # <= others in flight. Once a second, one read of their ledger entries (a
                # list of every SessionSummary, about 700 of them, cost the API server and
                # this process a share of the cores under test).
                while not stop_load.is_set() and not others_done(round_ms):
                    stop_load.wait(1.0)

        memories = store.memories()  # a plain Chroma collection: what an agent holds
        marker_vector, load_vector = LocalMiniLMEmbedding()(["session sunset", "a new memory"])
        jitter = random.Random(18)
        tick = float(op_env.get("SSO_SWEEP_TICK_SECONDS") or CONFIG.sweep_tick_seconds)

        def write_marker(sid: str, at_ms: int) -> None:
            memories.add(
                ids=[f"sunset-{sid}-{at_ms}"],
                documents=["session sunset"],
                metadatas=[{"sessionId": sid, "timestamp": at_ms, "type": SUNSET_MARKER_TYPE}],
                embeddings=np.asarray([marker_vector]),
            )

        def swept_once() -> bool:
            obj = kube.get_summarizer(ns, "default") or {}
            return (obj.get("status") or {}).get("watermark") is not None

        def measure(sids: list[str], into: list[float], started: list[int]) -> None:
            """Sunsets each session in turn, each timed to its row in Chroma."""
            for n, sid in enumerate(sids, 1):
                if args.marker:
                    time.sleep(jitter.uniform(0, tick))  # a random moment of the tick
                t0 = time.monotonic()
                wall0_ms = int(time.time() * 1000)
                started.append(time.time_ns())
                if args.marker:
                    write_marker(sid, wall0_ms)
                    name = summary_object_name(sid)
                else:
                    name, _ = kube.request_summary(ns, sid, trigger="sunset")
                deadline = t0 + args.timeout
                while True:
                    if summary_written_at(store, sid, wall0_ms - 5) >= wall0_ms - 5:
                        break
                    if time.monotonic() > deadline:
                        obj = kube.get_summary(ns, name) or {}
                        raise SystemExit(
                            f"{sid} not summarized in {args.timeout} s; its SessionSummary: "
                            f"{json.dumps(obj.get('status'))}\n{tail(log)}"
                        )
                    time.sleep(POLL_S)
                into.append((time.monotonic() - t0) * 1000)
                if n % 20 == 0:
                    print(f"  {n}/{len(sids)} sessions", file=sys.stderr)

        loader = threading.Thread(target=background_load, daemon=True)
        try:
            time.sleep(3)  # the operator's initial list/watch
            if args.under_load:
                measure(idle_ids, idle, [])  # this run's idle p99: nothing else in flight yet
                del idle[0]
                load_backlog()
                backlog_loaded = time.monotonic()
                loader.start()
                # The others' first round is 100 first summaries at once, ranked with a
                # sunset: the sunsets start once it is done, beside re-summaries as documented.
                wait_for(
                    lambda: load_rounds[0] >= 2,
                    args.timeout * 10,
                    0.2,
                    message="the others' first summaries",
                    log=log,
                )
            if args.marker:
                # The marker scan reads from the sweep's watermark, set by the first sweep.
                wait_for(swept_once, 60, 0.2, message="the first sweep", log=log)
            measure(session_ids, latencies, started_ns)
            if args.under_load:  # not starved: every backlog session still gets its summary
                stop_load.set()
                done = 0
                deadline = time.monotonic() + 900
                while time.monotonic() < deadline:
                    done = len(store.summary_states(backlog))
                    if done == len(backlog):
                        break
                    time.sleep(1)
                drained.append(
                    f"backlog: summarized={done}/{len(backlog)} "
                    f"drain_s={time.monotonic() - backlog_loaded:.0f} (from its loading)"
                )
        finally:
            stop_load.set()
            if loader.is_alive():
                loader.join(30)
            stop(operator)  # sends the traces still batched
        breakdown = phase_lines(otlp, session_ids, started_ns, latencies)
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    print(
        f"sessions={len(latencies)} mean_ms={statistics.mean(latencies):.0f} "
        f"min_ms={min(latencies):.0f} p90_ms={percentile(latencies, 90):.0f} "
        f"p95_ms={percentile(latencies, 95):.0f} max_ms={max(latencies):.0f}"
    )
    # Which sunsets were slowest (1 = the first measured, right after the load started).
    worst = sorted(range(len(latencies)), key=lambda i: -latencies[i])[:5]
    print("slowest: " + " ".join(f"#{i + 1}={latencies[i]:.0f}ms" for i in worst))
    # When they began (UTC, as the operator's log says it): to find what else ran then.
    print(
        "slowest_began: "
        + " ".join(
            f"#{i + 1}@"
            + time.strftime("%H:%M:%S", time.gmtime(started_ns[i] / 1e9))
            + f".{started_ns[i] // 1_000_000 % 1000:03d}"
            for i in worst
        )
    )
    print(*breakdown, sep="\n")
    if args.under_load:
        print(
            f"background: {load_rounds[0]} rounds of {len(others)} other summaries in flight, "
            f"a sweep every 5 s over a backlog of {args.backlog} sessions"
        )
        print(*drained, sep="\n")
        idle_p99 = percentile(idle, 99)
        print(f"idle: sessions={len(idle)} p50_ms={percentile(idle, 50):.0f} p99_ms={idle_p99:.0f}")
        print(
            f"sunset_latency_under_load p50_ms={p50:.0f} p99_ms={p99:.0f} "
            f"idle_p99_ms={idle_p99:.0f} ratio={p99 / idle_p99:.2f}"
        )
    elif args.marker:
        print(f"sunset_marker_latency p50_ms={p50:.0f} p99_ms={p99:.0f}")
    else:
        print(f"sunset_latency p50_ms={p50:.0f} p99_ms={p99:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
