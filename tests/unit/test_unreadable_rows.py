"""A stored record we cannot read (a summary row or ledger entry someone else wrote or edited
by hand) is refused without quoting it: its value may hold a credential, and why it was
refused is shown on the SessionSummary (condition, Event), in the log and by summaryctl."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.core.ledger import read_entry
from controller.core.summary import SUMMARY_FORMAT, UnreadablePriorSummary
from controller.core.summary_row import from_chroma_row
from controller.status.conditions import failure_shown
from tests.support.corrupt_rows import (
    CREDENTIALS,
    KEYS,
    corrupt_entries,
    corrupt_rows,
    quotes,
    with_credential,
)

SID = "s1"


def assert_refused_without_quoting(secret: str, read: Callable[[], object]) -> None:
    """read() reads the record or refuses it as unreadable, in words that quote none of it."""
    try:
        read()
    except UnreadablePriorSummary as exc:
        shown = failure_shown(exc)
        for text in (str(exc), shown[1] if shown else ""):
            assert not quotes(secret, text), text


@pytest.mark.parametrize("key", KEYS)
@settings(max_examples=25)
@given(secret=CREDENTIALS, data=st.data(), document=st.sampled_from([None, "", "  "]))
def test_a_row_we_cannot_read_is_refused_without_quoting_it(
    key: str, secret: str, data: st.DataObject, document: str | None
) -> None:
    """Any key of a row of ours corrupt, and no document to carry as another writer's text:
    the pass stops (UnreadablePriorSummary) and says why without the value."""
    meta = with_credential(data.draw(corrupt_rows(SID, key)), secret)
    meta["summaryFormat"] = SUMMARY_FORMAT  # ours: refused, not carried as another's text
    assert_refused_without_quoting(secret, lambda: from_chroma_row(SID, document, meta))


@given(secret=CREDENTIALS, data=st.data())
def test_a_ledger_entry_we_cannot_read_is_refused_without_quoting_it(
    secret: str, data: st.DataObject
) -> None:
    """Read as a pass reads an entry whose row is behind it (no document to carry): read,
    or refused as unreadable (never another error) without quoting it."""
    records = with_credential(data.draw(corrupt_entries(SID)), secret)

    def read() -> None:
        entry = read_entry(SID, records, {})
        if entry is not None:
            from_chroma_row(SID, None, {**entry.keys, "summaryFormat": SUMMARY_FORMAT})

    assert_refused_without_quoting(secret, read)
