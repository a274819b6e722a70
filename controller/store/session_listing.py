"""A session as one pass lists it: every row's key, which rows the pass reads
(controller.core.coverage), and those memories, read batch by batch."""

from __future__ import annotations

import bisect
import functools
import itertools
import time
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import numpy as np
from chromadb.api.models.Collection import Collection

from controller.core.coverage import (
    Bucket,
    Coverage,
    PriorCoverage,
    digest,
    extend,
    id_hash,
    to_reread,
)
from controller.core.coverage import build as coverage_of
from controller.core.memories import (
    Memory,
    Watermark,
    memory_from_row,
    memory_sort_key,
    placed,
    trusted_time,
)
from controller.core.visibility import SessionSources
from controller.redaction import PassRedaction
from controller.store.errors import guard

LIST_PAGE = 1000  # one round trip for most sessions; 2,000 kept more heap (docs/benchmarks.md)
GET_BATCH = 500
ID_PAGE = 5000  # ids only: a few bytes a row
SMALL_SESSION = 50  # rows: listed whole in one request (list_all)
NAMED_UNTRUSTED = 10
T = TypeVar("T")
Listed = tuple[str, Mapping[str, Any], str | None]  # (id, metadata, document) of a row read
_INT64 = (-(2**63), 2**63 - 1)


class RowKeys:
    """A session's (timestamp, id) keys in flat buffers (tuples cost more and stayed:
    docs/benchmarks.md), sorted by build(); `included`: not excluded, `selected`: read."""

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
        """Sorts the keys added (timestamps are parse_timestamp_ms's, within int64)."""
        self._end_at = np.frombuffer(self._ends, dtype=np.int64)
        self._selected = bytearray(b"\x01" * len(self._included))
        stamps = np.frombuffer(self._timestamps, dtype=np.int64)
        del self._timestamps  # the sorted copy is kept instead
        self._order = np.argsort(stamps, kind="stable")
        self._sorted_stamps = stamps[self._order]
        # Rows sharing a timestamp, ordered by id (a listing gives them in any order).
        _, firsts, counts = np.unique(self._sorted_stamps, return_index=True, return_counts=True)
        ties = counts > 1
        for first, count in zip(firsts[ties].tolist(), counts[ties].tolist(), strict=True):
            run = self._order[first : first + count].tolist()
            self._order[first : first + count] = sorted(run, key=self._id_of)
        return self

    def _id_of(self, row: int) -> str:
        begin = int(self._end_at[row - 1]) if row else 0
        return self._ids[begin : int(self._end_at[row])].decode("utf-8", "surrogatepass")

    def __len__(self) -> int:
        return len(self._order)

    def __iter__(self) -> Iterator[tuple[int, str]]:
        for stamp, row in zip(self._sorted_stamps.tolist(), self._order.tolist(), strict=True):
            yield stamp, self._id_of(row)

    def included(self) -> int:
        return sum(1 for row in self._order if self._included[row] and self._selected[row])

    def included_ids(self) -> Iterator[str]:
        for row in self._order:
            if self._included[row] and self._selected[row]:
                yield self._id_of(int(row))

    def select(self, keep: Callable[[int, str], bool]) -> int:
        for key, row in zip(self, self._order, strict=True):
            self._selected[int(row)] = 1 if keep(*key) else 0
        return sum(self._selected)

    def with_selection(self) -> Iterator[tuple[int, str, bool]]:
        for key, row in zip(self, self._order, strict=True):
            yield (*key, bool(self._selected[int(row)]))

    def count_upto(self, timestamp_ms: int, memory_id: str) -> int:
        """How many keys are <= (timestamp_ms, memory_id), which may lie outside int64."""
        if timestamp_ms > _INT64[1]:
            return len(self)
        if timestamp_ms < _INT64[0]:
            return 0
        low = int(np.searchsorted(self._sorted_stamps, timestamp_ms, side="left"))
        high = int(np.searchsorted(self._sorted_stamps, timestamp_ms, side="right"))
        ids = [self._id_of(int(row)) for row in self._order[low:high]]
        return low + bisect.bisect_right(ids, memory_id)


