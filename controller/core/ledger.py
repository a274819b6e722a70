"""The operator's ledger entry of one summary row: what the writer needs and no reader reads.
Pure.

Every agent reads the metadata of every summary row at boot, so the row carries only the
document and neo's keys (core/summary_row.py: READER_ROW_KEYS). The rest of a write's state
(the sections every fact is kept in, the coverage, the references, the watermark, a carried
legacy text, provenance, who wrote it) is one JSON document in the ledger collection
(`<summary collection>-ledger`, same store, same row id: store/ledger in
store/memory_store.py), with a few small keys as its metadata: the fence of the grant that
wrote it and its authority (core/fencing.py), the digest of the row's document it goes with,
and when it was written.

The ledger is written before the row: a write that stops between the two leaves a ledger
ahead of its row (the next pass reads the ledger and rewrites the row), never a row whose
facts the ledger lacks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from controller.core.summary_row import READER_ROW_KEYS, MetadataValue

LEDGER_FORMAT = 1
ROW_DIGEST_KEY = "rowDigest"
# Ledger records are found by id; Chroma wants a vector for each, and nobody queries them
# by meaning: one constant of one dimension.
LEDGER_VECTOR = (1.0,)


class UnreadableLedgerEntry(ValueError):
    """A ledger entry that is not a JSON object of this format."""


def split_row_and_ledger(
    meta: Mapping[str, MetadataValue],
) -> tuple[dict[str, MetadataValue], dict[str, MetadataValue]]:
    """(the reader's row, the ledger's state) of one write's keys (to_chroma_metadata)."""
    row = {key: value for key, value in meta.items() if key in READER_ROW_KEYS}
    state = {key: value for key, value in meta.items() if key not in READER_ROW_KEYS}
    return row, state


def ledger_is_behind(row: Mapping[str, Any], state: Mapping[str, Any] | None) -> bool:
    """The row carries a whole state of its own (the previous release kept everything in
    the row) written after the ledger's, or there is no ledger entry: the row's state is
    the newer one (a row not yet migrated, or one rewritten by the previous release after a
    rollback)."""
    if not state:
        return True
    if "sectionsJson" not in row:
        return False
    return _ms(row.get("summarizedAt")) > _ms(state.get("summarizedAt"))


def combined_state(
    row: Mapping[str, Any] | None, state: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The keys a summary is read from: the row's, and the ledger's for everything else.
    Of two whole states (a previous-release row beside a ledger entry) the newer wins."""
    row = row or {}
    if ledger_is_behind(row, state):
        return {**(state or {}), **row}
    return {**row, **(state or {})}


def _ms(value: object) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def ledger_document(state: Mapping[str, Any]) -> str:
    """The entry's document: the state's keys as one compact JSON object."""
    return json.dumps(
        {"ledgerFormat": LEDGER_FORMAT, **state},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )


def ledger_metadata(
    session_id: str,
    state: Mapping[str, Any],
    fence: Mapping[str, Any],
    row_digest: str | None,
) -> dict[str, Any]:
    """The entry's small keys: the fence (and its authority), the row's digest, the time."""
    meta: dict[str, Any] = {
        "sessionId": session_id,
        "ledgerFormat": LEDGER_FORMAT,
        **fence,
        ROW_DIGEST_KEY: row_digest,
        "summarizedAt": state.get("summarizedAt"),
    }
    return {key: value for key, value in meta.items() if value is not None}


def ledger_state(document: str | None) -> dict[str, Any] | None:
    """The state an entry's document holds; None without a document. Raises
    UnreadableLedgerEntry for a document this version cannot read."""
    if document is None or not document.strip():
        return None
    try:
        data = json.loads(document)
    except ValueError as exc:
        raise UnreadableLedgerEntry(f"the ledger entry is not JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("ledgerFormat") != LEDGER_FORMAT:
        raise UnreadableLedgerEntry(f"the ledger entry is not of format {LEDGER_FORMAT}")
    data.pop("ledgerFormat")
    return data
