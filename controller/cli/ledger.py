"""What the ledger records (core/ledger.py): of a session, its entry (summaryctl ledger) and
the memories its coverage leaves out (verify); of the clusters, their authority (handover)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from controller.cli.args import CliError, out, shown_time
from controller.cli.failures import kube_call
from controller.core.text import json_value, ms_to_rfc3339, one_line

if TYPE_CHECKING:
    from controller.core.summary import PriorSummary
    from controller.store.session_listing import SessionRows


def _ledger_lines(session_id: str, document: str, keys: dict[str, Any]) -> list[str]:
    """A session's ledger entry for a person: what it records, and how big each part is."""

    def measured(key: str, measure: Callable[[Any], Any], absent: Any = 0) -> Any:
        if not isinstance(keys.get(key), str):
            return absent
        try:
            return measure(json_value(keys[key]))
        except (ValueError, TypeError, AttributeError) as exc:
            raise CliError(
                f"session {session_id!r}: its {key} is not as the operator writes it "
                f"({one_line(exc, 100)}); --json shows every key as stored"
            ) from exc

    buckets = measured("coverageJson", lambda coverage: len(coverage.get("b") or []))
    sections = measured(
        "sectionsJson",
        lambda s: [f"  {title}: {len(items)} items" for title, items in s.items()],
        [],
    )
    state = {k: v for k, v in keys.items() if not k.startswith("ledger.")}
    legacy = keys.get("legacySummary") or ""
    fence, authority = keys.get("ledger.fence"), keys.get("ledger.fenceAuthority")
    claim = (
        f"claim grant {fence} (the SessionClaim's resourceVersion when the writer took it: a "
        f"later grant's writer refuses an older one's write) from the cluster whose kube-system "
        f"namespace has UID {authority or '(not recorded)'}"
        if fence is not None
        else "(none: written without the operator's claim)"
    )
    lines = [
        f"session:        {session_id}",
        f"written:        {shown_time(keys.get('summarizedAt'))} by {keys.get('writer', '?')} "
        f"({keys.get('triggerSource', '?')})",
        f"written under:  {claim}",
        f"row digest:     {keys.get('ledger.rowDigest', '(none)')} (of the document agents read)",
        f"memories:       {keys.get('memoryCount', '?')}; the newest covered "
        f"{keys.get('watermarkMemoryId', '-')} at {shown_time(keys.get('watermarkTimestamp'))}",
        f"coverage:       {buckets} buckets",
        f"references:     {measured('referencesJson', len)} kept, "
        f"{keys.get('referencesOmitted', 0)} left out",
        f"legacy text:    {len(legacy) if isinstance(legacy, str) else '?'} characters",
        f"document:       {len(document)} characters (the row agents read)",
        f"state:          {len(json.dumps(state, ensure_ascii=False))} bytes",
    ]
    return lines + sections


def cmd_ledger(args: argparse.Namespace) -> int:
    from controller.cli.settings import open_store

    with open_store(args) as (store, _):
        stored: tuple[str | None, dict[str, Any]] | None = store.stored_summary(args.session_id)
        tombstone = None if stored else store.read_ledger(args.session_id)
    if tombstone is not None:  # what a forget leaves: no text, the ids' digest and counts
        stored = (None, tombstone.head)
    if stored is None:
        raise CliError(
            f"no summary or ledger entry of session {args.session_id!r} in "
            f"{store.location.summary_collection!r} / {store.location.ledger_collection!r}"
        )
    document, keys = stored
    if args.json:
        out(*json.dumps({"document": document, "keys": keys}, indent=2).split("\n"))
    elif document is None:
        out(
            f"session {args.session_id!r} was forgotten at {shown_time(keys.get('forgottenAt'))}: "
            f"no summary row; its ledger entry is a tombstone (no text: the digest of the "
            f"ids of the {keys.get('memoryCount', '?')} memories it left, and its fence)"
        )
    else:
        out(*_ledger_lines(args.session_id, document, keys))
    return 0


def cmd_handover(args: argparse.Namespace) -> int:
    """Hands the store to this cluster: removes every other cluster's authority record, so
    our operator takes their rows over (core/ledger.py); a running one renews its own."""
    from controller.cli.settings import open_store
    from controller.kube.client import core

    with open_store(args) as (store, _):
        kube_system = kube_call(lambda: core().read_namespace("kube-system"))
        mine = str(getattr(kube_system.metadata, "uid", ""))
        others = [r for r in store.authorities() if r.uid != mine]
        store.remove_authorities([r.uid for r in others])
    for r in others:
        out(f"removed cluster {r.uid} (renewed by {r.holder}, {ms_to_rfc3339(r.renewed_ms)})")
    out(f"{store.location.ledger_collection} is cluster {mine}'s")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from controller.backends import redaction_of
    from controller.cli.settings import open_store
    from controller.core.summary import UnreadablePriorSummary
    from controller.redaction import PassRedaction

    reports = []
    with open_store(args) as (store, summarizer):
        mask = PassRedaction(redaction_of(summarizer.spec))  # the timestamps it quotes
        for session_id in args.session_ids:
            try:
                prior = store.read_summary(session_id)
            except UnreadablePriorSummary as exc:
                raise CliError(str(exc)) from exc
            reports.append(_report(session_id, prior, store.session_rows(session_id, mask=mask)))
    if args.json:
        out(*json.dumps(reports, indent=2).split("\n"))
    for report in [] if args.json else reports:
        out(*_report_lines(report))
    return 1 if any(r["uncovered"] or not r["memories"] for r in reports) else 0  # not verified


def _report(session_id: str, prior: PriorSummary | None, rows: SessionRows) -> dict[str, Any]:
    """verify's account of a session: the memories no pass of its summary has read."""
    from controller.core.coverage import uncovered
    from controller.core.summary import StructuredSummary
    from controller.pipeline import prior_coverage

    structured = prior if isinstance(prior, StructuredSummary) else None
    found = uncovered(list(rows.keys), prior_coverage(structured))
    summarized = set(structured.untimed_ids if structured else ())
    untimed = [
        {"id": i, "timestamp": rows.untimed_values.get(i), "summarized": i in summarized}
        for i in rows.untimed
    ]
    return {
        "sessionId": session_id,
        "memories": rows.total,
        "summary": "structured" if structured else "earlier text only" if prior else "none",
        "uncovered": found.count + sum(not u["summarized"] for u in untimed),
        "rows": [
            {"id": i, "timestamp": ms_to_rfc3339(ts), "why": why} for ts, i, why in found.rows
        ],
        "unreadableTimes": untimed,
        "ranges": [
            {
                "from": ms_to_rfc3339(d.start) if d.start is not None else None,
                "to": ms_to_rfc3339(d.end) if d.end is not None else None,
                "uncovered": d.uncovered,
                "candidates": [i for _, i in candidates],
            }
            for d, candidates in found.unnamed
        ],
    }


def _report_lines(report: dict[str, Any]) -> list[str]:
    sid, total = report["sessionId"], report["memories"]
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
        lines += [f"  {r['id']}  {r['timestamp']}  ({r['why']})" for r in report["rows"]]
        lines += [
            f"  {rng['uncovered']} of the {len(rng['candidates'])} memories from "
            f"{rng['from'] or 'the beginning'} to {rng['to'] or 'the watermark'} "
            "(the coverage cannot name which): " + ", ".join(rng["candidates"][:20])
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
            lines.append(f"  {u['id']}  {stamp}{later}")
    return lines
