"""A session as one pass lists it: every row's (timestamp, id) and metadata facts, which
rows the pass reads (after the prior's watermark, and behind it where the rows are not the
ones the prior covers: controller.core.coverage), and those memories, read batch by batch
as the pass consumes them."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from chromadb.api.models.Collection import Collection

from controller.core.coverage import Dirty, PriorCoverage, to_reread
from controller.core.memories import Memory, Watermark, memory_from_row
from controller.core.visibility import SessionSources
from controller.store.collections import listing
from controller.store.row_keys import RowKeys, RowKeysBuilder

# Rows per page of a session's listing: half the transient heap of 2,000 (measured: the
# pass over 50,000 memories kept 3 MB less afterwards), one round trip for most sessions.
LIST_PAGE = 1000
GET_BATCH = 500


@dataclass(frozen=True)
class SessionRows:
    """A session as listed for one pass: its counts and newest row, what it reads (the rows
    after the prior's watermark, and those at or before it in ranges the prior does not
    cover exactly: `reread`), and those memories, read only as the pass consumes them
    (`memories`), so a pass over a 50,000-memory session never holds the whole session."""

    total: int  # every row carrying the sessionId, whatever its type
    newest: Watermark | None  # the newest row of all, the pass's watermark
    keys: RowKeys  # (timestamp, id) of every parsed row, sorted; `selected`: read this pass
    included: int  # how many of the selected rows the pass summarizes (not excluded)
    skipped: int  # rows without a usable timestamp
    read: Callable[[], Iterator[Memory]]  # the included rows, in (timestamp, id) order
    sources: SessionSources = field(default_factory=SessionSources)  # who wrote the rows
    selected: int = 0  # rows read this pass, excluded types too
    reread: tuple[Dirty, ...] = ()  # ranges at or before the prior's watermark read again
    prior_key: tuple[int, str] | None = None  # the prior's watermark

    @property
    def memories(self) -> Iterator[Memory]:
        """The included memories, in order, GET_BATCH rows per read."""
        return self.read()

    @property
    def late(self) -> int:
        """Rows at or before the prior's watermark that it does not cover (landed late)."""
        return sum(d.uncovered for d in self.reread)

    def covered_keys(self, upto: tuple[int, str] | None = None) -> Iterator[tuple[int, str]]:
        """The rows a summary covers once the pass has read every selected row up to `upto`
        (None: all of them): the rows it did not need to read, at or before the prior's
        watermark, and the selected ones up to `upto`."""
        for ts, row_id, selected in self.keys.with_selection():
            key = (ts, row_id)
            if (selected and (upto is None or key <= upto)) or (
                not selected and self.prior_key is not None and key <= self.prior_key
            ):
                yield key


def list_session(
    coll: Collection,
    session_id: str,
    prior: PriorCoverage,
    exclude: Callable[[Memory], bool] | None,
    read_batch: Callable[[Sequence[str]], list[Memory]],
) -> SessionRows:
    """Lists the session and decides what the pass reads (MemoryStore.session_rows)."""
    newest: Watermark | None = None
    sources = SessionSources()
    keys = RowKeysBuilder()
    first_page: dict[str, Memory] = {}
    skipped = total = 0
    where = {"sessionId": session_id}
    listed = listing(
        coll, "listing the session's memories", where, LIST_PAGE, first_with_documents=True
    )
    for row_id, meta, doc in listed:
        total += 1
        probe = memory_from_row(row_id, doc, meta)
        sources.add(row_id, meta, probe.timestamp_ms if probe is not None else None)
        if probe is None:
            skipped += 1
            continue
        if newest is None or newest.after(probe):
            newest = Watermark.of(probe)
        wanted = exclude is None or not exclude(probe)
        keys.add(probe.timestamp_ms, probe.id, included=wanted)
        if wanted and total <= LIST_PAGE:  # the first page came with its documents
            first_page[row_id] = probe
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
    one_page = total <= LIST_PAGE
    if not one_page:
        first_page.clear()  # more than one page: read in order, batch by batch

    def read() -> Iterator[Memory]:
        ids = sorted_keys.included_ids()
        if one_page:
            yield from (first_page[row_id] for row_id in ids)
            return
        while batch := list(itertools.islice(ids, GET_BATCH)):
            yield from read_batch(batch)

    return SessionRows(
        total,
        newest,
        sorted_keys,
        sorted_keys.included(),
        skipped,
        read,
        sources,
        selected,
        tuple(reread),
        mark,
    )
