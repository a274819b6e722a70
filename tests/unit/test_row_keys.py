"""RowKeys: a session's (timestamp, id) sort keys in flat buffers must order, count and
select exactly as the tuples they replace (memory_sort_key, Watermark.after), for any
timestamps and ids a Chroma row can carry."""

from __future__ import annotations

import bisect

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.store.session_listing import RowKeys

JS_DATE_MAX_MS = 8_640_000_000_000_000  # a JavaScript Date's range, in ms

# Timestamps as parse_timestamp_ms returns them: usually epoch milliseconds, but any int a
# JavaScript Date holds.
timestamps = st.one_of(
    st.integers(min_value=1_700_000_000_000, max_value=1_700_000_000_020),  # many ties
    st.integers(min_value=-JS_DATE_MAX_MS, max_value=JS_DATE_MAX_MS),
)
# A watermark read from the ledger: any int.
watermarks = st.one_of(timestamps, st.integers(min_value=-(10**40), max_value=10**40))
# Any str a JSON listing can hold, lone surrogates included.
row_ids = st.text(st.characters(codec=None, exclude_categories=()), max_size=12)
rows = st.lists(st.tuples(timestamps, row_ids, st.booleans()), max_size=60)


def built(listed: list[tuple[int, str, bool]]) -> RowKeys:
    builder = RowKeys()
    for timestamp, row_id, included in listed:
        builder.add(timestamp, row_id, included=included)
    return builder.build()


def unique_ids(listed: list[tuple[int, str, bool]]) -> list[tuple[int, str, bool]]:
    """Chroma ids are unique within a collection."""
    seen: dict[str, tuple[int, str, bool]] = {}
    for row in listed:
        seen.setdefault(row[1], row)
    return list(seen.values())


@settings(max_examples=300)
@given(rows)
def test_keys_are_in_memory_sort_key_order(listed: list[tuple[int, str, bool]]) -> None:
    listed = unique_ids(listed)
    keys = built(listed)
    assert len(keys) == len(listed)
    assert list(keys) == sorted((t, i) for t, i, _ in listed)


@settings(max_examples=300)
@given(rows, st.lists(st.tuples(watermarks, row_ids), max_size=8))
def test_count_upto_is_bisect_right(
    listed: list[tuple[int, str, bool]], queries: list[tuple[int, str]]
) -> None:
    listed = unique_ids(listed)
    keys = built(listed)
    expected = sorted((t, i) for t, i, _ in listed)
    # Queries at every key too: a watermark is always one of the rows.
    for query in [*queries, *expected]:
        assert keys.count_upto(*query) == bisect.bisect_right(expected, query)


@settings(max_examples=300)
@given(rows)
def test_included_ids_in_order(listed: list[tuple[int, str, bool]]) -> None:
    listed = unique_ids(listed)
    keys = built(listed)
    expected = [i for t, i, keep in sorted(listed, key=lambda r: (r[0], r[1])) if keep]
    assert list(keys.included_ids()) == expected
    assert keys.included() == len(expected)


def test_fifty_thousand_rows_take_flat_buffers() -> None:
    """The point of the class: a 50,000-row session's keys, ties and all, in a few MB."""
    builder = RowKeys()
    for n in range(50_000):
        builder.add(1_700_000_000_000 + (n * 7919) % 40_000, f"row-{n:06d}", included=n % 3 > 0)
    keys = builder.build()
    assert keys.included() == sum(1 for n in range(50_000) if n % 3 > 0)
    ordered = list(keys)
    assert ordered == sorted(ordered)
    assert keys.count_upto(*ordered[12_345]) == 12_346
