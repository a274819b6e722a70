"""Fairness between SessionSummarizers: one sunset in a quiet namespace while another
namespace's burst of sunsets is queued.

Real parts: a local etcd + kube-apiserver, a Chroma server, the operator as a local process
with its default settings watching two namespaces, a SessionSummarizer in each. First one
sunset in the quiet namespace alone (idle), then --burst sunsets applied at once in the
busy namespace (a rollout that ends that many agents' sessions) and, once the operator has
begun them, one more in the quiet namespace. Each figure is from the request to the
object's Summarized status (polled every 20 ms). The scheduler serves each
SessionSummarizer as a flow in turn (docs/operations.md, "Scheduling").

    .venv/bin/python -m bench.fairness [--burst 200] [--operator-src DIR] [--quick]

Last line (ratio: quiet_s over idle_s):
fairness quiet_s=<s> idle_s=<s> ratio=<x> burst_s=<s> burst=<n>
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/fairness.py` from the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.api_calls import load_sessions
from controller.core.naming import summary_object_name
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
)
from devenv.operator import LOOPBACK_MODELS
from devenv.processes import spawn, stop, wait_for

QUICK_RUNS: QuickRuns = [
    ([], "fairness quiet_s=<s> idle_s=<s> ratio=<x> burst_s=<s> burst=<n>"),
]
BUSY, QUIET = "fair-busy", "fair-quiet"


def settled(obj: dict[str, Any]) -> bool:
    """Summarized at the object's current generation."""
    st = obj.get("status") or {}
    done = st.get("observedGeneration") == (obj.get("metadata") or {}).get("generation")
    return bool(done and st.get("phase") == "Summarized")


def summarized(ns: str, sid: str) -> bool:
    return settled(kube.get_summary(ns, summary_object_name(sid)) or {})


def done_in(ns: str, prefix: str = "") -> int:
    """Objects of the namespace (whose session id starts with prefix) Summarized, in one
    list request."""
    return sum(
        settled(o) and str((o.get("spec") or {}).get("sessionId", "")).startswith(prefix)
        for o in kube.iter_summaries(ns)
    )


def sunset(ns: str, sid: str) -> float:
    """Seconds from the request to Summarized."""
    began = time.monotonic()
    kube.request_summary(ns, sid, trigger="sunset")
    wait_for(lambda: summarized(ns, sid), 600, POLL_S, message=f"{ns}/{sid} Summarized")
    return time.monotonic() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--burst", type=int, default=200, help="sunsets in the busy namespace")
    parser.add_argument("--begun", type=int, default=10, help="burst passes begun first")
    parser.add_argument("--operator-src", type=Path, default=None)
    args = parse_bench_args(parser, burst=40)
    burst = [f"burst-{i:04d}" for i in range(args.burst)]
    with tempfile.TemporaryDirectory(prefix="bench-fairness-") as tmp:
        work = Path(tmp)
        with bench_control_plane(work / "cp") as cp, bench_chroma(work) as chroma_url:
            for ns, sessions in ((BUSY, burst), (QUIET, ["warm-up", "idle", "quiet"])):
                collections = {"memoryCollection": f"{ns}-m", "summaryCollection": f"{ns}-s"}
                create_summarizer(cp, ns, {"store": {"url": chroma_url, **collections},
                                           "sweep": {"enabled": False},
                                           "reconcile": {"enabled": False}})  # fmt: skip
                location = StoreLocation(
                    url=chroma_url,
                    memory_collection=collections["memoryCollection"],
                    summary_collection=collections["summaryCollection"],
                )
                load_sessions(MemoryStore(connect(location), location), sessions)
            env = dict(cp.env(), SSO_REPLICA_ID="fair-operator",
                       SSO_ALLOWED_MODEL_URLS=LOOPBACK_MODELS)  # fmt: skip
            log = work / "operator.log"
            argv = [sys.executable, "-m", "controller", "run", "--standalone"]
            operator = spawn(
                [*argv, "--namespace", BUSY, "--namespace", QUIET],
                log,
                env=env,
                cwd=args.operator_src,
            )
            try:
                sunset(QUIET, "warm-up")  # loads the embedding model
                idle_s = sunset(QUIET, "idle")
                began = time.monotonic()
                with ThreadPoolExecutor(8) as pool:
                    list(pool.map(lambda s: kube.request_summary(BUSY, s, trigger="sunset"), burst))
                wait_for(lambda: done_in(BUSY) >= args.begun, 600, 0.2, log=log)
                quiet_s = sunset(QUIET, "quiet")
                wait_for(lambda: done_in(BUSY) >= len(burst), 900, 0.5, log=log)
                burst_s = time.monotonic() - began
            finally:
                stop(operator)
    print(
        f"fairness quiet_s={quiet_s:.2f} idle_s={idle_s:.2f} ratio={quiet_s / idle_s:.1f} "
        f"burst_s={burst_s:.1f} burst={args.burst}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
