"""The Chroma store adapter: the only code that talks to Chroma.

Server mode (HttpClient) is what the operator uses; embedded PersistentClient is for
single-process local use only (`summaryctl summarize --local --path`): two processes on
one embedded path silently lose vectors. Every network failure surfaces as
StoreUnavailable so callers can report it and retry without having written anything.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast
from urllib.parse import urlparse

import chromadb
import httpx
import numpy as np
from chromadb.api import ClientAPI
from chromadb.api.models.Collection import Collection
from chromadb.api.types import Where
from chromadb.config import Settings
from chromadb.errors import ChromaError, InvalidArgumentError, NotFoundError

from controller.memories import Memory, Watermark, memory_from_row
from controller.naming import summary_row_id
from controller.summary import PriorSummary, from_chroma_row
from controller.sweep import StoredSummaryState

log = logging.getLogger(__name__)
T = TypeVar("T")

SCAN_PAGE = 2000
GET_BATCH = 500


class StoreUnavailable(RuntimeError):
    """Chroma could not be reached or answered with a server error. Nothing was written."""


class EmbeddingMismatch(RuntimeError):
    """Our embeddings would not match the ones the summary collection already holds."""


_DIMENSION_ERROR = re.compile(r"expecting embedding with dimension of (\d+), got (\d+)")


def _mismatch(collection: str, existing: int, produced: int) -> EmbeddingMismatch:
    return EmbeddingMismatch(
        f"summary collection {collection!r} holds {existing}-d embeddings but the "
        f"configured embedding model produces {produced}-d; configure spec.embedding to "
        "the model the collection uses"
    )


@dataclass(frozen=True)
class StoreLocation:
    url: str | None
    tenant: str = "default_tenant"
    database: str = "default_database"
    memory_collection: str = "neo-agent-memory"
    summary_collection: str = "neo-agent-sessions"
    path: str | None = None
    token: str | None = None
    timeout_seconds: float = 10.0

    def describe(self) -> str:
        where = self.url or f"embedded:{self.path}"
        return f"{where} ({self.tenant}/{self.database})"


def _settings() -> Settings:
    return Settings(anonymized_telemetry=False)


def connect(location: StoreLocation) -> ClientAPI:
    """A Chroma client for the location; raises StoreUnavailable when it cannot connect."""
    if location.url is None and not location.path:
        raise ValueError("either a Chroma server URL or an embedded path is required")
    try:
        if location.url is None:
            return chromadb.PersistentClient(
                path=str(location.path),
                settings=_settings(),
                tenant=location.tenant,
                database=location.database,
            )
        parsed = urlparse(location.url)
        headers = {"Authorization": f"Bearer {location.token}"} if location.token else None
        return chromadb.HttpClient(
            host=parsed.hostname or "localhost",
            port=parsed.port or (443 if parsed.scheme == "https" else 8000),
            ssl=parsed.scheme == "https",
            headers=headers,
            tenant=location.tenant,
            database=location.database,
            settings=_settings(),
        )
    except Exception as exc:  # chromadb raises ValueError/Exception for connection failures
        raise StoreUnavailable(f"cannot connect to Chroma at {location.describe()}: {exc}") from exc


def _guard(what: str, fn: Callable[[], T]) -> T:
    """Runs a store call, turning transport and server failures into StoreUnavailable."""
    try:
        return fn()
    except (httpx.TransportError, ConnectionError, TimeoutError) as exc:
        raise StoreUnavailable(f"Chroma unreachable while {what}: {exc}") from exc
    except ChromaError as exc:
        if isinstance(exc, NotFoundError):
            raise
        raise StoreUnavailable(f"Chroma error while {what}: {exc}") from exc
    except Exception as exc:
        # chromadb's HTTP client wraps server failures (5xx) in plain Exceptions.
        if "Could not connect" in str(exc) or "Connection" in type(exc).__name__:
            raise StoreUnavailable(f"Chroma unreachable while {what}: {exc}") from exc
        raise


@dataclass(frozen=True)
class SessionRows:
    """A session's memories as read for one pass."""

    total: int  # every row carrying the sessionId, whatever its type
    newest: Watermark | None  # the newest row of all, the pass's watermark
    memories: list[Memory]  # parsed rows after the asked-for watermark
    skipped: int  # rows without a usable timestamp


