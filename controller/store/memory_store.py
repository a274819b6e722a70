"""The Chroma store adapter, the only code that talks to Chroma. Every network failure is
StoreUnavailable, retried with nothing written; reading never creates a collection (a missing
one is CollectionNotFound), only the summary writer does."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from chromadb.api.models.Collection import Collection
from chromadb.errors import ChromaError

from controller.core.coverage import PriorCoverage
from controller.core.embedding_match import embedding_function_problem
from controller.core.ledger import (
    ROW_DIGEST_KEY,
    LedgerEntry,
    UnreadableLedgerEntry,
    read_entry,
    row_agreement,
)
from controller.core.memories import Memory, memory_from_row, memory_sort_key
from controller.core.naming import summary_row_id
from controller.core.row_ownership import (
    DIGEST_KEY,
    NEO_WRITER_KEYS,
    document_digest,
    rewritten_by,
)
from controller.core.summary import (
    SUMMARY_FORMAT,
    PriorSummary,
    StructuredSummary,
    UnreadablePriorSummary,
)
from controller.core.summary_row import from_chroma_row
from controller.redaction import PassRedaction
from controller.store.authorities import Authorities
from controller.store.collections import batches, collection_config, pages
from controller.store.errors import (
    CollectionNotFound,
    EmbeddingMismatch,
    StoreUnavailable,
    guard,
    mismatch,
)
from controller.store.forgetting import Forgetting, is_tombstone
from controller.store.row_writes import RowWrites
from controller.store.scans import SCAN_PAGE
from controller.store.session_listing import GET_BATCH, SessionRows, list_session

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class StoredPrior:
    """A session's stored summary as a pass reads it."""

    summary: PriorSummary | None
    # The row document's digest as read (None: no row), compared before upsert.
    row_digest: str | None
    # The row is the one the ledger entry names (or no entry); else a pass rewrites it.
    row_current: bool = True


