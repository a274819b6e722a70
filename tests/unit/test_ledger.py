"""The ledger entry's records (controller/core/ledger.py): a write appends what the growing
lists gained; reading the head and its segments gives back every key written; a head whose
segments are gone reads with its lists lost, never as an error; the row compares with the
entry. Pure."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from controller.core.ledger import (
    BUILT_ON_KEY,
    ROW_DIGEST_KEY,
    SEGMENTS_MAX,
    LedgerRecord,
    RowState,
    plan_write,
    read_entry,
    row_agreement,
    segment_id,
)
from controller.core.summary import HISTORY_SECTIONS, UnreadablePriorSummary
from controller.core.summary_row import DIGEST_KEY, document_digest

SID = "session-1"
items = st.lists(st.builds(lambda t: {"text": t}, st.text(min_size=1, max_size=8)), max_size=4)
Store = dict[str, tuple[str, dict[str, Any]]]  # the ledger collection, by id


def upserted(records: list[LedgerRecord]) -> Store:
    """As Chroma stores them: a key sent as None is removed."""
    return {
        r.record_id: (r.document, {k: v for k, v in r.metadata.items() if v is not None})
        for r in records
    }


def state(sections: dict[str, list[Any]], refs: list[str], n: int) -> dict[str, Any]:
    return {
        "sessionId": SID,
        "summaryFormat": "structured-v1",
        "title": f"Title {n}",
        DIGEST_KEY: f"doc-{n}",
        "sectionsJson": json.dumps({**sections, "Current State": [{"text": f"now {n}"}]}),
        "referencesJson": json.dumps(refs),
        "summarizedAt": n,
        "coverageJson": json.dumps({"v": 1, "b": [[n, 1, "1", "1"]]}),
    }


def write(stored: Store, keys: dict[str, Any], fence: int) -> Store:
    """One write as the store makes it: the plan's records, then every other record of
    the session deleted."""
    head = stored.get(f"summary_{SID}", (None, None))[1]
    others = tuple(k for k in stored if k != f"summary_{SID}")
    found = RowState(None, f"built-{fence}", head, others)
    records, left = plan_write(SID, keys, found, {"fence": fence})
    stored = {**stored, **upserted(records)}
    return {k: v for k, v in stored.items() if k not in left}


def read(stored: Store, row: dict[str, Any] | None = None) -> Any:
    return read_entry(SID, [(k, d, m) for k, (d, m) in stored.items()], row or {})


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.fixed_dictionaries({t: items for t in HISTORY_SECTIONS}),
            st.lists(st.text(max_size=6), max_size=3),
            st.booleans(),  # a supersede mark on an earlier item: the lists change, not grow
        ),
        min_size=1,
        max_size=SEGMENTS_MAX + 8,
    )
)
def test_every_write_reads_back_whole_and_appends_only_what_is_new(
    passes: list[tuple[dict[str, list[Any]], list[str], bool]],
) -> None:
    stored: Store = {}
    sections: dict[str, list[Any]] = {t: [] for t in HISTORY_SECTIONS}
    refs: list[str] = []
    for n, (added, new_refs, mark) in enumerate(passes):
        for title, new in added.items():
            sections[title] = sections[title] + new
        if mark and sections[HISTORY_SECTIONS[0]]:
            first = {**sections[HISTORY_SECTIONS[0]][0], "superseded_by": f"pass {n}"}
            sections[HISTORY_SECTIONS[0]] = [first, *sections[HISTORY_SECTIONS[0]][1:]]
        refs = refs + new_refs
        written = state(sections, refs, n)
        head = stored.get(f"summary_{SID}", (None, None))[1]
        records, _ = plan_write(SID, written, RowState(None, None, head), {"fence": n + 1})
        segments = [r for r in records if r.record_id != f"summary_{SID}"]
        if head is not None and head["generation"] == records[-1].metadata["generation"]:
            grown = sum(len(json.dumps(v)) for v in added.values()) + len(json.dumps(new_refs))
            assert sum(len(r.document) for r in segments) <= grown + 200  # only what is new
        stored = write(stored, written, n + 1)
        got = read(stored)
        assert got is not None and not got.lost and got.leftovers == 0
        assert got.head["fence"] == n + 1 and got.head[ROW_DIGEST_KEY] == f"doc-{n}"
        assert got.keys["title"] == f"Title {n}" and got.keys["summarizedAt"] == n
        back_sections = json.loads(got.keys["sectionsJson"])
        assert {t: back_sections[t] for t in HISTORY_SECTIONS} == sections
        assert back_sections["Current State"] == [{"text": f"now {n}"}]
        assert json.loads(got.keys["referencesJson"]) == refs
        assert got.head["segments"] <= SEGMENTS_MAX


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.fixed_dictionaries({t: items for t in HISTORY_SECTIONS}), min_size=2, max_size=6),
    st.integers(min_value=0, max_value=5),
)
def test_a_late_append_over_a_rewrite_reads_with_its_lists_lost_and_the_next_write_heals(
    appends: list[dict[str, list[Any]]], late_at: int
) -> None:
    """Writer A plans an append from the head as it was; writer B rewrites the lists (a new
    generation) and deletes the old one; A's head lands last. Its entry reads (lists lost,
    no coverage: the pass reads every memory), and the next write leaves a whole entry."""
    stored: Store = {}
    sections: dict[str, list[Any]] = {t: [{"text": "base"}] for t in HISTORY_SECTIONS}
    for n, added in enumerate(appends):
        sections = {t: sections[t] + added[t] for t in HISTORY_SECTIONS}
        stored = write(stored, state(sections, [], n), n + 1)
    head_a = stored[f"summary_{SID}"][1]
    grown = {t: [*sections[t], {"text": f"late {late_at}"}] for t in HISTORY_SECTIONS}
    plan_a, _ = plan_write(SID, state(grown, [], 90), RowState(None, None, head_a), {"fence": 1})
    rewritten = {t: [{"text": "rewritten"}] for t in HISTORY_SECTIONS}
    stored = write(stored, state(rewritten, [], 91), 2)  # B: a new generation
    stored.update(upserted(plan_a))  # A lands
    got = read(stored)
    # the title may quote a memory deleted since: the next pass derives it anew
    assert got.lost and "coverageJson" not in got.keys and "title" not in got.keys
    assert all(json.loads(got.keys["sectionsJson"])[t] == [] for t in HISTORY_SECTIONS)
    stored = write(stored, state(rewritten, [], 92), 3)
    healed = read(stored)
    assert not healed.lost and healed.leftovers == 0 and healed.keys["title"] == "Title 92"


def test_a_missing_or_changed_segment_loses_the_lists_and_a_bad_head_is_unreadable() -> None:
    stored = write({}, state({HISTORY_SECTIONS[0]: [{"text": "a"}]}, ["r"], 0), 1)
    segment = segment_id(SID, 1, 0)
    assert not read(stored).lost
    assert read({k: v for k, v in stored.items() if k != segment}).lost
    changed = {**stored, segment: (json.dumps({"References": ["other"]}), {})}
    assert read(changed).lost
    stray = {**stored, segment_id(SID, 1, 7): ("{}", {})}
    assert read(stray).leftovers == 1 and not read(stray).lost
    for document in ("{not json", "[]", '{"ledgerFormat": 9}', ""):
        with pytest.raises(UnreadablePriorSummary):
            read({f"summary_{SID}": (document, {})})
    assert read({}) is None


def test_a_release_0_1_0_head_takes_the_rows_own_keys_from_the_row() -> None:
    stored = write({}, state({}, [], 0), 1)
    document, meta = stored[f"summary_{SID}"]
    old = {k: v for k, v in json.loads(document).items() if k not in ("title", "summaryFormat")}
    stored[f"summary_{SID}"] = (json.dumps(old), meta)
    got = read(stored, {"title": "Row title", "memoryCount": 3, "notAReaderKey": 1})
    assert got.keys["title"] == "Row title" and got.keys["memoryCount"] == 3
    assert (
        "notAReaderKey" not in got.keys and not got.own and read(write({}, state({}, [], 0), 1)).own
    )


documents = st.text(max_size=60)


@settings(max_examples=300, deadline=None)
@given(documents, documents, st.one_of(st.none(), documents), st.one_of(st.none(), documents))
def test_the_row_agrees_is_behind_or_is_another_writers(
    written: str, row_document: str, row_records: str | None, built_on: str | None
) -> None:
    """agrees: the document the entry names; behind: missing, one whose digest it records
    as its own (a row of ours), or the one the entry was built on (its text is in the
    entry); anything else is another writer's."""
    head = {ROW_DIGEST_KEY: document_digest(written)}
    if built_on is not None:
        head[BUILT_ON_KEY] = document_digest(built_on)
    row = {DIGEST_KEY: document_digest(row_records)} if row_records is not None else {}
    got = row_agreement(row_document, row, head)
    if row_document == written:
        assert got == "agrees"
    elif row_document in (row_records, built_on):
        assert got == "behind"
    else:
        assert got == "foreign"
    assert row_agreement(None, row, head) == "behind"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
