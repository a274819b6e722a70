"""The sweep's, the marker scan's and the reconciliation's I/O (the decisions are in
core/sweep_plan.py). Idempotent when replicas overlap: objects are created if absent, and
patched only as read, when their last pass is done."""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from controller import metrics
from controller.api import SessionSummarizerSpec, Trigger
from controller.config import CONFIG
from controller.core.chunking import estimate_tokens, memory_text
from controller.core.coverage import PriorCoverage
from controller.core.memories import SUNSET_MARKER_TYPE, is_excluded
from controller.core.naming import summary_object_name
from controller.core.retention import RetentionPolicy, expired, pass_in_flight
from controller.core.summary import StructuredSummary, UnreadablePriorSummary
from controller.core.sweep_plan import (
    ReconcileCycle,
    RowCursor,
    SweepPlan,
    collect_activity,
    collect_markers,
    covered_by_summary,
    marker_action,
    may_refresh,
    not_acted_on,
    plan_refresh,
    plan_sweep,
    reconcile,
    uncovered_rows,
)
from controller.core.waiting import Pause, no_pause
from controller.kube import client as kube
from controller.runtime import MarkerMemory, Reconciler
from controller.status.conditions import now_rfc3339
from controller.store.errors import CollectionNotFound
from controller.store.memory_store import SCAN_PAGE, MemoryStore

WALK_FACTOR = 4  # at most this many times the cap of stale sessions looked up per sweep


@dataclass(frozen=True)
class SweepScan:
    """What a sweep's scans found, and its plan."""

    plan: SweepPlan
    scanned: int  # rows newer than the watermark (the range scan: active sessions again)
    appended: int  # rows added since the last sweep (the appended-rows scan)
    cursor: RowCursor  # where the appended-rows scan stopped
    aligned: bool  # False when rows were deleted: reconciled at once (reconcile_step)


def _ask(
    namespace: str,
    session_id: str,
    trigger: Trigger,
    summarizer: str,
    requested_at: str,
    existing: dict[str, Any] | None,
) -> str | None:
    """Creates the SessionSummary if it was absent when looked at (made by another sweep
    since: left be), else patches it only as read (never over a sunset since); returns
    "created" or "patched", None when nothing was asked."""
    _, how = kube.request_summary(
        namespace,
        session_id,
        trigger=trigger,
        summarizer=summarizer,
        requested_at=requested_at,
        patch_if_exists=False,
        resource_version=None if existing is None else existing["metadata"]["resourceVersion"],
    )
    return how if how in ("created", "patched") else None


def plan_from_store(
    store: MemoryStore,
    spec: SessionSummarizerSpec,
    *,
    watermark_ms: int | None,
    now_ms: int,
    cursor: RowCursor | None = None,
    pause: Pause = no_pause,
) -> SweepScan:
    """Plans from memories newer than the watermark or added since the cursor. pause: the
    scheduler's give_way, called before each read."""
    lookback_ms = spec.sweep.lookback_days * 86_400_000  # where the first sweep starts
    since = watermark_ms if watermark_ms is not None else now_ms - lookback_ms
    pause()
    appended, new_cursor, aligned = store.scan_appended(cursor)
    scanned = 0

    def counted() -> Iterator[tuple[str, int]]:
        nonlocal scanned
        pause()
        for row in store.scan_since(since):
            scanned += 1
            yield row
        # An added row that dates nothing (no usable timestamp) still changes its count.
        yield from ((sid, ts if ts is not None else 0) for sid, ts in appended)

    activity = collect_activity(counted(), now_ms=now_ms)
    pause()
    stored = store.summary_states(list(activity))
    # Count drift only matters where timestamps alone say "fresh".
    live_counts = {}
    for sid, newest_ms in activity.items():
        if sid in stored and (stored[sid].timestamp_ms or 0) >= newest_ms:
            pause()
            live_counts[sid] = len(store.session_ids(sid))
    plan = plan_sweep(
        activity,
        dict(stored),
        live_counts,
        now_ms=now_ms,
        idle_ms=spec.sweep.idle_seconds * 1000,
        max_sessions=spec.sweep.max_sessions_per_sweep,
    )

    def grown(session_ids: list[str]) -> Iterator[tuple[str, int]]:
        """Tokens each active session added since its summary (of those past the interval)."""
        summarized = False
        with contextlib.suppress(CollectionNotFound):  # no summary yet: no lookup per session
            store.summaries()
            summarized = True
        for sid in session_ids:
            pause()
            try:
                prior = store.read_summary(sid) if summarized else None
            except UnreadablePriorSummary:
                continue  # its SessionSummary reports it when a pass runs
            structured = prior if isinstance(prior, StructuredSummary) else None
            summarized_at = structured.summarized_at_ms if structured else None
            if not may_refresh(summarized_at, spec.sweep.min_refresh_seconds * 1000, now_ms):
                continue
            mark = structured.watermark if structured else None
            key = (mark.timestamp_ms, mark.memory_id) if mark else None
            rows = store.session_rows(sid, PriorCoverage(key))  # the memories after the watermark
            tokens = sum(
                estimate_tokens(memory_text(m))
                for m in rows.memories()
                if not is_excluded(m, spec.excluded_memory_types)
            )
            yield sid, tokens

    if (after_tokens := spec.sweep.refresh_after_tokens) and plan.still_active:  # 0: off
        cap = spec.sweep.max_sessions_per_sweep
        tokens = dict(grown(plan.still_active[: WALK_FACTOR * cap]))
        plan = plan_refresh(plan, tokens, after_tokens=after_tokens, max_sessions=cap)
    return SweepScan(plan, scanned, len(appended), new_cursor, aligned or cursor is None)