class MemoryStore:
    """Reads memories and reads/writes summaries in one Chroma database."""

    def __init__(self, client: ClientAPI, location: StoreLocation) -> None:
        self.client = client
        self.location = location
        self._summaries: Collection | None = None
        self._verified_dimension: int | None = None  # a collection's dimension never changes
        self._lock = threading.Lock()

    # -- health -----------------------------------------------------------------------

    def heartbeat(self) -> int:
        return _guard("checking the heartbeat", self.client.heartbeat)

    # -- collections ------------------------------------------------------------------

    def memories(self) -> Collection:
        def get() -> Collection:
            # No embedding function: we only read, and must not reconfigure the collection.
            return self.client.get_collection(self.location.memory_collection)

        try:
            return _guard("opening the memory collection", get)
        except NotFoundError:
            return _guard(
                "creating the memory collection",
                lambda: self.client.get_or_create_collection(self.location.memory_collection),
            )

    def summaries(self) -> Collection:
        with self._lock:
            if self._summaries is None:
                name = self.location.summary_collection
                self._summaries = _guard(
                    "opening the summary collection",
                    lambda: self.client.get_or_create_collection(
                        name, metadata={"hnsw:space": "cosine"}
                    ),
                )
            return self._summaries

    # -- memories ---------------------------------------------------------------------

    def session_rows(self, session_id: str, after: Watermark | None = None) -> SessionRows:
        """The session's row count and newest row, and its parsed memories after `after`.

        The listing is paged: one unpaged get of a 50,000-row session exceeds SQLite's
        variable limit inside Chroma ("too many SQL variables").
        """
        coll = self.memories()
        newest: Watermark | None = None
        wanted: list[tuple[tuple[int, str], str]] = []
        skipped = total = offset = 0
        while True:
            page = _guard(
                "listing the session's memories",
                lambda o=offset: coll.get(  # type: ignore[misc]
                    where={"sessionId": session_id},
                    include=["metadatas"],
                    limit=SCAN_PAGE,
                    offset=o,
                ),
            )
            ids, metas = page["ids"], page["metadatas"] or []
            total += len(ids)
            for row_id, meta in zip(ids, metas, strict=False):
                probe = memory_from_row(row_id, "", meta)
                if probe is None:
                    skipped += 1
                    continue
                mark = Watermark.of(probe)
                if newest is None or (mark.timestamp_ms, mark.memory_id) > (
                    newest.timestamp_ms,
                    newest.memory_id,
                ):
                    newest = mark
                if after is None or after.after(probe):
                    wanted.append(((probe.timestamp_ms, probe.id), row_id))
            if len(ids) < SCAN_PAGE:
                break
            offset += SCAN_PAGE
        memories: list[Memory] = []
        for batch in _batches([row_id for _, row_id in sorted(wanted)], GET_BATCH):
            got = _guard(
                "reading memories",
                lambda b=batch: coll.get(ids=list(b), include=["documents", "metadatas"]),  # type: ignore[misc]
            )
            for row_id, doc, meta in zip(
                got["ids"], got["documents"] or [], got["metadatas"] or [], strict=False
            ):
                memory = memory_from_row(row_id, doc, meta)
                if memory is not None:
                    memories.append(memory)
        return SessionRows(total=total, newest=newest, memories=memories, skipped=skipped)

    def count_session(self, session_id: str) -> int:
        coll = self.memories()
        got = _guard(
            "counting memories", lambda: coll.get(where={"sessionId": session_id}, include=[])
        )
        return len(got["ids"])

    def scan_since(self, watermark_ms: int, page: int = SCAN_PAGE) -> Iterator[tuple[str, int]]:
        """(sessionId, timestamp) of every memory newer than watermark_ms, page by page.

        Only numeric timestamps match the range filter; legacy ISO-string rows are older
        than any sweep window by definition of "legacy".
        """
        coll = self.memories()
        offset = 0
        while True:
            got = _guard(
                "scanning new memories",
                lambda o=offset: coll.get(  # type: ignore[misc]
                    where=cast(Where, {"timestamp": {"$gt": watermark_ms}}),
                    include=["metadatas"],
                    limit=page,
                    offset=o,
                ),
            )
            metas = got["metadatas"] or []
            for meta in metas:
                sid, ts = meta.get("sessionId"), meta.get("timestamp")
                if isinstance(sid, str) and isinstance(ts, int | float):
                    yield sid, int(ts)
            if len(got["ids"]) < page:
                return
            offset += page

    def add_memories(
        self, ids: Sequence[str], documents: Sequence[str], metadatas: Sequence[dict[str, Any]]
    ) -> None:
        """Used by the demo and tests to load sessions; agents write memories themselves."""
        coll = self.memories()
        from controller.embeddings import LocalMiniLMEmbedding

        embeddings = LocalMiniLMEmbedding()(list(documents))
        for batch in _batches(list(range(len(ids))), GET_BATCH):
            _guard(
                "adding memories",
                lambda b=batch: coll.upsert(  # type: ignore[misc]
                    ids=[ids[i] for i in b],
                    documents=[documents[i] for i in b],
                    metadatas=[metadatas[i] for i in b],
                    embeddings=[embeddings[i] for i in b],
                ),
            )

    # -- summaries --------------------------------------------------------------------

    def read_summary(self, session_id: str) -> PriorSummary | None:
        coll = self.summaries()
        got = _guard(
            "reading the prior summary",
            lambda: coll.get(ids=[summary_row_id(session_id)], include=["documents", "metadatas"]),
        )
        if not got["ids"]:
            return None
        docs, metas = got["documents"] or [], got["metadatas"] or []
        return from_chroma_row(session_id, docs[0] if docs else None, metas[0] if metas else None)

    def summary_states(self, session_ids: Sequence[str]) -> dict[str, StoredSummaryState]:
        """memoryCount and timestamp of the stored summaries of these sessions."""
        coll = self.summaries()
        states: dict[str, StoredSummaryState] = {}
        for batch in _batches(list(session_ids), GET_BATCH):
            got = _guard(
                "reading summary metadata",
                lambda b=batch: coll.get(  # type: ignore[misc]
                    ids=[summary_row_id(s) for s in b], include=["metadatas"]
                ),
            )
            for meta in got["metadatas"] or []:
                sid = meta.get("sessionId")
                if isinstance(sid, str):
                    count, ts = meta.get("memoryCount"), meta.get("timestamp")
                    states[sid] = StoredSummaryState(
                        memory_count=int(count) if isinstance(count, int | float) else None,
                        timestamp_ms=int(ts) if isinstance(ts, int | float) else None,
                    )
        return states

    def check_embedding_dimension(self, dimension: int) -> int | None:
        """Refuses to write vectors of another dimension than the collection holds.

        Samples one stored vector, once per store: after a match the answer is kept. A
        collection whose first rows are still being indexed can fail the sample ("Nothing
        found on disk" from the HNSW reader); the write then relies on Chroma's own check,
        which write_summary turns into the same EmbeddingMismatch. Returns the collection's
        dimension when it is known (None: empty or not indexed yet).
        """
        if self._verified_dimension == dimension:
            return dimension
        coll = self.summaries()
        try:
            got = _guard("sampling an embedding", lambda: coll.get(limit=1, include=["embeddings"]))
        except StoreUnavailable as exc:
            if isinstance(exc.__cause__, ChromaError) and "Nothing found on disk" in str(exc):
                log.info("summary collection not indexed yet; Chroma checks the dimension")
                return None
            raise
        embeddings = got.get("embeddings")
        if embeddings is None or len(embeddings) == 0:
            return None
        existing = len(embeddings[0])
        if existing != dimension:
            raise _mismatch(self.location.summary_collection, existing, dimension)
        self._verified_dimension = dimension
        return dimension

    def write_summary(
        self,
        session_id: str,
        document: str,
        metadata: dict[str, str | int | float | bool],
        embedding: Sequence[float],
    ) -> None:
        """Upserts the one row of the session (id summary_<sessionId>)."""
        coll = self.summaries()

        def upsert() -> None:
            try:
                coll.upsert(
                    ids=[summary_row_id(session_id)],
                    documents=[document],
                    metadatas=[metadata],
                    embeddings=cast(Any, [np.asarray(embedding, dtype=np.float32)]),
                )
            except InvalidArgumentError as exc:
                found = _DIMENSION_ERROR.search(str(exc))
                if found:
                    name = self.location.summary_collection
                    raise _mismatch(name, int(found.group(1)), int(found.group(2))) from exc
                raise

        _guard("writing the summary", upsert)

    def latest_summaries(self, limit: int) -> list[tuple[str, str, dict[str, Any]]]:
        """(id, document, metadata) of the newest summaries, as agents read them at boot."""
        coll = self.summaries()
        got = _guard("listing summaries", lambda: coll.get(include=["documents", "metadatas"]))
        rows = list(zip(got["ids"], got["documents"] or [], got["metadatas"] or [], strict=False))

        def ts(row: tuple[str, Any, Any]) -> float:
            value = (row[2] or {}).get("timestamp")
            return float(value) if isinstance(value, int | float) else 0.0

        rows.sort(key=ts, reverse=True)
        return [(i, d or "", dict(m or {})) for i, d, m in rows[:limit]]


def _batches(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


_CLIENTS: dict[StoreLocation, MemoryStore] = {}
_CLIENTS_LOCK = threading.Lock()


def store_for(location: StoreLocation) -> MemoryStore:
    """One client per location per process (the operator reuses it across summaries)."""
    with _CLIENTS_LOCK:
        store = _CLIENTS.get(location)
        if store is None:
            store = MemoryStore(connect(location), location)
            _CLIENTS[location] = store
        return store


def forget_store(location: StoreLocation) -> None:
    """Drops a cached client, e.g. after the store was unreachable, so the next call reconnects."""
    with _CLIENTS_LOCK, contextlib.suppress(KeyError):
        del _CLIENTS[location]
