"""The ledger entry (controller/core/ledger.py): one record holds every key of a write and
reads back whole; the row compares with it; release 0.1.0's entries (a head and segments)
still read. Pure."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.core.ledger import (
    BUILT_ON_KEY,
    LEDGER_FORMAT,
    ROW_DIGEST_KEY,
    UnreadableLedgerEntry,
    ledger_record,
    read_entry,
    row_agreement,
)
from controller.core.row_ownership import DIGEST_KEY, document_digest
from controller.core.summary import HISTORY_SECTIONS

SID = "session-1"
scalars = st.one_of(
    st.text(max_size=40),
    st.integers(min_value=-(2**53), max_value=2**53),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
)
keys = st.dictionaries(st.text(min_size=1, max_size=12), scalars, max_size=12)


@settings(max_examples=200, deadline=None)
@given(keys, st.text(max_size=30), st.one_of(st.none(), st.text(min_size=1, max_size=30)))
def test_every_key_of_a_write_reads_back_from_its_one_record(
    written: dict[str, Any], document: str, built_on: str | None
) -> None:
    written = {**written, DIGEST_KEY: document_digest(document), "sessionId": SID}
    record = ledger_record(SID, written, {"fence": 7, "fenceAuthority": "a"}, built_on)
    assert record.record_id == f"summary_{SID}"
    got = read_entry(SID, [(record.record_id, record.document, record.metadata)], {})
    assert got is not None and got.leftovers == 0
    head, back = got.head, got.keys
    assert back == written
    assert head["fence"] == 7 and head["ledgerFormat"] == LEDGER_FORMAT
    assert head[ROW_DIGEST_KEY] == document_digest(document)
    assert head.get(BUILT_ON_KEY) == built_on
    assert all(value is not None for value in head.values())  # Chroma refuses None


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


def release_0_1_0_entry(lists: dict[str, list[Any]], segments: int) -> list[tuple[str, str, Any]]:
    """A format-1 entry as release 0.1.0 wrote it: a head naming `segments` segments of
    generation 3, the lists (at most 6 items a segment) split among them in order."""
    head_id = f"summary_{SID}"
    rest = {"ledgerFormat": 1, "sectionsJson": json.dumps({"Current State": [{"text": "now"}]})}
    head_meta = {"sessionId": SID, "generation": 3, "segments": segments, "fence": 4}
    records = [(head_id, json.dumps(rest), head_meta)]
    for seq in range(segments):
        part = {name: items[seq * 6 : (seq + 1) * 6] for name, items in lists.items()}
        records.append((f"{head_id}#3.{seq}", json.dumps(part), {"sessionId": SID}))
    return records


@settings(max_examples=100, deadline=None)
@given(
    st.fixed_dictionaries(
        {name: st.lists(st.text(max_size=5), max_size=24) for name in HISTORY_SECTIONS}
    ),
    st.integers(min_value=4, max_value=6),
)
def test_a_release_0_1_0_entry_reads_with_the_rows_own_keys(
    lists: dict[str, list[Any]], segments: int
) -> None:
    records = release_0_1_0_entry(lists, segments)
    row = {"title": "Kept title", "memoryCount": 3, "notAReaderKey": 1}
    got = read_entry(SID, records, row)
    assert got is not None and got.leftovers == segments
    head, back = got.head, got.keys
    assert head["fence"] == 4 and back["title"] == "Kept title" and back["memoryCount"] == 3
    assert "notAReaderKey" not in back
    sections = json.loads(back["sectionsJson"])
    assert sections["Current State"] == [{"text": "now"}]
    assert {name: sections[name] for name in HISTORY_SECTIONS} == lists
    with pytest.raises(UnreadableLedgerEntry, match="missing"):
        read_entry(SID, records[:-1], row)


@pytest.mark.parametrize("document", ["{not json", "[]", '{"ledgerFormat": 9}', "", None])
def test_an_entry_of_no_known_format_is_unreadable(document: str | None) -> None:
    with pytest.raises(UnreadableLedgerEntry):
        read_entry(SID, [(f"summary_{SID}", document, {})], {})
    assert read_entry(SID, [], {}) is None
