"""Finding memories the sweep's timestamp scan cannot see (older than its watermark, or an
ISO timestamp Chroma cannot compare), and the paced reconciliation. Pure.

- RowCursor: Chroma lists rows in the order they were added, so each sweep reads the rows
  past the offset it stopped at; a deletion shifts the offsets, which the cursor notices
  (the row before its offset changed) and answers with a reconciliation.
- ReconcileCycle, a resync as informers do: a walk over the whole collection,
  `reconcileRowsPerSecond` rows per sweep tick every `reconcileIntervalSeconds`, counting
  each session's rows and digesting their ids (coverage.digest) against the summary's
  memoryCount and its ledger head's rowsDigest. A session that differs, or has no summary,
  gets a pass, which reads exactly the rows its summary does not cover. It reads a bounded
  number of rows per tick, so it never holds up a sunset.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from controller.core.coverage import Bucket, digest_text, id_hash
from controller.core.memories import FUTURE_TOLERANCE_MS
from controller.core.sweep_plan import (
    MAX_SESSION_ID,
    SessionActivity,
    StoredSummaryState,
    SweepPlan,
    plan_sweep,
)

# A row as the walk reads it: (sessionId, timestamp ms or None, row id).
WalkedRow = tuple[str, int | None, str]


@dataclass(frozen=True)
class RowCursor:
    """Where the appended-rows scan stopped: the collection's row count then, and the id of
    its last row (None for an empty collection)."""

    offset: int
    last_id: str | None


@dataclass
class ReconcileCycle:
    """One walk over the collection, counting each session's rows."""

    started_ms: int
    offset: int = 0
    rows: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    newest: dict[str, int] = field(default_factory=dict)
    digests: dict[str, Bucket] = field(default_factory=dict)  # each session's row ids

    def fold(self, rows: Iterable[WalkedRow], now_ms: int) -> int:
        """Counts a page of (sessionId, timestamp ms or None); returns its length. A row
        without a usable timestamp counts (memoryCount counts every row) but dates nothing,
        as does one too far ahead of now_ms (a bad clock must not keep a session active)."""
        n = 0
        for session_id, stamp, row_id in rows:
            n += 1
            ids = self.digests.get(session_id) or Bucket(0)
            self.digests[session_id] = ids.add(id_hash(row_id))
            ts = None if stamp is not None and stamp > now_ms + FUTURE_TOLERANCE_MS else stamp
            self.counts[session_id] = self.counts.get(session_id, 0) + 1
            if ts is not None and ts > self.newest.get(session_id, -(2**63)):
                self.newest[session_id] = ts
            elif session_id not in self.newest:
                self.newest[session_id] = -(2**63) if ts is None else ts
        self.rows += n
        self.offset += n
        return n

    def add_summarized(self, session_ids: Iterable[str]) -> None:
        """Sessions with a summary (a ledger entry): one the walk found no row of counts 0
        rows (its memories were all deleted), so its summary is asked again, and goes."""
        for session_id in session_ids:
            self.counts.setdefault(session_id, 0)
            self.newest.setdefault(session_id, 0)


def uncovered_rows(
    counts: Mapping[str, int], stored: Mapping[str, StoredSummaryState | None]
) -> int:
    """Rows no summary accounts for: each session's rows beyond its memoryCount (all, if none)."""
    total = 0
    for session_id, count in counts.items():
        state = stored.get(session_id)
        counted = state.memory_count if state is not None and state.memory_count else 0
        total += max(0, count - counted)
    return total


def reconcile(
    cycle: ReconcileCycle,
    stored: Mapping[str, StoredSummaryState | None],
    *,
    now_ms: int,
    idle_ms: int,
    max_sessions: int,
    rows_digests: Mapping[str, str] | None = None,
) -> SweepPlan:
    """What a finished walk asks for, by the sweep's own rules (sweep_plan) with the walk's
    counts as live counts: every idle session whose row count differs from its memoryCount,
    or whose row ids differ from its ledger rowsDigest (`rows_digests`; without one, the
    count decides), or that has rows and no summary; newest first."""
    changed = {
        sid
        for sid, written in (rows_digests or {}).items()
        if sid in cycle.digests and digest_text(cycle.digests[sid]) != written
    }
    stored = {
        sid: replace(state, memory_count=None) if state is not None and sid in changed else state
        for sid, state in stored.items()
    }
    activity = {
        sid: SessionActivity(sid, max(ts, 0))
        for sid, ts in cycle.newest.items()
        if sid.strip() and len(sid) <= MAX_SESSION_ID  # else it names no SessionSummary
    }
    return plan_sweep(
        activity,
        dict(stored),
        dict(cycle.counts),
        now_ms=now_ms,
        idle_ms=idle_ms,
        max_sessions=max_sessions,
    )
