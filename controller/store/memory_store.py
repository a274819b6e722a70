"""The Chroma store adapter: the only code that talks to Chroma.

Server mode (HttpClient) is what the operator uses; embedded PersistentClient is for
single-process local use only (`summaryctl summarize --local --path`): two processes on
one embedded path silently lose vectors. Every network failure surfaces as
StoreUnavailable so callers can report it and retry without having written anything.

Reading never creates a collection: a missing one is CollectionNotFound, naming it. Only
the summary writer creates the summary collection (summaries(create=True)); a name Chroma
refuses is InvalidStoreConfig. Neither is a StoreUnavailable: retrying soon fixes neither.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import logging
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, cast
from urllib.parse import urlparse

import chromadb
import httpx
import numpy as np
from chromadb.api import ClientAPI
from chromadb.api.models.Collection import Collection
from chromadb.api.types import DefaultEmbeddingFunction, Where
from chromadb.config import Settings
from chromadb.errors import ChromaError, InvalidArgumentError, NotFoundError

from controller.api import StoreSpec
from controller.core.memories import Memory, Watermark, memory_from_row
from controller.core.naming import summary_row_id
from controller.core.summary import PriorSummary, from_chroma_row
from controller.core.sweep_plan import StoredSummaryState

log = logging.getLogger(__name__)
T = TypeVar("T")

SCAN_PAGE = 2000
GET_BATCH = 500
CollectionRole = Literal["memory", "summary"]


class StoreUnavailable(RuntimeError):
    """Chroma could not be reached or answered with a server error. Nothing was written."""


class EmbeddingMismatch(RuntimeError):
    """Our embeddings would not match the ones the summary collection already holds."""


class InvalidStoreConfig(ValueError):
    """The store configuration can never work as written: a collection name Chroma refuses,
    a URL that is not http(s)://host[:port], a tenant or database that does not exist.
    Not a StoreUnavailable: it does not recover by itself."""


class CollectionNotFound(RuntimeError):
    """A collection the configuration names does not exist, and this read does not create
    it: a typo would otherwise become a new, empty collection (for memories, one recorded
    with Chroma's default embedding function, which the agents' own would then conflict
    with). Not a StoreUnavailable: it does not recover by retrying soon."""

    SHOWN = 10  # existing collection names listed in the message

    def __init__(
        self,
        collection: str,
        role: CollectionRole,
        where: str = "",
        existing: Sequence[str] | None = None,
    ) -> None:
        self.collection = collection
        self.role: CollectionRole = role
        self.where = where
        self.existing = list(existing) if existing is not None else None
        super().__init__(self._message())

    def _message(self) -> str:
        text = f"{self.role} collection {self.collection!r} does not exist"
        if self.where:
            text += f" in Chroma at {self.where}"
        if self.existing is None:
            return text
        close = difflib.get_close_matches(self.collection, self.existing, n=1, cutoff=0.75)
        if close:
            text += f"; did you mean {close[0]!r}?"
        if not self.existing:
            return text + "; the database has no collections"
        shown = sorted(self.existing)[: self.SHOWN]
        more = len(self.existing) - len(shown)
        return (
            text
            + "; existing collections: "
            + ", ".join(shown)
            + (f" (and {more} more)" if more > 0 else "")
        )


_DIMENSION_ERROR = re.compile(r"expecting embedding with dimension of (\d+), got (\d+)")
_NAME_ERROR = re.compile(r"Validation error: name|Expected a name")


def _mismatch(collection: str, existing: int, produced: int) -> EmbeddingMismatch:
    return EmbeddingMismatch(
        f"summary collection {collection!r} holds {existing}-d embeddings but the "
        f"configured embedding model produces {produced}-d; configure spec.embedding to "
        "the model the collection uses"
    )


# -- one-line failure messages -------------------------------------------------------------

MESSAGE_LIMIT = 240
_HTML = re.compile(r"<!doctype\s+html|<html[\s>]|<head[\s>]|<body[\s>]|<title[\s>]", re.I)
_NOT_CHROMA = "not Chroma's API: is the URL a Chroma server?"


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """exc and the exceptions it was raised from or during, outermost first, once each."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(seen) < 32:
        seen.add(id(current))
        yield current
        current = current.__cause__ or (
            None if current.__suppress_context__ else current.__context__
        )


