"""The one write of a summary: render, embed, then the group write re-reads the row (a newer
fence or another writer's document refuses it). controller/pipeline.py decides what."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Protocol

from controller.core.document import render_document
from controller.core.ledger import Fence, RowState
from controller.core.summary import StructuredSummary
from controller.core.summary_row import (
    Provenance,
    RowChangedDuringPass,
    document_digest,
    to_chroma_metadata,
)
from controller.store.memory_store import MemoryStore, RowWrite

Embedder = Callable[[list[str]], Sequence[Any]]  # one vector (floats) per text
EMBED_CHARS = 8000


class WriteGuard(Protocol):
    """The writer's side of the session's claim (kube/claims.py:SessionClaimHandle)."""

    def check(self) -> None:
        """Raises once this writer may no longer write (no I/O)."""

    def admit(self, found: Fence | None) -> Mapping[str, int | str]:
        """Raises if we may not write over `found`; else the keys the ledger entry records."""


# Writes a row in a group (scheduling.PassScheduler.store_write) or raises; CLI: write_alone.
GroupWrite = Callable[[MemoryStore, RowWrite], None]


def write_alone(store: MemoryStore, write: RowWrite) -> None:
    store.write_rows([write])
    write.result()


# Times a step of a pass as the named phase (tracing.PassTrace.phase); untimed: no trace.
PhaseTimer = Callable[[str], AbstractContextManager[None]]


def untimed(phase: str) -> AbstractContextManager[None]:
    return nullcontext()


@dataclass(frozen=True)
class Written:
    """What a write stored; digest: what the pass's next write expects to find."""

    at_ms: int
    document: str
    digest: str


def write_row(
    store: MemoryStore,
    summary: StructuredSummary,
    *,
    embed: Embedder,
    writer: str,
    trigger: str,
    guard: WriteGuard | None,
    seen: str | None,
    provenance: Provenance | None = None,
    visibility: Mapping[str, str | int | None] | None = None,
    group: GroupWrite = write_alone,
    phase: PhaseTimer = untimed,
) -> Written:
    """Writes the row unless, read right before the upsert, it has a newer fence or a document
    whose digest is not `seen` (None: no row). Chroma has no conditional write: a window
    remains between that read and the upsert."""
    with phase("summarized"):  # the document is the summary as agents read it
        document = render_document(
            summary, store.location.memory_collection, max_chars=store.location.document_max_chars
        )
        summarized_at_ms = int(time.time() * 1000)
        metadata = to_chroma_metadata(
            summary,
            writer=writer,
            trigger=trigger,
            summarized_at_ms=summarized_at_ms,
            provenance=(provenance or Provenance()).with_document(document),
            visibility=visibility,
            document=document,
        )
    # Our part of the document (DOCUMENT_MAX_CHARS) is embedded whole; carried text is not.
    with phase("embedded"):
        vector = embed([document[:EMBED_CHARS]])[0]
    store.check_embedding(len(vector))
    sid = summary.session_id

    def admit(found: RowState) -> Mapping[str, int | str]:
        if found.digest != seen:
            raise RowChangedDuringPass(
                f"the row of session {sid!r} was rewritten by another writer during this "
                "pass; nothing was written over it, and the next pass carries its text"
            )
        return guard.admit(found.fence) if guard is not None else {}

    # The claim is checked once the group is formed, never before the wait.
    with phase("written"):
        group(store, RowWrite(sid, document, metadata, vector, admit))
    return Written(summarized_at_ms, document, document_digest(document))
