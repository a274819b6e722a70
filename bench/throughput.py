"""Throughput with a model backend of fixed latency: sessions summarized per second at
concurrency C in {1, 4, 16}, against the ideal C / L.

Real parts: local etcd + kube-apiserver, a Chroma server, the operator as a local process
(standalone), and the OpenAI-compatible test server over real HTTP answering every chat
completion after exactly L seconds. Per C: a SessionSummarizer with
`model.maxConcurrency: C`; rounds x C sessions (one pass each, --rounds, default 10) are
sunset at once (from 8 threads); the clock runs from the first sunset to the last object
Summarized (seen on a watch). Besides the rate, each level prints the share of model slots
busy, the fill (first sunset -> first model call) and the drain (last model reply -> last
object Summarized).

    .venv/bin/python -m bench.throughput [--latency 2.0] [--quick]

Last line: throughput efficiency_at_16=<pct>

--backend extractive: the default backend with the local MiniLM embedding instead, no model
server: a backlog of N sessions (--backlog, default 500, 6 memories each) requested at once
(trigger sweep, as the sweep requests a backlog); the clock runs from the first request to
the last object Summarized. Last line:
extractive_throughput summaries_per_s=<x> backlog=<n> drain_s=<s>

--backend extractive --remote-embedding: the same backlog twice in one run, first with the
local MiniLM embedding (its line as above), then embedded by an OpenAI-compatible endpoint
at neo's 4096 dimensions (the test server on loopback, model
text-embedding-qwen3-embedding-8b: the configuration neo memory-core users run,
docs/migrating-from-neo.md). Last line:
extractive_throughput embedding=<text> dim=<n> summaries_per_s=<x> backlog=<n> drain_s=<s>
operator_cost embedding=<text> cpu_ms_per_summary=<n> api_calls_per_summary=<x>

The last line is the operator's own cost with the embedding remote: its process's CPU over
the drain per summary (the operator's path alone: no model, no embedding), and its
Kubernetes API calls per summary, counted on the apiserver's audit log (the operator runs
as a ServiceAccount of its own; lists and watches, on a clock, left out). Each drain's
figures, the local one's too, are printed on the line after it.
--before-src DIR measures the same first with the operator of another checkout (a git
worktree of an earlier commit) and prints after/before ratios: a before/after in one run.
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
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple, cast

import numpy as np
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from controller.api import GROUP, SUMMARY_PLURAL, VERSION
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
from devenv.controlplane import REPO_ROOT, ControlPlane
from devenv.operator import start_operator
from devenv.processes import cpu_seconds, stop, tail
from tests.support.openai_server import OpenAIServer, running_openai_server

# The smoke tier (tests/bench) runs `--quick` plus each argument list and checks that the
# last line has the format documented above (docs/benchmarks.md, "Quick mode").
QUICK_RUNS: QuickRuns = [
    ([], "throughput efficiency_at_16=<pct>"),
    (
        ["--backend", "extractive"],
        "extractive_throughput summaries_per_s=<x> backlog=<n> drain_s=<s>",
    ),
    (
        ["--backend", "extractive", "--remote-embedding"],
        "operator_cost embedding=<text> cpu_ms_per_summary=<n> api_calls_per_summary=<x>",
    ),
]
NEO_DIMENSION = 4096
NEO_EMBEDDING_MODEL = "text-embedding-qwen3-embedding-8b"
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


class Level(NamedTuple):
    rate: float  # sessions Summarized per second
    busy: float  # share of the C model slots busy over the run
    fill_s: float  # first sunset -> first model call
    drain_s: float  # last model reply -> last object Summarized


def wait_all_summarized(ns: str, names: set[str], timeout_s: float) -> float:
    """Blocks until every named SessionSummary shows Summarized; returns the monotonic time
    the last one was seen. A watch, not polling: exact, and the bench does not take the
    CPU (kubectl processes, repeated lists) that it measures."""
    pending = set(names)
    deadline = time.monotonic() + timeout_s
    version = None
    while pending and time.monotonic() < deadline:
        if version is None:
            listed = cast(
                dict[str, Any],
                kube.custom().list_namespaced_custom_object(GROUP, VERSION, ns, SUMMARY_PLURAL),
            )
            version = listed["metadata"]["resourceVersion"]
            for obj in listed["items"]:
                if (obj.get("status") or {}).get("phase") == "Summarized":
                    pending.discard(obj["metadata"]["name"])
            continue
        stream = watch.Watch().stream(
            kube.custom().list_namespaced_custom_object,
            GROUP,
            VERSION,
            ns,
            SUMMARY_PLURAL,
            resource_version=version,
            timeout_seconds=max(1, int(deadline - time.monotonic())),
        )
        try:
            for event in stream:
                obj = event["object"]
                version = obj["metadata"]["resourceVersion"]
                if (obj.get("status") or {}).get("phase") == "Summarized":
                    pending.discard(obj["metadata"]["name"])
                if not pending:
                    break
        except ApiException as exc:
            if exc.status != 410:  # expired resourceVersion: list again
                raise
            version = None
    if pending:
        raise TimeoutError(f"{len(pending)} of {len(names)} not Summarized in {timeout_s:.0f}s")
    return time.monotonic()


def run_level(
    cp: ControlPlane,
    chroma_url: str,
    model: OpenAIServer,
    c: int,
    work: Path,
    rounds: int,
    workers: int | None,
) -> Level:
    ns = f"tp-{c}"
    create_summarizer(
        cp,
        ns,
        {
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
            "reconcile": {"enabled": False},
        },
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
        create=True,
    )
    env = dict(cp.env(), SSO_REPLICA_ID=f"tp-{c}")
    if workers:
        env["SSO_WORKERS"] = str(workers)
    log = work / f"operator-{c}.log"
    operator = start_operator(log, env, "--standalone", "--namespace", ns)
    try:
        time.sleep(3)  # initial list/watch
        seen = len(model.requests_to("/chat/completions"))
        t0 = time.monotonic()
        # Sessions end together: the sunsets are sent from a few threads at once.
        with ThreadPoolExecutor(max_workers=8) as pool:
            names = {
                name
                for name, _ in pool.map(
                    lambda s: kube.request_summary(ns, s, trigger="sunset"), sessions
                )
            }
        try:
            elapsed = wait_all_summarized(ns, names, 600) - t0
        except TimeoutError as exc:
            raise SystemExit(f"{exc}\n{tail(log)}") from None
    finally:
        stop(operator)
    calls = model.requests_to("/chat/completions")[seen:]
    busy = sum(
        min(r.received_at + model.latency_seconds, t0 + elapsed) - r.received_at for r in calls
    )
    fill = min(r.received_at for r in calls) - t0
    drain = t0 + elapsed - (max(r.received_at for r in calls) + model.latency_seconds)
    return Level(len(sessions) / elapsed, busy / (c * elapsed), fill, drain)


def run_extractive(
    cp: ControlPlane,
    chroma_url: str,
    work: Path,
    backlog: int,
    trigger: str,
    embedding: dict[str, str] | None = None,
    ns: str = "tp-extractive",
    operator_src: Path = REPO_ROOT,
) -> Drain:
    """A backlog summarized by the extractive backend with the local embedding, or with
    `embedding` (a spec.embedding), in a namespace of its own (ns: benches may share a
    control plane), by the operator of operator_src. The operator runs as a ServiceAccount
    of its own: its API calls in the drain's window are counted on the audit log; its CPU
    (/proc) over the same window."""
    store_spec = {
        "url": chroma_url,
        "memoryCollection": f"{ns}-memory",
        "summaryCollection": f"{ns}-sessions",
    }
    spec: dict[str, Any] = {
        "store": store_spec,
        "sweep": {"enabled": False},
        "reconcile": {"enabled": False},
    }
    if embedding:
        spec["embedding"] = embedding
    create_summarizer(cp, ns, spec)
    loc = StoreLocation(
        url=chroma_url, memory_collection=f"{ns}-memory", summary_collection=f"{ns}-sessions"
    )
    sessions = [f"{ns}-s{i:03d}" for i in range(backlog)]
    ids, docs, metas = [], [], []
    for s in sessions:
        for turn in range(6):
            prompt = f"Step {turn} of {s}: harden the exporter on port {7100 + turn}."
            ids.append(f"{s}-{turn}")
            docs.append(f"User Prompt: {prompt}\nAgent Response: Done; tests pass.")
            metas.append(
                {
                    "sessionId": s,
                    "timestamp": 1_770_000_000_000 + turn * 1000,
                    "type": "agent-interaction",
                    "prompt": prompt,
                    "response": "Done; tests pass.",
                }
            )
    # Fixed vectors: a pass never reads a memory's vector, and loading stays quick.
    memories = connect(loc).get_or_create_collection(loc.memory_collection)
    for start in range(0, len(ids), 2000):
        end = start + 2000
        memories.upsert(
            ids=ids[start:end],
            documents=docs[start:end],
            metadatas=metas[start:end],  # type: ignore[arg-type]
            embeddings=np.full((len(ids[start:end]), 384), 0.05, dtype=np.float32),
        )
    log = work / f"operator-{ns}.log"
    kubeconfig = operator_kubeconfig(cp, ns, "sso-tp", work / f"{ns}.kubeconfig")
    env = dict(cp.env(), KUBECONFIG=str(kubeconfig))
    operator = start_operator(log, env, "--standalone", "--namespace", ns, cwd=operator_src)
    try:
        time.sleep(3)  # initial list/watch
        t0, cpu0, start_ms = time.monotonic(), cpu_seconds(operator.pid), int(time.time() * 1000)
        with ThreadPoolExecutor(max_workers=8) as pool:
            names = {
                name
                for name, _ in pool.map(
                    lambda s: kube.request_summary(ns, s, trigger=trigger), sessions
                )
            }
        requested = time.monotonic()
        try:
            done = wait_all_summarized(ns, names, 1800)
        except TimeoutError as exc:
            raise SystemExit(f"{exc}\n{tail(log)}") from None
        cpu = cpu_seconds(operator.pid) - cpu0
        end_ms = int(time.time() * 1000)
    finally:
        stop(operator)
    time.sleep(1)  # the audit log's last lines
    calls = audit_calls(cp.audit_log, f"system:serviceaccount:{ns}:sso-tp", start_ms, end_ms)
    per_summary = {k: n for k, n in calls.items() if k[0] not in ("list", "watch")}
    print(
        f"requests sent in {requested - t0:.1f}s; the operator's calls: "
        + " ".join(f"{v} {r}={n}" for (v, r), n in sorted(calls.items())),
        flush=True,
    )
    return Drain(
        backlog / (done - t0),
        done - t0,
        1000 * cpu / backlog,
        sum(per_summary.values()) / backlog,
    )


class Drain(NamedTuple):
    summaries_per_s: float
    drain_s: float
    cpu_ms_per_summary: float  # the operator process's CPU (utime + stime) over the drain
    api_calls_per_summary: float  # lists and watches (on a clock) left out

    def figures(self, backlog: int) -> str:
        return (
            f"summaries_per_s={self.summaries_per_s:.1f} backlog={backlog} "
            f"drain_s={self.drain_s:.1f} cpu_ms_per_summary={self.cpu_ms_per_summary:.0f} "
            f"api_calls_per_summary={self.api_calls_per_summary:.2f}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("openai", "extractive"), default="openai")
    parser.add_argument("--backlog", type=int, default=500, help="sessions (extractive)")
    parser.add_argument("--trigger", default="sweep", help="the backlog's trigger (extractive)")
    parser.add_argument(
        "--remote-embedding",
        action="store_true",
        help="extractive: also the same backlog embedded by an endpoint at 4096 dimensions",
    )
    parser.add_argument("--latency", type=float, default=2.0, help="model latency L (s)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=10,
        help="sessions per level = rounds x C; fill and drain (printed) weigh less with more",
    )
    parser.add_argument("--levels", default="1,4,16")
    parser.add_argument(
        "--operator-src", type=Path, default=REPO_ROOT, help="run the operator from this checkout"
    )
    parser.add_argument(
        "--before-src",
        type=Path,
        default=None,
        help="extractive: first the same with the operator of this checkout (e.g. a git "
        "worktree of an earlier commit), then after/before ratios",
    )
    parser.add_argument(
        "--workers", type=int, default=None, help="SSO_WORKERS (default: the operator's)"
    )
    # C = 16, the figure's level, for one round: 16 sessions, one model pass each.
    args = parse_bench_args(parser, backlog=4, latency=0.2, rounds=1, levels="16")
    work = Path(tempfile.mkdtemp(prefix="sso-tp-"))
    if args.backend == "extractive":
        runs = [("before", args.before_src)] if args.before_src else []
        runs.append(("after" if args.before_src else "", args.operator_src))
        results: dict[tuple[str, str], Drain] = {}
        with (
            bench_control_plane(work / "cp") as cp,
            bench_chroma(work / "chroma") as chroma_url,
            running_openai_server(
                embedding_dimension=NEO_DIMENSION, embedding_model=NEO_EMBEDDING_MODEL
            ) as endpoint,
        ):
            remote = {
                "provider": "openai",
                "baseUrl": endpoint.base_url,
                "model": NEO_EMBEDDING_MODEL,
            }
            embeddings = [("local", None)] + ([("remote", remote)] if args.remote_embedding else [])
            for label, src in runs:
                for kind, embedding in embeddings:
                    # Each mode its own namespaces: the smoke tier runs both on one cluster.
                    named = kind if args.remote_embedding else ""
                    ns = "-".join(p for p in ("tp-extractive", named, label) if p)
                    drain = run_extractive(
                        cp, chroma_url, work, args.backlog, args.trigger, embedding, ns, src
                    )
                    results[(label, kind)] = drain
                    print(f"{label or 'this'} {kind}: {drain.figures(args.backlog)}", flush=True)
        if args.before_src:
            for kind, _ in embeddings:
                before, after = results[("before", kind)], results[("after", kind)]
                print(
                    f"after/before {kind}: summaries_per_s x"
                    f"{after.summaries_per_s / before.summaries_per_s:.2f} cpu_ms_per_summary "
                    f"x{after.cpu_ms_per_summary / before.cpu_ms_per_summary:.2f} "
                    f"api_calls_per_summary x"
                    f"{after.api_calls_per_summary / before.api_calls_per_summary:.2f}"
                )
        label = "after" if args.before_src else ""
        for kind, _ in embeddings:
            got = results[(label, kind)]
            remote_only = f"embedding=remote dim={NEO_DIMENSION} " if kind == "remote" else ""
            print(
                f"extractive_throughput {remote_only}summaries_per_s={got.summaries_per_s:.1f} "
                f"backlog={args.backlog} drain_s={got.drain_s:.1f}",
                flush=True,
            )
        if args.remote_embedding:
            got = results[(label, "remote")]
            print(
                f"operator_cost embedding=remote cpu_ms_per_summary={got.cpu_ms_per_summary:.0f} "
                f"api_calls_per_summary={got.api_calls_per_summary:.2f}"
            )
        return 0
    efficiency: dict[int, float] = {}
    with (
        bench_control_plane(work / "cp") as cp,
        bench_chroma(work / "chroma") as chroma_url,
        running_openai_server(
            default_reply=json.dumps(REPLY), latency_seconds=args.latency
        ) as model,
    ):
        for c in (int(x) for x in args.levels.split(",")):
            level = run_level(cp, chroma_url, model, c, work, args.rounds, args.workers)
            ideal = c / args.latency
            efficiency[c] = 100 * level.rate / ideal
            print(
                f"concurrency={c} latency_s={args.latency} sessions_per_s={level.rate:.2f} "
                f"ideal={ideal:.2f} efficiency={efficiency[c]:.0f}% "
                f"model_slots_busy={100 * level.busy:.0f}% "
                f"fill_s={level.fill_s:.2f} drain_s={level.drain_s:.2f}",
                flush=True,
            )
    top = max(efficiency)
    print(f"throughput efficiency_at_{top}={efficiency[top]:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
