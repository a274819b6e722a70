"""Erasure and memory times on a real Chroma server, through the real pass
(controller/pipeline.py), the real forget (handlers/session_summary.py) and the real scans, no
cluster: an item stored quoted, masked or cut goes with its last memory; a forget cut
short between its two writes (a proxy drops the second on the wire) is not undone by the
next pass and completes when retried; a forgotten session whose rows have times nobody can
read or place is not stale to the sweep or the reconciliation; a memory from a bad clock's
future does not freeze Current State; the sweep's and the marker scan's filters find
timestamps in every unit."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from chromadb.errors import NotFoundError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.api import SessionSummarizerSpec
from controller.core.coverage import PriorCoverage, digest
from controller.core.coverage import build as coverage_of
from controller.core.ledger import FORGOTTEN_KEY, LAST_MEMORY_KEY, LedgerRecord, replacing_head
from controller.core.memories import (
    DEFAULT_EXCLUDED_TYPES,
    FUTURE_TOLERANCE_MS,
    render_interaction_document,
)
from controller.core.naming import summary_row_id
from controller.core.summary import LEGACY_HEADING
from controller.core.sweep_plan import ReconcileCycle, SunsetMarker, covered_by_summary, reconcile
from controller.core.visibility import SessionSources
from controller.pipeline import Backends, Outcome, prior_coverage, summarize_session
from controller.redaction import Redaction
from controller.store.connection import StoreLocation, connect
from controller.store.errors import StoreUnavailable
from controller.store.memory_store import MemoryStore, newer_where
from controller.store.session_listing import SMALL_SESSION
from controller.sweep import plan_from_store
from devenv.chroma import ChromaServer
from tests.integration.harness import load
from tests.support.chroma_proxy import ChromaProxy, chroma_proxy
from tests.support.ledger import forget_unguarded, ledger_of
from tests.support.passes import Verbatim
from tests.support.row_vectors import row_vectors
from tests.unit.test_item_sources import KINDS

NOW = int(time.time() * 1000)
SETTINGS = settings(
    max_examples=6,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def location(url: str, name: str) -> StoreLocation:
    return StoreLocation(
        url=url, memory_collection=f"{name}-memory", summary_collection=f"{name}-sessions"
    )


@pytest.fixture
def store(chroma_server: ChromaServer) -> MemoryStore:
    loc = location(chroma_server.url, f"erasure-{uuid.uuid4().hex[:8]}")
    return MemoryStore(connect(loc), loc)


@pytest.fixture
def proxy(chroma_server: ChromaServer) -> Iterator[ChromaProxy]:
    with chroma_proxy(chroma_server.url) as running:
        yield running


def memory(sid: str, i: int, ts: object, prompt: str, response: str = "Done.") -> Any:
    meta: dict[str, object] = {"sessionId": sid, "type": "agent-interaction", "prompt": prompt}
    meta |= {"response": response, "agent": "claude-code"}
    if ts is not None:
        meta["timestamp"] = ts
    return (f"{sid}-{i:04d}", render_interaction_document(prompt, "", response), meta)


def summarize(store: MemoryStore, sid: str, **parts: Any) -> Outcome:
    return summarize_session(
        Backends(store, row_vectors, **parts), sid, writer="it", trigger="manual"
    )


def everything_stored(store: MemoryStore, sid: str) -> str:
    """The session's row (document and metadata) and every ledger record of it."""
    texts = []
    for name in (store.location.summary_collection, store.location.ledger_collection):
        coll = store.client.get_collection(name)
        got = coll.get(where={"sessionId": sid}, include=["documents", "metadatas"])
        texts.append(json.dumps([got["ids"], got["documents"], got["metadatas"]]))
    return "\n".join(texts)


def fact() -> str:
    return f"FACT{uuid.uuid4().hex[:10].upper()}"


# -- an item stored transformed goes with its memories ---------------------------------------

STORED = st.tuples(
    st.lists(st.sampled_from(sorted(KINDS)), min_size=2, max_size=5),
    st.data(),
    st.sampled_from(["extractive", "verbatim"]),
)


