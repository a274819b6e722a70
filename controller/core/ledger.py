"""The operator's ledger entry of one summary row: what the writer needs and no reader reads.
Pure.

Every agent reads the metadata of every summary row at boot, so the row carries only the
document and neo's keys (core/summary_row.py: READER_ROW_KEYS). The rest of a write's state
(the sections every fact is kept in, the coverage, the references, the watermark, a carried
legacy text, provenance, who wrote it) is the session's entry in the ledger collection
(`<summary collection>-ledger`, same store: MemoryStore): a head record with the row's id,
whose metadata holds the fence of the grant that wrote it and its authority
(core/fencing.py), the digest of the row's document it goes with and when it was written,
and segment records holding what the growing lists (history items, references) gained at
each write, so a write costs what is new (plan_write, read_entry).

The ledger is written before the row, segments before the head: a write that stops on the
way leaves segments no head names (ignored, then replaced) or a ledger ahead of its row (the
next pass reads the ledger and rewrites the row), never a row whose facts the ledger lacks.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from controller.core.fencing import Fence
from controller.core.naming import summary_row_id
from controller.core.summary import HISTORY_SECTIONS
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
    if ledger_is_behind(row, state):  # the ledger's masking says nothing of the row's text
        return {**{k: v for k, v in (state or {}).items() if k != "maskedWith"}, **row}
    return {**row, **(state or {})}


def _ms(value: object) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


# The parts of a state that only grow: the history sections' items and the references.
# Each write appends what is new to them as one segment record; the head record holds the
# rest (Current State, coverage, watermark, sources, legacy text, provenance) and says which
# segments are the entry's. A write that changes what was there (a supersede mark) or that
# finds SEGMENTS_MAX segments writes the lists whole as segment 0 of a new generation.
GROWING = (*HISTORY_SECTIONS, "References", "Sources")
SEGMENTS_MAX = 64


@dataclass(frozen=True)
class RowState:
    """A session's row as a write finds it right before it writes (MemoryStore.
    read_row_state)."""

    fence: Fence | None
    digest: str | None  # of the row's document; None: no row
    ledger_head: dict[str, Any] | None  # the ledger entry's head keys; None: no entry


@dataclass(frozen=True)
class LedgerRecord:
    record_id: str
    document: str
    metadata: dict[str, Any]


@dataclass(frozen=True)
class LedgerWrite:
    """What one write upserts (segments first, the head last) and which older generations
    of the entry's segments it leaves behind (deleted after the head is written)."""

    records: tuple[LedgerRecord, ...]
    generation: int
    superseded: bool  # segments of earlier generations are garbage once the head is written


