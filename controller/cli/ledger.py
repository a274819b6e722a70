"""summaryctl ledger (a session's ledger entry, core/ledger.py) and summaryctl handover."""

from __future__ import annotations

import argparse
import json
from typing import Any

from controller.cli.args import CliError, printable
from controller.cli.failures import kube_call
from controller.core.text import json_value, ms_to_rfc3339


def _when(ms: Any) -> str:
    return ms_to_rfc3339(int(ms)) if isinstance(ms, int | float) else "?"


def _ledger_lines(session_id: str, document: str, keys: dict[str, Any]) -> list[str]:
    """A session's ledger entry for a person: what it records, and how big each part is."""
    sections = json_value(keys["sectionsJson"]) if isinstance(keys.get("sectionsJson"), str) else {}
    refs = json_value(keys["referencesJson"]) if isinstance(keys.get("referencesJson"), str) else []
    coverage = json_value(keys["coverageJson"]) if isinstance(keys.get("coverageJson"), str) else {}
    state = {k: v for k, v in keys.items() if not k.startswith("ledger.")}
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
        f"written:        {_when(keys.get('summarizedAt'))} by {keys.get('writer', '?')} "
        f"({keys.get('triggerSource', '?')})",
        f"written under:  {claim}",
        f"row digest:     {keys.get('ledger.rowDigest', '(none)')} (of the document agents read)",
        f"memories:       {keys.get('memoryCount', '?')}; the newest covered "
        f"{keys.get('watermarkMemoryId', '-')} at {_when(keys.get('watermarkTimestamp'))}",
        f"coverage:       {len(coverage.get('b') or [])} buckets",
        f"references:     {len(refs)} kept, {keys.get('referencesOmitted', 0)} left out",
        f"legacy text:    {len(keys.get('legacySummary') or '')} characters",
        f"document:       {len(document)} characters (the row agents read)",
        f"state:          {len(json.dumps(state, ensure_ascii=False))} bytes",
    ]
    return lines + [f"  {title}: {len(items)} items" for title, items in sections.items()]


def cmd_ledger(args: argparse.Namespace) -> int:
    """A session's ledger entry: the writer's state that the row no longer carries."""
    from controller.cli.settings import open_store

    with open_store(args) as (store, _):
        stored = store.stored_summary(args.session_id)
    if stored is None:
        raise CliError(
            f"no summary or ledger entry of session {printable(args.session_id)!r} in "
            f"{store.location.summary_collection!r} / {store.location.ledger_collection!r}"
        )
    document, keys = stored
    if args.json:
        print(json.dumps({"document": document, "keys": keys}, indent=2, ensure_ascii=False))
    else:
        print("\n".join(_ledger_lines(args.session_id, document, keys)))
    return 0


def cmd_handover(args: argparse.Namespace) -> int:
    """Hands the store to this cluster: removes every other cluster's authority record, so
    our operator takes their rows over (core/fencing.py); a running one renews its own."""
    from controller.cli.settings import open_store
    from controller.kube.client import core

    with open_store(args) as (store, _):
        kube_system = kube_call(lambda: core().read_namespace("kube-system"))
        mine = str(getattr(kube_system.metadata, "uid", ""))
        others = [r for r in store.authorities() if r.uid != mine]
        store.remove_authorities([r.uid for r in others])
    for r in others:
        print(f"removed cluster {r.uid} (renewed by {r.holder}, {ms_to_rfc3339(r.renewed_ms)})")
    print(f"{store.location.ledger_collection} is cluster {mine}'s")
    return 0