@dataclass(frozen=True)
class Applied:
    created: int
    patched: int
    in_flight: int  # stale, but a pass for them is already under way
    left: int  # stale and not acted on this sweep: the next sweep sees them again
    refreshed: int = 0  # active sessions asked for a refresh (created or patched)


def apply_plan(
    plan: SweepPlan, *, namespace: str, summarizer_name: str, pause: Pause = no_pause
) -> Applied:
    """Creates/patches SessionSummary objects for stale sessions, newest first, up to the
    cap. In-flight sessions do not use up the cap (they would starve an old backlog)."""
    budget = len(plan.candidates)
    stale = plan.candidates + plan.deferred

    def request(session_id: str, trigger: Trigger) -> str | None:
        """created or patched; None when in flight. requestedAt is taken after any pause."""
        pause()
        requested_at = now_rfc3339(precise=True)
        existing = kube.get_summary(namespace, summary_object_name(session_id))
        if existing is not None and pass_in_flight(existing):
            return None
        return _ask(namespace, session_id, trigger, summarizer_name, requested_at, existing)

    done: Counter[str | None] = Counter()
    for session_id in stale[: WALK_FACTOR * max(budget, 1)]:
        if done["created"] + done["patched"] >= budget:
            break
        done[request(session_id, "sweep")] += 1
    # plan.refresh is already within the cap (plan_refresh)
    refreshes = Counter(request(session_id, "refresh") for session_id in plan.refresh)
    left, refreshed = len(stale) - done.total(), refreshes["created"] + refreshes["patched"]
    return Applied(done["created"], done["patched"], done[None] + refreshes[None], left, refreshed)


def apply_retention(
    spec: SessionSummarizerSpec,
    listed: Iterable[dict[str, object]],
    *,
    namespace: str,
    summarizer: str,
    pause: Pause = no_pause,
) -> int:
    """Deletes the listed finished objects past their phase's TTL, each only if unchanged."""
    r, now = spec.retention, dt.datetime.now(dt.UTC)
    policy = RetentionPolicy(
        r.summarized_ttl_seconds, r.empty_ttl_seconds, r.not_found_ttl_seconds, r.failed_ttl_seconds
    )
    doomed = expired(listed, summarizer=summarizer, now=now, policy=policy)
    deleted = 0
    for name, version in doomed:
        pause()
        deleted += kube.delete_summary_if_unchanged(namespace, name, version)
    return deleted


@dataclass(frozen=True)
class MarkerScanResult:
    requested: list[str]  # session ids whose SessionSummary was created or patched
    invalid: list[str]  # newly found markers that name no session, each described
    markers_only: list[str]  # sessions of sunset markers alone: nothing to summarize
    figures: str  # for the log: what was read, and what the next scan looks at again


