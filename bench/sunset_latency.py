"""Sunset latency: from `summaryctl sunset` to the summary visible in Chroma.

Real parts: a local etcd + kube-apiserver, a Chroma server, the operator as a local
process (standalone, extractive backend). For each of N sessions (default 100), the clock
starts right before summaryctl's sunset call (create/patch of the SessionSummary) and stops
when the row summary_<sessionId> in Chroma carries a summarizedAt after that start.
Sessions are sunset one at a time so each figure is the latency of an idle system.

    .venv/bin/python -m bench.sunset_latency [--sessions 100] [--memories 6]

Last line: sunset_latency p50_ms=<n> p99_ms=<n>
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from controller import kube
from controller.demo_data import SAMPLE_SESSIONS, SampleSession, memory_rows
from controller.localenv.chroma import running_chroma
from controller.localenv.controlplane import REPO_ROOT, running_control_plane
from controller.localenv.processes import spawn, stop, tail
from controller.store import MemoryStore, StoreLocation, connect

NS = "bench"


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * len(ordered) + 0.5) - 1))
    return ordered[index]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--memories", type=int, default=6, help="memories per session")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sso-bench-"))
    with running_control_plane(work / "cp") as cp, running_chroma(work / "chroma") as chroma:
        env = cp.env()
        cp.kubectl_run("apply", "-f", str(REPO_ROOT / "crds"))
        cp.kubectl_run("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        cp.kubectl_run("create", "namespace", NS)
        cp.kubectl_run(
            "apply",
            "-f",
            "-",
            input=(
                "apiVersion: memorycore.io/v1alpha1\nkind: SessionSummarizer\n"
                f"metadata: {{name: default, namespace: {NS}}}\n"
                f"spec: {{store: {{url: '{chroma.url}'}}, sweep: {{enabled: false}}}}\n"
            ),
        )
        loc = StoreLocation(url=chroma.url)
        store = MemoryStore(connect(loc), loc)
        base = SAMPLE_SESSIONS[1]
        turns = (base.turns * ((args.memories // len(base.turns)) + 1))[: args.memories]
        session_ids = [f"bench-{i:04d}" for i in range(args.sessions)]
        start_ms = int(time.time() * 1000) - 86_400_000
        ids, docs, metas = [], [], []
        for i, sid in enumerate(session_ids):
            session = SampleSession(sid, base.agent, base.model, tuple(turns), base.tools)
            for row in memory_rows(session, start_ms + i * 1000):
                ids.append(row[0])
                docs.append(row[1])
                metas.append(row[2])
        store.add_memories(ids, docs, metas)
        summaries = store.summaries()
        print(f"loaded {len(ids)} memories in {args.sessions} sessions", file=sys.stderr)

        log = work / "operator.log"
        op_env = dict(env, SSO_REPLICA_ID="bench-operator")
        operator = spawn(
            [sys.executable, "-m", "controller", "run", "--standalone", "--namespace", NS],
            log,
            env=op_env,
            cwd=REPO_ROOT,
        )
        os.environ["KUBECONFIG"] = str(cp.kubeconfig)
        latencies: list[float] = []
        try:
            time.sleep(3)  # the operator's initial list/watch
            for n, sid in enumerate(session_ids, 1):
                t0 = time.monotonic()
                wall0_ms = int(time.time() * 1000)
                kube.request_summary(NS, sid, trigger="sunset")
                deadline = t0 + 30
                while True:
                    got = summaries.get(ids=[f"summary_{sid}"], include=["metadatas"])
                    metas_ = got["metadatas"] or []
                    if metas_ and int(metas_[0].get("summarizedAt", 0)) >= wall0_ms - 5:  # type: ignore[arg-type]
                        break
                    if time.monotonic() > deadline:
                        raise SystemExit(f"{sid} not summarized in 30 s\n{tail(log)}")
                    time.sleep(0.005)
                latencies.append((time.monotonic() - t0) * 1000)
                if n % 20 == 0:
                    print(f"  {n}/{len(session_ids)} sessions", file=sys.stderr)
        finally:
            stop(operator)
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    print(
        f"sessions={len(latencies)} mean_ms={statistics.mean(latencies):.0f} "
        f"min_ms={min(latencies):.0f} max_ms={max(latencies):.0f}"
    )
    print(f"sunset_latency p50_ms={p50:.0f} p99_ms={p99:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
