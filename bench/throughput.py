"""Throughput with a model backend of fixed latency: sessions summarized per second at
concurrency C in {1, 4, 16}, against the ideal C / L.

Real parts: local etcd + kube-apiserver, a Chroma server, the operator as a local process
(standalone), and the OpenAI-compatible test server over real HTTP answering every chat
completion after exactly L seconds. Per C: a SessionSummarizer with
`model.maxConcurrency: C`; rounds x C sessions (one pass each, --rounds, default 4) are
sunset at once; the clock runs from the first sunset to the last object Summarized.

    .venv/bin/python -m bench.throughput [--latency 2.0]

Last line: throughput efficiency_at_16=<pct>
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from controller import kube
from controller.localenv.chroma import running_chroma
from controller.localenv.controlplane import REPO_ROOT, ControlPlane, running_control_plane
from controller.localenv.processes import spawn, stop, tail, wait_for
from controller.store import MemoryStore, StoreLocation, connect
from tests.support.openai_server import OpenAIServer, running_openai_server

REPLY = {
    "title": "Exporter hardening",
    "category": "feature",
    "user_requests": ["Make the exporter listen on port 7103."],
    "questions_and_decisions": ["Decided on batches of 500 rows."],
    "design_choices": [],
    "corrections_and_feedback": [],
    "current_state": ["The exporter runs on 7103."],
    "technologies": ["python"],
}


def all_summarized(cp: ControlPlane, ns: str, n: int) -> bool:
    out = cp.kubectl_run("-n", ns, "get", "ssum", "-o", "jsonpath={.items[*].status.phase}").stdout
    return out.split().count("Summarized") == n


def run_level(
    cp: ControlPlane,
    chroma_url: str,
    model: OpenAIServer,
    c: int,
    work: Path,
    rounds: int,
    workers: int | None,
) -> tuple[float, float]:
    """Returns (sessions per second, share of the C model slots busy over the run)."""
    ns = f"tp-{c}"
    cp.kubectl_run("create", "namespace", ns)
    cp.kubectl_run(
        "apply",
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": "memorycore.io/v1alpha1",
                "kind": "SessionSummarizer",
                "metadata": {"name": "default", "namespace": ns},
                "spec": {
                    "store": {
                        "url": chroma_url,
                        "memoryCollection": f"{ns}-memory",
                        "summaryCollection": f"{ns}-sessions",
                    },
                    "model": {
                        "backend": "openai",
                        "baseUrl": model.base_url,
                        "model": "test-chat",
                        "maxConcurrency": c,
                        "timeoutSeconds": 60,
                    },
                    "sweep": {"enabled": False},
                },
            }
        ),
    )
    loc = StoreLocation(
        url=chroma_url, memory_collection=f"{ns}-memory", summary_collection=f"{ns}-sessions"
    )
    store = MemoryStore(connect(loc), loc)
    sessions = [f"{ns}-s{i:03d}" for i in range(rounds * c)]
    store.add_memories(
        [f"{s}-0" for s in sessions],
        [f"User Prompt: Harden the exporter for {s}." for s in sessions],
        [
            {
                "sessionId": s,
                "timestamp": 1_770_000_000_000,
                "type": "agent-interaction",
                "prompt": f"Harden the exporter for {s}.",
                "response": "Done.",
            }
            for s in sessions
        ],
    )
    env = dict(cp.env(), SSO_REPLICA_ID=f"tp-{c}")
    if workers:
        env["SSO_WORKERS"] = str(workers)
    log = work / f"operator-{c}.log"
    operator = spawn(
        [sys.executable, "-m", "controller", "run", "--standalone", "--namespace", ns],
        log,
        env=env,
        cwd=REPO_ROOT,
    )
    try:
        time.sleep(3)  # initial list/watch
        seen = len(model.requests_to("/chat/completions"))
        t0 = time.monotonic()
        for s in sessions:
            kube.request_summary(ns, s, trigger="sunset")
        wait_for(
            lambda: all_summarized(cp, ns, len(sessions)),
            600,
            0.1,
            message=f"all {len(sessions)} Summarized\n{tail(log)}",
        )
        elapsed = time.monotonic() - t0
    finally:
        stop(operator)
    calls = model.requests_to("/chat/completions")[seen:]
    busy = sum(
        min(r.received_at + model.latency_seconds, t0 + elapsed) - r.received_at for r in calls
    )
    return len(sessions) / elapsed, busy / (c * elapsed)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=2.0, help="model latency L (s)")
    parser.add_argument("--rounds", type=int, default=4, help="sessions per level = rounds x C")
    parser.add_argument("--levels", default="1,4,16")
    parser.add_argument(
        "--workers", type=int, default=None, help="SSO_WORKERS (default: the operator's)"
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sso-tp-"))
    efficiency: dict[int, float] = {}
    with (
        running_control_plane(work / "cp") as cp,
        running_chroma(work / "chroma") as chroma,
        running_openai_server(
            default_reply=json.dumps(REPLY), latency_seconds=args.latency
        ) as model,
    ):
        os.environ["KUBECONFIG"] = str(cp.kubeconfig)
        cp.kubectl_run("apply", "-f", str(REPO_ROOT / "crds"))
        cp.kubectl_run("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        for c in (int(x) for x in args.levels.split(",")):
            rate, busy = run_level(cp, chroma.url, model, c, work, args.rounds, args.workers)
            ideal = c / args.latency
            efficiency[c] = 100 * rate / ideal
            print(
                f"concurrency={c} latency_s={args.latency} sessions_per_s={rate:.2f} "
                f"ideal={ideal:.2f} efficiency={efficiency[c]:.0f}% "
                f"model_slots_busy={100 * busy:.0f}%",
                flush=True,
            )
    top = max(efficiency)
    print(f"throughput efficiency_at_{top}={efficiency[top]:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
