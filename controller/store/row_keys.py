"""The sort keys of a session's rows, (timestamp, id), in flat buffers freed whole after the
pass (tuples cost more and stayed: docs/benchmarks.md), plus the sorted order (Watermark's:
timestamp, then id). Timestamps are parse_timestamp_ms's, well within int64."""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Callable, Iterator

import numpy as np

_INT64 = (-(2**63), 2**63 - 1)


class RowKeysBuilder:
    """Collects (timestamp, id, included) per row as the listing pages arrive."""

    def __init__(self) -> None:
        self._timestamps = array("q")
        self._ends = array("q")
        self._ids = bytearray()
        self._included = bytearray()

    def add(self, timestamp_ms: int, row_id: str, *, included: bool) -> None:
        self._timestamps.append(timestamp_ms)
        self._ids += row_id.encode("utf-8", "surrogatepass")  # lone surrogates JSON may carry
        self._ends.append(len(self._ids))
        self._included.append(1 if included else 0)

    def build(self) -> RowKeys:
        return RowKeys(self._timestamps, self._ends, self._ids, self._included)


class RowKeys:
    """Sorted (timestamp, id) keys; `included` marks rows not of an excluded type,
    `selected` the rows the pass reads (all until select())."""

    def __init__(
        self,
        timestamps: array[int],
        ends: array[int],
        ids: bytearray,
        included: bytearray,
    ) -> None:
        self._ends = np.frombuffer(ends, dtype=np.int64)
        self._ids = ids
        self._included = included
        self._selected = bytearray(b"\x01" * len(included))
        stamps = np.frombuffer(timestamps, dtype=np.int64)
        self._order = np.argsort(stamps, kind="stable")
        self._sorted_stamps = stamps[self._order]
        self._order_ties()

    def _order_ties(self) -> None:
        """Rows sharing a timestamp, ordered by id (a listing gives them in any order)."""
        _, firsts, counts = np.unique(self._sorted_stamps, return_index=True, return_counts=True)
        for first, count in zip(
            firsts[counts > 1].tolist(), counts[counts > 1].tolist(), strict=True
        ):
            run = self._order[first : first + count].tolist()
            self._order[first : first + count] = sorted(run, key=self._id_of)

    def _id_of(self, row: int) -> str:
        begin = int(self._ends[row - 1]) if row else 0
        return self._ids[begin : int(self._ends[row])].decode("utf-8", "surrogatepass")

    def __len__(self) -> int:
        return len(self._order)

    def __getitem__(self, position: int) -> tuple[int, str]:
        """The key at this position of the sorted order."""
        return int(self._sorted_stamps[position]), self._id_of(int(self._order[position]))

    def __iter__(self) -> Iterator[tuple[int, str]]:
        return (self[position] for position in range(len(self)))

    def included(self) -> int:
        """Rows the pass summarizes: selected and not of an excluded type."""
        return sum(1 for row in self._order if self._included[row] and self._selected[row])

    def included_ids(self) -> Iterator[str]:
        """The ids of the rows the pass summarizes, in key order."""
        for row in self._order:
            if self._included[row] and self._selected[row]:
                yield self._id_of(int(row))

    def select(self, keep: Callable[[int, str], bool]) -> int:
        """Selects the rows `keep(timestamp, id)` accepts; returns how many."""
        for key, row in zip(self, self._order, strict=True):
            self._selected[int(row)] = 1 if keep(*key) else 0
        return sum(self._selected)

    def with_selection(self) -> Iterator[tuple[int, str, bool]]:
        """(timestamp, id, selected) of every row, in key order."""
        for key, row in zip(self, self._order, strict=True):
            yield (*key, bool(self._selected[int(row)]))

    def count_upto(self, timestamp_ms: int, memory_id: str) -> int:
        """How many keys are <= (timestamp_ms, memory_id) (a watermark read from the ledger
        may lie outside int64)."""
        if timestamp_ms > _INT64[1]:
            return len(self)
        if timestamp_ms < _INT64[0]:
            return 0
        stamps = self._sorted_stamps
        low = int(np.searchsorted(stamps, timestamp_ms, side="left"))
        high = int(np.searchsorted(stamps, timestamp_ms, side="right"))
        ids = [self._id_of(int(row)) for row in self._order[low:high]]
        return low + bisect.bisect_right(ids, memory_id)