@SETTINGS
@given(case=STORED)
def test_deleting_a_memory_removes_its_quoted_masked_or_cut_items_from_the_store(
    store: MemoryStore, case: tuple[list[str], st.DataObject, str]
) -> None:
    kinds, data, backend = case
    # One memory lives: a session with none is finding 11 (its row stays; issue 48).
    deleted = data.draw(
        st.sets(st.integers(0, len(kinds) - 1), min_size=1, max_size=len(kinds) - 1)
    )
    sid = f"kinds-{uuid.uuid4().hex[:6]}"
    facts = [fact() for _ in kinds]
    rows = [memory(sid, i, NOW - 60_000 + i, KINDS[kind](facts[i])) for i, kind in enumerate(kinds)]
    load(store, rows, row_vectors)
    summarizer = Verbatim() if backend == "verbatim" else None
    options = {"summarizer": summarizer} if summarizer else {}
    assert summarize(store, sid, **options).kind == "summarized"
    before = everything_stored(store, sid)
    store.memories().delete(ids=[rows[i][0] for i in deleted])
    summarize(store, sid, **options)
    after = everything_stored(store, sid)
    for i, kind in enumerate(kinds):
        if i in deleted:
            assert facts[i] not in after, (kind, facts[i], after[:3000])
        elif facts[i] in before:
            assert facts[i] in after, (kind, facts[i])
    assert "AKIA" not in after


# Rows a pass never summarizes: a sunset marker, the default excluded types, injected context.
LEFT_BEHIND = ("session-sunset", "tick", "heartbeat", "context-injection", "injected")


def never_summarized(sid: str, i: int, kind: str) -> Any:
    if kind == "injected":
        return memory(sid, i, NOW - 30_000 + i, "<system-reminder>Keep the tests green.")
    meta = {"sessionId": sid, "timestamp": NOW - 30_000 + i, "type": kind}
    return (f"{sid}-{i:04d}", f"{kind} of {sid}", meta)


@SETTINGS
@given(
    kinds=st.lists(st.sampled_from(sorted(KINDS)), min_size=1, max_size=3),
    left=st.lists(st.sampled_from(LEFT_BEHIND), min_size=1, max_size=3),
)
def test_deleting_every_memory_that_said_something_removes_the_summary_whatever_rows_remain(
    store: MemoryStore, kinds: list[str], left: list[str]
) -> None:
    """The session keeps rows no pass summarizes (markers, excluded types, injected context):
    its summary goes with the last memory that said something in it, not a pass that fails
    and leaves the deleted memories' text in the store."""
    sid = f"left-{uuid.uuid4().hex[:6]}"
    facts = [fact() for _ in kinds]
    said = [memory(sid, i, NOW - 60_000 + i, KINDS[k](facts[i])) for i, k in enumerate(kinds)]
    rows = [never_summarized(sid, 100 + i, kind) for i, kind in enumerate(left)]
    load(store, said + rows, row_vectors)
    options = {"excluded_types": sorted(DEFAULT_EXCLUDED_TYPES)}
    assert summarize(store, sid, **options).kind == "summarized"
    store.memories().delete(ids=[r[0] for r in said])
    outcome = summarize(store, sid, **options)
    assert outcome.kind == "empty" and outcome.memory_count == len(left)
    after = everything_stored(store, sid)
    assert [f for f in facts if f in after] == []
    assert store.stored_summary(sid) is None
    assert summarize(store, sid, **options).kind == "empty"  # and stays so


def test_an_item_masked_again_under_new_rules_still_goes_with_its_memory(
    store: MemoryStore,
) -> None:
    """A pass under other rules (a new extraPattern) masks the items the summary holds; they
    are the same items, and go when their memory does."""
    sid, gone, kept = f"remask-{uuid.uuid4().hex[:6]}", fact(), fact()
    rows = [
        memory(sid, 0, NOW - 60_000, f"Keep {gone} for ticket ZQ-204817 in the notes."),
        memory(sid, 1, NOW - 59_000, f"Keep {kept} in the notes."),
    ]
    load(store, rows, row_vectors)
    assert summarize(store, sid).kind == "summarized"
    assert "ZQ-204817" in everything_stored(store, sid)
    store.memories().delete(ids=[rows[0][0]])
    ticket = Redaction(extra=(("ticket", r"ZQ-\d{6}"),))
    outcome = summarize(store, sid, redaction=ticket)
    assert outcome.redactions.get("ticket", 0) >= 1  # the prior's items were masked again
    after = everything_stored(store, sid)
    assert gone not in after and "ZQ-204817" not in after
    assert kept in after


# -- a forget cut short ------------------------------------------------------------------------


