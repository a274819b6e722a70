"""A forget and a rebuild hold at every crash point, on a real Chroma server, no cluster.

The store's write methods (MemoryStore._put and _delete, through which every upsert and
delete goes) are wrapped to fail their n-th call, for n = 0, 1, ... until the operation
makes fewer writes, so a write point added later is covered without naming it. A write
fails as the store refusing or timing out (`lost`: never applied; `unanswered`: applied,
the answer lost) or as the process killed right there (`killed`: no handler runs). The
next run is the SessionSummary's retry of the same request (kopf retries a failed handler
and resumes an unfinished one), on a fresh store client, with or without a pass of the
session (a sunset, the sweep) landing in between. What it leaves: nothing of a forgotten
session in the row or the ledger but the tombstone; after a rebuild, row and ledger
agreeing, every living memory's fact kept and the text it replaced gone; a second session
in the same collections untouched.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest

from controller.pipeline import Backends, Outcome, summarize_session
from controller.store import memory_store
from controller.store.connection import StoreLocation, connect
from controller.store.errors import StoreUnavailable
from controller.store.memory_store import Forgotten, MemoryStore
from devenv.chroma import ChromaServer
from tests.integration.harness import interaction, load
from tests.integration.test_ledger_crashes import FOREIGN, assert_agree, rewrite_as_neo
from tests.support.ledger import forget_unguarded, ledger_of
from tests.support.row_vectors import row_vectors

BASE = 1_770_000_000_000
How = Literal["lost", "unanswered", "killed"]
HOWS: tuple[How, ...] = ("lost", "unanswered", "killed")


class Killed(BaseException):
    """The process died at this write: nothing above it runs (not an Exception)."""


@dataclass
class FailingWrites:
    """Counts the store's writes from 0 and fails the one at `at`, as `how` says."""

    at: int
    how: How
    calls: list[str] = field(default_factory=list)
    failed: bool = False

    def wrap(self, write: Callable[..., None]) -> Callable[..., None]:
        def failing(role: str, what: str, *args: Any, **kwargs: Any) -> None:
            index = len(self.calls)
            self.calls.append(what)
            if index != self.at:
                return write(role, what, *args, **kwargs)
            self.failed = True
            if self.how == "killed":
                raise Killed(what)
            if self.how == "unanswered":
                write(role, what, *args, **kwargs)
            failure = f"Chroma unreachable while {what}: the test failed it"
            raise StoreUnavailable(failure) from ConnectionError()

        return failing


def fresh(chroma: ChromaServer, name: str) -> MemoryStore:
    """A new client of the store, as a new process (or a retry after a lost store) opens."""
    location = StoreLocation(
        url=chroma.url, memory_collection=f"{name}-memory", summary_collection=f"{name}-sessions"
    )
    return MemoryStore(connect(location), location)


@contextmanager
def failing_store(chroma: ChromaServer, name: str, plan: FailingWrites) -> Iterator[MemoryStore]:
    store = fresh(chroma, name)
    store._put = plan.wrap(store._put)  # type: ignore[method-assign]
    store._delete = plan.wrap(store._delete)  # type: ignore[method-assign]
    with suppress(StoreUnavailable, Killed):
        yield store


def summarize(store: MemoryStore, sid: str, **options: Any) -> Outcome:
    return summarize_session(
        Backends(store, row_vectors), sid, writer="crash-test", trigger="test", **options
    )


def stored(store: MemoryStore, sid: str) -> list[tuple[str, str, str]]:
    """(collection, id, document + metadata) of every record of the session in the row's
    and the ledger's collections."""
    found = []
    for coll in (store.summaries(), ledger_of(store)):
        got = coll.get(where={"sessionId": sid}, include=["documents", "metadatas"])
        for i, d, m in zip(got["ids"], got["documents"] or [], got["metadatas"] or [], strict=True):
            found.append((coll.name, i, f"{d or ''}\n{json.dumps(m or {})}"))
    return found


@dataclass
class Session:
    sid: str
    facts: list[str]
    rows: list[Any]


