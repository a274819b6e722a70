"""Where a summary is written: one session, prior summary + new memories -> the store.

A pass reads the prior summary and only the memories after its watermark; a large backlog
is processed as a sequence of such passes over bounded chunks. The result must validate
(superset of the prior, no error text) before it is embedded and upserted, so a failed
pass never replaces a good summary. Blocking I/O: handlers call it in a worker thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from controller.extractive import summarize_extractive
from controller.journal import write_begins, write_ends
from controller.memories import Memory, is_excluded
from controller.naming import summary_row_id
from controller.store import MemoryStore
from controller.summary import (
    LegacySummary,
    StructuredSummary,
    render_document,
    to_chroma_metadata,
    validate_summary,
)

Embedder = Callable[[list[str]], Sequence[Any]]  # one vector (floats) per text
Summarizer = Callable[
    [str, Sequence[Memory], StructuredSummary | LegacySummary | None], StructuredSummary
]
OutcomeKind = Literal["summarized", "up-to-date", "not-found", "empty"]

CHUNK_MEMORIES = 400


@dataclass(frozen=True)
class Outcome:
    kind: OutcomeKind
    session_id: str
    memory_count: int
    summary: StructuredSummary | None = None
    new_memories: int = 0
    passes: int = 0
    last_memory_at_ms: int | None = None

    @property
    def summary_id(self) -> str:
        return summary_row_id(self.session_id)


def extractive(
    session_id: str, memories: Sequence[Memory], prior: StructuredSummary | LegacySummary | None
) -> StructuredSummary:
    return summarize_extractive(session_id, memories, prior)


def chunks(memories: Sequence[Memory], size: int) -> list[Sequence[Memory]]:
    return [memories[i : i + size] for i in range(0, len(memories), size)] or [[]]


def summarize_session(
    store: MemoryStore,
    session_id: str,
    *,
    embed: Embedder,
    writer: str,
    trigger: str,
    excluded_types: Sequence[str] = (),
    summarizer: Summarizer = extractive,
    chunk_size: int = CHUNK_MEMORIES,
    before_write: Callable[[], None] | None = None,
) -> Outcome:
    """Brings the session's stored summary up to date with its memories.

    before_write runs right before the upsert (the claim re-check); if it raises, nothing
    is written.
    """
    prior = store.read_summary(session_id)
    watermark = prior.watermark if isinstance(prior, StructuredSummary) else None
    rows = store.session_rows(session_id, after=watermark)
    if rows.total == 0:
        return Outcome("not-found", session_id, 0)
    last_ms = rows.newest.timestamp_ms if rows.newest else None
    new = sorted(
        (m for m in rows.memories if not is_excluded(m, excluded_types)),
        key=lambda m: (m.timestamp_ms, m.id),
    )
    if isinstance(prior, StructuredSummary) and not new and prior.memory_count == rows.total:
        return Outcome("up-to-date", session_id, rows.total, prior, 0, 0, last_ms)
    if prior is None and not new:
        return Outcome("empty", session_id, rows.total, last_memory_at_ms=last_ms)

    current: StructuredSummary | LegacySummary | None = prior
    passes = 0
    for chunk in chunks(new, chunk_size):
        result = summarizer(session_id, chunk, current)
        validate_summary(result, current)
        current = result
        passes += 1
    assert isinstance(current, StructuredSummary)
    # What the summary covers: every row of the session, including excluded types.
    final = current.model_copy(
        update={"memory_count": rows.total, "watermark": rows.newest, "last_memory_at_ms": last_ms}
    )
    validate_summary(final, prior)
    document = render_document(final)
    metadata = to_chroma_metadata(
        final, writer=writer, trigger=trigger, summarized_at_ms=int(time.time() * 1000)
    )
    vector = embed([document])[0]
    store.check_embedding_dimension(len(vector))
    began_ms = int(time.time() * 1000)
    write_begins(session_id, writer, began_ms)
    try:
        if before_write is not None:
            before_write()
        store.write_summary(session_id, document, metadata, vector)
    finally:  # ends whether written or refused (claim lost, store down)
        write_ends(session_id, writer, began_ms, int(time.time() * 1000))
    return Outcome("summarized", session_id, rows.total, final, len(new), passes, last_ms)
