"""What a summary covers, for generated sessions and generated late arrivals: the buckets
stay bounded, find every row that landed behind the watermark (and only the ranges it
landed in), and name one or two late rows of a bucket exactly."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.core.coverage import (
    MAX_BUCKETS,
    Coverage,
    Dirty,
    PriorCoverage,
    build,
    digest,
    digest_text,
    extend,
    missing_rows,
    to_reread,
)
from controller.core.sweep_plan import ReconcileCycle, StoredSummaryState, reconcile, uncovered_rows


def dirty_buckets(stored: Coverage, covered_keys: list[tuple[int, str]]) -> list[Dirty]:
    """The ranges to_reread gives for a prior that covers `stored`."""
    return to_reread(PriorCoverage((0, ""), stored), covered_keys, len(covered_keys))


KEYS = st.lists(
    st.tuples(st.integers(-(10**13), 10**13), st.text(min_size=1, max_size=12)),
    unique_by=lambda k: k[1],
    max_size=600,
)


@given(keys=KEYS, max_buckets=st.integers(1, 40))
@settings(max_examples=150, deadline=None)
def test_a_coverage_is_bounded_counts_every_row_and_keeps_a_timestamp_in_one_bucket(
    keys: list[tuple[int, str]], max_buckets: int
) -> None:
    coverage = build(keys, max_buckets)
    assert len(coverage.buckets) <= max_buckets
    assert coverage.count == len(keys)
    starts = [b.start for b in coverage.buckets]
    assert starts == sorted(set(starts))
    if keys:
        assert starts[0] == min(ts for ts, _ in keys)
    assert Coverage.from_json(coverage.to_json()) == coverage
    # The same rows in another order give the same coverage.
    assert build(list(reversed(keys)), max_buckets) == coverage


@st.composite
def late_arrivals(draw: st.DrawFn) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(rows a summary covered, rows that landed later at or before its newest row)."""
    covered = draw(KEYS.filter(bool))
    newest = max(covered)
    taken = {row_id for _, row_id in covered}
    late = draw(
        st.lists(
            st.tuples(
                st.integers(-(10**13), newest[0]),
                st.text(min_size=1, max_size=12).filter(lambda r: r not in taken),
            ),
            unique_by=lambda k: k[1],
            max_size=8,
        )
    )
    return covered, [k for k in late if k <= newest]


@given(case=late_arrivals())
@settings(max_examples=200, deadline=None)
def test_every_late_row_falls_in_a_dirty_range_and_an_untouched_range_stays_clean(
    case: tuple[list[tuple[int, str]], list[tuple[int, str]]],
) -> None:
    covered, late = case
    stored = build(covered)
    dirty = dirty_buckets(stored, covered + late)
    for ts, row_id in late:
        assert any(d.holds(ts) for d in dirty), (ts, row_id)
    assert sum(d.uncovered for d in dirty) == len(late)
    if not late:
        assert dirty == []
    # Each dirty range names its late rows exactly when it has one or two of them.
    for d in dirty:
        mine = [row_id for ts, row_id in late if d.holds(ts)]
        named = missing_rows(d, covered + late)
        if len(mine) <= 2:
            assert named is not None and sorted(named) == sorted(mine)


@given(case=late_arrivals(), gone=st.data())
@settings(max_examples=100, deadline=None)
def test_a_deleted_row_makes_its_range_dirty_too(
    case: tuple[list[tuple[int, str]], list[tuple[int, str]]], gone: st.DataObject
) -> None:
    covered, _ = case
    removed = gone.draw(st.sampled_from(covered))
    now = [k for k in covered if k != removed]
    dirty = dirty_buckets(build(covered), now)
    assert any(d.holds(removed[0]) for d in dirty)


def test_a_row_older_than_every_bucket_is_its_own_dirty_range() -> None:
    stored = build([(100, "a"), (200, "b")])
    dirty = dirty_buckets(stored, [(5, "old"), (100, "a"), (200, "b")])
    assert [(d.start, d.uncovered) for d in dirty] == [(None, 1)]
    assert missing_rows(dirty[0], [(5, "old"), (100, "a"), (200, "b")]) == ["old"]


def test_the_encoding_is_bounded_whatever_the_sessions_size() -> None:
    small = build([(i * 1000, f"id-{i}") for i in range(1_000)])
    large = build([(i * 1000, f"id-{i}") for i in range(50_000)])
    assert len(small.buckets) <= MAX_BUCKETS and len(large.buckets) <= MAX_BUCKETS
    assert len(small.to_json()) < 70 * MAX_BUCKETS and len(large.to_json()) < 70 * MAX_BUCKETS


@pytest.mark.parametrize(
    "text", ["{}", '{"v": 2, "b": []}', '{"v": 1, "b": [[2, 1, "x", "1"], [1, 1, "1", "1"]]}']
)
def test_a_coverage_this_version_cannot_read_is_refused(text: str) -> None:
    with pytest.raises((ValueError, KeyError)):
        Coverage.from_json(text)


def test_an_earlier_versions_row_rereads_all_behind_its_watermark_once_it_miscounts() -> None:
    keys = [(1, "a"), (2, "b"), (3, "c")]
    counted = PriorCoverage((3, "c"), None, 3)
    assert to_reread(counted, keys, 3) == []
    short = PriorCoverage((3, "c"), None, 2)  # one landed behind it since
    (everything,) = to_reread(short, keys, 3)
    assert everything.holds(-(10**15)) and everything.holds(3)
    assert to_reread(PriorCoverage(None), keys, 3) == []