def _str(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # a broken __str__ must not hide the failure it describes
        return ""


def _clip(text: str, limit: int = MESSAGE_LIMIT) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def _body_kind(body: str, content_type: str = "") -> str:
    """What a non-Chroma answer held, said in a few words instead of pasted."""
    if not body.strip():
        return "an empty body"
    if "html" in content_type.lower() or _HTML.search(body):
        return "an HTML page"
    lines = body.strip().splitlines()
    if len(lines) > 1 or len(body) > 120:
        return f"a {len(body)}-character, {len(lines)}-line body"
    return f"the body {_clip(body, 120)!r}"


def _http_answer(exc: BaseException) -> str | None:
    """chromadb raises a non-Chroma HTTP answer (a proxy's error page, another web server)
    as Exception(response text), raised while handling httpx's HTTPStatusError."""
    status_error = next((e for e in _chain(exc) if isinstance(e, httpx.HTTPStatusError)), None)
    if status_error is None:
        return None
    try:
        response, request = status_error.response, status_error.request
        body = response.text
        status = response.status_code
        origin = f"{request.url.scheme}://{request.url.netloc.decode(errors='replace')}"
        target = f"{request.method} {request.url.path}"
        content_type = response.headers.get("content-type", "")
    except Exception:  # a response without a request, an undecodable body
        return None
    answered = f"the server at {origin} answered HTTP {status} to {target}"
    detail = None
    with contextlib.suppress(ValueError):
        payload = json.loads(body)
        if isinstance(payload, dict) and "error" in payload:  # Chroma's error shape
            detail = " ".join(
                str(part) for part in (payload.get("error"), payload.get("message")) if part
            )
            detail = _own_text(Exception(detail)) if detail else None
    if status in (401, 403):
        return f"{answered}{f' ({detail})' if detail else ''}: the token is missing or refused"
    if detail:
        return f"{answered}: {detail}"
    hint = _NOT_CHROMA if status < 500 else _NOT_CHROMA[:-1] + ", and is it up behind any proxy?"
    return f"{answered} with {_body_kind(body, content_type)}, {hint}"


def _undecodable_answer(exc: BaseException) -> str | None:
    """A 200 answer that is not JSON (a web server's index page for every path)."""
    for e in _chain(exc):
        doc = getattr(e, "doc", None)
        if isinstance(e, json.JSONDecodeError) and isinstance(doc, str):
            return f"the server answered with {_body_kind(doc)} instead of JSON, {_NOT_CHROMA}"
    return None


def _own_text(exc: BaseException) -> str | None:
    """exc's own message on one line, or None when it has none worth showing (empty, or
    no letter or digit at all)."""
    text = _str(exc).strip().rstrip(":").strip()
    if not any(c.isalnum() for c in text):
        return None
    if _HTML.search(text):
        return f"{type(exc).__name__} carrying an HTML page, {_NOT_CHROMA}"
    lines = text.splitlines()
    if len(lines) > 3:  # a body or a traceback: its first line, and how much was left out
        return _clip(lines[0], MESSAGE_LIMIT - 40) + f" (+{len(lines) - 1} more lines)"
    return _clip(text)


def describe_error(exc: BaseException) -> str:
    """Why a store call failed, on one line: never empty, never a pasted page.

    str() of some exceptions is empty (chromadb re-raises an empty error body as
    Exception(''), timeouts may carry no text): then the type name and the chained cause
    say it. An HTML page or a long body (a proxy, another web server at the URL) is
    described in a few words instead of copied into a condition or an Event.
    """
    answer = _http_answer(exc) or _undecodable_answer(exc)
    if answer:
        return _clip(answer)
    own = _own_text(exc)
    chain = list(_chain(exc))
    if own is None:
        inner = next((e for e in chain[1:] if _own_text(e)), None)
        name = type(exc).__name__
        return _clip(f"{name} ({describe_error(inner)})" if inner is not None else name)
    # The innermost cause names what really happened (refused, no such host, timed out).
    root = next((t for e in reversed(chain[1:]) if (t := _own_text(e))), None)
    if root and root not in own:
        own = f"{own} ({root})"
    return _clip(own)


# -- connecting ----------------------------------------------------------------------------


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
    # The embedding provider (spec.embedding.provider): decides what embedding function
    # the summary collection records if the writer has to create it. See _creation_ef.
    embedding_provider: str = "local-minilm"

    def describe(self) -> str:
        where = self.url or f"embedded:{self.path}"
        return f"{where} ({self.tenant}/{self.database})"


def _settings() -> Settings:
    return Settings(anonymized_telemetry=False)


def connect(location: StoreLocation) -> ClientAPI:
    """A Chroma client for the location; raises StoreUnavailable when it cannot connect,
    InvalidStoreConfig when the URL, tenant or database can never work."""
    if location.url is None and not location.path:
        raise ValueError("either a Chroma server URL or an embedded path is required")
    if location.url is not None:
        problem = StoreSpec.url_problem(location.url)
        if problem:
            raise InvalidStoreConfig(f"Chroma URL {location.url!r} {problem}")
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
    except NotFoundError as exc:  # chromadb checks the tenant and database on connect
        raise InvalidStoreConfig(
            f"Chroma at {location.describe()}: {describe_error(exc)}; check spec.store.tenant "
            "and spec.store.database"
        ) from exc
    except Exception as exc:  # chromadb raises ValueError/Exception for connection failures
        raise StoreUnavailable(
            f"cannot connect to Chroma at {location.describe()}: {describe_error(exc)}"
        ) from exc


def _guard(what: str, fn: Callable[[], T]) -> T:
    """Runs a store call, turning transport and server failures into StoreUnavailable and a
    name Chroma refuses into InvalidStoreConfig. NotFoundError passes: callers decide."""
    try:
        return fn()
    except (httpx.TransportError, ConnectionError, TimeoutError) as exc:
        raise StoreUnavailable(f"Chroma unreachable while {what}: {describe_error(exc)}") from exc
    except NotFoundError:
        raise
    except InvalidArgumentError as exc:
        if _NAME_ERROR.search(_str(exc)):
            raise InvalidStoreConfig(
                f"Chroma refused a name while {what}: {describe_error(exc)}"
            ) from exc
        raise StoreUnavailable(f"Chroma error while {what}: {describe_error(exc)}") from exc
    except ChromaError as exc:
        raise StoreUnavailable(f"Chroma error while {what}: {describe_error(exc)}") from exc
    except Exception as exc:
        # chromadb's HTTP client raises a non-Chroma answer (5xx, a proxy's page) as a plain
        # Exception carrying the body, and connection trouble as a ValueError.
        if any(isinstance(e, httpx.HTTPStatusError | json.JSONDecodeError) for e in _chain(exc)):
            raise StoreUnavailable(f"Chroma error while {what}: {describe_error(exc)}") from exc
        if "Could not connect" in _str(exc) or "Connection" in type(exc).__name__:
            raise StoreUnavailable(
                f"Chroma unreachable while {what}: {describe_error(exc)}"
            ) from exc
        raise


@dataclass(frozen=True)
class SessionRows:
    """A session's memories as read for one pass."""

    total: int  # every row carrying the sessionId, whatever its type
    newest: Watermark | None  # the newest row of all, the pass's watermark
    memories: list[Memory]  # parsed rows after the asked-for watermark
    skipped: int  # rows without a usable timestamp


def _creation_ef(provider: str) -> DefaultEmbeddingFunction | None:
    """The embedding function the summary collection records when the writer creates it.

    We always write explicit vectors, so the record is for the agents that read the
    collection. chromadb 1.5 records a known function by name and, on every query_texts,
    rebuilds it from that name: a collection created without one records "default" (its
    ONNX all-MiniLM-L6-v2); ours would record "memorycore-local-minilm", which a process
    without this package cannot rebuild ("Embedding function ... not found"), so agents
    opening it with the default function (or none) would fail to query it.

    - local-minilm: chromadb's default function. It is the same model (identical vectors),
      and an agent opening the collection with the standard default function, or with
      none, gets no "Embedding function conflict" and embeds its queries correctly.
    - openai: nothing recorded. No function every agent can rebuild matches an arbitrary
      endpoint; with none recorded, an agent passes the function for that model and
      chromadb's conflict check has nothing to conflict with.
    """
    return DefaultEmbeddingFunction() if provider == "local-minilm" else None


class MemoryStore:
    """Reads memories and reads/writes summaries in one Chroma database."""

    def __init__(self, client: ClientAPI, location: StoreLocation) -> None:
        self.client = client
        self.location = location
        self._summaries: Collection | None = None
        self._memories: Collection | None = None  # opened once; dropped if it disappears
        self._verified_dimension: int | None = None  # a collection's dimension never changes
        self._lock = threading.Lock()

    # -- health -----------------------------------------------------------------------

    def heartbeat(self) -> int:
        return _guard("checking the heartbeat", self.client.heartbeat)

    # -- collections ------------------------------------------------------------------

    def _collection_names(self) -> list[str] | None:
        """Names in the database for a not-found message; None if they cannot be listed."""
        try:
            return [c.name for c in self.client.list_collections(limit=1000)]
        except Exception as exc:
            log.debug("cannot list collections: %s", describe_error(exc))
            return None

    def _open(
        self, role: CollectionRole, name: str, create: Callable[[], Collection] | None = None
    ) -> Collection:
        """Gets a collection; if it is missing, creates it only when `create` is given."""
        try:
            # No embedding function: we only read or write explicit vectors, and passing
            # one would be checked against (and could conflict with) the recorded one.
            return _guard(
                f"opening the {role} collection", lambda: self.client.get_collection(name)
            )
        except NotFoundError:
            pass
        problem = StoreSpec.collection_name_problem(name)
        if problem:
            raise InvalidStoreConfig(
                f"{role} collection name {name!r} is not valid in Chroma: it {problem}"
            )
        if create is None:
            raise CollectionNotFound(name, role, self.location.describe(), self._collection_names())
        log.info("creating the %s collection %r", role, name)
        return _guard(f"creating the {role} collection", create)

    def memories(self) -> Collection:
        """The memory collection, opened once and kept (a summary reads it for the claim's
        scope and for the session's rows); CollectionNotFound if it does not exist (never
        created)."""
        with self._lock:
            if self._memories is None:
                self._memories = self._open("memory", self.location.memory_collection)
            return self._memories

    def create_memory_collection(self) -> Collection:
        """Opens the memory collection, creating it if missing. For the demo and tests that
        load sessions into a fresh store; the operator never calls it (agents own it)."""
        name = self.location.memory_collection
        return self._open("memory", name, create=lambda: self.client.get_or_create_collection(name))

    def summaries(self, *, create: bool = False) -> Collection:
        """The summary collection, opened once and kept. Reads pass create=False and get
        CollectionNotFound when it is missing; only the writer passes create=True."""
        with self._lock:
            if self._summaries is None:
                name = self.location.summary_collection
                ef = _creation_ef(self.location.embedding_provider)

                def make() -> Collection:
                    return self.client.get_or_create_collection(
                        name, metadata={"hnsw:space": "cosine"}, embedding_function=cast(Any, ef)
                    )

                self._summaries = self._open("summary", name, make if create else None)
            return self._summaries

    def _on_summaries(self, what: str, op: Callable[[Collection], T], *, create: bool = False) -> T:
        """Runs op on the summary collection. If it was deleted after it was opened, the
        kept handle is dropped (the next writer recreates it) and it reads as missing."""
        coll = self.summaries(create=create)
        try:
            return _guard(what, lambda: op(coll))
        except NotFoundError:
            with self._lock:
                self._summaries = None
                self._verified_dimension = None
            raise CollectionNotFound(
                self.location.summary_collection, "summary", self.location.describe()
            ) from None

    def claim_scope(self) -> str:
        """What makes two addresses of one store (a Service name and its IP, two
        namespaces' summarizers) one store for the per-session claim: Chroma's id of the
        memory collection (unique across tenants and databases) and the summary
        collection's name. Reads only: CollectionNotFound when the memory collection is
        missing, and the summary collection is not created before there is a summary."""
        return f"{self.memories().id}/{self.location.summary_collection}"

    # -- memories ---------------------------------------------------------------------

    def session_rows(self, session_id: str, after: Watermark | None = None) -> SessionRows:
        """The session's row count and newest row, and its parsed memories after `after`.

        The listing is paged: one unpaged get of a 50,000-row session exceeds SQLite's
        variable limit inside Chroma ("too many SQL variables").
        """
        with self._memory_missing():
            return self._session_rows(self.memories(), session_id, after)

    def _session_rows(
        self, coll: Collection, session_id: str, after: Watermark | None
    ) -> SessionRows:
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
        with self._memory_missing():
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
        with self._memory_missing():
            coll = self.memories()
        offset = 0
        while True:
            with self._memory_missing():
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

    def scan_markers(
        self, marker_type: str, watermark_ms: int, page: int = SCAN_PAGE
    ) -> Iterator[tuple[str, object, int]]:
        """(memory id, sessionId as stored, timestamp) of every memory of marker_type newer
        than watermark_ms: the sweep's scan, narrowed by Chroma to the markers. The
        sessionId is passed on as stored (maybe missing or blank) for the caller to judge."""
        with self._memory_missing():
            coll = self.memories()
        where = {"$and": [{"type": marker_type}, {"timestamp": {"$gt": watermark_ms}}]}
        offset = 0
        while True:
            with self._memory_missing():
                got = _guard(
                    "scanning for sunset markers",
                    lambda o=offset: coll.get(  # type: ignore[misc]
                        where=cast(Where, where), include=["metadatas"], limit=page, offset=o
                    ),
                )
            for row_id, meta in zip(got["ids"], got["metadatas"] or [], strict=False):
                ts = (meta or {}).get("timestamp")
                if isinstance(ts, int | float) and not isinstance(ts, bool):
                    yield row_id, (meta or {}).get("sessionId"), int(ts)
            if len(got["ids"]) < page:
                return
            offset += page

    @contextlib.contextmanager
    def _memory_missing(self) -> Iterator[None]:
        """A memory collection deleted while it is read is missing, like one never made."""
        try:
            yield
        except NotFoundError:
            with self._lock:
                self._memories = None  # the next read opens it again (or finds it missing)
            raise CollectionNotFound(
                self.location.memory_collection, "memory", self.location.describe()
            ) from None

    def add_memories(
        self,
        ids: Sequence[str],
        documents: Sequence[str],
        metadatas: Sequence[dict[str, Any]],
        *,
        create: bool = False,
    ) -> None:
        """Used by the demo and tests to load sessions; agents write memories themselves.
        create=True creates the memory collection if it is missing (a fresh store)."""
        coll = self.create_memory_collection() if create else self.memories()
        from controller.embeddings.minilm import LocalMiniLMEmbedding

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
        """The session's stored summary; None when there is none yet, including when the
        summary collection does not exist yet (the first write creates it)."""
        try:
            got = self._on_summaries(
                "reading the prior summary",
                lambda coll: coll.get(
                    ids=[summary_row_id(session_id)], include=["documents", "metadatas"]
                ),
            )
        except CollectionNotFound:
            return None
        if not got["ids"]:
            return None
        docs, metas = got["documents"] or [], got["metadatas"] or []
        return from_chroma_row(session_id, docs[0] if docs else None, metas[0] if metas else None)

    def summary_states(self, session_ids: Sequence[str]) -> dict[str, StoredSummaryState]:
        """memoryCount and timestamp of the stored summaries of these sessions; none when
        the summary collection does not exist yet (nothing has been summarized)."""
        states: dict[str, StoredSummaryState] = {}
        for batch in _batches(list(session_ids), GET_BATCH):
            try:
                got = self._on_summaries(
                    "reading summary metadata",
                    lambda coll, b=batch: coll.get(  # type: ignore[misc]
                        ids=[summary_row_id(s) for s in b], include=["metadatas"]
                    ),
                )
            except CollectionNotFound:
                return {}
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
        dimension when it is known (None: empty, not indexed yet, or not created yet).
        """
        if self._verified_dimension == dimension:
            return dimension
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
        """Upserts the one row of the session (id summary_<sessionId>); the writer, so the
        one place that creates the summary collection when it is missing."""

        def upsert(coll: Collection) -> None:
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

        self._on_summaries("writing the summary", upsert, create=True)

    def latest_summaries(self, limit: int) -> list[tuple[str, str, dict[str, Any]]]:
        """(id, document, metadata) of the newest summaries, as agents read them at boot.
        CollectionNotFound when the summary collection does not exist: a typo'd name must
        not read as "no summaries yet"."""
        got = self._on_summaries(
            "listing summaries", lambda coll: coll.get(include=["documents", "metadatas"])
        )
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
