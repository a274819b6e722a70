"""Fencing's remaining window is harmless (issue 28): a deposed writer's row that lands after
a newer writer's, as when a writer pauses between its fence check and its upsert, only
delays facts; the next pass restores them from the memories and the carried legacy text.

The real pipeline (controller/pipeline.py:summarize_session, the extractive summarizer,
checkpoints) on a real Chroma server; hypothesis chooses the session, the checkpoint the
deposed writer is frozen at, the memories that arrive while it is frozen and whether a
legacy summary was there first. The writers' claims are WriteGuards that hold one write
between the fence check and the upsert, the pause fencing cannot close.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Mapping

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from controller.core.ledger import Fence, admission
from controller.kube.claims import ClaimLost
from controller.pipeline import Backends, summarize_session
from controller.store.memory_store import MemoryStore
from tests.integration.harness import Harness, interaction, load
from tests.support.row_vectors import row_vectors

_RUNS = itertools.count()
LEGACY = "Legacy fact: the nightly export was moved to 02:00 UTC by hand."


class Guard:
    """A writer's claim as the pipeline sees it. With hold_at=n, the n-th write is held
    after its fence check until released; the writer then finds its claim lapsed (it was
    paused past its duration) and writes nothing more."""

    def __init__(self, fence: int, hold_at: int | None = None) -> None:
        self.fence: Fence | None = Fence(fence, "test-cluster")
        self.hold_at = hold_at
        self.admitted = 0
        self.held = threading.Event()
        self.resume = threading.Event()
        self.lapsed = False

    def check(self) -> None:
        if self.lapsed:
            raise ClaimLost("claim lapsed while paused")

    def admit(self, found: Fence | None) -> Mapping[str, int | str]:
        self.check()
        assert self.fence is not None
        if admission(found, self.fence, grant_is_current=False) != "write":
            raise ClaimLost(f"fenced: the row carries {found} > {self.fence}")
        self.admitted += 1
        if self.admitted == self.hold_at:
            self.held.set()
            assert self.resume.wait(120), "never resumed"
            self.lapsed = True
        return self.fence.metadata()


def fact(sid: str, k: int) -> str:
    return f"Fact {sid}-{k}"


def row_text(store: MemoryStore, sid: str) -> str:
    document, meta = store.stored_summary(sid) or ("", {})
    parts = [document, meta.get("sectionsJson"), meta.get("legacySummary")]
    return " ".join(str(p or "") for p in parts)


def run(store: MemoryStore, sid: str, guard: Guard, checkpoint_passes: int) -> None:
    summarize_session(
        Backends(store, row_vectors),
        sid,
        writer=f"fence-{guard.fence.number if guard.fence else None}",
        trigger="test",
        chunk_size=1,
        checkpoint_passes=checkpoint_passes,
        guard=guard,
    )


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    before=st.integers(min_value=2, max_value=9),
    checkpoint_passes=st.integers(min_value=1, max_value=3),
    hold_at=st.integers(min_value=1, max_value=4),
    arriving=st.integers(min_value=0, max_value=3),
    legacy=st.booleans(),
)
def test_a_deposed_writers_late_row_only_delays_facts_the_next_pass_restores(
    harness: Harness,
    before: int,
    checkpoint_passes: int,
    hold_at: int,
    arriving: int,
    legacy: bool,
) -> None:
    sid = f"stale-{next(_RUNS)}"
    store = harness.store("stale-memory", "stale-sessions")
    if legacy:
        store.client.get_or_create_collection("stale-sessions").upsert(
            ids=[f"summary_{sid}"],
            documents=[LEGACY],
            metadatas=[{"sessionId": sid, "timestamp": 1_760_000_000_000, "memoryCount": 1}],
            embeddings=[[0.1] * 384],
        )
    base = 1_770_000_000_000
    first = [interaction(sid, k, base + k, f"{fact(sid, k)}: step {k}.") for k in range(before)]
    load(store, first, row_vectors)
    writes_of_a = (before - 1) // checkpoint_passes + 1  # its checkpoints and its final write
    deposed = Guard(fence=1, hold_at=min(hold_at, writes_of_a))
    failure: list[BaseException] = []

    def writer_a() -> None:
        try:
            run(store, sid, deposed, checkpoint_passes)
        except ClaimLost:
            pass  # the lapsed claim ends A's pass, as in the operator
        except BaseException as exc:  # pragma: no cover - shown by the assert below
            failure.append(exc)

    a = threading.Thread(target=writer_a)
    a.start()
    try:
        assert deposed.held.wait(120), f"A never reached its write {deposed.hold_at}"
        # While A is paused: memories arrive, and B (a newer grant) writes everything.
        load(
            store,
            [
                interaction(sid, k, base + 1000 + k, f"{fact(sid, k)}: late step {k}.")
                for k in range(before, before + arriving)
            ],
            row_vectors,
        )
        run(store, sid, Guard(fence=2), checkpoint_passes)
    finally:
        deposed.resume.set()  # A's held row lands now, over B's
        a.join(120)
    assert not failure, failure
    total = before + arriving
    after_late_row = row_text(store, sid)
    delayed = [k for k in range(total) if fact(sid, k) not in after_late_row]
    event(f"facts delayed by the late row: {'some' if delayed else 'none'}")
    # The next pass (a newer grant), as the next sunset or sweep brings it.
    run(store, sid, Guard(fence=3), checkpoint_passes)
    final = row_text(store, sid)
    assert [k for k in range(total) if fact(sid, k) not in final] == []
    if legacy:
        assert LEGACY in final
