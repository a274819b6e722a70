"""Where the sweep decides which sessions need a summary. Pure. Its watermark stays behind
every session skipped as active or deferred; sunset markers (docs/agents.md) ask for a pass
whatever the idle threshold; the rows the time scan cannot see, RowCursor (in the order Chroma
added them) and ReconcileCycle (a walk counting rows per session, as informers resync) find."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, NamedTuple

from controller.core.coverage import Bucket, digest_text, id_hash
from controller.core.memories import FUTURE_TOLERANCE_MS, SUNSET_MARKER_TYPE, parse_timestamp_ms
from controller.core.naming import blank_session_id
from controller.core.retention import pass_in_flight

MarkerAction = Literal["request", "wait", "done"]
MAX_SESSION_ID = 1024  # SessionSummary spec.sessionId maxLength
# A row as the walk reads it: (sessionId, timestamp ms, row id, row_problem's answer).
WalkedRow = tuple[str | None, int | None, str, str | None]
IGNORED_IDS_SHOWN = 5


@dataclass(frozen=True)
class StoredSummaryState:
    """The parts of a stored summary that decide staleness (its neo metadata)."""

    memory_count: int | None
    timestamp_ms: int | None


@dataclass
class SweepPlan:
    """Session ids: stale and idle, newest first (candidates to the cap, deferred after)."""

    candidates: list[str] = field(default_factory=list)
    deferred: list[str] = field(default_factory=list)
    still_active: list[str] = field(default_factory=list)
    fresh: list[str] = field(default_factory=list)
    next_watermark_ms: int = 0
    refresh: list[str] = field(default_factory=list)  # active, grown enough to refresh

    @property
    def found(self) -> int:
        """Sessions that need a summary now (the queue depth)."""
        return len(self.candidates) + len(self.deferred) + len(self.refresh)


def collect_activity(rows: Iterable[tuple[str, int]], *, now_ms: int) -> dict[str, int]:
    """The newest time per session of scanned (sessionId, ms) pairs; a sessionId the CRD
    refuses is skipped, a bad clock's future counts as 0 (seen, never kept active)."""
    newest: dict[str, int] = {}
    for session_id, stamp in rows:
        if blank_session_id(session_id) or len(session_id) > MAX_SESSION_ID:
            continue
        ts = 0 if stamp > now_ms + FUTURE_TOLERANCE_MS else stamp
        if ts > newest.get(session_id, -1):
            newest[session_id] = ts
    return newest


def is_stale(newest_ms: int, stored: StoredSummaryState | None, live_count: int | None) -> bool:
    """Missing, older than the newest memory, or counting other rows than the live count."""
    return (
        stored is None
        or stored.timestamp_ms is None
        or stored.timestamp_ms < newest_ms
        or (live_count is not None and stored.memory_count != live_count)
    )


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
    stale: list[tuple[int, str]] = []  # (newest ms, session id)
    for sid, newest_ms in activity.items():
        if not is_stale(newest_ms, stored.get(sid), live_counts.get(sid)):
            plan.fresh.append(sid)
        elif newest_ms > idle_before:
            plan.still_active.append(sid)
        else:
            stale.append((newest_ms, sid))
    stale.sort(key=lambda c: (-c[0], c[1]))
    plan.candidates = [sid for _, sid in stale[:max_sessions]]
    plan.deferred = [sid for _, sid in stale[max_sessions:]]
    plan.still_active.sort()
    plan.fresh.sort()
    plan.next_watermark_ms = min([idle_before, *(ms - 1 for ms, _ in stale[max_sessions:])])
    return plan


def may_refresh(summarized_at_ms: int | None, min_interval_ms: int, now_ms: int) -> bool:
    """The minimum interval since the last summary (if any) has passed."""
    return summarized_at_ms is None or now_ms - summarized_at_ms >= min_interval_ms


def plan_refresh(
    plan: SweepPlan, tokens: Mapping[str, int], *, after_tokens: int, max_sessions: int
) -> SweepPlan:
    """Moves the active sessions grown past after_tokens (estimated tokens since their
    summary, of those measured) to refresh, most grown first, within what the cap leaves
    after the idle stale ones; the rest stay still_active (measured again)."""
    due = [sid for sid in plan.still_active if tokens.get(sid, 0) > after_tokens]
    due.sort(key=lambda sid: (-tokens[sid], sid))
    plan.refresh = due[: max(0, max_sessions - len(plan.candidates))]
    picked = set(plan.refresh)
    plan.still_active = [sid for sid in plan.still_active if sid not in picked]
    return plan


