"""Finding memories the sweep's timestamp scan cannot see (older than its watermark, or an
ISO timestamp Chroma cannot compare), and the paced reconciliation. Pure.

RowCursor follows the rows in the order Chroma added them, and notices a deletion (which
shifts the offsets) by the row before its offset changing. ReconcileCycle is a resync as
informers do: a paced walk that counts and digests each session's rows against its summary.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from controller.core.coverage import Bucket, digest_text, id_hash
from controller.core.memories import FUTURE_TOLERANCE_MS, SUNSET_MARKER_TYPE
from controller.core.sweep_plan import (
    StoredSummaryState,
    SweepPlan,
    collect_activity,
    marker_problem,
    plan_sweep,
)

# A row as the walk reads it: (sessionId or None, timestamp ms or None, row id, and why the
# operator cannot act on it, else None: row_problem).
WalkedRow = tuple[str | None, int | None, str, str | None]
IGNORED_IDS_SHOWN = 5


def row_problem(meta: Mapping[str, object]) -> str | None:
    """Why the operator cannot act on a memory row it reads: a sessionId no SessionSummary
    can name (never summarized), or a sunset marker whose timestamp is not a number (the
    marker scan's range read never finds it). None for a usable row, and for a row with no
    sessionId: it belongs to no session."""
    session_id = meta.get("sessionId")
    if session_id is not None and (problem := marker_problem(session_id)) is not None:
        return f"{problem}, so never summarized"
    stamp = meta.get("timestamp")
    if meta.get("type") == SUNSET_MARKER_TYPE and (
        isinstance(stamp, bool) or not isinstance(stamp, int | float)
    ):
        return (
            "is a sunset marker whose timestamp is not a number (epoch ms), so never found "
            "by the marker scan (the sweep summarizes its session once idle)"
        )
    return None


@dataclass
class IgnoredRows:
    """Rows the walk found with one problem: how many, and the first few ids."""

    count: int = 0
    ids: list[str] = field(default_factory=list)


UNDATED = -(2**63)  # the newest time of a session none of whose rows has a usable one


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
    rows: int = 0  # walked so far: where the next page starts
    counts: dict[str, int] = field(default_factory=dict)
    newest: dict[str, int] = field(default_factory=dict)
    digests: dict[str, Bucket] = field(default_factory=dict)  # each session's row ids
    ignored: dict[str, IgnoredRows] = field(default_factory=dict)  # by row_problem

    def fold(self, rows: Sequence[WalkedRow], now_ms: int) -> int:
        """Counts a page of rows; returns its length. A row without a usable timestamp counts
        (memoryCount counts every row) but dates nothing, as does one too far ahead of now_ms
        (a bad clock must not keep a session active)."""
        for session_id, stamp, row_id, problem in rows:
            if problem is not None:
                found = self.ignored.setdefault(problem, IgnoredRows())
                found.count += 1
                found.ids += [row_id][: IGNORED_IDS_SHOWN - len(found.ids)]
            if session_id is None or problem is not None:
                continue
            ids = self.digests.get(session_id) or Bucket(0)
            self.digests[session_id] = ids.add(id_hash(row_id))
            self.counts[session_id] = self.counts.get(session_id, 0) + 1
            if stamp is None or stamp > now_ms + FUTURE_TOLERANCE_MS:
                stamp = UNDATED
            self.newest[session_id] = max(self.newest.get(session_id, UNDATED), stamp)
        self.rows += len(rows)
        return len(rows)

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
    """What a finished walk asks for, by the sweep's own rules with its counts as live counts:
    idle sessions whose rows differ from their summary's (in count, or in ids from the ledger's
    rowsDigest where `rows_digests` has one) or that have rows and no summary."""
    changed = {
        sid
        for sid, written in (rows_digests or {}).items()
        if sid in cycle.digests and digest_text(cycle.digests[sid]) != written
    }
    stored = {
        sid: replace(state, memory_count=None) if state is not None and sid in changed else state
        for sid, state in stored.items()
    }
    # An undated session (UNDATED) as 0, idle, as the sweep takes a time ahead of the clock.
    activity = collect_activity(((s, max(t, 0)) for s, t in cycle.newest.items()), now_ms=now_ms)
    return plan_sweep(
        activity,
        dict(stored),
        dict(cycle.counts),
        now_ms=now_ms,
        idle_ms=idle_ms,
        max_sessions=max_sessions,
    )