@dataclass(frozen=True)
class SessionRows:
    """A session as listed for one pass; memories read lazily (a session may hold 50,000)."""

    total: int  # every row carrying the sessionId, whatever its type or time (memoryCount)
    newest: Watermark | None  # the newest row of all, the pass's watermark
    keys: RowKeys  # (timestamp, id) of every parsed row, sorted; `selected`: read this pass
    included: int  # how many of the selected rows the pass summarizes (not excluded)
    memories: Callable[[], Iterator[Memory]]  # the included rows in order, then new untimed
    sources: SessionSources = field(default_factory=SessionSources)  # who wrote the rows
    selected: int = 0  # rows read this pass, excluded types too
    late: int = 0  # rows at or before the prior's watermark it does not cover (landed late)
    prior_key: tuple[int, str] | None = None  # the prior's watermark
    digest: Bucket = field(default_factory=lambda: Bucket(0))  # every row's id (coverage.digest)
    base: Coverage | None = None  # the prior's, when only rows after its watermark were listed
    untrusted: tuple[str, ...] = ()  # some rows with an impossible time, for a Warning Event
    # Sorted ids of rows whose time is unreadable or unplaced (memories.placed): in `total`,
    # not in the coverage; each is summarized once, at the end of the order.
    untimed: tuple[str, ...] = ()
    untimed_values: Mapping[str, str | None] = field(default_factory=dict)  # id: its time shown

    def coverage(self, upto: tuple[int, str] | None = None) -> tuple[Coverage, int]:
        """The coverage (and row count) once the selected rows up to `upto` (None: all) are
        read; unselected rows at or before the prior's watermark count too."""
        mark = self.prior_key
        keys = [
            (ts, row_id)
            for ts, row_id, selected in self.keys.with_selection()
            if (selected and (upto is None or (ts, row_id) <= upto))
            or (not selected and mark is not None and (ts, row_id) <= mark)
        ]
        if self.base is None:
            return coverage_of(keys), len(keys)
        assert mark is not None
        return extend(self.base, keys, mark[0]), self.base.count + len(keys)


def list_appended(
    coll: Collection,
    session_id: str,
    prior: PriorCoverage,
    exclude: Callable[[Memory], bool] | None,
    mask: PassRedaction,
) -> SessionRows | None:
    """The session from its row ids and the rows from the prior's watermark on; None (list_all)
    unless the older ids digest as the prior's (none deleted, none landed behind)."""
    if prior.digest is None or prior.digest.count <= SMALL_SESSION:  # list_all's one request
        return None  # costs a small session less than these two
    mark, sources = prior.watermark_key, SessionSources.from_json(prior.sources_json)
    if mark is None or prior.coverage is None or sources is None:
        return None
    listed = pages(coll, "listing the session's row ids", {"sessionId": session_id}, ID_PAGE, ())
    ids = [row_id for row_id, _, _ in listed]
    now_ms = int(time.time() * 1000)
    where = {"$and": [{"sessionId": session_id}, {"timestamp": {"$gte": mark[0]}}]}
    what = "listing the session's new memories"  # with their documents: a pass reads them
    listed = pages(coll, what, where, LIST_PAGE + 1, first_with_documents=True)
    newer = {row_id: (mask.meta(meta), doc) for row_id, meta, doc in listed}
    if len(newer) > LIST_PAGE:
        return None  # a long backlog: read in order, batch by batch
    added: list[Memory] = []
    for row_id, (meta, doc) in newer.items():
        if row_id in prior.untimed:  # summarized at the end of the order already
            continue
        memory = memory_from_row(row_id, doc, meta)
        if memory is None or not placed(memory.timestamp_ms, now_ms):
            return None  # a row to place at the end of the order: the full listing does
        if (memory.timestamp_ms, memory.id) > mark:
            added.append(memory)
    new_ids = {m.id for m in added}
    every_id = digest(i for i in ids if i not in new_ids)
    if every_id != prior.digest:
        return None
    added.sort(key=memory_sort_key)
    keys = RowKeys()
    wanted: dict[str, Memory] = {}
    newest = Watermark(timestamp_ms=mark[0], memory_id=mark[1])
    for memory in added:
        newest = Watermark.of(memory)
        every_id = every_id.add(id_hash(memory.id))
        sources.add(memory.id, newer[memory.id][0], memory.timestamp_ms)
        include = exclude is None or not exclude(memory)
        keys.add(memory.timestamp_ms, memory.id, included=include)
        if include:
            wanted[memory.id] = mask.memory(memory)
    sorted_keys = keys.build()
    what = "reading the untimed rows' times"
    untimed = by_ids(coll, what, sorted(prior.untimed), ["metadatas"], LIST_PAGE)
    return SessionRows(
        total=every_id.count,  # a row landing between the two reads is counted once
        newest=newest,
        keys=sorted_keys,
        included=len(wanted),
        memories=lambda: (wanted[row_id] for row_id in sorted_keys.included_ids()),
        sources=sources,
        selected=len(added),
        prior_key=mark,
        digest=every_id,
        base=prior.coverage,
        untimed=tuple(sorted(prior.untimed)),
        untimed_values={row_id: _shown(meta) for row_id, meta, _ in untimed},
    )


def _shown(meta: Mapping[str, object]) -> str | None:
    return None if (stamp := meta.get("timestamp")) is None else repr(stamp)[:60]


