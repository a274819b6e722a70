"""controller/runtime.py, SummarizerParts: what the runtime keeps per SessionSummarizer is closed
when the SessionSummarizer changes or goes, never under a pass that holds it, and is not
kept for one not seen yet or brought back by a pass or a timer tick still under way for a
deleted one. The cache's
bookkeeping only: the Chroma client is a stand-in that counts its closes (the real one is
tests/integration/test_runtime_lifecycle.py's)."""

from __future__ import annotations

import threading

import pytest

from controller.api import SessionSummarizerSpec
from controller.embeddings.minilm import LocalMiniLMEmbedding
from controller.runtime import SummarizerParts
from controller.scheduling import PassScheduler, SchedulerLimits
from controller.store.connection import StoreLocation
from controller.store.errors import StoreUnavailable
from controller.store.memory_store import MemoryStore

NS = "ns"


class CountedStore(MemoryStore):
    def __init__(self, location: StoreLocation) -> None:  # no client: nothing to reach
        self.location = location
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


class Parts(SummarizerParts):
    def __init__(self) -> None:
        limits = SchedulerLimits(workers=1, background_workers=1, cores=1, store_writes=1)
        super().__init__(PassScheduler(limits), LocalMiniLMEmbedding())
        self.built: list[CountedStore] = []
        self.hold_build: threading.Event | None = None
        self.building = threading.Event()
        self._build["store"] = self._connect

    def _connect(self, location: StoreLocation) -> MemoryStore:
        self.building.set()
        if self.hold_build is not None:
            self.hold_build.wait(10)
        store = CountedStore(location)
        self.built.append(store)
        return store


def spec(url: str = "http://chroma:8000") -> SessionSummarizerSpec:
    return SessionSummarizerSpec.model_validate({"store": {"url": url}})


def test_a_store_is_reused_then_closed_once_when_the_spec_changes() -> None:
    parts = Parts()
    parts.spec_changed(NS, "s", 1)
    for _ in range(3):
        with parts.store(NS, "s", spec()) as store:
            assert isinstance(store, CountedStore)
    assert len(parts.built) == 1 and parts.count()["clients"] == 1
    parts.spec_changed(NS, "s", 2)
    assert parts.built[0].closed == 1 and parts.count()["clients"] == 0
    with parts.store(NS, "s", spec("http://other:8000")):
        pass
    parts.spec_changed(NS, "s", 2)  # the same generation again (a handler retried): kept
    assert [s.closed for s in parts.built] == [1, 0] and parts.count()["clients"] == 1


def test_a_part_in_use_is_closed_when_the_pass_gives_it_back_not_before() -> None:
    parts = Parts()
    parts.spec_changed(NS, "s", 1)
    with parts.store(NS, "s", spec()) as store:
        parts.forget(NS, "s")
        assert isinstance(store, CountedStore) and store.closed == 0
        assert parts.count()["clients"] == 1  # draining: still held by this pass
    assert store.closed == 1 and parts.count()["clients"] == 0


def test_a_use_before_the_summarizer_is_seen_or_after_it_was_deleted_keeps_nothing() -> None:
    parts = Parts()
    nothing = dict.fromkeys(parts.count(), 0)
    with parts.store(NS, "s", spec()) as early:  # before its spec handler ran
        assert isinstance(early, CountedStore)
    assert early.closed == 1 and parts.count() == nothing
    parts.spec_changed(NS, "s", 1)
    with parts.store(NS, "s", spec()):
        pass
    assert parts.count()["clients"] == 1
    parts.forget(NS, "s")
    with parts.store(NS, "s", spec()) as late:  # a tick or a queued pass still under way
        assert isinstance(late, CountedStore)
    assert late.closed == 1 and parts.count() == nothing
    parts.spec_changed(NS, "s", 1)  # created again: kept again
    with parts.store(NS, "s", spec()):
        pass
    assert parts.count()["clients"] == 1


@pytest.mark.parametrize("meanwhile", ["forget", "spec_changed", "close"])
def test_a_part_built_while_the_summarizer_changed_or_went_is_not_kept(meanwhile: str) -> None:
    parts = Parts()
    parts.spec_changed(NS, "s", 1)
    parts.hold_build = threading.Event()
    used: list[CountedStore] = []

    def use() -> None:
        with parts.store(NS, "s", spec()) as store:
            assert isinstance(store, CountedStore)
            used.append(store)

    user = threading.Thread(target=use)
    user.start()
    assert parts.building.wait(5)
    if meanwhile == "forget":
        parts.forget(NS, "s")
    elif meanwhile == "spec_changed":
        parts.spec_changed(NS, "s", 2)
    else:
        parts.close()
    parts.hold_build.set()
    user.join(10)
    assert used and used[0].closed == 1
    assert parts.count()["clients"] == 0


def test_an_unreachable_store_is_reconnected_at_the_next_use() -> None:
    parts = Parts()
    parts.spec_changed(NS, "s", 1)
    with pytest.raises(StoreUnavailable), parts.store(NS, "s", spec()):
        raise StoreUnavailable("gone")
    assert parts.built[0].closed == 1
    with parts.store(NS, "s", spec()) as again:
        assert again is parts.built[1]
    with parts.store(NS, "s", spec()) as kept:
        assert kept is again and not again.closed


def test_the_timers_upkeep_outlives_a_spec_change_and_not_a_deletion() -> None:
    """A tick before the spec handler has one kept; a spec change keeps it; after a deletion a
    tick still under way gets one kept by nobody, until the summarizer is seen again."""
    parts = Parts()
    early = parts.upkeep(NS, "s")  # a timer may tick before the spec handler runs
    early.markers.acted["x"] = 1
    parts.spec_changed(NS, "s", 1)
    parts.spec_changed(NS, "s", 2)
    assert parts.upkeep(NS, "s") is early
    parts.forget(NS, "s")
    late = parts.upkeep(NS, "s")
    assert late is not early and late is not parts.upkeep(NS, "s")  # kept by nobody
    parts.spec_changed(NS, "s", 1)  # created again
    again = parts.upkeep(NS, "s")
    assert again is parts.upkeep(NS, "s") and not again.markers.acted
