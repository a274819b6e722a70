"""Forgetting sessions (docs/privacy.md, "Forget and rebuild"), and the stored state the
sweep judges staleness by, tombstones included: a forgotten session is not summarized again
until its memories change. Mixed into MemoryStore."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from controller.core.coverage import digest, digest_text
from controller.core.ledger import LEDGER_FORMAT, LEDGER_VECTOR
from controller.core.naming import summary_row_id
from controller.core.sweep_plan import StoredSummaryState
from controller.store.collections import batches
from controller.store.errors import CollectionNotFound, guard
from controller.store.scans import Scans

# A ledger head with this key is a tombstone: the session was forgotten at that time (ms).
FORGOTTEN_KEY = "forgottenAt"
DELETE_BATCH = 500


@dataclass(frozen=True)
class Forgotten:
    """What one forget removed (counts and ids' digest only: never the text)."""

    row: bool  # the summary row existed and was deleted
    ledger_records: int  # the entry's head and segments replaced or deleted
    memories: int  # the session's memories deleted (0 unless asked)
    remaining: int  # the session's memories left in the memory collection


def is_tombstone(head: Mapping[str, Any] | None) -> bool:
    return head is not None and FORGOTTEN_KEY in head


class Forgetting(Scans):
    """The forget of one session, and the stored state of many."""

    def summary_states(self, session_ids: Sequence[str]) -> dict[str, StoredSummaryState]:
        """memoryCount and timestamp of these sessions' summaries or tombstones."""
        rows = self._metadata("summary", session_ids).items()
        states = {s: _state(m.get("memoryCount"), m.get("timestamp")) for s, m in rows}
        heads = self._metadata("ledger", [s for s in session_ids if s not in states])
        for sid, head in heads.items():
            if is_tombstone(head):
                states[sid] = _state(head.get("memoryCount"), head.get(FORGOTTEN_KEY))
        return states

    def written_since(self, session_ids: Sequence[str], since_ms: int) -> set[str]:
        """Sessions whose ledger head was replaced at or after since_ms (no longer stale)."""
        heads = self._metadata("ledger", session_ids).items()
        return {sid for sid, head in heads if _at(head) >= since_ms}

    def forget_state(
        self, session_id: str, fence: Mapping[str, int | str], *, memories: bool
    ) -> Forgotten:
        """Replaces the ledger head with a tombstone, then deletes the summary row, the
        segments and (with memories) the memories. Head first, so a forget cut short leaves
        nothing a pass would carry; the SessionSummary retries until complete."""
        ids = self.session_ids(session_id)
        left = [] if memories else ids
        tombstone = {
            "sessionId": session_id,
            "ledgerFormat": LEDGER_FORMAT,
            FORGOTTEN_KEY: int(time.time() * 1000),
            "rowsDigest": digest_text(digest(left)),
            "memoryCount": len(left),
            **fence,
        }
        self._on_ledger(
            "writing the session's tombstone",
            lambda coll: coll.upsert(
                ids=[summary_row_id(session_id)],
                documents=["{}"],
                metadatas=[cast(Any, tombstone)],
                embeddings=cast(Any, [np.asarray(LEDGER_VECTOR, dtype=np.float32)]),
            ),
            create=True,
        )
        row = self._delete_row(session_id)
        where = cast(Any, {"$and": [{"sessionId": session_id}, {"segment": {"$gte": 0}}]})
        segments = self._on_ledger(
            "listing the session's ledger segments", lambda c: c.get(where=where, include=[])
        )["ids"]
        self._on_ledger("deleting the session's ledger segments", lambda c: c.delete(where=where))
        deleted = 0
        if memories and ids:
            coll = self.memories()
            for batch in batches(ids, DELETE_BATCH):
                guard("deleting the session's memories", lambda b=batch: coll.delete(ids=b))  # type: ignore[misc]
                deleted += len(batch)
        return Forgotten(row, 1 + len(segments), deleted, len(left))

    def session_ids(self, session_id: str) -> list[str]:
        """Every row id of the session: what its memoryCount counts."""
        where = {"sessionId": session_id}
        with self._memory_missing():
            coll = self.memories()
            got = guard("listing the session", lambda: coll.get(where=where, include=[]))  # type: ignore[arg-type]
        return list(got["ids"])

    def _delete_row(self, session_id: str) -> bool:
        row_id = summary_row_id(session_id)
        try:
            found = self._on_summaries(
                "reading the summary row", lambda coll: coll.get(ids=[row_id], include=[])
            )["ids"]
            if found:
                self._on_summaries("deleting the summary row", lambda c: c.delete(ids=[row_id]))
        except CollectionNotFound:
            return False
        return bool(found)


def _at(head: Mapping[str, Any]) -> int:
    """When a write or a forget replaced this ledger head (ms; 0: unknown)."""
    times = (head.get("summarizedAt"), head.get(FORGOTTEN_KEY))
    return max(
        int(t) if isinstance(t, int | float) and not isinstance(t, bool) else 0 for t in times
    )


def _state(count: object, ts: object) -> StoredSummaryState:
    return StoredSummaryState(
        memory_count=int(count) if isinstance(count, int | float) else None,
        timestamp_ms=int(ts) if isinstance(ts, int | float) else None,
    )