shapes = st.fixed_dictionaries(  # as a head records them: any value in any place
    {
        n: st.one_of(json_values, st.tuples(json_values, json_values).map(list))
        for n in ["Sources", "References", *HISTORY_SECTIONS]
    }
)


@settings(max_examples=300, deadline=None)
@given(lists=st.one_of(json_values, shapes))
@example(lists={n: [1e999, "d"] for n in ["Sources", "References", *HISTORY_SECTIONS]}).via(
    "a length JSON reads as infinity"
)
@example(lists=[]).via("not an object")
def test_a_head_whose_lists_another_writer_changed_is_rewritten_not_a_failed_pass(
    lists: Any,
) -> None:
    """Whatever JSON a head's `lists` holds, the next write plans (a list whose recorded
    shape it cannot read is written whole) and its entry reads back every key."""
    keys = state({HISTORY_SECTIONS[0]: [{"text": "a"}]}, ["r"], 0)
    stored = write({}, keys, 1)
    document, head = stored[f"summary_{SID}"]
    stored[f"summary_{SID}"] = (document, {**head, "lists": json.dumps(lists)})
    grown = state({HISTORY_SECTIONS[0]: [{"text": "a"}, {"text": "b"}]}, ["r", "s"], 1)
    entry = read(write(stored, grown, 2))
    assert not entry.lost and json.loads(entry.keys["referencesJson"]) == ["r", "s"]
    assert json.loads(entry.keys["sectionsJson"])[HISTORY_SECTIONS[0]] == [
        {"text": "a"},
        {"text": "b"},
    ]