def session(store: MemoryStore, prefix: str, memories: int) -> Session:
    """A session summarized in two writes (so its ledger entry has segments), each of its
    memories saying a fact of its own."""
    sid = f"{prefix}-{uuid.uuid4().hex[:6]}"
    facts = [f"FACT{uuid.uuid4().hex[:10].upper()}" for _ in range(memories)]
    rows = [
        interaction(sid, k, BASE + k * 1000, f"Keep {facts[k]} in the notes.")
        for k in range(memories)
    ]
    load(store, rows[: memories // 2], row_vectors)
    assert summarize(store, sid).kind == "summarized"
    load(store, rows[memories // 2 :], row_vectors)
    assert summarize(store, sid, chunk_size=1, checkpoint_passes=1).kind == "summarized"
    return Session(sid, facts, rows)


def facts_kept(store: MemoryStore, one: Session) -> list[str]:
    text = "\n".join(t for _, _, t in stored(store, one.sid))
    return [f for f in one.facts if f in text]


# -- a forget -----------------------------------------------------------------------------------


def pass_between(at: int, how: How) -> bool:
    """Whether a pass of the session lands between the cut and the retry: every other write
    point, shifted by the way the write fails, so across the three ways each point is cut
    both with and without one (half the runs of crossing them)."""
    return (at + HOWS.index(how)) % 2 == 1


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("memories", [False, True], ids=["summary", "with-memories"])
def test_a_forget_cut_at_any_write_is_finished_by_the_next_run_and_loses_nothing_else(
    chroma_server: ChromaServer, monkeypatch: pytest.MonkeyPatch, memories: bool, how: How
) -> None:
    monkeypatch.setattr(memory_store, "DELETE_BATCH", 2)  # the memories' deletes: several writes
    name = f"forget-crash-{uuid.uuid4().hex[:6]}"
    store = fresh(chroma_server, name)
    other = session(store, "other", 4)
    other_kept = facts_kept(store, other)
    for at in itertools.count():
        one = session(store, "forgotten", 5)
        records_before = len(stored(store, one.sid)) - 1  # the head and segments, not the row
        plan = FailingWrites(at, how)
        with failing_store(chroma_server, name, plan) as failing:
            forget_unguarded(failing, one.sid, memories=memories, request="uid-1/2")
        between = pass_between(at, how)
        if between:
            summarize(fresh(chroma_server, name), one.sid)
        retry = fresh(chroma_server, name)
        outcome = forget_unguarded(retry, one.sid, memories=memories, request="uid-1/2")

        assert outcome.kind == "forgotten"
        if not between:  # the status and the Event say what the request removed in all
            said = outcome.forgotten
            assert said == Forgotten(True, records_before, 5 * memories, 5 - 5 * memories), (
                at,
                plan.calls,
            )
        records = stored(retry, one.sid)
        assert [(c, i) for c, i, _ in records] == [
            (f"{name}-sessions-ledger", f"summary_{one.sid}")
        ]
        assert facts_kept(retry, one) == [], (at, plan.calls, records)
        assert retry.stored_summary(one.sid) is None
        left = len(retry.session_ids(one.sid))
        assert left == (0 if memories else 5), (at, plan.calls)
        # The sweep judges the session by its tombstone: not stale until its memories change.
        state = retry.summary_states([one.sid])[one.sid]
        assert state.memory_count == left
        # Another forget of the session is told as its own: nothing was left to remove.
        again = forget_unguarded(retry, one.sid, memories=memories, request="uid-1/3").forgotten
        assert again == Forgotten(False, 0, 0, 5 - 5 * memories)
        # Nothing else lost.
        assert facts_kept(retry, other) == other_kept
        assert_agree(retry, other.sid)
        assert summarize(retry, other.sid).kind == "up-to-date"
        if not plan.failed:
            # the tombstone, the row, the segments and (5 memories, 2 a delete) 3 deletes
            assert at == 3 + 3 * memories, plan.calls
            return


# -- a rebuild ----------------------------------------------------------------------------------


@pytest.mark.parametrize("how", HOWS)
def test_a_rebuild_cut_at_any_write_is_finished_by_the_next_run_and_loses_nothing_else(
    chroma_server: ChromaServer, how: How
) -> None:
    """The row carries another writer's text (neo's) and the items of a deleted memory's
    neighbours; the rebuild writes it from the living memories alone, in several writes
    (a checkpoint a memory)."""
    name = f"rebuild-crash-{uuid.uuid4().hex[:6]}"
    store = fresh(chroma_server, name)
    other = session(store, "other", 4)
    other_kept = facts_kept(store, other)
    for at in itertools.count():
        one = session(store, "rebuilt", 4)
        rewrite_as_neo(store, one.sid)
        assert summarize(store, one.sid).kind == "summarized"  # neo's text carried
        assert FOREIGN in "\n".join(t for _, _, t in stored(store, one.sid))
        plan = FailingWrites(at, how)
        with failing_store(chroma_server, name, plan) as failing:
            summarize(failing, one.sid, rebuild=True, chunk_size=1, checkpoint_passes=1)
        if pass_between(at, how):
            summarize(fresh(chroma_server, name), one.sid)
        retry = fresh(chroma_server, name)
        assert summarize(retry, one.sid, rebuild=True).kind == "summarized"

        assert_agree(retry, one.sid)
        text = "\n".join(t for _, _, t in stored(retry, one.sid))
        assert FOREIGN not in text, (at, plan.calls)
        assert facts_kept(retry, one) == one.facts
        assert summarize(retry, one.sid).kind == "up-to-date"
        assert facts_kept(retry, other) == other_kept
        assert_agree(retry, other.sid)
        if not plan.failed:
            assert at > 2, plan.calls
            return
