"""Memory times in every unit and from bad clocks (docs/summaries.md, "Memory times"): each
epoch unit is read by its magnitude, and a time no clock could have given neither keeps its
session active nor sorts its summary first."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.core.memories import (
    FUTURE_TOLERANCE_MS,
    PAST_FLOOR_MS,
    memory_from_row,
    newest_time,
    parse_timestamp_ms,
    placed,
    trusted_time,
)
from controller.core.summary import StructuredSummary
from controller.core.summary_row import to_chroma_metadata
from controller.core.sweep_plan import (
    ReconcileCycle,
    SunsetMarker,
    collect_activity,
    marker_action,
    plan_sweep,
    reconcile,
)
from tests.unit.test_sunset_markers import summary_object

NOW = 1_764_000_000_000  # 2025-11-24, epoch ms
HOUR = 3_600_000
# Every instant each unit reads (docs): March 1973 up to the year 5138.
INSTANTS = st.integers(10**11, 10**14 - 1)


def as_stored(value: int, text: bool) -> int | str:
    return str(value) if text else value


@given(ms=INSTANTS, sub=st.integers(0, 999), text=st.booleans())
@settings(max_examples=400)
def test_every_epoch_unit_reads_as_the_same_millisecond(ms: int, sub: int, text: bool) -> None:
    assert parse_timestamp_ms(as_stored(ms, text)) == ms
    assert parse_timestamp_ms(as_stored(ms * 1000 + sub, text)) == ms  # microseconds
    assert parse_timestamp_ms(as_stored(ms * 1_000_000 + sub * 1000 + sub, text)) == ms  # ns
    seconds = ms // 1000
    assert parse_timestamp_ms(as_stored(seconds, text)) == seconds * 1000


@given(ms=INSTANTS)
def test_float_micro_and_nanoseconds_read_within_a_millisecond(ms: int) -> None:
    assert abs(parse_timestamp_ms(float(ms) * 1000) - ms) <= 1  # type: ignore[operator]
    assert abs(parse_timestamp_ms(float(ms) * 1e6) - ms) <= 1  # type: ignore[operator]
    assert parse_timestamp_ms(ms / 1000) == ms  # float seconds keep their milliseconds


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (99_999_999_999, 99_999_999_999_000),  # the largest seconds: the year 5138
        (100_000_000_000, 100_000_000_000),  # the smallest milliseconds: March 1973
        (99_999_999_999_999, 99_999_999_999_999),  # the largest milliseconds
        (100_000_000_000_000, 100_000_000_000),  # the smallest microseconds
        (1_764_000_000_123_456, 1_764_000_000_123),  # time.time_ns() // 1000
        ("1764000000123456789", 1_764_000_000_123),  # time.time_ns(), as text
        (1_764_000_000_123_456_789, 1_764_000_000_123),  # exact: past a float's 53 bits
        (99_999_999_999_999_999_999, 99_999_999_999_999),  # the largest nanoseconds
        (-1_700_000_000, -1_700_000_000_000),  # before 1970, in seconds
    ],
)
def test_units_are_told_apart_at_the_documented_limits(value: object, expected: int) -> None:
    assert parse_timestamp_ms(value) == expected


@pytest.mark.parametrize(
    "value", [10**20, "100000000000000000000", "1.7e12", "Mon, 24 Nov 2025 12:00:00 GMT"]
)
def test_numbers_past_nanoseconds_and_other_texts_are_unreadable(value: object) -> None:
    assert parse_timestamp_ms(value) is None
    assert memory_from_row("m", "doc", {"sessionId": "s", "timestamp": value}) is None


def test_the_future_tolerance_and_the_past_floor_are_exact() -> None:
    assert trusted_time(NOW + FUTURE_TOLERANCE_MS, NOW)
    assert not trusted_time(NOW + FUTURE_TOLERANCE_MS + 1, NOW)
    assert trusted_time(PAST_FLOOR_MS, NOW) and not trusted_time(PAST_FLOOR_MS - 1, NOW)


BAD_CLOCKS = st.one_of(
    st.integers(NOW + FUTURE_TOLERANCE_MS + 1, 10**14 - 1),
    st.integers(-(10**14), PAST_FLOOR_MS - 1),
)


@given(bad=BAD_CLOCKS, idle_for=st.integers(HOUR, 30 * 24 * HOUR))
def test_a_bad_clock_never_keeps_an_idle_session_active(bad: int, idle_for: int) -> None:
    rows = [("s", NOW - idle_for), ("s", bad)]
    plan = plan_sweep(
        collect_activity(rows, now_ms=NOW), {}, {}, now_ms=NOW, idle_ms=HOUR, max_sessions=5
    )
    assert plan.candidates == ["s"] and plan.still_active == []
    cycle = ReconcileCycle(started_ms=NOW)
    cycle.fold([(sid, ts, f"m{i}", None) for i, (sid, ts) in enumerate(rows)], NOW)
    walked = reconcile(cycle, {}, now_ms=NOW, idle_ms=HOUR, max_sessions=5)
    assert walked.candidates == ["s"]


def test_a_time_within_the_tolerance_still_keeps_its_session_active() -> None:
    rows = [("s", NOW - 2 * HOUR), ("s", NOW + FUTURE_TOLERANCE_MS)]
    plan = plan_sweep(
        collect_activity(rows, now_ms=NOW), {}, {}, now_ms=NOW, idle_ms=HOUR, max_sessions=5
    )
    assert plan.still_active == ["s"]


def row_timestamp(summary: StructuredSummary, summarized_at_ms: int) -> object:
    """The row's `timestamp` key (neo's boot read fails without one)."""
    meta = to_chroma_metadata(summary, writer="w", trigger="t", summarized_at_ms=summarized_at_ms)
    return meta["timestamp"]


@pytest.mark.parametrize("early", [1, 1000, 60_000])
def test_a_future_time_one_step_past_the_tolerance_counts_as_now(early: int) -> None:
    summary = StructuredSummary(
        session_id="s", title="t", last_memory_at_ms=NOW + FUTURE_TOLERANCE_MS
    )
    assert row_timestamp(summary, NOW) == NOW + FUTURE_TOLERANCE_MS
    late = summary.model_copy(update={"last_memory_at_ms": NOW + FUTURE_TOLERANCE_MS + early})
    assert row_timestamp(late, NOW) == NOW


@given(bad=BAD_CLOCKS, written=st.integers(NOW - HOUR, NOW))
def test_a_bad_clock_never_pins_the_summary_first_or_last_in_neos_listing(
    bad: int, written: int
) -> None:
    summary = StructuredSummary(
        session_id="s", title="t", first_memory_at_ms=NOW - HOUR, last_memory_at_ms=bad
    )
    assert row_timestamp(summary, written) == written


@given(
    good=st.lists(st.integers(PAST_FLOOR_MS, NOW + FUTURE_TOLERANCE_MS), max_size=3),
    bad=st.lists(st.one_of(st.none(), BAD_CLOCKS), max_size=3),
)
def test_a_tombstone_dates_its_memories_by_the_newest_a_bad_clocks_counting_as_now(
    good: list[int], bad: list[int | None]
) -> None:
    """A forget's tombstone (lastMemoryAt): the newest memory time it covers, never a bad
    clock's (which would pin every later memory of the session as older) nor none."""
    as_now = [NOW for b in bad if b is not None]
    assert newest_time([*good, *bad], NOW) == max(good + as_now, default=NOW)


def test_a_future_time_in_the_status_never_marks_a_later_sunset_marker_as_seen() -> None:
    """status.lastMemoryAt is the newest row a pass placed in the session's order: a bad
    clock's time is not placed (memories.placed), so a marker written later is still asked
    for."""
    bad = NOW + 365 * 24 * HOUR
    assert not placed(bad, NOW) and placed(NOW + FUTURE_TOLERANCE_MS, NOW)
    marker = SunsetMarker("s", NOW + HOUR)
    obj = summary_object(in_flight=False, last_memory_at_ms=NOW)
    assert marker_action(marker, obj) == "request"