def _lists(state: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """(the state without its growing lists, the lists)."""
    sections = json.loads(str(state.get("sectionsJson") or "{}"))
    refs = json.loads(str(state.get("referencesJson") or "[]"))
    lists = {title: list(sections.pop(title, [])) for title in HISTORY_SECTIONS}
    lists["References"] = list(refs)
    lists["Sources"] = list(json.loads(str(state.get("itemSourcesJson") or "[]")))
    lifted = ("sectionsJson", "referencesJson", "itemSourcesJson")
    rest = {k: v for k, v in state.items() if k not in lifted}
    rest["sectionsJson"] = _dump(sections)
    return rest, lists


def _digest(items: list[Any]) -> str:
    text = json.dumps(items, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def _dump(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def segment_id(session_id: str, generation: int, seq: int) -> str:
    return f"{summary_row_id(session_id)}#{generation}.{seq}"


def plan_write(
    session_id: str,
    state: Mapping[str, Any],
    head: Mapping[str, Any] | None,
    fence: Mapping[str, Any],
    row_digest: str | None,
) -> LedgerWrite:
    """The records of one write of the entry, given its head's metadata as read right
    before (None: no entry). Appends a segment holding only what the lists gained when
    every list still starts with what the head says it held; else the lists whole."""
    rest, lists = _lists(state)
    shape = _shape(head)
    generation, seq = _number(head, "generation"), _number(head, "segments")
    grown = (
        shape is not None
        and seq < SEGMENTS_MAX
        and all(
            len(lists[name]) >= length and _digest(lists[name][:length]) == digest
            for name, (length, digest) in shape.items()
        )
    )
    if grown:
        assert shape is not None
        part = {n: lists[n][shape[n][0] :] for n in GROWING if lists[n][shape[n][0] :]}
    else:
        generation, seq, part = generation + 1, 0, lists
    segments = []
    if part or not grown:
        meta = {"sessionId": session_id, "generation": generation, "segment": seq}
        segments.append(LedgerRecord(segment_id(session_id, generation, seq), _dump(part), meta))
        seq += 1
    head_meta: dict[str, Any] = {
        "sessionId": session_id,
        "ledgerFormat": LEDGER_FORMAT,
        "generation": generation,
        "segments": seq,
        "lists": _dump({n: [len(items), _digest(items)] for n, items in lists.items()}),
        **fence,
        ROW_DIGEST_KEY: row_digest,
        "summarizedAt": state.get("summarizedAt"),
        # Every row id of the session the write accounted for (coverage.digest_text): the
        # reconciliation's walk compares it with the ids it counts (reconcile_plan.py).
        "rowsDigest": state.get("rowsDigest"),
    }
    head_meta = {k: v for k, v in head_meta.items() if v is not None}
    head_record = LedgerRecord(summary_row_id(session_id), ledger_document(rest), head_meta)
    # Without a head there is no earlier generation to drop (a first write: no request).
    return LedgerWrite((*segments, head_record), generation, superseded=not grown and bool(head))


def _number(head: Mapping[str, Any] | None, key: str) -> int:
    value = (head or {}).get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _shape(head: Mapping[str, Any] | None) -> dict[str, tuple[int, str]] | None:
    """What each list held at the head's write: (length, digest); None when unknown."""
    try:
        shape = json.loads(str((head or {})["lists"]))
        shape.setdefault("Sources", [0, _digest([])])  # a head written before item sources
        found = {n: (int(shape[n][0]), str(shape[n][1])) for n in GROWING}
    except (KeyError, ValueError, TypeError, IndexError):
        return None
    return found


def read_entry(
    session_id: str, records: Sequence[tuple[str, str | None, Mapping[str, Any]]]
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(the head's metadata, the state) of an entry from its records (the head and its
    segments, in any order; segments of other generations, or past the head's count, are
    leftovers of a write that stopped, and ignored); None without a head. Raises
    UnreadableLedgerEntry when a segment the head names is missing or unreadable."""
    by_id = {record_id: (doc, meta) for record_id, doc, meta in records}
    found = by_id.get(summary_row_id(session_id))
    if found is None:
        return None
    document, head = found
    rest = ledger_state(document) or {}
    head = dict(head or {})
    lists: dict[str, list[Any]] = {name: [] for name in GROWING}
    generation = _number(head, "generation")
    for seq in range(_number(head, "segments")):
        segment = by_id.get(segment_id(session_id, generation, seq))
        if segment is None or segment[0] is None:
            raise UnreadableLedgerEntry(f"segment {generation}.{seq} of the entry is missing")
        try:
            part = json.loads(segment[0])
            for name, items in part.items():
                lists[name].extend(items)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            why = f"segment {generation}.{seq} cannot be read ({exc})"
            raise UnreadableLedgerEntry(why) from None
    sections = json.loads(rest.get("sectionsJson") or "{}")
    sections.update({title: lists[title] for title in HISTORY_SECTIONS})
    rest["sectionsJson"] = _dump(sections)
    rest["referencesJson"] = json.dumps(lists["References"], ensure_ascii=False)
    rest["itemSourcesJson"] = json.dumps(lists["Sources"])
    return head, rest


def ledger_document(state: Mapping[str, Any]) -> str:
    """The entry's document: the state's keys as one compact JSON object."""
    return json.dumps(
        {"ledgerFormat": LEDGER_FORMAT, **state},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )


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