def run_marker_scan(
    store: MemoryStore,
    spec: SessionSummarizerSpec,
    *,
    namespace: str,
    summarizer_name: str,
    watermark_ms: int,
    memory: MarkerMemory,
) -> MarkerScanResult:
    """Requests a pass for each session with an unhandled sunset marker newer than the
    watermark, ignoring idleness; skips marker-only sessions; capped per scan and per minute.
    memory: what this process did about the window's markers (the runtime's upkeep)."""
    started = time.monotonic()
    memory.bucket.per_minute = spec.sweep.marker_requests_per_minute
    rows = list(store.scan_markers(SUNSET_MARKER_TYPE, watermark_ms))
    markers, invalid = collect_markers(rows)
    new_invalid = [f"memory {i[:80]!r} {p}" for i, p in invalid.items() if i not in memory.reported]
    pending = not_acted_on(markers, memory.acted)
    stored = store.summary_states([m.session_id for m in pending]) if pending else {}
    uncovered = []
    for marker in pending:
        if covered_by_summary(marker, stored.get(marker.session_id)):
            memory.acted[marker.session_id] = marker.timestamp_ms
        else:
            uncovered.append(marker)
    budget = spec.sweep.max_sessions_per_sweep
    requested: list[str] = []
    markers_only: list[str] = []
    waiting = walked = 0
    requested_at = now_rfc3339(precise=True)
    for marker in uncovered[: WALK_FACTOR * budget]:
        if len(requested) >= budget or memory.bucket.available(time.monotonic()) < 1:
            break
        walked += 1
        if not store.has_memories_besides(marker.session_id, SUNSET_MARKER_TYPE):
            markers_only.append(marker.session_id)  # a later marker is looked at again
            memory.acted[marker.session_id] = marker.timestamp_ms
            continue
        existing = kube.get_summary(namespace, summary_object_name(marker.session_id))
        action = marker_action(marker, existing)
        if action == "request" and _ask(
            namespace, marker.session_id, "sunset-marker", summarizer_name, requested_at, existing
        ):
            memory.bucket.take(1, time.monotonic())  # a grant per request made
            requested.append(marker.session_id)
        elif action != "done":  # a pass under way, or changed since read: looked at again
            waiting += 1
            continue
        memory.acted[marker.session_id] = marker.timestamp_ms
    # Forget what the window no longer holds: those markers are never read again.
    memory.acted = {s: ts for s, ts in memory.acted.items() if s in markers}
    memory.reported = set(invalid)
    figures = (
        f"{len(rows)} markers read in {(time.monotonic() - started) * 1000:.0f} ms, {waiting} "
        f"waiting for a pass under way, {len(uncovered) - walked} left for the next tick"
    )
    return MarkerScanResult(requested, new_invalid, markers_only, figures)


def reconcile_step(
    store: MemoryStore,
    spec: SessionSummarizerSpec,
    *,
    namespace: str,
    summarizer_name: str,
    state: Reconciler,
    pause: Pause,
) -> ReconcileCycle | None:
    """One tick: ask for the passes the last walk found (maxSessionsPerSweep at most), start
    a walk when due, and read what reconcileRowsPerSecond allows since the last step (two
    ticks' worth at most), so the walk never holds up a sunset. Returns the walk it ended."""
    sweep, now_ms, monotonic = spec.sweep, int(time.time() * 1000), time.monotonic()
    if state.pending and state.last_done_ms is not None:  # set with pending, at a walk's end
        batch, state.pending = state.pending, []
        pause()  # those written or forgotten since the walk are not stale
        since = store.written_since(batch, state.last_done_ms)
        batch = [sid for sid in batch if sid not in since]
        cap = sweep.max_sessions_per_sweep
        plan = SweepPlan(candidates=batch[:cap], deferred=batch[cap:])
        applied = apply_plan(
            plan, namespace=namespace, summarizer_name=summarizer_name, pause=pause
        )
        state.pending = batch[len(batch) - applied.left :]
    interval_ms = sweep.reconcile_interval_seconds * 1000
    if state.cycle is None and (
        state.due_now or state.last_done_ms is None or now_ms - state.last_done_ms >= interval_ms
    ):
        state.cycle, state.due_now, state.last_step = ReconcileCycle(now_ms), False, monotonic
    cycle = state.cycle
    if cycle is None:
        return None
    rate = sweep.reconcile_rows_per_second
    elapsed = min(max(monotonic - state.last_step, 0.0), 2 * CONFIG.sweep_tick_seconds)
    budget = max(1, int(rate * elapsed)) if cycle.rows else min(rate, SCAN_PAGE)
    state.last_step = monotonic
    read = 0
    while read < budget:
        ask = min(SCAN_PAGE, budget - read)
        pause()
        got = cycle.fold(store.rows_from(cycle.rows, ask), now_ms)
        read += got
        if got < ask:  # the end of the collection: compare
            cycle.add_summarized(store.ledger_sessions())
            stored = store.summary_states(list(cycle.counts))
            # Where the counts agree, the ids may not (a deletion, then a late arrival).
            agree = [
                s for s, n in cycle.counts.items() if (st := stored.get(s)) and st.memory_count == n
            ]
            plan = reconcile(
                cycle,
                stored,
                now_ms=now_ms,
                idle_ms=sweep.idle_seconds * 1000,
                max_sessions=sweep.max_sessions_per_sweep,
                rows_digests=store.rows_digests(agree),
            )
            state.pending = plan.candidates + plan.deferred
            state.cycle, state.last_done_ms = None, now_ms
            cycle.uncovered = uncovered_rows(cycle.counts, stored)
            metrics.observe_reconcile(read, cycle.uncovered)
            return cycle
    metrics.observe_reconcile(read, None)
    return None
