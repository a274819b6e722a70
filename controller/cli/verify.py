"""summaryctl verify: which memories of each session no summary covers."""

from __future__ import annotations

import argparse
import json

from controller.cli.args import CliError, printable
from controller.cli.commands import _store
from controller.cli.failures import store_errors


def cmd_verify(args: argparse.Namespace) -> int:
    """Which memories of each session no summary covers, and which have a time the operator
    cannot read (exit 1 when any)."""
    from controller.cli.settings import load_summarizer
    from controller.core.coverage import PriorCoverage, uncovered
    from controller.core.summary import StructuredSummary, UnreadablePriorSummary
    from controller.core.text import ms_to_rfc3339

    store = _store(args, load_summarizer(args))
    reports = []
    for session_id in args.session_ids:
        with store_errors():
            try:
                prior = store.read_summary(session_id)
            except UnreadablePriorSummary as exc:
                raise CliError(str(exc)) from exc
            rows = store.session_rows(session_id)
        keys = list(rows.keys)
        mark = prior.watermark if isinstance(prior, StructuredSummary) else None
        covered = (
            PriorCoverage((mark.timestamp_ms, mark.memory_id), prior.coverage, prior.memory_count)
            if isinstance(prior, StructuredSummary) and mark is not None
            else PriorCoverage()
        )
        found = uncovered(keys, covered)
        reports.append(
            {
                "sessionId": session_id,
                "memories": len(keys),
                "summary": "structured"
                if isinstance(prior, StructuredSummary)
                else ("earlier text only" if prior is not None else "none"),
                "uncovered": found.count,
                "rows": [
                    {"id": i, "timestamp": ms_to_rfc3339(ts), "why": why}
                    for ts, i, why in found.rows
                ],
                "unreadableTimes": [
                    {"id": i, "timestamp": rows.untimed_values.get(i, "")} for i in rows.untimed
                ],
                "ranges": [
                    {
                        "from": ms_to_rfc3339(d.start) if d.start is not None else None,
                        "to": ms_to_rfc3339(d.end) if d.end is not None else None,
                        "uncovered": d.uncovered,
                        "candidates": [i for _, i in rows],
                    }
                    for d, rows in found.unnamed
                ],
            }
        )
    if args.json:
        print(json.dumps(reports, indent=2))
    for report in [] if args.json else reports:
        sid = printable(report["sessionId"])
        unreadable = report["unreadableTimes"]
        if unreadable:
            print(
                f"{sid}: {len(unreadable)} of its memories have a timestamp the operator cannot "
                "read (summarized at the end of the session, not counted in memoryCount):"
            )
            for row in unreadable:
                print(f"  {printable(row['id'])}  timestamp {printable(row['timestamp'])}")
        if not report["uncovered"]:
            print(
                f"{sid}: every one of its {report['memories']} memories is covered by its summary"
            )
            continue
        print(
            f"{sid}: {report['uncovered']} of its {report['memories']} memories are not covered "
            f"by its summary ({report['summary']}):"
        )
        for row in report["rows"]:
            print(f"  {printable(row['id'])}  {row['timestamp']}  ({row['why']})")
        for rng in report["ranges"]:
            print(
                f"  {rng['uncovered']} of the {len(rng['candidates'])} memories from "
                f"{rng['from'] or 'the beginning'} to {rng['to'] or 'the watermark'} "
                "(the coverage cannot name which): "
                + ", ".join(map(printable, rng["candidates"][:20]))
            )
    return 1 if any(r["uncovered"] or r["unreadableTimes"] for r in reports) else 0
