"""Passes written as groups (controller/store/memory_store.py) on the real Chroma server: many
passes of this process writing at once share upserts, each row is still the one its pass
wrote, and a pass its own checks refuse leaves its row as it was while the rest of its
group is written."""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from controller.core.claim_rules import Claim, Writer
from controller.core.ledger import Fence, RowState
from controller.core.summary import StructuredSummary
from controller.kube.claims import ClaimLost, SessionClaimHandle
from controller.pipeline import Backends, summarize_session
from controller.scheduling import PassScheduler, SchedulerLimits
from controller.store.connection import StoreLocation, connect
from controller.store.errors import EmbeddingMismatch
from controller.store.memory_store import MemoryStore, RowWrite, write_alone
from devenv.chroma import ChromaServer
from tests.integration.harness import Harness, interaction, load

SESSIONS = 24


class GroupCountingStore(MemoryStore):
    """The real store, recording the size of each group it writes."""

    def __init__(self, location: StoreLocation) -> None:
        super().__init__(connect(location), location)
        self.groups: list[int] = []
        self._sizes = threading.Lock()

    def write_rows(self, writes: Sequence[RowWrite]) -> None:
        with self._sizes:
            self.groups.append(len(writes))
        super().write_rows(writes)


class Guard:
    """A claim's side of a write (upsert.WriteGuard) with a fence of its own; `lost` says
    no right before the upsert, as a claim taken over by another writer does."""

    def __init__(self, number: int, lost: bool = False) -> None:
        self.fence = Fence(number, "test-authority")
        self.lost = lost

    def check(self) -> None:
        pass

    def admit(self, found: Fence | None) -> Mapping[str, int | str]:
        if self.lost:
            raise ClaimLost("taken over")
        return self.fence.metadata()


def _embed(texts: list[str]) -> list[list[float]]:
    return [[float(len(t) % 7), 1.0, 0.5, float(len(t) % 3)] for t in texts]


@pytest.mark.parametrize("seed", [1, 2])
def test_passes_writing_at_once_share_upserts_and_each_row_is_its_own_pass_s(
    chroma_server: ChromaServer, seed: int
) -> None:
    rng = random.Random(seed)
    tag = uuid.uuid4().hex[:8]
    location = StoreLocation(
        url=chroma_server.url, memory_collection=f"gw-mem-{tag}", summary_collection=f"gw-{tag}"
    )
    store = GroupCountingStore(location)
    sessions = [f"gw-{tag}-{i:02d}" for i in range(SESSIONS)]
    turns = {s: rng.randint(1, 12) for s in sessions}
    base = 1_770_000_000_000
    load(
        store,
        [
            interaction(s, n, base + n * 1000, f"Change port {8000 + n} in src/{s}/m{n}.py")
            for s in sessions
            for n in range(turns[s])
        ],
    )
    refused = set(rng.sample(sessions, 3))
    # One earlier write of a refused session: its row must stay as it was.
    summarize_session(
        Backends(store, _embed), sorted(refused)[0], writer="before", trigger="manual"
    )
    kept = store.summaries().get(ids=[f"summary_{sorted(refused)[0]}"], include=["documents"])
    late = sorted(refused)[0]
    load(store, [interaction(late, 99, base + 99_000, "A later turn: nothing is up to date")])
    sched = PassScheduler(
        SchedulerLimits(workers=SESSIONS, background_workers=1, cores=1, store_writes=1)
    )
    errors: dict[str, BaseException] = {}

    def run(sid: str) -> None:
        try:
            summarize_session(
                Backends(store, _embed),
                sid,
                writer="group",
                trigger="manual",
                guard=Guard(100 + sessions.index(sid), lost=sid in refused),
                group=sched.store_write,
            )
        except ClaimLost as exc:
            errors[sid] = exc

    try:
        with ThreadPoolExecutor(SESSIONS) as pool:
            list(pool.map(run, sessions))
    finally:
        sched.stop(5)

    assert set(errors) == refused
    assert (
        store.summaries().get(ids=[f"summary_{sorted(refused)[0]}"], include=["documents"]) == kept
    )
    for sid in sorted(refused)[1:]:
        assert store.read_summary(sid) is None
    for sid in sessions:
        if sid in refused:
            continue
        summary = store.read_summary(sid)
        assert isinstance(summary, StructuredSummary), sid
        assert summary.memory_count == turns[sid]
        assert summary.session_id == sid
        state = store.read_row_state(sid)
        assert state.fence == Fence(100 + sessions.index(sid), "test-authority")
        texts = [i.text for items in summary.sections.values() for i in items]
        assert any(f"src/{sid}/m0.py" in t for t in texts + summary.references), sid
    groups = store.groups[1:]  # after the refused session's earlier write
    assert sum(groups) == SESSIONS  # every pass's row went in exactly one group
    assert len(groups) < SESSIONS  # and some of them shared one


