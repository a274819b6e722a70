"""Refresh by size: an active session is summarized once it grew past the threshold, and
never more often than the minimum interval; below the threshold it is left alone."""

from __future__ import annotations

from typing import Any

from controller.api import SessionSummarizerSpec
from controller.core.sweep_plan import SweepPlan, may_refresh, plan_refresh, plan_sweep
from controller.sweep import plan_from_store

NOW = 10_000_000_000
AFTER_TOKENS, MIN_INTERVAL_MS = 1_000, 600_000


def active_plan(*sids: str, stale_idle: int = 0, cap: int = 50) -> SweepPlan:
    activity = dict.fromkeys(sids, NOW - 1_000)
    for i in range(stale_idle):
        activity[f"idle-{i}"] = NOW - 3_600_000 - i
    return plan_sweep(activity, {}, {}, now_ms=NOW, idle_ms=900_000, max_sessions=cap)


def test_an_active_session_grown_past_the_threshold_is_refreshed() -> None:
    plan = active_plan("busy")
    planned = plan_refresh(plan, {"busy": 1_001}, after_tokens=AFTER_TOKENS, max_sessions=50)
    assert planned.refresh == ["busy"]
    assert planned.still_active == [] and planned.found == 1


def test_below_the_threshold_an_active_session_is_left_alone() -> None:
    plan = active_plan("quiet")
    planned = plan_refresh(plan, {"quiet": 1_000}, after_tokens=AFTER_TOKENS, max_sessions=50)
    assert planned.refresh == [] and planned.still_active == ["quiet"]


def refreshed(session_id: str, tokens: int, summarized_at_ms: int | None) -> bool:
    """As the sweep decides: measured only when may_refresh lets it, then plan_refresh."""
    if not may_refresh(summarized_at_ms, MIN_INTERVAL_MS, NOW):
        return False
    plan = plan_refresh(
        active_plan(session_id), {session_id: tokens}, after_tokens=AFTER_TOKENS, max_sessions=50
    )
    return plan.refresh == [session_id]


def test_never_more_often_than_the_minimum_interval() -> None:
    assert not refreshed("busy", 50_000, summarized_at_ms=NOW - 599_999)
    assert refreshed("busy", 50_000, summarized_at_ms=NOW - 600_000)


def test_a_session_without_a_summary_is_refreshed_on_size_alone() -> None:
    assert refreshed("new", 1_500, None)


class _ActiveStore:
    """Memories of active sessions and no summary; fails the test if a session is measured."""

    def scan_appended(self, cursor: object) -> tuple[list[tuple[str, int]], None, bool]:
        return [("busy", NOW - 1_000), ("other", NOW - 2_000)], None, True

    def scan_since(self, since: int) -> list[tuple[str, int]]:
        return []

    def summary_states(self, session_ids: list[str]) -> dict[str, object]:
        return {}

    def summaries(self) -> None:
        raise AssertionError("refreshing is off: no session is measured")


def test_zero_turns_refreshing_off() -> None:
    """refreshAfterTokens 0: no active session is measured (no reads) nor refreshed."""
    spec = SessionSummarizerSpec.model_validate({"sweep": {"refreshAfterTokens": 0}})
    store: Any = _ActiveStore()
    found = plan_from_store(store, spec, watermark_ms=NOW, now_ms=NOW)
    assert found.plan.refresh == [] and found.plan.still_active == ["busy", "other"]


def test_refreshes_share_the_per_sweep_cap_with_idle_stale_sessions_most_grown_first() -> None:
    plan = active_plan("a", "b", "c", stale_idle=2, cap=4)
    tokens = {"a": 2_000, "b": 9_000, "c": 5_000}
    planned = plan_refresh(plan, tokens, after_tokens=AFTER_TOKENS, max_sessions=4)
    assert planned.refresh == ["b", "c"]
    assert planned.still_active == ["a"]  # measured again by a later sweep
