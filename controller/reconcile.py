"""The reconciliation's I/O (controller.core.reconcile_plan decides): a paced walk over the
whole memory collection on the sweep's timer, counting each session's rows against its
summary, and asking for a pass where they differ. The backstop for what the sweep's scans
cannot see; it reads a bounded number of rows per tick and never holds up a sunset.
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.api import SessionSummarizerSpec
from controller.config import CONFIG
from controller.core.reconcile_plan import ReconcileCycle, reconcile, uncovered_rows
from controller.core.sweep_plan import SweepPlan
from controller.core.waiting import Pause
from controller.store.memory_store import SCAN_PAGE, MemoryStore
from controller.sweep import apply_plan
from controller.upkeep_state import Reconciler


@dataclass(frozen=True)
class ReconcileResult:
    read: int  # rows walked this step
    finished: ReconcileCycle | None = None  # the walk this step completed, if any
    uncovered: int = 0  # rows no summary accounts for, found by the finished walk
    sessions: int = 0  # sessions the finished walk found needing a pass


def reconcile_step(
    store: MemoryStore,
    spec: SessionSummarizerSpec,
    *,
    namespace: str,
    summarizer_name: str,
    now_ms: int,
    monotonic: float,
    state: Reconciler,
    pause: Pause,
) -> ReconcileResult:
    """One tick: ask for the passes the last walk found (maxSessionsPerSweep at most), start
    a walk when due, and read what reconcileRowsPerSecond allows since the last step (two
    ticks' worth at most), so the walk never holds up a sunset."""
    sweep = spec.sweep
    if state.pending:
        batch, state.pending = state.pending, []
        if state.last_done_ms is not None:  # written or forgotten since the walk: not stale
            pause()
            since = store.written_since([c.session_id for c in batch], state.last_done_ms)
            batch = [c for c in batch if c.session_id not in since]
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
        return ReconcileResult(0)
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
            uncovered = uncovered_rows(cycle.counts, stored)
            return ReconcileResult(read, cycle, uncovered, len(state.pending))
    return ReconcileResult(read)
