"""A forget, or a pass that drops a summary, whose claim lapses between any two of its
writes, on a real Chroma server, no cluster.

The store's writes (MemoryStore._put and _delete) are counted as in test_erasure_crashes;
right after the writer's admission (-1) or its n-th write, for n = -1, 0, 1, ... until the
operation makes fewer writes, the writer's claim lapses (a pause, the API server out of
reach for the claim's duration) and a successor granted a newer fence runs its pass. The
writer goes on as far as its guard lets it; a writer told ClaimLost is retried, as kopf
retries the SessionSummary's handler, under a claim of its own. The successor runs after
the write, during it (the guard let it through, the store has not seen it) or, for a drop,
across it (its reads before, its writes after). A drop deletes only what it read: its
ledger delete is also checked against generated entries and what replaced them.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.core.ledger import (
    FORGOTTEN_KEY,
    ROW_DIGEST_KEY,
    Fence,
    LedgerRecord,
    RowState,
    admission,
    recorded_fence,
    replacing_head,
    segment_id,
)
from controller.core.naming import summary_row_id
from controller.handlers.session_summary import forget_session
from controller.kube.claims import ClaimLost
from controller.pipeline import Backends, Outcome, summarize_session
from controller.store import memory_store
from controller.store.memory_store import Forgotten, MemoryStore, is_tombstone
from devenv.chroma import ChromaServer
from tests.integration.harness import interaction, load
from tests.integration.test_erasure_crashes import BASE, facts_kept, fresh, session, stored
from tests.integration.test_ledger_crashes import assert_agree
from tests.support.ledger import forget_unguarded, ledger_of
from tests.support.row_vectors import row_vectors


@dataclass
class Lapse:
    """Counts the admission (-1) and the store's writes (0, 1, ...); right after the one at
    `at` (or, `during`, once its guard let it through, before it reaches the store), the
    guard's claim lapses and `successor` runs. A successor that returns a callable is held
    part way, across that write: the callable lets it finish, right after it (finish)."""

    at: int
    successor: Callable[[], object]
    during: bool = False
    events: list[str] = field(default_factory=list)
    lapsed: bool = False
    rest: Callable[[], object] | None = None

    def after(self, what: str) -> None:
        self.events.append(what)
        if len(self.events) - 2 == self.at:
            self.lapsed = True
            held = self.successor()
            self.rest = held if callable(held) else None

    def finish(self) -> None:
        rest, self.rest = self.rest, None
        if rest is not None:
            rest()

    def wrap(self, write: Callable[..., None]) -> Callable[..., None]:
        def lapsing(role: str, what: str, *args: Any, **kwargs: Any) -> None:
            if self.during:
                self.after(what)
            try:
                write(role, what, *args, **kwargs)
            finally:
                self.finish()
            if not self.during:
                self.after(what)

        return lapsing


class Guard:
    """A claim's WriteGuard as SessionClaimHandle behaves: check() raises once the claim
    lapsed; admit() checks, then compares fences (core/ledger.admission)."""

    def __init__(self, number: int, lapse: Lapse | None = None) -> None:
        self.fence, self.lapse = Fence(number, "cluster-a"), lapse

    def check(self) -> None:
        if self.lapse is not None and self.lapse.lapsed:
            raise ClaimLost("claim lapsed")

    def admit(self, found: Fence | None) -> Mapping[str, int | str]:
        self.check()
        if admission(found, self.fence, grant_is_current=False) == "newer-grant":
            raise ClaimLost("fenced")
        if self.lapse is not None:
            self.lapse.after("admitted")
        return self.fence.metadata()


def lapsing_store(chroma: ChromaServer, name: str, lapse: Lapse) -> MemoryStore:
    store = fresh(chroma, name)
    store._put = lapse.wrap(store._put)  # type: ignore[method-assign]
    store._delete = lapse.wrap(store._delete)  # type: ignore[method-assign]
    return store


def summarize(store: MemoryStore, sid: str, **options: Any) -> Outcome:
    return summarize_session(
        Backends(store, row_vectors), sid, writer="successor", trigger="sunset", **options
    )


@pytest.mark.parametrize("during", [False, True], ids=["after-a-write", "during-a-write"])
@pytest.mark.parametrize("memories", [False, True], ids=["summary", "with-memories"])
def test_a_forget_whose_claim_lapses_between_any_two_writes_stops_and_its_retry_forgets_all(
    chroma_server: ChromaServer, monkeypatch: pytest.MonkeyPatch, memories: bool, during: bool
) -> None:
    monkeypatch.setattr(memory_store, "DELETE_BATCH", 2)  # the memories' deletes: several writes
    name = f"forget-lapse-{uuid.uuid4().hex[:6]}"
    for at in itertools.count(-1):
        one = session(fresh(chroma_server, name), "forgotten", 5)

        def successor(sid: str = one.sid, fence: int = 200 + at) -> None:
            """A newer claim's pass: it writes the row from the memories left."""
            summarize(fresh(chroma_server, name), sid, guard=Guard(fence))

        lapse = Lapse(at, successor, during)
        request = "uid-7/2"
        try:
            outcome = forget_session(
                lapsing_store(chroma_server, name, lapse),
                one.sid,
                memories=memories,
                guard=Guard(100, lapse),
                request=request,
            )
        except ClaimLost:  # the handler's retry, under a newer claim of its own
            retry = fresh(chroma_server, name)
            outcome = forget_session(
                retry, one.sid, memories=memories, guard=Guard(1000), request=request
            )
        after = fresh(chroma_server, name)
        assert outcome.kind == "forgotten"
        assert lapse.events[at + 2 :] == [], "the writer wrote on once its claim lapsed"
        records = [(c, i) for c, i, _ in stored(after, one.sid)]
        assert records == [(f"{name}-sessions-ledger", f"summary_{one.sid}")], (at, lapse.events)
        assert facts_kept(after, one) == [], (at, lapse.events)
        left = len(after.session_ids(one.sid))
        assert left == (0 if memories else 5), (at, lapse.events)
        # What the status says is left (what went is the total only when no successor's
        # entry replaced the tombstone between the tries, as in test_erasure_crashes).
        said = outcome.forgotten
        assert said is not None and said.remaining == left, (at, said)
        assert after.summary_states([one.sid])[one.sid].memory_count == left
        again = forget_unguarded(after, one.sid, memories=memories, request="uid-7/3").forgotten
        assert again == Forgotten(False, 0, 0, left)
        if not lapse.lapsed:
            # the tombstone, the row, the segments and (5 memories, 2 a delete) 3 deletes
            assert at == 3 + 3 * memories, lapse.events
            return


