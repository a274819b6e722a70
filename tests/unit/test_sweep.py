from collections.abc import Iterator

from controller.api import SessionSummarizerSpec
from controller.core.sweep_plan import (
    StoredSummaryState,
    collect_activity,
    is_stale,
    plan_sweep,
)
from controller.sweep import plan_from_store

NOW = 10_000_000_000
IDLE = 900_000


def act(sid: str, newest: int) -> int:
    return newest


def test_newest_timestamp_per_session_is_kept() -> None:
    rows = [("a", 5), ("b", 7), ("a", 9), ("a", 3)]
    assert collect_activity(rows, now_ms=10**12) == {"a": act("a", 9), "b": act("b", 7)}


def test_session_without_a_summary_is_stale() -> None:
    assert is_stale(act("s", 1), None, 3)


def test_memories_newer_than_the_summary_make_it_stale() -> None:
    assert is_stale(act("s", 200), StoredSummaryState(3, 100), 4)


def test_count_drift_makes_a_summary_stale() -> None:
    assert is_stale(act("s", 100), StoredSummaryState(3, 100), 5)


def test_summary_covering_every_memory_is_fresh() -> None:
    assert not is_stale(act("s", 100), StoredSummaryState(3, 100), 3)


def test_active_sessions_are_skipped_and_fresh_ones_left_alone() -> None:
    activity = {
        "idle-missing": act("idle-missing", NOW - IDLE - 1),
        "active-missing": act("active-missing", NOW - 1_000),
        "fresh": act("fresh", NOW - IDLE - 50),
    }
    stored = {"fresh": StoredSummaryState(2, NOW - IDLE - 50)}
    plan = plan_sweep(activity, stored, {"fresh": 2}, now_ms=NOW, idle_ms=IDLE, max_sessions=10)
    assert plan.candidates == ["idle-missing"]
    assert plan.still_active == ["active-missing"]
    assert plan.fresh == ["fresh"]


def test_candidates_are_newest_first_and_capped() -> None:
    activity = {f"s{i}": act(f"s{i}", NOW - IDLE - 1000 * i) for i in range(5)}
    plan = plan_sweep(activity, {}, {}, now_ms=NOW, idle_ms=IDLE, max_sessions=2)
    assert plan.candidates == ["s0", "s1"]
    assert plan.deferred == ["s2", "s3", "s4"]
    assert plan.found == 5


def test_watermark_stays_behind_deferred_and_active_sessions() -> None:
    activity = {f"s{i}": act(f"s{i}", NOW - IDLE - 1000 * i) for i in range(3)}
    activity["busy"] = act("busy", NOW - 10)
    plan = plan_sweep(activity, {}, {}, now_ms=NOW, idle_ms=IDLE, max_sessions=1)
    # The deferred s1 and s2 must be rescanned: the watermark is below their newest memory.
    assert plan.next_watermark_ms < activity["s2"]
    # The active session is rescanned too: the watermark never passes now - idle.
    assert plan.next_watermark_ms <= NOW - IDLE < activity["busy"]


def test_watermark_advances_to_the_idle_horizon_when_nothing_is_left() -> None:
    plan = plan_sweep(
        {"a": act("a", NOW - IDLE - 5)}, {}, {}, now_ms=NOW, idle_ms=IDLE, max_sessions=10
    )
    assert plan.next_watermark_ms == NOW - IDLE


class _EmptyStore:
    """No memories and no summaries; remembers where the scan started."""

    since: int | None = None

    def scan_appended(self, cursor: object) -> tuple[list[tuple[str, int]], None, bool]:
        return [], None, True

    def scan_since(self, since: int) -> Iterator[tuple[str, int]]:
        self.since = since
        return iter(())

    def summary_states(self, session_ids: list[str]) -> dict[str, object]:
        return {}


def test_first_sweep_starts_at_the_lookback_window() -> None:
    store = _EmptyStore()
    spec = SessionSummarizerSpec.model_validate({"sweep": {"lookbackDays": 30}})
    plan_from_store(store, spec, watermark_ms=None, now_ms=NOW)  # type: ignore[arg-type]
    assert store.since == NOW - 30 * 86_400_000