# -- the reconciliation's decisions ------------------------------------------------------------


def test_a_walk_counts_every_row_and_asks_for_sessions_whose_count_differs() -> None:
    cycle = ReconcileCycle(started_ms=0)
    assert (
        cycle.fold(
            [
                ("a", 1_000, "a1", None),
                ("a", 5_000, "a2", None),
                ("b", None, "b1", None),
                ("c", 2_000, "c1", None),
            ],
            10**9,
        )
        == 4
    )
    assert cycle.fold([("a", 3_000, "a3", None), ("d", 4_000, "d1", None)], 10**9) == 2
    assert cycle.rows == 6
    # b's row has no time: counted (memoryCount counts every row), dating nothing.
    assert cycle.counts == {"a": 3, "b": 1, "c": 1, "d": 1}
    stored = {
        "a": StoredSummaryState(memory_count=2, timestamp_ms=5_000),  # one landed late
        "b": StoredSummaryState(memory_count=1, timestamp_ms=1),  # as summarized
        "c": StoredSummaryState(memory_count=1, timestamp_ms=2_000),
        # d: never summarized
    }
    plan = reconcile(cycle, stored, now_ms=10**9, idle_ms=1_000, max_sessions=10)
    assert sorted(plan.candidates) == ["a", "d"]  # a by its count (its time is older), d missing
    assert uncovered_rows(cycle.counts, stored) == 1 + 1


def test_a_walk_leaves_active_sessions_to_the_sweep() -> None:
    cycle = ReconcileCycle(started_ms=0)
    cycle.fold([("busy", 9_999_000, "b1", None)], 10_000_000)
    plan = reconcile(cycle, {}, now_ms=10_000_000, idle_ms=60_000, max_sessions=10)
    assert plan.candidates == [] and plan.still_active == ["busy"]


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 4), max_size=6),
    st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 4), max_size=6),
)
def test_a_walk_asks_again_for_every_summary_whose_memories_are_all_gone(
    walked: dict[str, int], summarized: dict[str, int]
) -> None:
    """Sessions with a ledger entry and no row left count 0 rows: those whose summary
    counts some are asked again (the pass drops what their memories said); the others
    are judged as before."""
    cycle = ReconcileCycle(started_ms=0)
    rows = [(s, 1_000 + k, f"{s}{k}", None) for s, n in walked.items() for k in range(n)]
    cycle.fold(rows, 10**9)
    cycle.add_summarized(summarized)
    stored = {
        s: StoredSummaryState(memory_count=n, timestamp_ms=10**6) for s, n in summarized.items()
    }
    plan = reconcile(cycle, stored, now_ms=10**9, idle_ms=1_000, max_sessions=10)
    asked = set(plan.candidates)
    for session, count in summarized.items():
        live = walked.get(session, 0)
        assert (session in asked) == (count != live), (session, count, live)


# -- a pass that reads only what is new ----------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 50), st.text(min_size=1, max_size=6)), unique_by=lambda k: k[1]
    ),
    st.lists(st.integers(1, 400), max_size=12),
    st.integers(1, 16),
)
def test_a_coverage_grown_pass_by_pass_covers_exactly_the_rows_a_full_listing_would(
    first: list[tuple[int, str]], steps: list[int], max_buckets: int
) -> None:
    """Rows added after the watermark, pass after pass, grow the coverage (extend) to one
    that a full listing finds clean, that counts every row and stays bounded; and the
    digest of the ids alone tells the rows apart from a set with one deleted."""
    keys = sorted(first)
    coverage = build(keys, max_buckets)
    for n, step in enumerate(steps):
        mark = max(keys) if keys else (0, "")
        new = [(mark[0] + step % 3, f"new-{n}-{i}") for i in range(step % 7 + 1)]
        new = [k for k in new if k > mark]
        coverage = extend(coverage, new, mark[0], max_buckets) if keys else build(new, max_buckets)
        keys = sorted(keys + new)
    assert coverage.count == len(keys) and len(coverage.buckets) <= max_buckets
    assert dirty_buckets(coverage, keys) == []
    ids = [row_id for _, row_id in keys]
    assert digest(ids) == digest(reversed(ids))
    if ids:
        assert digest(ids[1:]) != digest(ids)
        assert digest([*ids[1:], "late-one"]) != digest(ids)  # a deletion and an arrival


def test_a_walk_finds_a_deletion_then_a_late_arrival_that_leave_the_count_as_it_was() -> None:
    """The count agrees with memoryCount; the ids do not (one deleted, one landed late):
    the ledger's rowsDigest of the last write tells them apart."""
    written = digest_text(digest(["m1", "m2", "m3"]))
    now = digest_text(digest(["m1", "m3", "late"]))
    stored = {"s": StoredSummaryState(memory_count=3, timestamp_ms=5_000)}
    for ids, expected in ((["m1", "m2", "m3"], []), (["m1", "m3", "late"], ["s"])):
        cycle = ReconcileCycle(started_ms=0)
        cycle.fold([("s", 1_000 * (i + 1), row_id, None) for i, row_id in enumerate(ids)], 10**9)
        plan = reconcile(
            cycle, stored, now_ms=10**9, idle_ms=1_000, max_sessions=5,
            rows_digests={"s": written},
        )  # fmt: skip
        assert plan.candidates == expected, ids
    assert now != written
    # Without a digest (a write of an earlier version), the count alone decides.
    plan = reconcile(cycle, stored, now_ms=10**9, idle_ms=1_000, max_sessions=5)
    assert plan.candidates == []
