"""Reads and deletes by ids on a real Chroma server, whatever the list repeats: Chroma refuses
a request naming an id twice, and two SessionSummaries of one session (allowed) put their
session in one list twice, so each read answers per id as for the list without repeats."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.core.ledger import AuthorityRecord
from controller.redaction import PassRedaction
from controller.store.connection import connect
from controller.store.memory_store import MemoryStore, is_tombstone
from devenv.chroma import ChromaServer
from tests.integration.harness import load
from tests.integration.test_erasure_store import NOW, SETTINGS, location, memory, summarize
from tests.support.ledger import forget_unguarded

SESSIONS = ("kept-1", "kept-2", "forgotten", "never")  # two summarized, one forgotten, none


@pytest.fixture(scope="module")
def store(chroma_server: ChromaServer) -> MemoryStore:
    loc = location(chroma_server.url, f"ids-{uuid.uuid4().hex[:8]}")
    made = MemoryStore(connect(loc), loc)
    for sid in SESSIONS[:3]:
        load(made, [memory(sid, i, NOW - 60_000 + i, f"Step {i} of {sid}.") for i in range(3)])
        assert summarize(made, sid).kind == "summarized"
    assert forget_unguarded(made, "forgotten", memories=False).kind == "forgotten"
    return made


def repeating(items: tuple[str, ...]) -> st.SearchStrategy[list[str]]:
    """Lists of items in which at least one repeats, in any order."""
    picked = st.lists(st.sampled_from(items), min_size=1, max_size=6)
    return picked.flatmap(lambda some: st.permutations([*some, *some[: len(some) // 2 + 1]]))


def memory_ids(sessions: list[str]) -> list[str]:
    """Two memory ids of each session, repeated as the sessions are."""
    return [f"{sid}-{i:04d}" for sid in sessions for i in (0, 2)]


# Every read by ids, by session: what it answers about these sessions.
READS: dict[str, Callable[[MemoryStore, list[str]], object]] = {
    "ledger_heads": lambda store, sids: store.ledger_heads(sids),
    "summary_states": lambda store, sids: store.summary_states(sids),
    "rows_digests": lambda store, sids: store.rows_digests(sids),
    "written_since": lambda store, sids: store.written_since(sids, 0),
    "read_row_states": lambda store, sids: store.read_row_states(sids),
    "memories_by_id": lambda store, sids: [
        m.id for m in store.memories_by_id(memory_ids(sids), PassRedaction())
    ],
}


@pytest.mark.parametrize("read", sorted(READS))
@SETTINGS
@given(sessions=repeating(SESSIONS))
def test_every_read_by_ids_answers_as_for_each_id_once_whatever_the_list_repeats(
    store: MemoryStore, read: str, sessions: list[str]
) -> None:
    once = list(dict.fromkeys(sessions))
    assert READS[read](store, sessions) == READS[read](store, once)


@SETTINGS
@given(sessions=repeating(SESSIONS))
def test_a_session_named_twice_still_reads_its_ledger_head_and_memories(
    store: MemoryStore, sessions: list[str]
) -> None:
    heads = store.ledger_heads(sessions)
    assert set(heads) == set(sessions) - {"never"}
    assert is_tombstone(heads.get("forgotten")) == ("forgotten" in sessions)
    assert set(store.read_row_states(sessions)) == set(sessions)
    read = [m.id for m in store.memories_by_id(memory_ids(sessions), PassRedaction())]
    assert sorted(read) == sorted({i for i in memory_ids(sessions) if not i.startswith("never")})


@SETTINGS
@given(uids=repeating(("a", "b", "c")))
def test_removing_authority_records_named_twice_removes_each(
    store: MemoryStore, uids: list[str]
) -> None:
    for uid in uids:
        store.renew_authority(AuthorityRecord(uid, "it", NOW, 60.0))
    store.remove_authorities(uids)
    assert not {r.uid for r in store.authorities()} & set(uids)