@pytest.mark.parametrize("applied", [False, True], ids=["never-sent", "answer-lost"])
@pytest.mark.parametrize("memories", [False, True], ids=["summary", "with-memories"])
def test_a_forget_cut_after_its_tombstone_is_not_undone_and_completes_when_retried(
    store: MemoryStore, proxy: ChromaProxy, applied: bool, memories: bool
) -> None:
    sid, said = f"cut-{uuid.uuid4().hex[:6]}", fact()
    load(
        store,
        [memory(sid, i, NOW - 60_000 + i, f"Keep {said} step {i}.") for i in range(3)],
        row_vectors,
    )
    assert summarize(store, sid).kind == "summarized"
    through = MemoryStore(connect(proxy_location := _via(proxy, store)), proxy_location)
    proxy.arm(0, "unanswered" if applied else "lost", verb="delete")  # the row's delete
    with pytest.raises(StoreUnavailable):
        forget_unguarded(through, sid, memories=memories)
    assert [verb for verb, _ in proxy.failed] == ["delete"]
    head = ledger_of(store).get(ids=[f"summary_{sid}"], include=["metadatas"])["metadatas"]
    assert head and "forgottenAt" in (head[0] or {})
    # The row the forget left (never-sent) is forgotten all the same: the next pass does
    # not carry its text as an earlier summary.
    outcome = summarize(store, sid)
    assert outcome.summary is None or outcome.summary.legacy_text is None
    assert LEGACY_HEADING not in everything_stored(store, sid)
    # Retried, the forget completes.
    proxy.arm(None)
    forgotten = forget_unguarded(through, sid, memories=memories)
    assert forgotten.kind == "forgotten"
    assert store.stored_summary(sid) is None and said not in everything_stored(store, sid)
    assert len(store.session_ids(sid)) == (0 if memories else 3)


@SETTINGS
@given(
    memories=st.integers(0, 3), summarized=st.booleans(), delete=st.booleans(), again=st.booleans()
)
def test_a_forget_counts_only_what_it_found(
    store: MemoryStore, memories: int, summarized: bool, delete: bool, again: bool
) -> None:
    """Whatever existed (memories or none, a summary or none, a tombstone already), a
    forget's counts are what it found: a session never summarized has no ledger record to
    remove, and a second forget removes nothing the first did not."""
    sid = f"count-{uuid.uuid4().hex[:6]}"
    load(
        store,
        [memory(sid, i, NOW - 60_000 + i, f"Step {i}.") for i in range(memories)],
        row_vectors,
    )
    if summarized:
        summarize(store, sid)
    if again:
        forget_unguarded(store, sid, memories=False)
    got: list[Any] = []
    with contextlib.suppress(NotFoundError):  # nothing summarized in this store yet
        got = (
            ledger_of(store).get(where={"sessionId": sid}, include=["metadatas"])["metadatas"] or []
        )
    records = sum("forgottenAt" not in (m or {}) for m in got)
    row = store.stored_summary(sid) is not None
    gone = forget_unguarded(store, sid, memories=delete).forgotten
    assert gone is not None
    assert (gone.row, gone.ledger_records) == (row, records), (gone, got)
    assert gone.memories == (memories if delete else 0)
    assert gone.remaining == len(store.session_ids(sid)) == (0 if delete else memories)


def _via(proxy: ChromaProxy, store: MemoryStore) -> StoreLocation:
    loc = store.location
    return StoreLocation(
        url=proxy.url,
        memory_collection=loc.memory_collection,
        summary_collection=loc.summary_collection,
    )


# -- a forgotten session stays forgotten whatever its rows' times ------------------------------

TIMES = st.lists(
    st.sampled_from(
        ["ms", "seconds", "micros", "iso", "none", "words", "1.7e12", "future", "past"]
    ),
    min_size=1,
    max_size=6,
)


def shaped(shape: str, ms: int) -> object:
    """A row's timestamp as some writer stored it: in every unit, as text nobody reads, or
    from a bad clock (400 days ahead; before 2000)."""
    return {
        "ms": ms,
        "seconds": ms // 1000,
        "micros": ms * 1000 + 7,
        "nanos": ms * 1_000_000 + 7,
        "iso": dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(),
        "none": None,
        "words": "yesterday",
        "1.7e12": "1.7e12",
        "future": ms + 400 * 86_400_000,
        "past": 946_684_700_000,
    }[shape]


