"""Where the sweep decides which sessions need a summary. Pure: no store, no cluster.

The scan's watermark stays behind every session skipped as still active or deferred by the
per-sweep cap, so nothing is left behind. Sunset markers (docs/agents.md) ask for a pass
whatever the idle threshold says; one is done once the stored summary covers it or its
SessionSummary finished a pass that saw it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from controller.core.memories import FUTURE_TOLERANCE_MS, parse_timestamp_ms
from controller.core.naming import blank_session_id
from controller.core.retention import pass_in_flight

StaleReason = Literal["missing", "newer-memories", "count-drift"]
CandidateReason = StaleReason | Literal["refresh"]
MarkerAction = Literal["request", "wait", "done"]
MARKER_TRIGGER = "sunset-marker"
REFRESH_TRIGGER = "refresh"
MAX_SESSION_ID = 1024  # SessionSummary spec.sessionId maxLength


@dataclass(frozen=True)
class StoredSummaryState:
    """The parts of a stored summary that decide staleness (its neo metadata)."""

    memory_count: int | None
    timestamp_ms: int | None


@dataclass(frozen=True)
class Candidate:
    session_id: str
    newest_ms: int
    reason: CandidateReason


@dataclass
class SweepPlan:
    candidates: list[Candidate] = field(default_factory=list)
    deferred: list[Candidate] = field(default_factory=list)
    still_active: list[str] = field(default_factory=list)
    fresh: list[str] = field(default_factory=list)
    next_watermark_ms: int = 0
    refresh: list[Candidate] = field(default_factory=list)  # active, grown enough to refresh

    @property
    def found(self) -> int:
        """Sessions that need a summary now (the queue depth)."""
        return len(self.candidates) + len(self.deferred) + len(self.refresh)


def collect_activity(rows: Iterable[tuple[str, int]], *, now_ms: int) -> dict[str, int]:
    """The newest timestamp per session of scanned (sessionId, timestamp_ms) pairs. A blank or
    over-long sessionId (the CRD refuses it) is skipped; a time too far ahead of now_ms (a bad
    clock) counts as 0: the session is still seen (count check), never kept "active"."""
    newest: dict[str, int] = {}
    for session_id, stamp in rows:
        if blank_session_id(session_id) or len(session_id) > MAX_SESSION_ID:
            continue
        ts = 0 if stamp > now_ms + FUTURE_TOLERANCE_MS else stamp
        if ts > newest.get(session_id, -1):
            newest[session_id] = ts
    return newest


def stale_reason(
    newest_ms: int, stored: StoredSummaryState | None, live_count: int | None
) -> StaleReason | None:
    """Why a session's summary is stale, or None when fresh: the stored memoryCount differs
    from the live count, or memories newer than the summary covers."""
    if stored is None:
        return "missing"
    if stored.timestamp_ms is None or stored.timestamp_ms < newest_ms:
        return "newer-memories"
    if live_count is not None and stored.memory_count != live_count:
        return "count-drift"
    return None


def plan_sweep(
    activity: Mapping[str, int],
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
    for sid, newest_ms in activity.items():
        reason = stale_reason(newest_ms, stored.get(sid), live_counts.get(sid))
        if reason is None:
            plan.fresh.append(sid)
        elif newest_ms > idle_before:
            plan.still_active.append(sid)
        else:
            stale.append(Candidate(sid, newest_ms, reason))
    stale.sort(key=lambda c: (-c.newest_ms, c.session_id))
    plan.candidates, plan.deferred = stale[:max_sessions], stale[max_sessions:]
    plan.still_active.sort()
    plan.fresh.sort()
    plan.next_watermark_ms = min([idle_before, *(c.newest_ms - 1 for c in plan.deferred)])
    return plan


# -- sunset markers -------------------------------------------------------------------------


class SunsetMarker(NamedTuple):
    """The newest sunset marker the scan saw of one session (its timestamp, epoch ms)."""

    session_id: str
    timestamp_ms: int


@dataclass(frozen=True)
class InvalidMarker:
    """A marker that names no session the operator can summarize; reported, never acted on."""

    memory_id: str
    problem: str

    def describe(self) -> str:
        return f"memory {self.memory_id[:80]!r} {self.problem}"


def marker_problem(session_id: object) -> str | None:
    """Why a marker's sessionId cannot name a SessionSummary; None when it can."""
    if session_id is None:
        return "has no sessionId (metadata sessionId must be the session's id)"
    if not isinstance(session_id, str):
        kind = "boolean" if isinstance(session_id, bool) else "number"  # Chroma's other scalars
        return f"has a sessionId that is a {kind}, not text"
    if blank_session_id(session_id):
        return "has a blank sessionId"
    if len(session_id) > MAX_SESSION_ID:
        return f"has a sessionId longer than {MAX_SESSION_ID} characters"
    return None


def collect_markers(
    rows: Iterable[tuple[str, object, int]],
) -> tuple[dict[str, SunsetMarker], list[InvalidMarker]]:
    """Folds scanned (memory id, sessionId, timestamp) markers into the newest marker per
    session, and the markers that name no session."""
    newest: dict[str, int] = {}
    invalid: list[InvalidMarker] = []
    for memory_id, session_id, ts in rows:
        if (problem := marker_problem(session_id)) is not None:
            invalid.append(InvalidMarker(memory_id, problem))
            continue
        assert isinstance(session_id, str)
        if ts > newest.get(session_id, -1):
            newest[session_id] = ts
    markers = {sid: SunsetMarker(sid, ts) for sid, ts in newest.items()}
    return markers, sorted(invalid, key=lambda i: i.memory_id)


def not_acted_on(
    markers: Mapping[str, SunsetMarker], acted: Mapping[str, int]
) -> list[SunsetMarker]:
    """Markers newer than the last one acted on for their session, oldest first (the
    longest waiting go first when a cap applies)."""
    pending = [m for m in markers.values() if m.timestamp_ms > acted.get(m.session_id, -1)]
    return sorted(pending, key=lambda m: (m.timestamp_ms, m.session_id))


def covered_by_summary(marker: SunsetMarker, stored: StoredSummaryState | None) -> bool:
    """True when the stored summary was written after a pass that read the marker: its
    timestamp is the newest row of the session it covers, markers included."""
    written = stored.timestamp_ms if stored is not None else None
    return written is not None and written >= marker.timestamp_ms


def marker_action(marker: SunsetMarker, obj: Mapping[str, Any] | None) -> MarkerAction:
    """What to do for a marker the stored summary does not cover, by the session's
    SessionSummary: wait while a pass is under way; done when the last pass saw the marker
    (and wrote nothing: asking again changes nothing); else request. status.lastMemoryAt, the
    newest row the last pass saw, has whole seconds: compared with the marker's."""
    if obj is None:
        return "request"
    if pass_in_flight(obj):
        return "wait"
    seen = parse_timestamp_ms((obj.get("status") or {}).get("lastMemoryAt"))
    if seen is not None and seen >= marker.timestamp_ms - marker.timestamp_ms % 1000:
        return "done"
    return "request"
