"""The sweep's pace: how fast a backlog of idle sessions without a summary drains, on a quiet
machine and on one whose cores other processes keep busy.

Real parts: a local etcd + kube-apiserver, a Chroma server, the operator as a local process
with its default settings, one SessionSummarizer whose sweep runs every --interval seconds
and asks for at most --per-sweep sessions each time; its store holds --sessions idle sessions
(three memories each, an hour old) and no summary. With --busy N, N processes spin on the
CPU for the whole run (a test run or a build beside the operator); they are stopped after.
With --sunsets R, R sessions a second end (each a sunset of an active session: a first
summary, which the sweep's steps give way to) while the backlog drains.
Counted: the sessions Summarized by --timeout, the seconds until the last one was, and the
sweeps the operator logged. A sweep that keeps its pace drains --sessions in about
sessions / per-sweep sweeps.

    .venv/bin/python -m bench.sweep_drain [--busy 2] [--sessions 40] [--operator-src DIR]

Last line:
sweep_drain sessions=<n> drained=<n> drain_s=<s> sweeps=<n> busy=<n>
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

if __package__ in (None, ""):  # `python bench/sweep_drain.py` from the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.api_calls import load_sessions
from bench.fairness import done_in
from controller.kube import client as kube
from controller.store.connection import StoreLocation, connect
from controller.store.memory_store import MemoryStore
from devenv.bench import (
    QuickRuns,
    bench_chroma,
    bench_control_plane,
    create_summarizer,
    parse_bench_args,
)
from devenv.operator import LOOPBACK_MODELS
from devenv.processes import spawn, stop

QUICK_RUNS: QuickRuns = [
    ([], "sweep_drain sessions=<n> drained=<n> drain_s=<s> sweeps=<n> busy=<n>"),
]
NS = "sweep-drain"
SPIN = "while True: pass"


def end_sessions(active: list[str], args: argparse.Namespace, ended: threading.Event) -> None:
    """args.sunsets sunsets a second until ended is set."""
    if not args.sunsets:
        return
    began = time.monotonic()
    for n, sid in enumerate(active):
        if ended.wait(max(0.0, began + n / args.sunsets - time.monotonic())):
            return
        kube.request_summary(NS, sid, trigger="sunset")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sessions", type=int, default=40, help="idle sessions to drain")
    parser.add_argument("--per-sweep", type=int, default=5, help="spec.sweep.maxSessionsPerSweep")
    parser.add_argument("--interval", type=int, default=5, help="spec.sweep.intervalSeconds")
    parser.add_argument("--busy", type=int, default=0, help="processes spinning on the CPU")
    parser.add_argument("--sunsets", type=float, default=0.0, help="sunsets a second meanwhile")
    parser.add_argument("--timeout", type=float, default=200.0, help="seconds to wait")
    parser.add_argument("--operator-src", type=Path, default=None)
    parser.add_argument("--keep-log", type=Path, default=None, help="copy the operator's log")
    args = parse_bench_args(parser, sessions=6, per_sweep=3, timeout=60.0)
    sessions = [f"idle-{i:04d}" for i in range(args.sessions)]
    spinners: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(prefix="bench-sweep-drain-") as tmp:
        work = Path(tmp)
        with bench_control_plane(work / "cp") as cp, bench_chroma(work) as chroma_url:
            collections = {"memoryCollection": f"{NS}-m", "summaryCollection": f"{NS}-s"}
            sweep = {
                "intervalSeconds": args.interval,
                "maxSessionsPerSweep": args.per_sweep,
                "idleSeconds": 600,
            }
            spec = {"store": {"url": chroma_url, **collections}, "sweep": sweep}
            create_summarizer(cp, NS, {**spec, "reconcile": {"enabled": False}})
            location = StoreLocation(
                url=chroma_url,
                memory_collection=collections["memoryCollection"],
                summary_collection=collections["summaryCollection"],
            )
            store = MemoryStore(connect(location), location)
            load_sessions(store, sessions)
            active = [f"active-{i:05d}" for i in range(int(args.sunsets * args.timeout) + 1)]
            if args.sunsets:
                load_sessions(store, active, age_ms=0, step_ms=0)  # active for the whole run
            env = dict(cp.env(), SSO_REPLICA_ID="drain-operator",
                       SSO_ALLOWED_MODEL_URLS=LOOPBACK_MODELS)  # fmt: skip
            log = work / "operator.log"
            argv = [sys.executable, "-m", "controller", "run", "--standalone", "--namespace", NS]
            try:
                spinners = [
                    spawn([sys.executable, "-c", SPIN], work / f"spin-{i}.log")
                    for i in range(args.busy)
                ]
                operator = spawn(argv, log, env=env, cwd=args.operator_src)
                began, drained, last = time.monotonic(), 0, 0.0
                ended = threading.Event()
                sunsets = threading.Thread(target=end_sessions, args=(active, args, ended))
                try:
                    sunsets.start()
                    while drained < len(sessions) and time.monotonic() - began < args.timeout:
                        time.sleep(0.5)
                        now = done_in(NS, prefix="idle-")
                        if now > drained:
                            drained, last = now, time.monotonic() - began
                finally:
                    ended.set()
                    sunsets.join()
                    stop(operator)
            finally:
                for spinner in spinners:
                    stop(spinner, grace=1)
            text = log.read_text(errors="replace")
            if args.keep_log is not None:
                args.keep_log.write_text(text)
    sweeps = text.count("sweep by drain-operator:")
    print(
        f"sweep_drain sessions={len(sessions)} drained={drained} drain_s={last:.1f} "
        f"sweeps={sweeps} busy={args.busy}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