@SETTINGS
@given(shapes=TIMES)
def test_a_forgotten_session_with_rows_of_every_time_is_stale_to_no_scan(
    store: MemoryStore, shapes: list[str]
) -> None:
    sid = f"forgot-{uuid.uuid4().hex[:6]}"
    rows = [memory(sid, 0, NOW - 120_000, "Keep the first request.")]
    rows += [
        memory(sid, i + 1, shaped(s, NOW - 100_000 + i), f"Step {i}.") for i, s in enumerate(shapes)
    ]
    load(store, rows, row_vectors)
    summarize(store, sid)
    assert forget_unguarded(store, sid, memories=False).kind == "forgotten"
    now = int(time.time() * 1000)
    # The reconciliation's walk, as controller/sweep.py runs it (reconcile_step).
    cycle = ReconcileCycle(now)
    cycle.fold(store.rows_from(0, 10_000), now)
    stored = store.summary_states(list(cycle.counts))
    agree = [s for s, n in cycle.counts.items() if (got := stored.get(s)) and got.memory_count == n]
    plan = reconcile(
        cycle,
        stored,
        now_ms=now,
        idle_ms=0,
        max_sessions=100,
        rows_digests=store.rows_digests(agree),
    )
    assert sid not in plan.candidates + plan.deferred
    assert stored[sid].memory_count == cycle.counts[sid] == len(store.session_ids(sid))
    # The sweep, from a watermark before every row.
    spec = SessionSummarizerSpec.model_validate({"sweep": {"idleSeconds": 1}})
    swept = plan_from_store(store, spec, watermark_ms=NOW - 3_600_000, now_ms=now).plan
    assert sid not in swept.candidates + swept.deferred


SKEWS = st.integers(-FUTURE_TOLERANCE_MS, FUTURE_TOLERANCE_MS)  # agent clock - operator clock


@settings(SETTINGS, max_examples=25)
@given(skew=SKEWS, ages=st.lists(st.integers(0, 600_000), min_size=1, max_size=3), other=SKEWS)
def test_a_forgotten_session_is_stale_only_once_a_memory_comes_after_its_forget_whatever_clock(
    store: MemoryStore, skew: int, ages: list[int], other: int
) -> None:
    """Agents' clocks up to FUTURE_TOLERANCE_MS off the operator's, either way: a session
    summarized, then forgotten (summary only: summaryctl forget's default), with no memory
    newer in its agent's clock than the forget, is no sweep candidate and its newest memory as
    a sunset marker is covered; a memory after the forget, from any such clock, makes it one."""
    sid = f"skewed-{uuid.uuid4().hex[:6]}"
    start = int(time.time() * 1000) + skew  # the agent's clock now
    rows = [memory(sid, i, start - age, f"Step {i}.") for i, age in enumerate(ages)]
    load(store, rows, row_vectors)
    newest = start - min(ages)
    assert summarize_session(Backends(store, row_vectors), sid, writer="it", trigger="t").kind
    assert forget_unguarded(store, sid, memories=False).kind == "forgotten"
    spec = SessionSummarizerSpec()

    def swept(newest_ms: int) -> list[str]:
        """The sweep's candidates once the session is idle (spec.sweep.idleSeconds)."""
        now_ms = newest_ms + spec.sweep.idle_seconds * 1000 + 1_000
        plan = plan_from_store(store, spec, watermark_ms=None, now_ms=now_ms).plan
        return plan.candidates + plan.deferred

    state = store.summary_states([sid])[sid]
    assert sid not in swept(newest), (state, newest)
    assert covered_by_summary(SunsetMarker(sid, newest), state), (state, newest)
    after = int(time.time() * 1000) + other  # a memory after the forget, from any clock
    load(store, [memory(sid, len(ages), after, "One more step.")], row_vectors)
    assert sid in swept(max(newest, after))
    if other == skew:  # the same agent's sunset marker after the forget asks for a pass
        assert not covered_by_summary(SunsetMarker(sid, after), state)


@settings(SETTINGS, max_examples=10)
@given(skew=SKEWS, again=st.sampled_from(["the retry", "another forget"]))
def test_a_forget_again_keeps_the_time_of_the_memories_the_first_one_removed(
    store: MemoryStore, skew: int, again: str
) -> None:
    """A forget that deleted the memories, run again (its retry after a lapsed claim or a
    failed status write, or another request) finds none: the tombstone keeps the newest time
    of those the first removed, not the operator's clock, so the agent's sunset marker after
    the forget still asks for a pass."""
    sid = f"again-{uuid.uuid4().hex[:6]}"
    newest = int(time.time() * 1000) + skew - 1_000
    load(store, [memory(sid, i, newest - i, f"Step {i}.") for i in range(2)], row_vectors)
    forget_unguarded(store, sid, memories=True, request="uid/1")
    first = store.ledger_heads([sid])[sid][LAST_MEMORY_KEY]
    assert first == newest
    forget_unguarded(store, sid, memories=True, request="uid/1" if again == "the retry" else "b/1")
    state = store.summary_states([sid])[sid]
    assert store.ledger_heads([sid])[sid][LAST_MEMORY_KEY] == first
    assert not covered_by_summary(SunsetMarker(sid, newest + 1), state)


