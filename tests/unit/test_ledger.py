"""The ledger entry's records (controller/core/ledger.py): a write appends what the growing
lists gained; reading the head and its segments gives back the state written. Pure."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.core.ledger import (
    SEGMENTS_MAX,
    UnreadableLedgerEntry,
    combined_state,
    plan_write,
    read_entry,
    segment_id,
)
from controller.core.summary import HISTORY_SECTIONS

SID = "session-1"
items = st.lists(st.builds(lambda t: {"text": t}, st.text(min_size=1, max_size=8)), max_size=4)


def state(sections: dict[str, list[Any]], refs: list[str], n: int) -> dict[str, Any]:
    return {
        "sectionsJson": json.dumps({**sections, "Current State": [{"text": f"now {n}"}]}),
        "referencesJson": json.dumps(refs),
        "summarizedAt": n,
        "coverageJson": json.dumps({"v": 1, "b": [[n, 1, "1", "1"]]}),
    }


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
    stored: dict[str, tuple[str, dict[str, Any]]] = {}  # the ledger collection, by id
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
        plan = plan_write(SID, written, head, {"fence": n + 1}, f"digest-{n}")
        new_bytes = sum(len(r.document) for r in plan.records[:-1])
        if not plan.superseded:  # appended: the segment holds only what this pass added
            grown = sum(len(json.dumps(v)) for v in added.values()) + len(json.dumps(new_refs))
            assert new_bytes <= grown + 200
        for record in plan.records:
            stored[record.record_id] = (record.document, record.metadata)
        if plan.superseded:  # the store deletes earlier generations
            stored = {
                k: v
                for k, v in stored.items()
                if v[1].get("generation", plan.generation) >= plan.generation
            }
        got = read_entry(SID, [(k, d, m) for k, (d, m) in stored.items()])
        assert got is not None
        head_meta, back = got
        assert head_meta["fence"] == n + 1 and back["summarizedAt"] == n
        back_sections = json.loads(back["sectionsJson"])
        assert {t: back_sections[t] for t in HISTORY_SECTIONS} == sections
        assert back_sections["Current State"] == [{"text": f"now {n}"}]
        assert json.loads(back["referencesJson"]) == refs
        assert head_meta["segments"] <= SEGMENTS_MAX


def test_segments_no_head_names_are_ignored_and_a_missing_one_is_an_error() -> None:
    first = plan_write(SID, state({}, ["a"], 0), None, {}, None)
    records = {r.record_id: (r.document, r.metadata) for r in first.records}
    stray = (segment_id(SID, first.generation, 7), json.dumps({"References": ["stray"]}), {})
    got = read_entry(SID, [(k, d, m) for k, (d, m) in records.items()] + [stray])
    assert got is not None and json.loads(got[1]["referencesJson"]) == ["a"]
    head = records.pop(f"summary_{SID}")
    with pytest.raises(UnreadableLedgerEntry, match="missing"):
        read_entry(SID, [(f"summary_{SID}", head[0], head[1])])
    assert read_entry(SID, []) is None


def test_a_row_newer_than_its_ledger_entry_keeps_none_of_the_entrys_masking() -> None:
    """After a rollback the previous release may rewrite a row (its whole state on the row,
    never masked by this one): the ledger's maskedWith then says nothing of that text."""
    entry = {**state({}, [], 1), "maskedWith": "f00d"}
    newer_row = {**state({}, ["r"], 2), "sessionId": SID}
    assert "maskedWith" not in combined_state(newer_row, entry)
    assert combined_state({"sessionId": SID, "summarizedAt": 3}, entry)["maskedWith"] == "f00d"
