"""Where the sweep decides which sessions need a summary. Pure: no store, no cluster.

The scan behind it reads only memories newer than a watermark, so its cost follows new
memories, not the size of the collection. The watermark stays behind every session that
was skipped as still active or deferred by the per-sweep cap, so each of them is seen
again by a later sweep; nothing is ever left behind by advancing it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

StaleReason = Literal["missing", "newer-memories", "count-drift"]


@dataclass(frozen=True)
class SessionActivity:
    """What the scan saw of one session: its newest memory timestamp (epoch ms)."""

    session_id: str
    newest_ms: int


@dataclass(frozen=True)
class StoredSummaryState:
    """The parts of a stored summary that decide staleness (its neo metadata)."""

    memory_count: int | None
    timestamp_ms: int | None


@dataclass(frozen=True)
class Candidate:
    session_id: str
    newest_ms: int
    reason: StaleReason


@dataclass
class SweepPlan:
    candidates: list[Candidate] = field(default_factory=list)
    deferred: list[Candidate] = field(default_factory=list)
    still_active: list[str] = field(default_factory=list)
    fresh: list[str] = field(default_factory=list)
    next_watermark_ms: int = 0

    @property
    def found(self) -> int:
        """Sessions that need a summary now (the queue depth)."""
        return len(self.candidates) + len(self.deferred)


def collect_activity(rows: Iterable[tuple[str, int]]) -> dict[str, SessionActivity]:
    """Folds scanned (sessionId, timestamp_ms) pairs into the newest timestamp per session."""
    newest: dict[str, int] = {}
    for session_id, ts in rows:
        if ts > newest.get(session_id, -1):
            newest[session_id] = ts
    return {sid: SessionActivity(sid, ts) for sid, ts in newest.items()}


def stale_reason(
    activity: SessionActivity, stored: StoredSummaryState | None, live_count: int | None
) -> StaleReason | None:
    """Why a session's summary is stale, or None when it is fresh.

    Staleness as the old system defined it (stored memoryCount differs from the live
    count) plus memories newer than what the summary covers.
    """
    if stored is None:
        return "missing"
    if stored.timestamp_ms is None or stored.timestamp_ms < activity.newest_ms:
        return "newer-memories"
    if live_count is not None and stored.memory_count != live_count:
        return "count-drift"
    return None


def plan_sweep(
    activity: Mapping[str, SessionActivity],
    stored: Mapping[str, StoredSummaryState | None],
    live_counts: Mapping[str, int],
    *,
    now_ms: int,
    idle_ms: int,
    max_sessions: int,
) -> SweepPlan:
    """Picks the sessions to (re)summarize now: stale, idle, newest first, at most max_sessions."""
    plan = SweepPlan()
    idle_before = now_ms - idle_ms
    stale: list[Candidate] = []
    for sid, act in activity.items():
        reason = stale_reason(act, stored.get(sid), live_counts.get(sid))
        if reason is None:
            plan.fresh.append(sid)
        elif act.newest_ms > idle_before:
            plan.still_active.append(sid)
        else:
            stale.append(Candidate(sid, act.newest_ms, reason))
    stale.sort(key=lambda c: (-c.newest_ms, c.session_id))
    plan.candidates, plan.deferred = stale[:max_sessions], stale[max_sessions:]
    plan.still_active.sort()
    plan.fresh.sort()
    watermark = idle_before
    if plan.deferred:
        watermark = min(watermark, min(c.newest_ms for c in plan.deferred) - 1)
    plan.next_watermark_ms = watermark
    return plan


def initial_watermark(now_ms: int, lookback_days: int) -> int:
    """Where the first sweep starts: the lookback window."""
    return now_ms - lookback_days * 86_400_000
