"""A pass over a session longer than one listing page streams its memories from the real
Chroma server: the summary it writes is the one a single-page read writes, every row is
covered exactly once, and memories are read as the pass consumes them, not up front."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from controller.core.document import render_document
from controller.core.memories import SUNSET_MARKER_TYPE, render_interaction_document
from controller.pipeline import Backends, Outcome, prior_coverage, summarize_session
from controller.store import session_listing
from controller.store.connection import StoreLocation, connect
from controller.store.memory_store import MemoryStore
from devenv.chroma import running_chroma

START_MS = 1_770_000_000_000
SESSION = "streamed-session"
ROWS = 230  # with a page of 50 and batches of 20: five listing pages, a dozen reads


@pytest.fixture(scope="module")
def chroma_url() -> Iterator[str]:
    with running_chroma() as chroma:
        yield chroma.url


def store_at(url: str, summaries: str) -> MemoryStore:
    location = StoreLocation(url=url, summary_collection=summaries)
    return MemoryStore(connect(location), location)


def row(i: int) -> tuple[str, str, dict[str, Any]]:
    """Memory i of the session: every 7th an excluded sunset marker, every 11th sharing its
    timestamp with the one before (the id breaks the tie), the rest ordinary turns."""
    kind = SUNSET_MARKER_TYPE if i % 7 == 3 else "agent-interaction"
    ts = START_MS + (i - 1 if i % 11 == 5 else i) * 1000
    prompt = f"Step {i}: make the exporter retry batch {i} on port {7000 + i}."
    thought, response = f"thinking about step {i}", f"Done with step {i}."
    meta: dict[str, Any] = {
        "sessionId": SESSION,
        "timestamp": ts,
        "type": kind,
        "prompt": prompt,
        "thought": thought,
        "response": response,
    }
    doc = render_interaction_document(prompt, thought, response)
    # Loaded out of order, so Chroma's listing order is not the session's order.
    return (f"mem-{(i * 37) % ROWS:04d}-{i:04d}", doc, meta)


@pytest.fixture(scope="module")
def loaded(chroma_url: str) -> str:
    store = store_at(chroma_url, "unused-summaries")
    coll = store.create_memory_collection()
    rows = [row(i) for i in range(ROWS)]
    # Every 13th row without a document (older agents wrote none): rebuilt from metadata.
    for bare in (False, True):
        part = [r for i, r in enumerate(rows) if (i % 13 == 0) == bare]
        coll.upsert(
            ids=[r[0] for r in part],
            documents=None if bare else [r[1] for r in part],
            metadatas=[r[2] for r in part],
            embeddings=np.full((len(part), 384), 1 / np.sqrt(384), dtype=np.float32),
        )
    return chroma_url


def embed(texts: list[str]) -> list[list[float]]:
    return [[1.0] + [0.0] * 383 for _ in texts]


def summarize(url: str, summaries: str, **kw: Any) -> Outcome:
    return summarize_session(
        Backends(store_at(url, summaries), embed), SESSION, writer="test", trigger="test", **kw
    )


def test_a_session_longer_than_a_page_gets_the_summary_of_a_single_page_read(
    loaded: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = summarize(loaded, "one-page", chunk_size=25, checkpoint_passes=3)
    monkeypatch.setattr(session_listing, "LIST_PAGE", 50)
    monkeypatch.setattr(session_listing, "GET_BATCH", 20)
    streamed = summarize(loaded, "streamed", chunk_size=25, checkpoint_passes=3)

    markers = sum(1 for i in range(ROWS) if i % 7 == 3)
    for outcome in (whole, streamed):
        assert outcome.kind == "summarized"
        assert (outcome.memory_count, outcome.new_memories) == (ROWS, ROWS - markers)
        assert outcome.passes == -(-(ROWS - markers) // 25)
        assert outcome.checkpoints == (outcome.passes - 1) // 3
    assert streamed.summary is not None and whole.summary is not None
    assert streamed.summary.watermark == whole.summary.watermark
    assert streamed.summary.watermark is not None
    newest = max((r[2]["timestamp"], r[0]) for r in map(row, range(ROWS)))
    assert (streamed.summary.watermark.timestamp_ms, streamed.summary.watermark.memory_id) == newest
    assert render_document(streamed.summary) == render_document(whole.summary)


def test_a_second_pass_after_new_memories_counts_every_row_once(
    loaded: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(session_listing, "LIST_PAGE", 50)
    monkeypatch.setattr(session_listing, "GET_BATCH", 20)
    first = summarize(loaded, "incremental", chunk_size=40)
    again = summarize(loaded, "incremental", chunk_size=40)
    assert (first.kind, again.kind) == ("summarized", "up-to-date")
    assert again.memory_count == ROWS


def test_memories_are_read_as_the_pass_consumes_them(
    loaded: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row deleted after the pass started but before its batch was read is not seen: the
    batch was not read up front. (Rows of batches already read are.)"""
    monkeypatch.setattr(session_listing, "LIST_PAGE", 50)
    monkeypatch.setattr(session_listing, "GET_BATCH", 20)
    store = store_at(loaded, "unused-summaries")
    rows = store.session_rows(SESSION)
    assert rows.total == ROWS and rows.included == ROWS and len(rows.keys) == ROWS
    stream = rows.memories()
    head = [next(stream) for _ in range(20)]  # exactly the first batch
    last_id = list(rows.keys)[-1][1]
    kept = store.memories().get(ids=[last_id], include=["documents", "metadatas"])
    store.memories().delete(ids=[last_id])
    try:
        rest = list(stream)
    finally:  # the other tests read the whole session
        store.memories().upsert(
            ids=[last_id],
            documents=kept["documents"],
            metadatas=kept["metadatas"],
            embeddings=np.full((1, 384), 1 / np.sqrt(384), dtype=np.float32),
        )
    seen = [m.id for m in head + rest]
    assert last_id not in seen and len(seen) == ROWS - 1
    assert [(m.timestamp_ms, m.id) for m in head + rest] == list(rows.keys)[:-1]


def test_a_memory_added_after_a_pass_reaches_the_next_with_its_document(chroma_url: str) -> None:
    """A row only its document describes (no prompt or response in its metadata), added
    after the prior, is read with its text when only the new rows are listed too."""
    location = StoreLocation(url=chroma_url, memory_collection="notes", summary_collection="n-s")
    store = MemoryStore(connect(location), location)
    metas = [{"sessionId": "notes", "timestamp": START_MS + i, "type": "note"} for i in range(61)]
    ids, docs = [f"note-{i:03d}" for i in range(61)], [f"note {i}" for i in range(60)]
    docs.append("the exporter listens on port 7443")
    assert len(ids) > session_listing.SMALL_SESSION  # listed by its new rows only
    store.add_memories(ids[:60], docs[:60], metas[:60], create=True, embed=embed)
    summarize_session(Backends(store, embed), "notes", writer="test", trigger="test")
    store.add_memories(ids[60:], docs[60:], metas[60:], embed=embed)
    rows = store.session_rows("notes", prior_coverage(store.read_summary("notes")))
    assert rows.base is not None  # the appended-rows listing
    assert [(m.id, m.document) for m in rows.memories()] == [(ids[60], docs[60])]