def test_a_tombstone_of_release_0_1_0_is_read_by_the_time_of_its_forget(store: MemoryStore) -> None:
    """0.1.0's tombstones have no lastMemoryAt: the sweep compares forgottenAt, as it did."""
    sid = f"old-tomb-{uuid.uuid4().hex[:6]}"
    load(store, [memory(sid, i, NOW - 60_000 + i, f"Step {i}.") for i in range(2)], row_vectors)
    forget_unguarded(store, sid, memories=False)
    keys = ("sessionId", "ledgerFormat", FORGOTTEN_KEY, "rowsDigest", "memoryCount")
    head = store.ledger_heads([sid])[sid]
    old = LedgerRecord(summary_row_id(sid), "{}", replacing_head({k: head[k] for k in keys}))
    store._put("ledger", "writing a tombstone as release 0.1.0 did", [old])
    assert store.summary_states([sid])[sid].timestamp_ms == head[FORGOTTEN_KEY]
    spec = SessionSummarizerSpec.model_validate({"sweep": {"idleSeconds": 1}})
    swept = plan_from_store(store, spec, watermark_ms=None, now_ms=int(time.time() * 1000)).plan
    assert sid not in swept.candidates + swept.deferred


def test_a_row_of_no_session_neither_ends_the_walk_nor_hides_the_rows_added_after_it(
    store: MemoryStore,
) -> None:
    sid = f"walked-{uuid.uuid4().hex[:6]}"
    load(store, [memory(f"{sid}-before", 0, NOW, "Before the cursor.")], row_vectors)
    _, cursor, _ = store.scan_appended(None)
    orphan = memory(sid, 0, NOW, "A row of no session.")
    del orphan[2]["sessionId"]
    load(
        store, [orphan, *(memory(sid, i, NOW + i, f"Step {i}.") for i in range(1, 4))], row_vectors
    )
    page = store.rows_from(1, 4)
    assert len(page) == 4  # a full page: the walk reads on
    cycle = ReconcileCycle(NOW)
    assert cycle.fold(page, NOW) == 4 and cycle.counts == {sid: 3}
    appended, _, aligned = store.scan_appended(cursor)
    assert aligned and sorted(appended) == [(sid, NOW + i) for i in range(1, 4)]


# -- a bad clock's memory does not freeze Current State ----------------------------------------

UNITS = st.lists(
    st.sampled_from(["ms", "seconds", "micros", "nanos", "iso", "future", "past"]),
    min_size=1,
    max_size=5,
)


def current_state(store: MemoryStore, sid: str) -> str:
    stored = store.stored_summary(sid)
    assert stored is not None
    return json.dumps(json.loads(stored[1]["sectionsJson"]).get("Current State"))


@SETTINGS
@given(units=UNITS)
def test_current_state_follows_the_newest_memory_whatever_the_other_times(
    store: MemoryStore, units: list[str]
) -> None:
    sid = f"clock-{uuid.uuid4().hex[:6]}"
    rows = [
        memory(sid, i, shaped(u, NOW - 600_000 + i * 1000), f"Step {i}.", f"Did step {i}.")
        for i, u in enumerate(units)
    ]
    # More rows than SMALL_SESSION: a session the pass may list only the new rows of.
    rows += [memory(sid, 500 + i, NOW - 900_000 + i, f"Note {i}.") for i in range(SMALL_SESSION)]
    load(store, rows, row_vectors)
    summarize(store, sid)
    for n in range(2):
        state = f"STATE{uuid.uuid4().hex[:8].upper()}"
        ts = int(time.time() * 1000) - 1000
        load(store, [memory(sid, 100 + n, ts, f"Next {n}.", f"Finished {state}.")], row_vectors)
        assert summarize(store, sid).kind == "summarized"
        assert state in current_state(store, sid), units
    assert summarize(store, sid).kind == "up-to-date"
    # With nothing but new rows since, a pass lists only those (not the whole session).
    prior = store.read_summary(sid)
    load(
        store, [memory(sid, 200, int(time.time() * 1000) - 500, "Last.", "Done last.")], row_vectors
    )
    rows_now = store.session_rows(sid, prior_coverage(prior))  # type: ignore[arg-type]
    assert rows_now.base is not None and rows_now.selected == 1


