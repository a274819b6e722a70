"""Failover: time from SIGKILL of the active replica to the next summary written by the new
one, with kopf's default peering lifetime (60 s) and our tuned default (15 s), in one run.

Real parts: local etcd + kube-apiserver, Chroma server, two operator processes per
setting (distinct random priorities, peering on). Per trial: wait until a leader is
active and has written a warm-up summary, SIGKILL it, sunset a new session at once, and
time until its summary is in Chroma (written by the survivor).

    .venv/bin/python -m bench.failover [--trials 2] [--tuned 15] [--default 60] [--quick]

Last line: failover default_s=<n> tuned_s=<n>   (medians)
"""

from __future__ import annotations

import sys
from pathlib import Path

# The repo root on the path: the benches also run as `python bench/NAME.py`.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import datetime as dt
import json
import statistics
import tempfile
import time

from controller.kube import client as kube
from controller.kube.peering import leader_of, live_peers
from controller.store.connection import StoreLocation, connect
from controller.store.memory_store import MemoryStore
from devenv.bench import (
    QuickRuns,
    bench_chroma,
    bench_control_plane,
    create_summarizer,
    parse_bench_args,
)
from devenv.controlplane import ControlPlane
from devenv.operator import start_operator
from devenv.processes import kill, stop, wait_for

# The smoke tier (tests/bench) runs `--quick` plus each argument list and checks that the
# last line has the format documented above (docs/benchmarks.md, "Quick mode").
QUICK_RUNS: QuickRuns = [([], "failover default_s=<n> tuned_s=<n>")]


def leader(cp: ControlPlane, ns: str) -> str | None:
    out = cp.kubectl_run(
        "-n",
        ns,
        "get",
        "kopfpeerings.kopf.dev",
        "session-summary-operator",
        "-o",
        "json",
        check=False,
    )
    if out.returncode != 0:
        return None
    status = json.loads(out.stdout).get("status") or {}
    return leader_of(live_peers(status, dt.datetime.now(dt.UTC)))


def load_session(store: MemoryStore, sid: str) -> None:
    meta = {
        "sessionId": sid,
        "timestamp": 1_770_000_000_000,
        "type": "agent-interaction",
        "prompt": f"Deploy {sid}.",
        "thought": "ok",
        "response": "Deployed.",
    }
    store.add_memories([f"{sid}-0"], [f"User Prompt: Deploy {sid}."], [meta], create=True)


def written_by(store: MemoryStore, sid: str) -> str | None:
    stored = store.stored_summary(sid)  # who wrote it is in the row's ledger entry
    return str(stored[1].get("writer")) if stored else None


def trial(
    cp: ControlPlane, store: MemoryStore, url: str, work: Path, lifetime: int, n: int
) -> float:
    ns = f"fo-{lifetime}-{n}"
    create_summarizer(
        cp,
        ns,
        {"store": {"url": url}, "sweep": {"enabled": False}, "reconcile": {"enabled": False}},
    )
    procs = {}
    for r in ("a", "b"):
        rid = f"{ns}-{r}"
        env = dict(cp.env(), SSO_REPLICA_ID=rid, SSO_PEERING_LIFETIME=str(lifetime))
        procs[rid] = start_operator(work / f"{rid}.log", env, "--namespace", ns)
    try:
        active = wait_for(lambda: leader(cp, ns), 120, 0.5, message="a leader")
        assert active is not None  # wait_for returns a truthy value
        warm, probe = f"{ns}-warm", f"{ns}-probe"
        load_session(store, warm)
        load_session(store, probe)
        kube.request_summary(ns, warm, trigger="sunset")
        wait_for(lambda: written_by(store, warm), 120, 0.2, message="warm-up summary")
        time.sleep(1 + (n % 3))  # kill at varying points of the keepalive cycle
        t0 = time.monotonic()
        kill(procs[active])
        kube.request_summary(ns, probe, trigger="sunset")
        writer = wait_for(
            lambda: written_by(store, probe), 300, 0.1, message="summary after failover"
        )
        elapsed = time.monotonic() - t0
        assert writer != active, (writer, active)
        print(
            f"  lifetime={lifetime}s trial={n}: {elapsed:.1f}s "
            f"(killed {active}, new writer {writer})",
            file=sys.stderr,
        )
        return elapsed
    finally:
        for proc in procs.values():
            stop(proc)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--tuned", type=int, default=15, help="tuned peering lifetime (s)")
    parser.add_argument("--default", type=int, default=60, help="kopf's peering lifetime (s)")
    args = parse_bench_args(parser, trials=1, tuned=3, default=5)
    if args.default == args.tuned:
        parser.error("--default and --tuned must differ")
    work = Path(tempfile.mkdtemp(prefix="sso-failover-"))
    results: dict[int, list[float]] = {args.default: [], args.tuned: []}
    with bench_control_plane(work / "cp") as cp, bench_chroma(work / "chroma") as chroma_url:
        loc = StoreLocation(url=chroma_url)
        store = MemoryStore(connect(loc), loc)
        for n in range(args.trials):
            for lifetime in results:
                results[lifetime].append(trial(cp, store, chroma_url, work, lifetime, n))
    default_s = statistics.median(results[args.default])
    tuned_s = statistics.median(results[args.tuned])
    print(
        f"trials={args.trials} default_lifetime={args.default} tuned_lifetime={args.tuned} "
        f"default_all={[round(x, 1) for x in results[args.default]]} "
        f"tuned_all={[round(x, 1) for x in results[args.tuned]]}"
    )
    print(f"failover default_s={default_s:.1f} tuned_s={tuned_s:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
