"""Kubernetes API calls per summary, counted on the real apiserver's audit log.

Real parts: a local etcd + kube-apiserver (audit log on, devenv/controlplane.py), a Chroma
server, and the operator as a local process running as its own ServiceAccount, so every
request it makes is attributed to it. N sessions are sunset one at a time (each waited
for), then the operator's requests in that window are counted by verb and resource. Lists
and watches (the peering reporter's periodic list, kopf's watches) run on a clock, not per
summary: they are shown but left out of the per-summary figure.

    .venv/bin/python -m bench.api_calls [--sessions 20] [--operator-src DIR] [--quick]
    .venv/bin/python -m bench.api_calls --model-latency 0.5 --memories 30 --claim-ttl 6

--operator-src runs the operator from another checkout (e.g. `git worktree add /tmp/old
REV`) against the same CRDs, for a before/after in one session.

The renewer's cost: a pass renews its session claim (an `update sessionclaims`) once per
renew period (a third of the claim's duration) while it runs, so a summary that ends
within one period costs none. --model-latency S summarizes with an OpenAI-compatible
model over HTTP that answers each pass after S seconds (tests/support/openai_server.py),
each of --memories memories read in its own pass, and --claim-ttl sets the claim's
duration: passes that outlast renew periods show what each costs. The line before the
last: claim_renewals per_summary=<r> pass_s=<mean> renew_period_s=<p>.

Last line (operator: the source directory it ran from):
api_calls per_summary=<x> sessions=<n> operator=<text>
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/api_calls.py` from the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from controller.core.memories import render_interaction_document
from controller.core.naming import summary_object_name
from controller.kube import client as kube
from controller.store.connection import StoreLocation, connect
from controller.store.memory_store import MemoryStore
from devenv.bench import (
    QuickRuns,
    audit_calls,
    bench_chroma,
    bench_control_plane,
    create_summarizer,
    operator_kubeconfig,
    parse_bench_args,
)
from devenv.controlplane import REPO_ROOT
from devenv.operator import LOOPBACK_MODELS
from devenv.processes import spawn, stop, wait_for
from tests.support.fact_model import echo_facts, fact_memory
from tests.support.openai_server import running_openai_server

NS = "calls"  # with --model-latency: calls-renew, its own collections too (the smoke tier
SA = "sso-calls"  # runs both modes on one shared control plane and Chroma)
PER_CLOCK = {"list", "watch"}
# The smoke tier (tests/bench) runs `--quick` plus each argument list and checks that the
# last line has the format documented above (docs/benchmarks.md, "Quick mode").
QUICK_RUNS: QuickRuns = [
    ([], "api_calls per_summary=<x> sessions=<n> operator=<text>"),
    (  # passes outlasting the claim's renew period: the renewer runs
        ["--model-latency", "0.1", "--memories", "4", "--claim-ttl", "1.2"],
        "api_calls per_summary=<x> sessions=<n> operator=<text>",
    ),
]


def load_sessions(
    store: MemoryStore,
    sessions: list[str],
    memories: int | None = None,
    age_ms: int = 3_600_000,
    step_ms: int = 1000,
) -> None:
    """Three memories a session (or `memories` one-fact ones), the first age_ms ago, each
    session's step_ms after the last's."""
    if memories:  # one fact per memory, one memory per model pass (tests/support/fact_model.py)
        base = int(time.time() * 1000) - age_ms
        rows = [fact_memory(sid, k, base + step_ms * i + k) for i, sid in enumerate(sessions)
                for k in range(memories)]  # fmt: skip
        store.add_memories(
            [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], create=True
        )
        return
    ids, docs, metas = [], [], []
    base = int(time.time() * 1000) - age_ms
    for i, sid in enumerate(sessions):
        for k in range(3):
            prompt = f"Step {k} of {sid}: add the export button and test it."
            ids.append(f"{sid}-{k}")
            docs.append(render_interaction_document(prompt, "thinking", f"Done step {k}."))
            metas.append(
                {
                    "sessionId": sid,
                    "timestamp": base + step_ms * i + k,
                    "type": "agent-interaction",
                    "prompt": prompt,
                    "response": f"Done step {k}.",
                }
            )
    store.add_memories(ids, docs, metas, create=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--operator-src", type=Path, default=REPO_ROOT)
    parser.add_argument(
        "--model-latency", type=float, default=0.0, help="summarize with a model this slow (s)"
    )
    parser.add_argument("--memories", type=int, default=3, help="per session (with a model)")
    parser.add_argument("--claim-ttl", type=float, default=60.0, help="claim duration (s)")
    args = parse_bench_args(parser, sessions=2)
    renew = args.model_latency > 0
    ns, sa = (f"{NS}-renew", f"{SA}-renew") if renew else (NS, SA)
    sessions = [f"{ns}-{i:03d}" for i in range(args.sessions)]
    work = Path(tempfile.mkdtemp(prefix="sso-calls-"))
    with contextlib.ExitStack() as stack:
        cp = stack.enter_context(bench_control_plane(work / "cp"))
        chroma_url = stack.enter_context(bench_chroma(work / "chroma"))
        store_spec = {"url": chroma_url}
        if renew:
            store_spec |= {
                "memoryCollection": f"{ns}-memory",
                "summaryCollection": f"{ns}-sessions",
            }
        spec: dict[str, Any] = {
            "store": store_spec,
            "sweep": {"enabled": False},
            "reconcile": {"enabled": False},
        }
        if renew:
            model = stack.enter_context(
                running_openai_server(responder=echo_facts, latency_seconds=args.model_latency)
            )
            spec["model"] = {
                "backend": "openai",
                "baseUrl": model.base_url,
                "model": "test-chat",
                "maxInputTokens": 256,  # one memory per pass
                "timeoutSeconds": 60,
            }
        create_summarizer(cp, ns, spec)
        sa_config = operator_kubeconfig(cp, ns, sa, work / "operator.kubeconfig")
        location = StoreLocation(
            url=chroma_url,
            memory_collection=store_spec.get("memoryCollection", "neo-agent-memory"),
            summary_collection=store_spec.get("summaryCollection", "neo-agent-sessions"),
        )
        store = MemoryStore(connect(location), location)
        load_sessions(store, sessions, args.memories if renew else None)
        env = dict(
            cp.env(),
            KUBECONFIG=str(sa_config),
            SSO_REPLICA_ID="calls-operator",
            SSO_CLAIM_TTL_SECONDS=str(args.claim_ttl),
            SSO_CLAIM_MARGIN_SECONDS=str(min(5.0, args.claim_ttl / 4)),
            # The scripted model is on loopback: the operator sends memories only where the
            # install's list allows (docs/security.md).
            SSO_ALLOWED_MODEL_URLS=LOOPBACK_MODELS,
        )
        log = work / "operator.log"
        operator = spawn(
            [sys.executable, "-m", "controller", "run", "--standalone", "--namespace", ns],
            log,
            env=env,
            cwd=args.operator_src,
        )
        try:

            def phase(sid: str) -> str | None:
                obj = kube.get_summary(ns, summary_object_name(sid)) or {}
                st = obj.get("status") or {}
                done = st.get("observedGeneration") == (obj.get("metadata") or {}).get("generation")
                return st.get("phase") if done else None

            def summarized(sid: str) -> bool:
                return phase(sid) == "Summarized"

            kube.request_summary(ns, "warm-up", trigger="sunset")  # NotFound: loads the model
            wait_for(lambda: phase("warm-up"), 120, 0.2, message="warm-up", log=log)
            time.sleep(1)
            start = int(time.time() * 1000)
            pass_s = []
            for sid in sessions:
                began = time.monotonic()
                kube.request_summary(ns, sid, trigger="sunset")
                wait_for(partial(summarized, sid), 600, 0.05, log=log)
                pass_s.append(time.monotonic() - began)
            time.sleep(1.5)  # the last status patch and Event land
            end = int(time.time() * 1000)
        finally:
            stop(operator)
        calls = audit_calls(cp.audit_log, f"system:serviceaccount:{ns}:{sa}", start, end)
    per_summary = sum(n for (verb, _), n in calls.items() if verb not in PER_CLOCK)
    print(f"{'verb':8} {'resource':40} {'calls':>6} {'per summary':>12}")
    for (verb, resource), n in sorted(calls.items(), key=lambda kv: (-kv[1], kv[0])):
        note = "  (on a clock)" if verb in PER_CLOCK else ""
        print(f"{verb:8} {resource:40} {n:6d} {n / len(sessions):12.2f}{note}")
    renewals = calls[("update", "sessionclaims")]
    print(
        f"claim_renewals per_summary={renewals / len(sessions):.2f} "
        f"pass_s={sum(pass_s) / len(pass_s):.1f} renew_period_s={args.claim_ttl / 3:g}"
    )
    print(
        f"api_calls per_summary={per_summary / len(sessions):.2f} sessions={len(sessions)} "
        f"operator={args.operator_src}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