def held_at_its_first_write(
    run: Callable[[MemoryStore], object], store: MemoryStore
) -> Callable[[], None]:
    """Runs `run(store)` in a thread up to its first write, which waits there (its reads
    done); returns what lets it write on and waits for its end."""
    reached, go = threading.Event(), threading.Event()

    def held(write: Callable[..., None]) -> Callable[..., None]:
        def waiting(*args: Any, **kwargs: Any) -> None:
            reached.set()
            assert go.wait(120), "never let go on"
            write(*args, **kwargs)

        return waiting

    store._put = held(store._put)  # type: ignore[method-assign]
    store._delete = held(store._delete)  # type: ignore[method-assign]
    pool = ThreadPoolExecutor(1)
    running = pool.submit(run, store)
    running.add_done_callback(lambda _: reached.set())
    assert reached.wait(120), "the successor never reached a write"

    def rest() -> None:
        go.set()
        try:
            running.result(120)
        finally:
            pool.shutdown()

    return rest


TIMINGS = {  # when the successor runs, against the drop's write at `at`: (during, held)
    "after-a-write": (False, False),
    "during-a-write": (True, False),  # between the drop's check and its delete
    "across-a-write": (True, True),  # reads before that delete, writes after it
}


@pytest.mark.parametrize("timing", TIMINGS)
@pytest.mark.parametrize("successor_does", ["summarize", "forget"])
def test_a_pass_dropping_a_summary_whose_claim_lapses_leaves_its_successors_work(
    chroma_server: ChromaServer, timing: str, successor_does: str
) -> None:
    """Every memory of the session was deleted: the pass drops the row and the ledger entry.
    Its claim lapses at any point of that; meanwhile a newer claim's writer either
    summarizes a memory that landed or forgets the session. What the successor wrote stays
    whole: a row with the entry that names it, or the forget's tombstone."""
    during, held = TIMINGS[timing]
    name = f"drop-lapse-{uuid.uuid4().hex[:6]}"
    for at in itertools.count(-1):
        one = session(fresh(chroma_server, name), "dropped", 2)
        fresh(chroma_server, name).memories().delete(ids=[i for i, _, _ in one.rows])
        late = f"FACT{uuid.uuid4().hex[:10].upper()}"
        fence = 200 + at

        def successors_write(store: MemoryStore, sid: str = one.sid, fence: int = fence) -> None:
            if successor_does == "forget":
                forget_session(store, sid, memories=False, guard=Guard(fence), request="uid-9/1")
            else:
                assert summarize(store, sid, guard=Guard(fence)).kind == "summarized"

        def successor(sid: str = one.sid, fact: str = late) -> object:
            if successor_does == "summarize":  # a new memory landed
                rows = [interaction(sid, 9, BASE + 9000, f"Keep {fact} in the notes.")]
                load(fresh(chroma_server, name), rows, row_vectors)
            if held:
                return held_at_its_first_write(successors_write, fresh(chroma_server, name))
            return successors_write(fresh(chroma_server, name))

        lapse = Lapse(at, successor, during)
        stops: AbstractContextManager[object] = pytest.raises(ClaimLost)
        try:
            with stops if at < 1 else nullcontext():  # after its last write: nothing to stop
                summarize(
                    lapsing_store(chroma_server, name, lapse), one.sid, guard=Guard(100, lapse)
                )
        finally:
            lapse.finish()
        after = fresh(chroma_server, name)
        assert lapse.events[at + 2 :] == [], "the writer wrote on once its claim lapsed"
        records = [(c, i) for c, i, _ in stored(after, one.sid)]
        if not lapse.lapsed:
            assert records == [], lapse.events
            assert at == 2, lapse.events  # the row, the ledger entry
            return
        if successor_does == "forget":  # the tombstone alone, as the forget left it
            assert records == [(f"{name}-sessions-ledger", f"summary_{one.sid}")], (at, records)
            assert is_tombstone(after.ledger_heads([one.sid]).get(one.sid)), at
            assert after.stored_summary(one.sid) is None
        else:  # the row and the entry naming it, which the next pass reads as its own
            assert_agree(after, one.sid)
            text = "\n".join(t for _, _, t in stored(after, one.sid))
            assert late in text, (at, lapse.events)
            assert summarize(after, one.sid).kind == "up-to-date", at