def list_all(
    coll: Collection,
    session_id: str,
    prior: PriorCoverage,
    exclude: Callable[[Memory], bool] | None,
    read_batch: Callable[[Sequence[str]], list[Memory]],
    mask: PassRedaction,
) -> SessionRows:
    """Lists every row of the session, and decides what the pass reads."""
    newest: Watermark | None = None
    every_id = Bucket(0)  # the digest of every row's id (coverage.digest)
    sources = SessionSources()
    keys = RowKeys()
    first_page: dict[str, Memory] = {}
    now_ms, untrusted = int(time.time() * 1000), list[str]()
    untimed: dict[str, str | None] = {}
    what, where = "listing the session's memories", {"sessionId": session_id}
    for row_id, meta, doc in pages(coll, what, where, LIST_PAGE, first_with_documents=True):
        every_id = every_id.add(id_hash(row_id))
        meta = mask.meta(meta)  # tool names are cut to 50 characters: masked before
        probe = memory_from_row(row_id, doc, meta)
        if probe is not None and not trusted_time(probe.timestamp_ms, now_ms):
            if len(untrusted) < NAMED_UNTRUSTED:
                untrusted.append(row_id)
            probe = probe if placed(probe.timestamp_ms, now_ms) else None
        sources.add(row_id, meta, probe.timestamp_ms if probe is not None else None)
        if probe is None:
            untimed[row_id] = _shown(meta)
            continue
        if newest is None or newest.after(probe):
            newest = Watermark.of(probe)
        wanted = exclude is None or not exclude(probe)
        keys.add(probe.timestamp_ms, probe.id, included=wanted)
        if wanted and every_id.count <= LIST_PAGE:  # the first page came with its documents
            first_page[row_id] = mask.memory(probe)
    sorted_keys = keys.build()
    mark = prior.watermark_key
    reread = []
    if mark is not None:
        behind = sorted_keys.count_upto(*mark)
        reread = to_reread(prior, itertools.islice(sorted_keys, behind), behind)
    starts = [d.start if d.start is not None else -(2**63) for d in reread]

    def keep(ts: int, row_id: str) -> bool:
        if mark is None or (ts, row_id) > mark:
            return True
        at = bisect.bisect_right(starts, ts) - 1
        return at >= 0 and reread[at].holds(ts)

    selected = sorted_keys.select(keep)
    if every_id.count > LIST_PAGE:
        first_page.clear()  # more than one page: read in order, batch by batch

    fresh = [row_id for row_id in sorted(untimed) if row_id not in prior.untimed]
    end_ms = newest.timestamp_ms if newest is not None else now_ms
    what = "reading the session's memories without a readable time"
    untimed_now = read_memories(coll, fresh, mask, exclude, end_ms, what)

    def read() -> Iterator[Memory]:
        ids = sorted_keys.included_ids()
        if first_page:  # one page (none read when it has no included row)
            yield from (first_page[row_id] for row_id in ids)
        else:
            while batch := list(itertools.islice(ids, GET_BATCH)):
                yield from read_batch(batch)
        yield from untimed_now

    return SessionRows(
        total=every_id.count,
        newest=newest,
        keys=sorted_keys,
        included=sorted_keys.included() + len(untimed_now),
        memories=read,
        sources=sources,
        selected=selected + len(fresh),
        late=sum(d.uncovered for d in reread),
        prior_key=mark,
        digest=every_id,
        untrusted=tuple(untrusted),
        untimed=tuple(sorted(untimed)),
        untimed_values=untimed,
    )


def read_memories(
    coll: Collection,
    ids: Sequence[str],
    mask: PassRedaction,
    exclude: Callable[[Memory], bool] | None = None,
    at_ms: int | None = None,
    what: str = "reading memories",
) -> list[Memory]:
    """These memories still there and not excluded, masked, in order; at_ms: the time given
    rows whose own is unreadable."""
    found: list[Memory] = []
    for row_id, meta, doc in by_ids(coll, what, ids, ["documents", "metadatas"], GET_BATCH):
        meta = {**meta, "timestamp": at_ms} if at_ms is not None else meta
        memory = memory_from_row(row_id, doc, mask.meta(meta))
        if memory is not None and (exclude is None or not exclude(memory)):
            found.append(mask.memory(memory))
    return sorted(found, key=memory_sort_key)


def pages(
    coll: Collection,
    what: str,
    where: dict[str, Any],
    page: int,
    include: Sequence[str] = ("metadatas",),
    *,
    first_with_documents: bool = False,
) -> Iterator[Listed]:
    """(id, metadata, document) of every row matching where, page by page (SQLite's limit)."""
    for offset in itertools.count(0, page):
        wanted = [*include, "documents"] if first_with_documents and not offset else include
        query: dict[str, Any] = {"where": where or None, "include": list(wanted), "limit": page}
        got = guard(what, functools.partial(coll.get, offset=offset, **query))
        yield from rows(got)
        if len(got["ids"]) < page:
            return


def by_ids(
    coll: Collection, what: str, ids: Sequence[str], include: list[str], size: int
) -> Iterator[Listed]:
    """(id, metadata, document) of these rows still there, `size` ids a read (SQLite's limit)."""
    for batch in batches(ids, size):
        got = guard(what, functools.partial(coll.get, ids=list(batch), include=cast(Any, include)))
        yield from rows(got)


def rows(got: Any) -> Iterator[Listed]:
    """Each row a get answered (metadata {} and document None when not asked)."""
    ids, none = got["ids"], [None] * len(got["ids"])
    metas, docs = got.get("metadatas") or none, got.get("documents") or none
    for row_id, meta, doc in zip(ids, metas, docs, strict=False):
        yield row_id, meta or {}, doc


def batches(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    """Each item once (Chroma refuses a request naming an id twice), `size` a batch."""
    items = list(dict.fromkeys(items))
    for start in range(0, len(items), size):
        yield items[start : start + size]