class MemoryStore(RowWrites, Forgetting, Authorities):
    """Reads memories and reads/writes summaries in one Chroma database."""

    def session_rows(
        self,
        session_id: str,
        prior: PriorCoverage | None = None,
        exclude: Callable[[Memory], bool] | None = None,
        mask: PassRedaction | None = None,
    ) -> SessionRows:
        """The session as a pass lists it (session_listing.py): counts, newest row, and the
        memories it reads (core/coverage.py), read batch by batch as the caller iterates;
        those `exclude` accepts are counted, not read. Each is masked before anything else."""
        mask = mask or PassRedaction()
        with self._memory_missing():
            coll = self.memories()
            read = lambda ids: [mask.memory(m) for m in self._read_batch(coll, ids, mask)]  # noqa: E731
            return list_session(coll, session_id, prior or PriorCoverage(), exclude, read, mask)

    def memories_by_id(self, ids: Sequence[str], mask: PassRedaction) -> list[Memory]:
        """These memories (masked), in the session's order; those gone since are left out."""
        with self._memory_missing():
            coll = self.memories()
        found = [
            mask.memory(m)
            for batch in batches(list(ids), GET_BATCH)
            for m in self._read_batch(coll, batch, mask)
        ]
        return sorted(found, key=memory_sort_key)

    def _read_batch(
        self, coll: Collection, ids: Sequence[str], mask: PassRedaction
    ) -> list[Memory]:
        """The memories of these ids (consecutive in the session's order), in that order."""
        with self._memory_missing():
            got = guard(
                "reading memories",
                lambda: coll.get(ids=list(ids), include=["documents", "metadatas"]),
            )
        memories = [
            memory
            for row_id, doc, meta in zip(
                got["ids"], got["documents"] or [], got["metadatas"] or [], strict=False
            )
            if (memory := memory_from_row(row_id, doc, mask.meta(meta))) is not None
        ]
        memories.sort(key=memory_sort_key)
        return memories

    def count_session(self, session_id: str) -> int:
        return len(self.session_ids(session_id))

    def add_memories(
        self,
        ids: Sequence[str],
        documents: Sequence[str],
        metadatas: Sequence[dict[str, Any]],
        *,
        create: bool = False,
        embed: Callable[[list[str]], Any] | None = None,
    ) -> None:
        """Writes memories as an agent would (summaryctl remember, the demo, tests), embedded
        with `embed` (default: local MiniLM), which must match the collection's model
        (core/embedding_match.py). create=True creates a missing memory collection."""
        coll = self.create_memory_collection() if create else self.memories()
        record = collection_config(coll).get("embedding_function")
        loc = self.location
        problem = embedding_function_problem(
            record, loc.memory_collection, loc.embedding_provider, loc.embedding_model
        )
        if problem:
            raise EmbeddingMismatch(problem)
        embeddings = (embed or self._memory_embedding)(list(documents))
        for batch in batches(list(range(len(ids))), GET_BATCH):
            guard(
                "adding memories",
                lambda b=batch: coll.upsert(  # type: ignore[misc]
                    ids=[ids[i] for i in b],
                    documents=[documents[i] for i in b],
                    metadatas=[metadatas[i] for i in b],
                    embeddings=[embeddings[i] for i in b],
                ),
            )

    @functools.cached_property
    def _memory_embedding(self) -> Callable[[list[str]], Any]:
        from controller.embeddings.minilm import LocalMiniLMEmbedding

        return LocalMiniLMEmbedding()

    # -- summaries --------------------------------------------------------------------

    def read_summary(self, session_id: str) -> PriorSummary | None:
        """The session's stored summary; None if none yet (or no summary collection yet)."""
        return self.read_prior(session_id).summary

    def _summary_row(self, session_id: str) -> tuple[str | None, dict[str, Any]] | None:
        """The session's summary row (document, metadata); None if missing."""
        row_id = summary_row_id(session_id)
        what, include = "reading the summary of the session", ["documents", "metadatas"]
        return self._by_id(self._on_summaries, what, include, [row_id]).get(row_id)

    def read_ledger(self, session_id: str, row: dict[str, Any] | None = None) -> LedgerEntry | None:
        """The session's ledger entry (`row`: the row's metadata), in one read; None without
        one; a tombstone as a head-only entry. Raises UnreadablePriorSummary if unreadable."""
        try:
            got = self._on_ledger(
                "reading the session's ledger entry",
                lambda coll: coll.get(
                    where={"sessionId": session_id}, include=["documents", "metadatas"]
                ),
            )
        except CollectionNotFound:
            return None
        records = list(
            zip(got["ids"], got["documents"] or [], got["metadatas"] or [], strict=False)
        )
        head = next((m for i, _, m in records if i == summary_row_id(session_id)), None)
        if is_tombstone(head):  # forgotten (store/forgetting.py): no state to carry
            return LedgerEntry(dict(head or {}), {}, 0, False, False)
        try:
            return read_entry(session_id, [(i, d, dict(m or {})) for i, d, m in records], row or {})
        except UnreadableLedgerEntry as exc:
            raise UnreadablePriorSummary(
                f"the ledger entry of session {session_id!r} in "
                f"{self.location.ledger_collection!r} cannot be read ({exc}); it and the row "
                "are left in place (spec.action Rebuild writes them anew from the memories)"
            ) from None

    def stored_summary(self, session_id: str) -> tuple[str, dict[str, Any]] | None:
        """(row document, the row's and ledger entry's keys) for `summaryctl ledger`."""
        row = self._summary_row(session_id)
        document, row_meta = row or (None, {})
        ledger = self.read_ledger(session_id, row_meta)
        ledger = None if ledger is None or is_tombstone(ledger.head) else ledger
        if row is None and ledger is None:
            return None
        keys = {**row_meta, **(ledger.keys if ledger else {})}
        if ledger is not None:
            keys.update({f"ledger.{k}": v for k, v in ledger.head.items()})
        return document or "", keys

    def read_prior(self, session_id: str) -> StoredPrior:
        """The stored summary, from the ledger entry (else the row), and whether the row
        agrees with it (core/ledger.py: row_agreement, read_entry; docs/ledger.md). A row
        another writer rewrote gives its text to carry; a missing or stale row, leftover
        records or lost lists make the pass write again (masked_with unknown)."""
        row = self._summary_row(session_id)
        document, row_meta = row or (None, {})
        digest = document_digest(document or "") if row else None
        entry = self.read_ledger(session_id, row_meta)
        if entry is not None and is_tombstone(entry.head):
            entry = None
            if row is not None and rewritten_by(document, row_meta) is None:
                # Ours, left by a forget cut short: forgotten too; the next write replaces it.
                return StoredPrior(None, digest)
        if entry is None:  # no ledger entry: the row is all there is (another writer's text)
            return StoredPrior(from_chroma_row(session_id, document, row_meta), digest)
        head, keys, leftovers, lost, own = entry
        agreement = row_agreement(document, row_meta, head)
        meta = {**keys, "summaryFormat": SUMMARY_FORMAT}
        meta.pop(DIGEST_KEY, None)  # ours: the entry says which row document it goes with
        if agreement == "foreign":  # from_chroma_row carries its text and names its writer
            meta[DIGEST_KEY] = str(head.get(ROW_DIGEST_KEY))
            meta.update({k: row_meta[k] for k in NEO_WRITER_KEYS if k in row_meta})
        summary = from_chroma_row(session_id, None if agreement == "behind" else document, meta)
        if (agreement == "behind" or lost) and isinstance(summary, StructuredSummary):
            summary = summary.model_copy(update={"masked_with": None})
        current = agreement == "agrees" and own and not (leftovers or lost)
        return StoredPrior(summary, digest, current)

    def check_embedding(self, dimension: int) -> int | None:
        """Refuses vectors the collection's readers cannot use: of another dimension than it
        holds, or from another model than the function it (before it exists: the memory
        collection) records. Samples one stored vector once per store; a fresh collection
        leaves it to Chroma's own check. Returns the collection's dimension when known."""
        if self._verified_dimension == dimension:
            return dimension
        held = self._held_dimension()
        problem = embedding_function_problem(
            self.summary_function_record(),
            self.location.summary_collection,
            self.location.embedding_provider,
            self.location.embedding_model,
        )
        if held is not None and held != dimension:
            if problem:  # both: the models first (the more telling), then the sizes
                raise EmbeddingMismatch(f"{problem} (it holds {held}-d, this model {dimension}-d)")
            raise mismatch(self.location.summary_collection, held, dimension)
        if problem:
            raise EmbeddingMismatch(problem)
        if held is not None:
            self._verified_dimension = dimension
        return held

    def _held_dimension(self) -> int | None:
        """The summary collection's vector dimension (one sampled), or None if unknown."""
        try:
            got = self._on_summaries(
                "sampling an embedding", lambda coll: coll.get(limit=1, include=["embeddings"])
            )
        except CollectionNotFound:
            return None
        except StoreUnavailable as exc:
            cause = exc.__cause__
            if isinstance(cause, ChromaError) and "Nothing found on disk" in str(cause):
                log.info("summary collection not indexed yet; Chroma checks the dimension")
                return None
            raise
        embeddings = got.get("embeddings")
        if embeddings is None or len(embeddings) == 0:
            return None
        return len(embeddings[0])

    def ledger_sessions(self) -> Iterator[str]:
        """The session of every ledger entry but tombstones, page by page."""
        try:
            coll = self.ledger()
        except CollectionNotFound:
            return
        for _, meta in pages(coll, "listing the ledger", {"ledgerFormat": {"$gte": 1}}, SCAN_PAGE):
            sid = meta.get("sessionId")
            if isinstance(sid, str) and not is_tombstone(meta):
                yield sid

    def latest_summaries(self, limit: int) -> list[tuple[str, str, dict[str, Any]]]:
        """(id, document, metadata) of the newest summaries, as agents read them at boot.
        CollectionNotFound if missing: a typo must not read as "no summaries yet"."""
        coll = self.summaries()
        rows = [(i, dict(m)) for i, m in pages(coll, "listing summaries", {}, SCAN_PAGE)]

        def ts(row: tuple[str, dict[str, Any]]) -> float:
            value = row[1].get("timestamp")
            return float(value) if isinstance(value, int | float) else 0.0

        newest = [i for i, _ in sorted(rows, key=ts, reverse=True)[:limit]]
        found = self._by_id(
            self._on_summaries, "reading summaries", ["documents", "metadatas"], newest
        )
        return [(i, found[i][0] or "", found[i][1]) for i in newest if i in found]
