"""A forget, or a pass that drops a summary, whose claim lapses between any two of its
writes, on a real Chroma server, no cluster.

The store's writes (MemoryStore._put and _delete) are counted as in test_erasure_crashes;
right after the writer's admission (-1) or its n-th write, for n = -1, 0, 1, ... until the
operation makes fewer writes, the writer's claim lapses (a pause, the API server out of
reach for the claim's duration) and a successor granted a newer fence runs its pass. The
writer goes on as far as its guard lets it; a writer told ClaimLost is retried, as kopf
retries the SessionSummary's handler, under a claim of its own.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import pytest

from controller.core.ledger import Fence, admission
from controller.erasure import forget_session
from controller.kube.claims import ClaimLost
from controller.pipeline import Backends, Outcome, summarize_session
from controller.store import memory_store
from controller.store.memory_store import Forgotten, MemoryStore
from devenv.chroma import ChromaServer
from tests.integration.harness import interaction, load
from tests.integration.test_erasure_crashes import BASE, facts_kept, fresh, session, stored
from tests.integration.test_ledger_crashes import assert_agree
from tests.support.ledger import forget_unguarded
from tests.support.row_vectors import row_vectors


@dataclass
class Lapse:
    """Counts the admission (-1) and the store's writes (0, 1, ...); right after the one at
    `at` (or, `during`, once its guard let it through, before it reaches the store), the
    guard's claim lapses and `successor` runs."""

    at: int
    successor: Callable[[], object]
    during: bool = False
    events: list[str] = field(default_factory=list)
    lapsed: bool = False

    def after(self, what: str) -> None:
        self.events.append(what)
        if len(self.events) - 2 == self.at:
            self.lapsed = True
            self.successor()

    def wrap(self, write: Callable[..., None]) -> Callable[..., None]:
        def lapsing(role: str, what: str, *args: Any, **kwargs: Any) -> None:
            if self.during:
                self.after(what)
            write(role, what, *args, **kwargs)
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


def test_a_pass_dropping_a_summary_whose_claim_lapses_leaves_its_successors_entry(
    chroma_server: ChromaServer,
) -> None:
    """Every memory of the session was deleted: the pass drops the row and the ledger entry.
    Its claim lapses on the way; a new memory lands and the successor summarizes it."""
    name = f"drop-lapse-{uuid.uuid4().hex[:6]}"
    for at in itertools.count(-1):
        one = session(fresh(chroma_server, name), "dropped", 2)
        fresh(chroma_server, name).memories().delete(ids=[i for i, _, _ in one.rows])
        late = f"FACT{uuid.uuid4().hex[:10].upper()}"

        def successor(sid: str = one.sid, fact: str = late, fence: int = 200 + at) -> None:
            store = fresh(chroma_server, name)
            rows = [interaction(sid, 9, BASE + 9000, f"Keep {fact} in the notes.")]
            load(store, rows, row_vectors)
            assert summarize(store, sid, guard=Guard(fence)).kind == "summarized"

        lapse = Lapse(at, successor)
        stops: AbstractContextManager[object] = pytest.raises(ClaimLost)
        with stops if at < 1 else nullcontext():  # after its last write: nothing to stop
            summarize(lapsing_store(chroma_server, name, lapse), one.sid, guard=Guard(100, lapse))
        after = fresh(chroma_server, name)
        assert lapse.events[at + 2 :] == [], "the writer wrote on once its claim lapsed"
        if lapse.lapsed:
            assert_agree(after, one.sid)
            text = "\n".join(t for _, _, t in stored(after, one.sid))
            assert late in text, (at, lapse.events)
        else:
            assert stored(after, one.sid) == [], lapse.events
            assert at == 2, lapse.events  # the row, the ledger entry
            return
