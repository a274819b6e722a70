"""API calls and Events per minute of an object waiting for another writer's claim, counted
on the real apiserver's audit log (tests/support/waiting.py has the scenario: object A holds
the session's claim through a slow model call, object B of the same session waits).

Real parts: a local etcd + kube-apiserver (audit log on), a Chroma server, an
OpenAI-compatible model server whose answer takes --wait + 5 s, and the operator as a local
process running as its own ServiceAccount.

    .venv/bin/python -m bench.waiting [--wait 60] [--before-src DIR] [--quick]

--before-src runs the same scenario first with the operator of another checkout (e.g.
`git worktree add /tmp/before main`), in the same run, against the same control plane.

Prints a table of the requests per (verb, resource), the wait's own share (calls on the
waiting object, its Events and claims), then one line per operator run with that share per
minute; the last line is this checkout's:

Last line: waiting calls_per_min=<x> claim_looks_per_min=<x> events_per_min=<x> operator=<text>
(events: the Events about the waiting object, each counted as many times as it was posted)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):  # `python bench/waiting.py` from the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from devenv.bench import QuickRuns, bench_chroma, bench_control_plane, parse_bench_args
from devenv.controlplane import REPO_ROOT
from tests.support.waiting import WaitingFigures, measure_waiting

QUICK_RUNS: QuickRuns = [
    ([], "waiting calls_per_min=<x> claim_looks_per_min=<x> events_per_min=<x> operator=<text>"),
]  # fmt: skip


def line(figures: WaitingFigures, src: Path) -> str:
    return (
        f"waiting calls_per_min={figures.per_minute(figures.waiting_total):.1f} "
        f"claim_looks_per_min={figures.per_minute(figures.claim_looks):.1f} "
        f"events_per_min={figures.per_minute(figures.events):.1f} "
        f"operator={src}"
    )


def table(figures: WaitingFigures, src: Path) -> None:
    print(f"== {src}: {figures.seconds:.0f} s of waiting")
    print(f"{'verb':8} {'resource':32} {'calls':>6} {'per min':>8}")
    rows = [*figures.calls.items(), *figures.on_clock.items()]
    for (verb, resource), n in sorted(rows, key=lambda kv: (-kv[1], kv[0])):
        note = "  (on a clock)" if (verb, resource) in figures.on_clock else ""
        print(f"{verb:8} {resource:32} {n:6d} {figures.per_minute(n):8.1f}{note}")
    print(
        f"of which the wait's own (on the waiting object, its Events, claims): "
        f"{figures.waiting_total} ({figures.per_minute(figures.waiting_total):.1f} per min)"
    )
    print(
        f"Events of the waiting object: {figures.event_objects} ({figures.event_counts or 'none'})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--wait", type=float, default=60.0, help="seconds of waiting counted")
    parser.add_argument("--operator-src", type=Path, default=REPO_ROOT)
    parser.add_argument("--before-src", type=Path, default=None)
    args = parse_bench_args(parser, wait=4.0)
    work = Path(tempfile.mkdtemp(prefix="sso-waiting-"))
    runs = [("before", args.before_src)] if args.before_src else []
    runs.append(("after", args.operator_src))
    lines = []
    with bench_control_plane(work / "cp") as cp, bench_chroma(work / "chroma") as chroma_url:
        for i, (label, src) in enumerate(runs):
            figures = measure_waiting(
                cp,
                chroma_url,
                work,
                namespace=f"waiting-{label}-{i}",
                wait_s=args.wait,
                model_latency_s=args.wait + 5,
                operator_src=src,
            )
            table(figures, src)
            lines.append(line(figures, src))
    for text in lines:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