def test_a_row_chroma_refuses_fails_alone_and_the_rest_of_its_group_is_written(
    chroma_server: ChromaServer,
) -> None:
    tag = uuid.uuid4().hex[:8]
    location = StoreLocation(url=chroma_server.url, summary_collection=f"gw-refused-{tag}")
    store = MemoryStore(connect(location), location)
    good = [
        RowWrite(f"ok-{n}", f"summary {n}", {"sessionId": f"ok-{n}"}, [0.1] * 4) for n in (1, 2)
    ]
    # A vector of another size: Chroma refuses the request that carries it.
    bad = RowWrite("bad", "summary", {"sessionId": "bad"}, [0.1] * 3)
    store.write_rows([good[0], bad, good[1]])
    assert good[0].error is None and good[1].error is None
    assert isinstance(bad.error, EmbeddingMismatch), bad.error
    got = store.summaries().get(ids=["summary_ok-1", "summary_ok-2", "summary_bad"])
    assert sorted(got["ids"]) == ["summary_ok-1", "summary_ok-2"]


@settings(
    max_examples=4,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(lapses=st.lists(st.booleans(), min_size=2, max_size=4).filter(any))
@example(lapses=[True, True])
@example(lapses=[False, True])
def test_rows_written_one_by_one_after_a_refused_group_are_checked_again(
    harness: Harness, lapses: list[bool]
) -> None:
    """A group Chroma refuses (a row of another vector size) is written row by row, each
    row read and admitted again as if alone: a pass whose claim lapsed while the group was
    admitted and refused writes nothing; the others are written."""
    tag = uuid.uuid4().hex[:8]
    location = StoreLocation(url=harness.chroma.url, summary_collection=f"gw-again-{tag}")
    store = MemoryStore(connect(location), location)
    # The collection holds 4-d vectors already, so Chroma refuses the 3-d row however many
    # of the others are refused before it.
    write_alone(store, RowWrite(f"again-{tag}-seed", "seed", {"sessionId": "seed"}, [0.1] * 4))
    handles = [
        SessionClaimHandle(
            Claim(
                session_id=f"again-{tag}-{n}",
                collection_id=location.row_scope,
                writer=Writer("group-test", f"uid-{tag}-{n}", f"ns/again-{n}"),
                duration_s=2.2 if lapses_ else 60,  # lapses 2 s after the grant (no renewal)
                collection=location.summary_collection,
            ),
            margin_s=0.2 if lapses_ else 5,
            renew_s=100,
            authority="group-test-cluster",
        )
        for n, lapses_ in enumerate(lapses)
    ]
    writes = [
        RowWrite(h.claim.session_id, f"summary {n}", {"sessionId": h.claim.session_id}, [0.1] * 4,
                 admit=lambda found, h=h: h.admit(found.fence))
        for n, h in enumerate(handles)
    ]  # fmt: skip

    def slow_admission(found: RowState) -> Mapping[str, int | str]:
        time.sleep(2.5)  # a check with I/O (a claim read, another cluster's record)
        return {}

    bad = RowWrite("again-bad", "summary", {"sessionId": "again-bad"}, [0.1] * 3, slow_admission)
    try:
        for h in sorted(handles, key=lambda h: h.claim.duration_s, reverse=True):
            h.acquire()  # the ones that lapse last: each is admitted once before it lapses
        store.write_rows([*writes, bad])
    finally:
        for h in handles:
            h.release()
    assert isinstance(bad.error, EmbeddingMismatch), bad.error
    got = set(store.summaries().get(ids=[f"summary_{w.session_id}" for w in writes])["ids"])
    for write, lapsed in zip(writes, lapses, strict=True):
        if lapsed:
            assert isinstance(write.error, ClaimLost), write.error
            assert f"summary_{write.session_id}" not in got
        else:
            assert write.error is None, write.error
            assert f"summary_{write.session_id}" in got
