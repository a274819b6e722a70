"""Operator memory with N SessionSummary objects in the apiserver (default 10,000).

Real parts: local etcd + kube-apiserver, a Chroma server, the operator as a local
process. The objects are created through the API and first handled by one operator
process (their sessions are unknown to Chroma, so each ends NotFound quickly); then a
fresh operator process starts against the same objects, as after a restart or failover,
and its resident set size is read from /proc after its initial list/watch settles and
again after a sweep.

    .venv/bin/python -m bench.operator_rss [--objects 10000] [--variants ...] [--quick]

Runs the fresh operator three times (--variants): default glibc malloc, MALLOC_ARENA_MAX=2
(what the chart sets), and that plus PYTHONMALLOC=malloc. The fresh operator loads the
local embedding model at start (the SessionSummarizer's EmbeddingReady probe), as any
operator that has summarized once holds it. Last line: operator_rss objects=<n> rss_mb=<n>
(the best setting, the larger of its two readings)
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

from controller.core.naming import summary_object_name
from controller.store.connection import StoreLocation, connect
from devenv.bench import (
    QuickRuns,
    bench_chroma,
    bench_control_plane,
    create_summarizer,
    parse_bench_args,
)
from devenv.controlplane import REPO_ROOT, ControlPlane
from devenv.operator import operator_argv
from devenv.processes import spawn, stop, wait_for

NS = "rss"
VARIANTS: dict[str, dict[str, str]] = {
    "default": {},
    "malloc_arena_max_2": {"MALLOC_ARENA_MAX": "2"},
    # Python's small objects from glibc malloc too, so the periodic malloc_trim can
    # return pages that pymalloc's 1 MiB arenas would keep for one live object.
    "pythonmalloc_malloc": {"MALLOC_ARENA_MAX": "2", "PYTHONMALLOC": "malloc"},
}
# The smoke tier (tests/bench) runs `--quick` plus each argument list and checks that the
# last line has the format documented above (docs/benchmarks.md, "Quick mode").
QUICK_RUNS: QuickRuns = [([], "operator_rss objects=<n> rss_mb=<n>")]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def create_objects(cp: ControlPlane, n: int) -> None:
    for start in range(0, n, 1000):
        items = [
            {
                "apiVersion": "memorycore.io/v1alpha1",
                "kind": "SessionSummary",
                "metadata": {"name": summary_object_name(f"rss-{i:05d}"), "namespace": NS},
                "spec": {"sessionId": f"rss-{i:05d}", "trigger": "manual"},
            }
            for i in range(start, min(n, start + 1000))
        ]
        cp.kubectl_run(
            "create",
            "-f",
            "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
        )


def count_phase(cp: ControlPlane, phase: str) -> int:
    out = cp.kubectl_run("-n", NS, "get", "ssum", "-o", "jsonpath={.items[*].status.phase}").stdout
    return out.split().count(phase)


def settle(pid: int, seconds: float) -> float:
    """RSS once it stops growing by more than 1 MB over `seconds`."""
    previous = rss_mb(pid)
    while True:
        time.sleep(seconds)
        current = rss_mb(pid)
        if current - previous < 1.0:
            return current
        previous = current


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=10_000)
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help=f"fresh operators, of {list(VARIANTS)}"
    )
    parser.add_argument("--sweep-interval", type=int, default=30, help="seconds (min 5)")
    parser.add_argument("--heap-trim-seconds", type=float, default=30, help="SSO_HEAP_TRIM_SECONDS")
    parser.add_argument(
        "--settle-seconds", type=float, default=5, help="RSS settled: < 1 MB more over this"
    )
    args = parse_bench_args(
        parser,
        objects=20,
        variants="pythonmalloc_malloc",  # sets every variable the variants set
        sweep_interval=5,
        heap_trim_seconds=1,
        settle_seconds=1,
    )
    unknown = set(args.variants.split(",")) - set(VARIANTS)
    if unknown:
        parser.error(f"--variants: unknown {sorted(unknown)}; known: {list(VARIANTS)}")
    variants = {v: VARIANTS[v] for v in args.variants.split(",")}
    work = Path(tempfile.mkdtemp(prefix="sso-rss-"))
    with bench_control_plane(work / "cp") as cp, bench_chroma(work / "chroma") as chroma_url:
        create_summarizer(
            cp,
            NS,
            {
                "store": {"url": chroma_url},
                "sweep": {"enabled": True, "intervalSeconds": args.sweep_interval},
            },
        )
        # An empty memory collection: the sessions are unknown, so each pass ends NotFound
        # at once (without it, every pass fails MemoryCollectionNotFound and is retried).
        location = StoreLocation(url=chroma_url)
        connect(location).get_or_create_collection(location.memory_collection)
        t = time.monotonic()
        create_objects(cp, args.objects)
        print(f"created {args.objects} objects in {time.monotonic() - t:.0f}s", file=sys.stderr)
        argv = operator_argv("--standalone", "--namespace", NS)
        first = spawn(
            argv, work / "first.log", env=dict(cp.env(), SSO_REPLICA_ID="first"), cwd=REPO_ROOT
        )
        try:
            t = time.monotonic()
            wait_for(
                lambda: count_phase(cp, "NotFound") == args.objects,
                3600,
                args.settle_seconds,  # each look lists every object
                message="every object handled",
            )
            print(
                f"first operator handled {args.objects} objects in {time.monotonic() - t:.0f}s, "
                f"rss {rss_mb(first.pid):.0f} MB",
                file=sys.stderr,
            )
        finally:
            stop(first)
        readings = {}
        for label, extra in variants.items():
            env = dict(
                cp.env(),
                SSO_REPLICA_ID=f"second-{label}",
                SSO_HEAP_TRIM_SECONDS=str(args.heap_trim_seconds),
                **extra,
            )
            log = work / f"second-{label}.log"
            readings[label] = fresh_operator_rss(cp, argv, env, log, args.settle_seconds)
    for label, (after_list, after_sweep) in readings.items():
        print(
            f"{label}: objects={args.objects} rss_after_list_watch_mb={after_list:.0f} "
            f"rss_after_sweep_mb={after_sweep:.0f}"
        )
    best = min(max(r) for r in readings.values())
    print(f"operator_rss objects={args.objects} rss_mb={best:.0f}")
    return 0


def fresh_operator_rss(
    cp: ControlPlane, argv: list[str], env: dict[str, str], log: Path, settle_s: float
) -> tuple[float, float]:
    """A fresh operator against the handled objects: RSS after list/watch and after a sweep."""
    replica = env["SSO_REPLICA_ID"]
    # The operator returns freed heap to the OS every SSO_HEAP_TRIM_SECONDS: wait one more.
    trimmed = float(env["SSO_HEAP_TRIM_SECONDS"]) + settle_s

    def last_sweep() -> str:
        return cp.kubectl_run(
            "-n", NS, "get", "ssumr", "default", "-o", "jsonpath={.status.lastSweepAt}"
        ).stdout

    before = last_sweep()
    proc = spawn(argv, log, env=env, cwd=REPO_ROOT)
    try:
        settle(proc.pid, settle_s)
        time.sleep(trimmed)
        after_list = settle(proc.pid, settle_s)

        def swept() -> bool:
            # A standalone replica does not restamp status.activeReplica (the first one
            # did), so a sweep by this one shows as a new lastSweepAt (seconds: the
            # second sweep of the one before is more than a second old).
            return last_sweep() not in ("", before)

        wait_for(swept, 300, 1, message=f"a sweep by {replica}")
        time.sleep(trimmed)  # and the next trim
        return after_list, settle(proc.pid, settle_s)
    finally:
        stop(proc)


if __name__ == "__main__":
    sys.exit(main())
