"""Scans of the whole memory collection for the sweep and the reconciliation. Mixed into
MemoryStore."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, cast

from chromadb.api.models.Collection import Collection

from controller.core.memories import FUTURE_TOLERANCE_MS, UNIT_LIMITS, parse_timestamp_ms
from controller.core.naming import summary_row_id
from controller.core.reconcile_plan import RowCursor, WalkedRow
from controller.store.collections import Collections, batches, pages
from controller.store.errors import CollectionNotFound, guard

SCAN_PAGE = 2000  # rows per page of the sweep's scans of the whole collection


class Scans(Collections):
    """Reads of the memory collection that look at every session at once."""

    def scan_since(self, watermark_ms: int, page: int = SCAN_PAGE) -> Iterator[tuple[str, int]]:
        """(sessionId, timestamp ms) of every memory with a numeric timestamp after
        watermark_ms and not in the future (memories.placed). Text, late and future
        timestamps are found by scan_appended instead."""
        where = newer_where(watermark_ms, int(time.time() * 1000) + FUTURE_TOLERANCE_MS)
        for _, meta in self._scan("scanning new memories", where, page):
            sid, ts = meta.get("sessionId"), parse_timestamp_ms(meta.get("timestamp"))
            if isinstance(sid, str) and ts is not None:
                yield sid, ts

    def scan_appended(
        self, cursor: RowCursor | None, page: int = SCAN_PAGE
    ) -> tuple[list[tuple[str, int | None]], RowCursor, bool]:
        """(sessionId, timestamp ms or None) of the rows added since `cursor`, the new
        cursor, and whether the cursor was aligned. Chroma lists rows in insertion order;
        deletions shift offsets, so a misaligned cursor reads nothing and the caller
        reconciles everything (sweep.py). No cursor: the new one starts at the end."""
        with self._memory_missing():
            coll = self.memories()
            total = guard("counting memories", coll.count)
            aligned = cursor is not None and self._ends_with(coll, cursor)
            found: list[tuple[str, int | None]] = []
            offset = cursor.offset if aligned and cursor is not None else total
            while offset < total:
                rows = self.rows_from(offset, min(page, total - offset))
                if not rows:
                    break
                found += [(sid, ts) for sid, ts, _ in rows if sid is not None]
                offset += len(rows)
            return found, RowCursor(total, self._id_at(coll, total - 1)), aligned

    def _ends_with(self, coll: Collection, cursor: RowCursor) -> bool:
        """The row just before the cursor's offset is still the one the cursor saw last."""
        if cursor.offset == 0:
            return cursor.last_id is None
        return self._id_at(coll, cursor.offset - 1) == cursor.last_id

    def _id_at(self, coll: Collection, offset: int) -> str | None:
        if offset < 0:
            return None
        got = guard("reading a memory id", lambda: coll.get(include=[], limit=1, offset=offset))
        return got["ids"][0] if got["ids"] else None

    def rows_from(self, offset: int, limit: int) -> list[WalkedRow]:
        """(sessionId or None, timestamp ms or None, row id) of `limit` rows from `offset`,
        in the order they were added: every row read, so a short page is the end."""
        with self._memory_missing():
            coll = self.memories()
            got = guard(
                "reading memories in the order they were added",
                lambda: coll.get(include=["metadatas"], limit=limit, offset=offset),
            )
        metas = [m or {} for m in got["metadatas"] or []]
        return [
            (
                sid if isinstance(sid := meta.get("sessionId"), str) else None,
                parse_timestamp_ms(meta.get("timestamp")),
                row_id,
            )
            for row_id, meta in zip(got["ids"], metas, strict=True)
        ]

    def rows_digests(self, session_ids: Sequence[str]) -> dict[str, str]:
        """Each session's ledger head rowsDigest; sessions without one are left out."""
        heads = self._metadata("ledger", session_ids).items()
        return {s: d for s, head in heads if isinstance(d := head.get("rowsDigest"), str)}

    def _metadata(self, role: str, session_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """These sessions' summary row or ledger head metadata, by session."""
        on = self._on_summaries if role == "summary" else self._on_ledger
        found: dict[str, dict[str, Any]] = {}
        for batch in batches(list(session_ids), SCAN_PAGE):
            try:
                got = on(
                    f"reading the {role} metadata",
                    lambda coll, b=batch: coll.get(  # type: ignore[misc]
                        ids=[summary_row_id(s) for s in b], include=["metadatas"]
                    ),
                )
            except CollectionNotFound:
                return {}
            metas = (dict(m or {}) for m in got["metadatas"] or [])
            found.update((m["sessionId"], m) for m in metas if isinstance(m.get("sessionId"), str))
        return found

    def has_memories_besides(self, session_id: str, memory_type: str) -> bool:
        """Whether the session has a memory not of memory_type (untyped counts)."""
        where = {"$and": [{"sessionId": session_id}, {"type": {"$ne": memory_type}}]}
        with self._memory_missing():
            coll = self.memories()
            got = guard(
                "looking for the session's memories",
                lambda: coll.get(where=cast(Any, where), limit=1, include=[]),
            )
        return bool(got["ids"])

    def scan_markers(
        self, marker_type: str, watermark_ms: int, page: int = SCAN_PAGE
    ) -> Iterator[tuple[str, object, int]]:
        """(memory id, sessionId as stored, maybe blank, timestamp ms) of every memory of
        marker_type newer than watermark_ms, in any unit."""
        where = {"$and": [{"type": marker_type}, newer_where(watermark_ms)]}
        for row_id, meta in self._scan("scanning for sunset markers", where, page):
            if (ts := parse_timestamp_ms(meta.get("timestamp"))) is not None:
                yield row_id, meta.get("sessionId"), ts

    def _scan(
        self, what: str, where: dict[str, Any], page: int
    ) -> Iterator[tuple[str, Mapping[str, Any]]]:
        with self._memory_missing():
            coll = self.memories()
            yield from pages(coll, what, where, page)


def newer_where(after_ms: int, upto_ms: int | None = None) -> dict[str, Any]:
    """Chroma filter for numeric timestamps in (after_ms, upto_ms], one range per UNIT_LIMITS
    band. Chroma truncates float bounds, so seconds' bounds sit halfway between two ms."""
    cap = 2**63 - 1  # Chroma's integers are 64-bit
    upto, ranges, band = upto_ms if upto_ms is not None else cap, [], 0
    for limit, scale in UNIT_LIMITS:
        if scale < 0:  # seconds, rounded to the ms
            low, high = ("$gt", (after_ms + 0.5) / 1000), ("$lte", (upto + 0.5) / 1000)
        else:  # ms, µs, ns, floored to the ms
            low, high = ("$gte", max((after_ms + 1) * scale, band)), ("$lt", (upto + 1) * scale)
        bounds = (low, high, ("$lt", limit))
        ranges.append({"$and": [{"timestamp": {op: min(v, cap)}} for op, v in bounds]})
        band = limit
    return {"$or": ranges}