SINCE = ("nothing", "a newer entry", "a late write under the fence read", "a tombstone")


@settings(max_examples=40, deadline=None, database=None)
@given(
    generation=st.integers(min_value=1, max_value=4),
    segments=st.integers(min_value=1, max_value=3),
    fenced=st.booleans(),
    leftovers=st.booleans(),
    since=st.sampled_from(SINCE),
    old_records_left=st.booleans(),
)
def test_a_drop_deletes_the_entry_as_it_read_it_and_nothing_written_since(
    chroma_server: ChromaServer,
    generation: int,
    segments: int,
    fenced: bool,
    leftovers: bool,
    since: str,
    old_records_left: bool,
) -> None:
    """Whatever the entry the drop read holds (a fence or none, an earlier generation's
    records left over) and whatever replaced it since (a newer writer's entry, a late write
    under the same fence, a forget's tombstone; the records it replaced deleted or not yet),
    the drop's ledger delete removes the records it read and nothing else."""
    store, sid = fresh(chroma_server, "drop-filter"), f"filter-{uuid.uuid4().hex[:8]}"

    def record(meta: dict[str, Any]) -> LedgerRecord:
        seq, meta = meta.get("segment"), {"sessionId": sid, **meta}
        if seq is None:  # a head replaces the one before whole
            return LedgerRecord(summary_row_id(sid), "{}", replacing_head(meta))
        return LedgerRecord(segment_id(sid, meta["generation"], seq), "{}", meta)

    def segments_of(gen: int, count: int) -> list[LedgerRecord]:
        return [record({"generation": gen, "segment": k}) for k in range(count)]

    fence = Fence(100, "cluster-a").metadata() if fenced else {}
    entry = {"generation": generation, "segments": segments, ROW_DIGEST_KEY: "read", **fence}
    read = [record(entry), *segments_of(generation, segments)]
    read += segments_of(generation - 1, 1) if leftovers and generation > 1 else []
    newer = {"generation": generation + 1, "segments": 1, **Fence(200, "cluster-a").metadata()}
    written = {
        "nothing": [],
        "a newer entry": [record({**newer, ROW_DIGEST_KEY: "newer"})],
        "a late write under the fence read": [record({**entry, ROW_DIGEST_KEY: "late"})],
        "a tombstone": [record({FORGOTTEN_KEY: 1, **Fence(200, "cluster-a").metadata()})],
    }[since]
    written += segments_of(generation + 1, 1) if "entry" in since else []
    store._put("ledger", "the entry as read", read)
    if written:
        store._put("ledger", "what replaced it", written)
        if not old_records_left:
            ledger_of(store).delete(ids=[r.record_id for r in read[1:]])
    store.drop_summary(sid, RowState(recorded_fence(entry), None, entry))
    left = ledger_of(store).get(where={"sessionId": sid})["ids"]
    assert sorted(left) == sorted({r.record_id for r in written}), (entry, since)