class SunsetMarker(NamedTuple):
    """The newest sunset marker the scan saw of one session (its timestamp, epoch ms)."""

    session_id: str
    timestamp_ms: int


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
) -> tuple[dict[str, SunsetMarker], dict[str, str]]:
    """The newest marker per session of scanned (id, sessionId, time), and the problem of
    each marker that names no session (by memory id: reported, never acted on)."""
    newest: dict[str, SunsetMarker] = {}
    invalid: dict[str, str] = {}
    for memory_id, session_id, ts in rows:
        if (problem := marker_problem(session_id)) is not None:
            invalid[memory_id] = problem
        elif isinstance(session_id, str) and ts > newest.get(session_id, ("", -1))[1]:
            newest[session_id] = SunsetMarker(session_id, ts)  # str: no problem
    return newest, dict(sorted(invalid.items()))


def not_acted_on(
    markers: Mapping[str, SunsetMarker], acted: Mapping[str, int]
) -> list[SunsetMarker]:
    """Markers newer than the last acted on for their session, longest waiting first."""
    pending = [m for m in markers.values() if m.timestamp_ms > acted.get(m.session_id, -1)]
    return sorted(pending, key=lambda m: (m.timestamp_ms, m.session_id))


def covered_by_summary(marker: SunsetMarker, stored: StoredSummaryState | None) -> bool:
    """The stored summary's timestamp, its newest row (markers too), is the marker's or later."""
    written = stored.timestamp_ms if stored is not None else None
    return written is not None and written >= marker.timestamp_ms


def marker_action(marker: SunsetMarker, obj: Mapping[str, Any] | None) -> MarkerAction:
    """For a marker the stored summary does not cover: wait while a pass is under way; done
    when the last pass saw it (status.lastMemoryAt, in whole seconds) and wrote nothing."""
    if obj is None:
        return "request"
    if pass_in_flight(obj):
        return "wait"
    seen = parse_timestamp_ms((obj.get("status") or {}).get("lastMemoryAt"))
    if seen is not None and seen >= marker.timestamp_ms - marker.timestamp_ms % 1000:
        return "done"
    return "request"


def row_problem(meta: Mapping[str, object]) -> str | None:
    """Why the operator cannot act on a row it reads (None: usable, or of no session)."""
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


@dataclass(frozen=True)
class RowCursor:
    """Where the appended-rows scan stopped: the row count then and its last row's id, which
    a deletion (shifting the offsets) changes."""

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
    uncovered: int = 0  # rows no summary accounts for (uncovered_rows), once the walk ended

    def fold(self, rows: Sequence[WalkedRow], now_ms: int) -> int:
        """Counts a page of rows; returns its length. A row without a usable time (none, or a
        bad clock's future) counts, as memoryCount does, but dates nothing."""
        for session_id, stamp, row_id, problem in rows:
            if problem is not None:
                found = self.ignored.setdefault(problem, IgnoredRows())
                found.count += 1
                found.ids += [row_id][: IGNORED_IDS_SHOWN - len(found.ids)]
            if session_id is None or problem is not None:
                continue
            self.digests[session_id] = self.digests.get(session_id, Bucket(0)).add(id_hash(row_id))
            self.counts[session_id] = self.counts.get(session_id, 0) + 1
            if stamp is None or stamp > now_ms + FUTURE_TOLERANCE_MS:
                stamp = 0  # dates nothing: idle, as the sweep takes a time ahead of the clock
            self.newest[session_id] = max(self.newest.get(session_id, 0), stamp)
        self.rows += len(rows)
        return len(rows)

    def add_summarized(self, session_ids: Iterable[str]) -> None:
        """Sessions with a ledger entry: one with no row counts 0, so its summary goes."""
        for session_id in session_ids:
            self.counts.setdefault(session_id, 0)
            self.newest.setdefault(session_id, 0)


def uncovered_rows(
    counts: Mapping[str, int], stored: Mapping[str, StoredSummaryState | None]
) -> int:
    """Rows no summary accounts for: each session's rows beyond its memoryCount (all, if none)."""
    rows = ((count, stored.get(sid)) for sid, count in counts.items())
    return sum(max(0, n - ((s.memory_count or 0) if s else 0)) for n, s in rows)


def reconcile(
    cycle: ReconcileCycle,
    stored: Mapping[str, StoredSummaryState | None],
    *,
    now_ms: int,
    idle_ms: int,
    max_sessions: int,
    rows_digests: Mapping[str, str] | None = None,
) -> SweepPlan:
    """What a finished walk asks for, by the sweep's rules with its counts as live counts, and
    a session whose row ids differ from its ledger's rowsDigest as drifted."""
    changed = {
        sid
        for sid, written in (rows_digests or {}).items()
        if sid in cycle.digests and digest_text(cycle.digests[sid]) != written
    }
    stored = {
        sid: replace(state, memory_count=None) if state is not None and sid in changed else state
        for sid, state in stored.items()
    }
    activity = collect_activity(cycle.newest.items(), now_ms=now_ms)
    return plan_sweep(
        activity, stored, cycle.counts, now_ms=now_ms, idle_ms=idle_ms, max_sessions=max_sessions
    )