def test_a_session_with_more_untimed_rows_than_sqlite_binds_is_listed_by_its_new_rows(
    store: MemoryStore,
) -> None:
    """A pass after one that summarized a session's rows without a time reads their stored
    times by id: past SQLite's 32,766 bound variables one read of them all failed ("too
    many SQL variables", a StoreUnavailable retried for good)."""
    sid, count = f"untimed-{uuid.uuid4().hex[:6]}", 33_000
    coll = store.create_memory_collection()
    untimed = [f"{sid}-u{n:05d}" for n in range(count)]
    for start in range(0, count, 5000):
        part = untimed[start : start + 5000]
        metas: list[Any] = [{"sessionId": sid, "prompt": "Note."}] * len(part)
        coll.add(ids=part, embeddings=[[1.0, 0.0]] * len(part), metadatas=metas)
    mark = (NOW - 60_000, f"{sid}-t")
    meta: Any = {"sessionId": sid, "prompt": "Step.", "timestamp": mark[0]}
    coll.add(ids=[mark[1]], embeddings=[[1.0, 0.0]], metadatas=[meta])
    prior = PriorCoverage(
        watermark_key=mark,
        coverage=coverage_of([mark]),
        digest=digest([*untimed, mark[1]]),
        sources_json=SessionSources().to_json(),
        untimed=frozenset(untimed),
    )
    rows = store.session_rows(sid, prior)
    assert rows.base is not None and rows.selected == 0  # listed by its new rows only
    assert rows.total == count + 1 and rows.untimed == tuple(untimed)
    assert rows.untimed_values == dict.fromkeys(untimed)


# -- the sweep's and the marker scan's filters, in every unit ---------------------------------

SCANNED = st.lists(
    st.tuples(
        st.sampled_from(["ms", "ms-float", "seconds", "seconds-float", "micros", "nanos"]),
        st.integers(-3_600_000, 3_600_000),  # offset from the watermark
        st.booleans(),  # a sunset marker
    ),
    min_size=1,
    max_size=12,
)


def numeric(unit: str, ms: int) -> int | float:
    return {
        "ms": ms,
        "ms-float": ms + 0.25,
        "seconds": ms // 1000,
        "seconds-float": ms / 1000,
        "micros": ms * 1000 + 999,
        "nanos": ms * 1_000_000 + 999_999,
    }[unit]


@settings(SETTINGS, max_examples=40)
@given(rows=SCANNED, future=st.booleans())
def test_the_scans_find_rows_newer_than_the_watermark_in_every_unit(
    store: MemoryStore, rows: list[tuple[str, int, bool]], future: bool
) -> None:
    watermark = NOW - 4 * 3_600_000
    sid = f"units-{uuid.uuid4().hex[:6]}"
    loaded = []
    for i, (unit, offset, marker) in enumerate(rows):
        row_id, document, meta = memory(sid, i, numeric(unit, watermark + offset), f"Step {i}.")
        meta["type"] = "session-sunset" if marker else "agent-interaction"
        loaded.append((row_id, document, meta))
    if future:  # a bad clock's row: never the sweep's activity (scan_appended finds it)
        loaded.append(memory(sid, 99, NOW + 10 * FUTURE_TOLERANCE_MS, "Later."))
    load(store, loaded, row_vectors)
    times = [_read_ms(unit, watermark + offset) for unit, offset, _ in rows]
    newer = sorted(t for t in times if t > watermark)
    # Chroma's filter itself matches those rows and no other (no older µs/ns row every sweep).
    ceiling = int(time.time() * 1000) + FUTURE_TOLERANCE_MS
    where = {"$and": [{"sessionId": sid}, newer_where(watermark, ceiling)]}
    matched = store.memories().get(where=where, include=[])["ids"]  # type: ignore[arg-type]
    assert sorted(matched) == sorted(
        r[0] for r, t in zip(loaded, times, strict=False) if t > watermark
    )
    assert sorted(ts for s, ts in store.scan_since(watermark) if s == sid) == newer
    markers = store.scan_markers("session-sunset", watermark)
    expected = sorted(t for t, (_, _, m) in zip(times, rows, strict=True) if m and t > watermark)
    assert sorted(ts for _, s, ts in markers if s == sid) == expected


def _read_ms(unit: str, ms: int) -> int:
    """The time a numeric timestamp of this unit reads as (memories.parse_timestamp_ms)."""
    return ms if unit != "seconds" else (ms // 1000) * 1000
