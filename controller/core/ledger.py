"""The operator's ledger entry of one summary row: everything a write produced, in one record
beside the row. Pure.

Every agent reads the metadata of every summary row at boot, so the row carries only the
document and neo's keys (core/summary_row.py: READER_ROW_KEYS). The ledger collection
(`<summary collection>-ledger`, same store: MemoryStore) holds one record per row, with the
row's id. Its document holds every key of the write: the row's own (title, category, scores,
technologies...) and the writer's state (sections, coverage, references, legacy text,
provenance), so a missing or stale row is written again whole from it. Its metadata holds
what scans read without the document: the fence of the grant that wrote it and its
authority (core/fencing.py), the digest of the row document it goes with and of the one it
was built on, the digest of the session's row ids and when it was written.

One upsert writes the whole record: a late or concurrent write lands a whole state, never
a part naming records another write replaced. The ledger is written before the row, and
every read compares the two (row_agreement): a row that is not the one the ledger names is
written again from the ledger.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from controller.core.fencing import Fence
from controller.core.naming import summary_row_id
from controller.core.row_ownership import DIGEST_KEY, document_digest
from controller.core.summary import HISTORY_SECTIONS
from controller.core.summary_row import READER_ROW_KEYS

LEDGER_FORMAT = 2
ROW_DIGEST_KEY = "rowDigest"  # the row document this entry goes with
BUILT_ON_KEY = "builtOnDigest"  # the row document the write read: its text is in the entry
# Ledger records are found by id; Chroma wants a vector for each, and nobody queries them
# by meaning: one constant of one dimension.
LEDGER_VECTOR = (1.0,)
# What the row is, read beside its entry: the one the entry names; behind it (missing, an
# earlier row of ours, or one whose text the entry already carries); another writer's.
Agreement = Literal["agrees", "behind", "foreign"]


class UnreadableLedgerEntry(ValueError):
    """A ledger entry that is not a JSON object of a format this version reads."""


@dataclass(frozen=True)
class RowState:
    """A session's row as a write finds it right before it writes (MemoryStore.
    read_row_states)."""

    fence: Fence | None
    digest: str | None  # of the row's document; None: no row
    # Ledger records of the session other than its entry (release 0.1.0's segments):
    # deleted once the entry is written whole.
    leftovers: tuple[str, ...] = ()


class LedgerEntry(NamedTuple):
    head: dict[str, Any]  # the entry's metadata (fence, digests, when)
    keys: dict[str, Any]  # every key of the write
    # Records of the session beside the entry (release 0.1.0's segments, or ones a write
    # could not delete): the next write deletes them.
    leftovers: int = 0


@dataclass(frozen=True)
class LedgerRecord:
    record_id: str
    document: str
    metadata: dict[str, Any]


def ledger_record(
    session_id: str,
    keys: Mapping[str, Any],
    fence: Mapping[str, Any],
    built_on: str | None,
) -> LedgerRecord:
    """The session's entry as one write leaves it: `keys`, every key of the write
    (summary_row.to_chroma_metadata); `fence`, the keys of the claim's grant; `built_on`,
    the digest of the row document the write read (None: no row)."""
    meta = {
        "sessionId": session_id,
        "ledgerFormat": LEDGER_FORMAT,
        **fence,
        ROW_DIGEST_KEY: keys.get(DIGEST_KEY),
        BUILT_ON_KEY: built_on,
        "summarizedAt": keys.get("summarizedAt"),
        # Every row id of the session the write accounted for (coverage.digest_text): the
        # reconciliation's walk compares it with the ids it counts (reconcile_plan.py).
        "rowsDigest": keys.get("rowsDigest"),
    }
    document = _dump({"ledgerFormat": LEDGER_FORMAT, **keys})
    meta = {k: v for k, v in meta.items() if v is not None}
    return LedgerRecord(summary_row_id(session_id), document, meta)


def row_agreement(
    document: str | None, row: Mapping[str, Any], head: Mapping[str, Any]
) -> Agreement:
    """What the session's row (its document and metadata; None: no row) is to the entry
    whose head metadata is `head`. A row of ours is one whose documentDigest is its
    document's: another writer's upsert replaces the document and leaves our keys."""
    if document is None:
        return "behind"
    digest = document_digest(document)
    if digest == head.get(ROW_DIGEST_KEY):
        return "agrees"
    if digest == head.get(BUILT_ON_KEY) or row.get(DIGEST_KEY) == digest:
        return "behind"
    return "foreign"


def read_entry(
    session_id: str,
    records: Sequence[tuple[str, str | None, Mapping[str, Any]]],
    row: Mapping[str, Any],
) -> LedgerEntry | None:
    """The entry from the session's records (in any order); None without one. Raises
    UnreadableLedgerEntry for one this version cannot read. An entry of release 0.1.0
    (format 1: the lists in segment records) kept the row's own keys only on the row:
    they are taken from `row`, the row's metadata."""
    by_id = {record_id: (doc, meta) for record_id, doc, meta in records}
    found = by_id.get(summary_row_id(session_id))
    if found is None:
        return None
    document, head = found[0], dict(found[1] or {})
    try:
        data = json.loads(document or "")
    except ValueError as exc:
        raise UnreadableLedgerEntry(f"the ledger entry is not JSON ({exc})") from None
    version = data.pop("ledgerFormat", None) if isinstance(data, dict) else None
    if version == LEDGER_FORMAT:
        return LedgerEntry(head, data, len(by_id) - 1)
    if version == 1:
        own = {k: v for k, v in row.items() if k in READER_ROW_KEYS}
        state = _release_0_1_0_state(session_id, data, head, by_id)
        return LedgerEntry(head, {**own, **state}, len(by_id) - 1)
    raise UnreadableLedgerEntry(f"the ledger entry is not of format {LEDGER_FORMAT} or 1")


def _release_0_1_0_state(
    session_id: str,
    rest: dict[str, Any],
    head: Mapping[str, Any],
    by_id: Mapping[str, tuple[str | None, Mapping[str, Any]]],
) -> dict[str, Any]:
    """The state of a format-1 entry: its head's keys and the growing lists, appended from
    the segments its head names (summary_<id>#<generation>.<n>)."""
    lists: dict[str, list[Any]] = {name: [] for name in (*HISTORY_SECTIONS, "References")}
    lists["Sources"] = []
    generation = _number(head, "generation")
    for seq in range(_number(head, "segments")):
        segment = by_id.get(f"{summary_row_id(session_id)}#{generation}.{seq}")
        if segment is None or segment[0] is None:
            raise UnreadableLedgerEntry(f"segment {generation}.{seq} of the entry is missing")
        try:
            for name, items in json.loads(segment[0]).items():
                lists[name].extend(items)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            why = f"segment {generation}.{seq} of the entry cannot be read ({exc})"
            raise UnreadableLedgerEntry(why) from None
    sections = json.loads(rest.get("sectionsJson") or "{}")
    sections.update({title: lists[title] for title in HISTORY_SECTIONS})
    return {
        **rest,
        "sectionsJson": _dump(sections),
        "referencesJson": json.dumps(lists["References"], ensure_ascii=False),
        "itemSourcesJson": json.dumps(lists["Sources"]),
    }


def _number(head: Mapping[str, Any], key: str) -> int:
    value = head.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _dump(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
