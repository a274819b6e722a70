"""Refresh by size: an active session is summarized once it grew past the threshold, and
never more often than the minimum interval; below the threshold it is left alone."""

from __future__ import annotations

from controller.core.sweep_plan import (
    Candidate,
    Growth,
    RefreshPolicy,
    SweepPlan,
    may_refresh,
    plan_refresh,
    plan_sweep,
)

NOW = 10_000_000_000
POLICY = RefreshPolicy(after_tokens=1_000, min_interval_ms=600_000)


def active_plan(*sids: str, stale_idle: int = 0, cap: int = 50) -> SweepPlan:
    activity = dict.fromkeys(sids, NOW - 1_000)
    for i in range(stale_idle):
        activity[f"idle-{i}"] = NOW - 3_600_000 - i
    return plan_sweep(activity, {}, {}, now_ms=NOW, idle_ms=900_000, max_sessions=cap)


def test_an_active_session_grown_past_the_threshold_is_refreshed() -> None:
    plan = active_plan("busy")
    planned = plan_refresh(
        plan,
        [Growth("busy", NOW - 1_000, 1_001)],
        POLICY,
        max_sessions=50,
    )
    assert planned.refresh == [Candidate("busy", NOW - 1_000, "refresh")]
    assert planned.still_active == [] and planned.found == 1


def test_below_the_threshold_an_active_session_is_left_alone() -> None:
    plan = active_plan("quiet")
    planned = plan_refresh(
        plan,
        [Growth("quiet", NOW - 1_000, 1_000)],
        POLICY,
        max_sessions=50,
    )
    assert planned.refresh == [] and planned.still_active == ["quiet"]


def refreshed(growth: Growth, summarized_at_ms: int | None, policy: RefreshPolicy = POLICY) -> bool:
    """As the sweep decides: measured only when may_refresh lets it, then plan_refresh."""
    if not may_refresh(summarized_at_ms, policy, NOW):
        return False
    plan = plan_refresh(active_plan(growth.session_id), [growth], policy, max_sessions=50)
    return [c.session_id for c in plan.refresh] == [growth.session_id]


def test_never_more_often_than_the_minimum_interval() -> None:
    grown = Growth("busy", NOW, 50_000)
    assert not refreshed(grown, summarized_at_ms=NOW - 599_999)
    assert refreshed(grown, summarized_at_ms=NOW - 600_000)


def test_a_session_without_a_summary_is_refreshed_on_size_alone() -> None:
    assert refreshed(Growth("new", NOW, 1_500), None)


def test_zero_turns_refreshing_off() -> None:
    off = RefreshPolicy(after_tokens=0, min_interval_ms=0)
    assert not refreshed(Growth("busy", NOW, 10**9), None, off)


def test_refreshes_share_the_per_sweep_cap_with_idle_stale_sessions_most_grown_first() -> None:
    plan = active_plan("a", "b", "c", stale_idle=2, cap=4)
    growth = [Growth(s, NOW, t) for s, t in (("a", 2_000), ("b", 9_000), ("c", 5_000))]
    planned = plan_refresh(plan, growth, POLICY, max_sessions=4)
    assert [c.session_id for c in planned.refresh] == ["b", "c"]
    assert planned.still_active == ["a"]  # measured again by a later sweep
