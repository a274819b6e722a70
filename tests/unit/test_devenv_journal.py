"""The chaos tests' write journal (devenv/journal.py): a write's lines are matched by the
time its begin line carries, which each later line repeats as `began`."""

from __future__ import annotations

import contextlib
import itertools
import tempfile
import types
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.core.ledger import RowState
from controller.store.memory_store import RowWrite
from devenv import journal
from tests.support.write_journal import read_writes


@given(st.lists(st.sampled_from(["written", "refused", "failed"]), min_size=1, max_size=6))
def test_each_write_is_read_back_whole_however_the_clock_moves_between_its_reads(
    outcomes: list[str],
) -> None:
    """The clock moves on between the reads of a write's begin (a millisecond boundary, or
    a loaded machine): its begin line then had a later time than its `began`, its other
    lines matched nothing, and it read as begun and never ended (an overlap, or no write)."""
    clock = itertools.count(1_000)
    with pytest.MonkeyPatch.context() as mp, tempfile.TemporaryDirectory() as tmp:
        mp.setattr(journal, "_now_ms", lambda: next(clock))
        path = Path(tmp) / "writes.jsonl"
        for n, outcome in enumerate(outcomes):
            _write(journal.journaled(_write_row, journal.Journal(path)), f"s-{n}", outcome)
        writes = read_writes(path)
    assert [(w.session, w.outcome) for w in writes] == [
        (f"s-{n}", o) for n, o in enumerate(outcomes)
    ]
    assert [w.admitted is not None for w in writes] == [o != "refused" for o in outcomes]


def _write_row(store: Any, summary: Any, *, group: Any, **_: Any) -> None:
    """The pipeline's write_row as far as the journal sees it: one row to its group."""
    group(store, RowWrite(summary.session_id, "doc", {}, [0.0], summary.admit))


def _write(write: Any, sid: str, outcome: str) -> None:
    def admit(found: RowState) -> dict[str, int | str]:
        if outcome == "refused":
            raise PermissionError("claim lost")
        return {}

    def group(store: Any, row: RowWrite) -> None:
        row.admit(RowState(None, None))
        if outcome == "failed":
            raise OSError("store down")

    summary = types.SimpleNamespace(session_id=sid, admit=admit)
    with contextlib.suppress(PermissionError, OSError):  # the journal ends it either way
        write(None, summary, writer="r0", guard=None, group=group)
