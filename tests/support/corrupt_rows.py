"""Stored records we did not write as we write them (hand-edited, another tool's), each
holding a generated credential: a summary row with a key corrupt, or a ledger entry with its
head's state, a segment or the head's metadata corrupt. For the tests that a record refused
as unreadable is never quoted (tests/unit and tests/integration test_unreadable_rows.py).

Strategies draw SECRET where the credential goes; `with_credential` puts it there, so the
strategies are built once, not per credential."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

from controller.core.ledger import RowState, plan_write
from controller.core.summary import SECTION_TITLES, StructuredSummary, SummaryItem
from controller.core.summary_row import to_chroma_metadata
from tests.support.credentials import generated

SECRET = "SECRETMARK"  # JSON-safe, as every generated credential is
CREDENTIALS = st.builds(
    lambda seed, kind: generated(seed)[kind][0],
    st.integers(0, 2**16),
    st.sampled_from(sorted(generated(0))),
)
_NAMES = st.sampled_from([*SECTION_TITLES, "text", "superseded_by", "v", "b", SECRET])
_LEAVES = st.sampled_from([SECRET, f"see {SECRET} here", "ok", 7, -1, True, None])
_TREES = st.recursive(
    _LEAVES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_NAMES, inner, max_size=3),
    max_leaves=6,
)
# Items as we store them (text, or an object with a text), and not as we do.
_READABLE = st.sampled_from([SECRET, "An item.", {"text": f"Sent {SECRET}."}])
_ITEMS = _READABLE | st.sampled_from(
    [[SECRET], {"text": 7, "note": SECRET}, {SECRET: "x"}, {"text": SECRET * 30}, None]
)


def _sections(items: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(_NAMES, st.lists(items, min_size=1, max_size=3), min_size=1, max_size=3)


# JSON values shaped like what we store (sections of items, lists, coverage buckets) or not,
# holding the credential: as a value, a section's name (its items readable), an item.
CARRYING = (_sections(_READABLE) | _sections(_ITEMS) | _TREES).filter(
    lambda value: SECRET in json.dumps(value)
)
_TEXT = CARRYING.map(json.dumps)
# A key's corrupt value: JSON text holding the credential (most often), that text cut short,
# or the credential itself.
STORED = st.one_of(_TEXT, _TEXT, _TEXT.map(lambda text: text[:-1]), st.just(SECRET))


def row_of(session_id: str) -> dict[str, Any]:
    """A summary row's metadata as we write it, every section holding an item."""
    summary = StructuredSummary(
        session_id=session_id,
        title="Retry the fetcher",
        sections={title: [SummaryItem(text=f"An item of {title}.")] for title in SECTION_TITLES},
        technologies=["kopf"],
    )
    return to_chroma_metadata(summary, writer="w", trigger="t", summarized_at_ms=1)


# Every key a read looks at: the row's, and those a write sets when it has them.
KEYS = sorted(
    {*row_of("s"), "coverageJson", "untimedJson", "itemSourcesJson", "legacySummary"}
    | {"sourcesJson", "referencesOmitted", "referencesOmittedDigests", "maskedWith", "rowsDigest"}
)


@st.composite
def corrupt_rows(draw: st.DrawFn, session_id: str, key: str) -> dict[str, Any]:
    """A row's metadata with `key` corrupt (and, at times, up to two other keys)."""
    keys = [key, *draw(st.lists(st.sampled_from(KEYS), max_size=2))]
    return {**row_of(session_id), **{k: draw(STORED, label=k) for k in keys}}


@st.composite
def corrupt_entries(
    draw: st.DrawFn, session_id: str, key: str | None = None
) -> list[tuple[str, str, dict[str, Any]]]:
    """A ledger entry's records (id, document, metadata) as we write them, then the head's
    state (any JSON; `key` of it, when given), one segment's lists, or the head's metadata
    corrupt."""
    planned, _ = plan_write(session_id, row_of(session_id), RowState(None, None), {"fence": 1})
    # as Chroma stores them: a key sent as None is removed
    records = {
        r.record_id: (r.document, {k: v for k, v in r.metadata.items() if v is not None})
        for r in planned
    }
    head = f"summary_{session_id}"
    where = "state" if key else draw(st.sampled_from(["state", "segment", "head"]))
    if where == "state":
        state = json.loads(records[head][0])
        keys = draw(st.lists(st.sampled_from(sorted(state)), min_size=0 if key else 1, max_size=3))
        keys = [key, *keys] if key else keys
        state.update({key: draw(CARRYING | STORED, label=key) for key in keys})
        records[head] = (json.dumps(state), records[head][1])
    elif where == "segment":
        segment = next(i for i in records if i != head)
        records[segment] = (draw(STORED), records[segment][1])
    else:
        records[head][1]["lists"] = draw(STORED)
    return [(i, doc, meta) for i, (doc, meta) in records.items()]


def with_credential(value: Any, secret: str) -> Any:
    """value (text, or a record's parts) with the credential where SECRET is."""
    if isinstance(value, str):
        return value.replace(SECRET, secret)
    if isinstance(value, dict):
        return {with_credential(k, secret): with_credential(v, secret) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(with_credential(v, secret) for v in value)
    return value


def quotes(secret: str, text: str) -> bool:
    """Does text hold any 8 characters of the credential in a row (a cut quote too)?"""
    return any(secret[i : i + 8] in text for i in range(len(secret) - 7))
