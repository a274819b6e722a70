"""summaryctl verify: which memories of each session no summary covers."""

from __future__ import annotations

import argparse
import json
from typing import Any

from controller.cli.args import CliError, printable


def cmd_verify(args: argparse.Namespace) -> int:
    """Which memories of each session no summary covers, i.e. no pass read (exit 1 if any)."""
    from controller.cli.settings import open_store
    from controller.core.coverage import uncovered
    from controller.core.summary import StructuredSummary, UnreadablePriorSummary
    from controller.core.text import ms_to_rfc3339
    from controller.pipeline import prior_coverage

    reports = []
    with open_store(args) as (store, _):
        for session_id in args.session_ids:
            try:
                prior = store.read_summary(session_id)
            except UnreadablePriorSummary as exc:
                raise CliError(str(exc)) from exc
            rows = store.session_rows(session_id)
            structured = prior if isinstance(prior, StructuredSummary) else None
            covered = prior_coverage(structured)
            found = uncovered(list(rows.keys), covered)
            summarized = set(structured.untimed_ids if structured else ())
            untimed = [
                {"id": i, "timestamp": rows.untimed_values.get(i), "summarized": i in summarized}
                for i in rows.untimed
            ]
            reports.append(
                {
                    "sessionId": session_id,
                    "memories": rows.total,
                    "summary": "structured"
                    if structured
                    else ("earlier text only" if prior else "none"),
                    "uncovered": found.count + sum(not u["summarized"] for u in untimed),
                    "rows": [
                        {"id": i, "timestamp": ms_to_rfc3339(ts), "why": why}
                        for ts, i, why in found.rows
                    ],
                    "unreadableTimes": untimed,
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
        print("\n".join(_report_lines(report)))
    return 1 if any(r["uncovered"] for r in reports) else 0


def _report_lines(report: dict[str, Any]) -> list[str]:
    sid, total = printable(report["sessionId"]), report["memories"]
    untimed = report["unreadableTimes"]
    if not total:
        lines = [f"{sid}: no memory carries this sessionId: nothing to cover (is the id right?)"]
    elif not report["uncovered"]:
        lines = [
            f"{sid}: all {total} of its memories are covered: a pass of its summary read each "
            "one (what it kept of them: summaryctl summaries --full)"
        ]
    else:
        lines = [
            f"{sid}: {report['uncovered']} of its {total} memories are not covered (no pass of "
            f"its summary has read them; summary: {report['summary']}):"
        ]
        lines += [f"  {printable(r['id'])}  {r['timestamp']}  ({r['why']})" for r in report["rows"]]
        lines += [
            f"  {rng['uncovered']} of the {len(rng['candidates'])} memories from "
            f"{rng['from'] or 'the beginning'} to {rng['to'] or 'the watermark'} "
            "(the coverage cannot name which): " + ", ".join(map(printable, rng["candidates"][:20]))
            for rng in report["ranges"]
        ]
    if untimed:
        missing = sum(u["timestamp"] is None for u in untimed)
        lines.append(
            f"{sid}: {missing} of its memories have no timestamp and {len(untimed) - missing} "
            "one the operator cannot read (epoch seconds, ms, µs or ns, or ISO-8601); each is "
            "summarized once, at the end of the session's order:"
        )
        for u in untimed:
            stamp = "no timestamp" if u["timestamp"] is None else f"timestamp {u['timestamp']}"
            later = "" if u["summarized"] else "  (not covered yet)"
            lines.append(printable(f"  {u['id']}  {stamp}{later}"))
    return lines
