"""The Chroma store adapter, the only code that talks to Chroma: a network failure is
StoreUnavailable, with nothing written; reads never create a collection."""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, ParamSpec, Protocol, TypeVar, cast

import numpy as np
from chromadb.api import ClientAPI
from chromadb.api.models.Collection import Collection
from chromadb.api.types import DefaultEmbeddingFunction, Documents, EmbeddingFunction, Embeddings
from chromadb.errors import ChromaError, InvalidArgumentError, NotFoundError
from chromadb.utils.embedding_functions import register_embedding_function

from controller.api import StoreSpec
from controller.core.coverage import PriorCoverage, digest, digest_text
from controller.core.document import render_document
from controller.core.ledger import (
    AUTHORITY_RECORD,
    FORGOTTEN_BY_KEY,
    FORGOTTEN_KEY,
    LAST_MEMORY_KEY,
    LEDGER_FORMAT,
    LEDGER_VECTOR,
    REQUEST_KEY,
    ROW_DIGEST_KEY,
    AuthorityRecord,
    Fence,
    LedgerEntry,
    LedgerRecord,
    RowState,
    authority_record_id,
    entry_as_read,
    plan_write,
    read_entry,
    recorded_fence,
    replacing_head,
    row_agreement,
)
from controller.core.memories import (
    FUTURE_TOLERANCE_MS,
    UNIT_LIMITS,
    Memory,
    newest_time,
    parse_timestamp_ms,
)
from controller.core.naming import summary_row_id
from controller.core.summary import (
    SUMMARY_FORMAT,
    PriorSummary,
    StructuredSummary,
    UnreadablePriorSummary,
)
from controller.core.summary_row import (
    DIGEST_KEY,
    NEO_WRITER_KEYS,
    READER_ROW_KEYS,
    Provenance,
    RowChangedDuringPass,
    document_digest,
    from_chroma_row,
    rewritten_by,
    to_chroma_metadata,
    upsert_metadata,
)
from controller.core.sweep_plan import RowCursor, StoredSummaryState, WalkedRow, row_problem
from controller.core.waiting import Pause, no_pause
from controller.redaction import PassRedaction
from controller.store.connection import StoreLocation
from controller.store.errors import (
    DIMENSION_ERROR,
    UNREACHABLE,
    CollectionNotFound,
    CollectionRole,
    EmbeddingMismatch,
    InvalidStoreConfig,
    StoreUnavailable,
    caused_by,
    guard,
    mismatch,
)
from controller.store.session_listing import (
    GET_BATCH,
    Listed,
    SessionRows,
    batches,
    by_ids,
    list_all,
    list_appended,
    pages,
    read_memories,
    rows,
)

log = logging.getLogger(__name__)
T = TypeVar("T")
P = ParamSpec("P")


# A different model of the same dimension passes Chroma's dimension check and ruins every
# search over summaries: the model a collection's function record names is compared first.
MINILM = "all-MiniLM-L6-v2"
MINILM_FUNCTIONS = frozenset({"default", "onnx_mini_lm_l6_v2"})
NEO_FUNCTION = "dynamic_text_embedding_service"


def embedding_function_problem(
    record: Mapping[str, Any] | None, collection: str, provider: str, model: str
) -> str | None:
    """Why embedding with (provider, model) would not match the collection's record, else None."""
    if not isinstance(record, Mapping) or record.get("type") != "known":
        return None
    name = record.get("name")
    if not isinstance(name, str) or not name:
        return None
    config = {"model_name": MINILM} if name in MINILM_FUNCTIONS else record.get("config")
    theirs = config.get("model_name") if isinstance(config, Mapping) else None
    ours = MINILM if provider == "local-minilm" else model
    described = f"{provider} model {ours!r}"
    if name == NEO_FUNCTION:
        if provider != "local-minilm":
            return None  # neo's endpoint model is not recorded; the dimension check remains
        return (
            f"collection {collection!r} records neo memory-core's embedding function "
            f"{NEO_FUNCTION!r} (neo's endpoint, by default text-embedding-qwen3-embedding-8b, "
            f"4096-d) but this summarizer embeds with the {described}; set spec.embedding to "
            "neo's endpoint and model (docs/migrating-from-neo.md)"
        )
    if not isinstance(theirs, str) or not theirs.strip():
        return None
    # Models compare without case or organisation prefix ("sentence-transformers/x" is x).
    if len({m.strip().rsplit("/", 1)[-1].lower() for m in (theirs, ours)}) == 1:
        return None
    return (
        f"collection {collection!r} records the embedding function {name!r} with model "
        f"{theirs!r} but this summarizer embeds with the {described}; set spec.embedding to "
        "the model the collection uses"
    )


def _creation_ef(provider: str) -> DefaultEmbeddingFunction | None:
    """A new collection's record when the memory collection has none (agents rebuild it)."""
    return DefaultEmbeddingFunction() if provider == "local-minilm" else None


@register_embedding_function
class NeoDynamicTextEmbedding(EmbeddingFunction[Documents]):
    """neo memory-core's function, registered so its collections open without a warning."""

    recorded_config: ClassVar[dict[str, Any]] = {}

    def __init__(self) -> None:
        pass

    def __call__(self, input: Documents) -> Embeddings:
        raise RuntimeError(f"{self.name()} is recorded, not run: the writer passes vectors")

    @staticmethod
    def name() -> str:
        return NEO_FUNCTION

    def get_config(self) -> dict[str, Any]:
        return dict(self.recorded_config)

    @classmethod
    def build_from_config(cls, config: dict[str, Any]) -> NeoDynamicTextEmbedding:
        return cls()


def recorded_function(record: Mapping[str, Any]) -> EmbeddingFunction[Documents]:
    """A function Chroma records exactly as `record` (a known function's name and config)."""
    name, config = str(record["name"]), dict(record.get("config") or {})
    if name == NEO_FUNCTION:
        return NeoDynamicTextEmbedding()
    attributes = {"name": staticmethod(lambda: name), "recorded_config": config}
    named = type("RecordedFunction", (NeoDynamicTextEmbedding,), attributes)
    return cast(EmbeddingFunction[Documents], named())


def collection_config(coll: Collection) -> Mapping[str, Any]:
    """The configuration Chroma records on a collection ({} when it has none)."""
    config = coll.configuration_json
    return config if isinstance(config, Mapping) else {}


DELETE_BATCH = 500
SCAN_PAGE = 2000  # rows per page of the sweep's scans of the whole collection
GROUP_ROWS = 16  # rows a group writes at most: a request of a few MiB with 4,096-d vectors


@dataclass(eq=False)
class RowWrite:
    """One session's row waiting to be written. `admit` raises to refuse the row as found
    right before the upsert, else returns the keys the ledger records (the fence)."""

    session_id: str
    document: str
    metadata: Mapping[str, str | int | float | bool]
    embedding: Sequence[float]
    admit: Callable[[RowState], Mapping[str, int | str]] = lambda found: {}
    deadline: float = 0.0  # the pass's (scheduling.py): a group takes the earliest first
    error: BaseException | None = None  # after the write: what refused or failed it
    done: bool = False

    def result(self) -> None:
        if self.error is not None:
            raise self.error


class GroupWriter:
    """Rows written to one summary collection together (an upsert of sixteen costs little more
    than one, docs/benchmarks.md): whichever pass finds a group free writes up to GROUP_ROWS,
    earliest deadline first, one per session and of one vector size."""

    def __init__(self, groups: int = 1, rows: int = GROUP_ROWS) -> None:
        self._groups, self._rows = groups, rows
        self._changed = threading.Condition()
        self._waiting: list[RowWrite] = []
        self._writing: set[str] = set()  # sessions of the groups in flight
        self._leading = 0

    def write(self, store: MemoryStore, write: RowWrite, pause: Pause = no_pause) -> None:
        """pause: called before sending a group with no due row (the scheduler's give_way)."""
        with self._changed:
            self._waiting.append(write)
            while not write.done:
                group = self._next()
                if not group:
                    self._changed.wait()
                    continue
                self._leading += 1
                self._changed.release()
                try:
                    if all(w.deadline > time.monotonic() for w in group):
                        pause()
                    store.write_rows(group)  # sets each write's error; raises only on a bug
                except BaseException as exc:  # each member raises it; this write may be elsewhere
                    log.exception("a group write failed")
                    for member in group:  # never "done" with no error and no row written
                        member.error = member.error or exc
                    if not isinstance(exc, Exception):
                        raise
                finally:
                    self._changed.acquire()
                    self._leading -= 1
                    self._writing.difference_update(w.session_id for w in group)
                    for member in group:
                        member.done = True
                    self._changed.notify_all()
        write.result()

    def _next(self) -> list[RowWrite]:
        """Under the lock: the next group, if one may start (one extra for rows already due)."""
        if self._leading > self._groups:
            return []
        due = time.monotonic() if self._leading == self._groups else None
        group: list[RowWrite] = []
        for write in sorted(self._waiting, key=lambda w: w.deadline):
            if len(group) == self._rows or (due is not None and write.deadline > due):
                break
            size = len(group[0].embedding) if group else len(write.embedding)
            if write.session_id in self._writing or len(write.embedding) != size:
                continue
            group.append(write)
            self._writing.add(write.session_id)
        self._waiting = [w for w in self._waiting if w not in group]
        return group


@dataclass(frozen=True)
class StoredPrior:
    summary: PriorSummary | None
    row_digest: str | None  # the row document's as read (None: no row)
    row_current: bool = True  # the row is the one the ledger entry names (or no entry)


@dataclass(frozen=True)
class Forgotten:
    """What one forget removed (counts only: never the text)."""

    row: bool  # the summary row existed and was deleted
    ledger_records: int  # the entry's head and segments replaced or deleted
    memories: int  # the session's memories deleted (0 unless asked)
    remaining: int  # the session's memories left in the memory collection


def is_tombstone(head: Mapping[str, Any] | None) -> bool:
    return head is not None and FORGOTTEN_KEY in head


Check = Callable[[], None]  # raises once the writer may no longer write (WriteGuard.check)


class MemoryStore:
    """Memories and summaries in one Chroma database; each collection opened once a store."""

    def __init__(self, client: ClientAPI, location: StoreLocation) -> None:
        self.client = client
        self.location = location
        self._handles: dict[CollectionRole, Collection] = {}  # opened once; dropped if gone
        self._verified_dimension: int | None = None  # a collection's dimension never changes
        self._lock = threading.Lock()

    def close(self) -> None:
        self._handles.clear()
        getattr(self.client, "close", lambda: None)()

    def heartbeat(self) -> int:
        return guard("checking the heartbeat", self.client.heartbeat)

    def _name(self, role: CollectionRole) -> str:
        return str(getattr(self.location, f"{role}_collection"))  # memory, summary or ledger

    def _open(
        self, role: CollectionRole, create: Callable[[], Collection] | None = None
    ) -> Collection:
        """Gets a collection; if it is missing, creates it only when `create` is given."""
        name = self._name(role)  # never the memory collection's (StoreSpec, summaryctl check)
        # No embedding function: we pass explicit vectors; one could conflict.
        with contextlib.suppress(NotFoundError):
            return guard(f"opening the {role} collection", lambda: self.client.get_collection(name))
        if problem := StoreSpec.collection_name_problem(name):
            raise InvalidStoreConfig(
                f"{role} collection name {name!r} is not valid in Chroma: it {problem}"
            )
        if create is None:
            existing = None
            with contextlib.suppress(Exception):  # the names, for the message
                existing = [c.name for c in self.client.list_collections(limit=1000)]
            raise CollectionNotFound(name, role, self.location.describe(), existing)
        log.info("creating the %s collection %r", role, name)
        return guard(f"creating the {role} collection", create)

    def _once(self, role: CollectionRole, create: bool = False) -> Collection:
        """The collection kept for role, else opened outside the lock (a slow store holds up
        no other collection) and kept."""
        if (kept := self._handles.get(role)) is not None:  # one dict read: no lock
            return kept
        makers = {"summary": self._make_summaries, "ledger": self._make_ledger}
        opened = self._open(role, makers[role] if create else None)
        with self._lock:
            return self._handles.setdefault(role, opened)

    def memories(self) -> Collection:
        return self._once("memory")

    def create_memory_collection(self) -> Collection:
        """For summaryctl remember, the demo and tests; the operator never calls it."""
        name = self.location.memory_collection
        ef = cast(Any, _creation_ef(self.location.embedding_provider))
        make = lambda: self.client.get_or_create_collection(name, embedding_function=ef)  # noqa: E731
        return self._open("memory", create=make)

    def summaries(self, *, create: bool = False) -> Collection:
        return self._once("summary", create)

    def _make_summaries(self) -> Collection:
        """With the memory collection's function and distance if our model fits, else not."""
        record, space = self.agents_recipe()
        loc = self.location
        fits = record is not None and not self._model_problem(record, "summary")
        ef = recorded_function(record) if fits and record else _creation_ef(loc.embedding_provider)
        # Distance as metadata: a configuration without a function records a "legacy" one.
        return self.client.get_or_create_collection(
            loc.summary_collection,
            metadata={"hnsw:space": (space if fits else None) or "cosine"},
            embedding_function=cast(Any, ef),
        )

    def _model_problem(self, record: Mapping[str, Any] | None, role: CollectionRole) -> str | None:
        provider, model = self.location.embedding_provider, self.location.embedding_model
        return embedding_function_problem(record, self._name(role), provider, model)

    def agents_recipe(self) -> tuple[Mapping[str, Any] | None, str | None]:
        """(the memory collection's known embedding function, its hnsw distance), if set."""
        try:
            memories = self._once("memory")
        except CollectionNotFound:
            return None, None
        config = collection_config(memories)
        record = config.get("embedding_function")
        known = record if isinstance(record, Mapping) and record.get("type") == "known" else None
        hnsw = config.get("hnsw")
        space = hnsw.get("space") if isinstance(hnsw, Mapping) else None
        return known, space if isinstance(space, str) else None

    def _make_ledger(self) -> Collection:
        meta = {"memorycore.io/ledger-of": self.location.summary_collection}
        return self.client.get_or_create_collection(self.location.ledger_collection, metadata=meta)

    def _on(
        self, role: CollectionRole, what: str, op: Callable[[Collection], T], create: bool = False
    ) -> T:
        coll = self._once(role, create)
        with self._missing(role):
            return guard(what, lambda: op(coll))

    def _get(self, role: CollectionRole, what: str, **query: Any) -> Any:
        return self._on(role, what, lambda c: c.get(**query))

    def _delete(self, role: CollectionRole, what: str, **query: Any) -> None:
        self._on(role, what, lambda c: c.delete(**query))

    def _pages(self, role: CollectionRole, what: str, where: dict[str, Any]) -> Iterator[Listed]:
        with self._missing(role):
            yield from pages(self._once(role), what, where, SCAN_PAGE)

    @contextlib.contextmanager
    def _missing(self, role: CollectionRole) -> Iterator[None]:
        """A collection deleted since opened: its handle is dropped, and it reads as missing."""
        try:
            yield
        except NotFoundError:
            with self._lock:
                self._handles.pop(role, None)
                if role == "summary":
                    self._verified_dimension = None
            raise CollectionNotFound(self._name(role), role, self.location.describe()) from None

    # -- memories ---------------------------------------------------------------------

    def session_rows(
        self,
        session_id: str,
        prior: PriorCoverage | None = None,
        exclude: Callable[[Memory], bool] | None = None,
        mask: PassRedaction | None = None,
    ) -> SessionRows:
        """The session as a pass lists it, masked, `exclude`'s rows not read (session_listing)."""
        mask, prior = mask or PassRedaction(), prior or PriorCoverage()
        with self._missing("memory"):
            coll, read = self.memories(), functools.partial(self.memories_by_id, mask=mask)
            appended = list_appended(coll, session_id, prior, exclude, mask)
            return appended or list_all(coll, session_id, prior, exclude, read, mask)

    def memories_by_id(self, ids: Sequence[str], mask: PassRedaction) -> list[Memory]:
        with self._missing("memory"):
            return read_memories(self.memories(), ids, mask)

    def session_ids(self, session_id: str) -> list[str]:
        """Every row id of the session: what its memoryCount counts."""
        where = {"sessionId": session_id}
        return list(self._get("memory", "listing the session", where=where, include=[])["ids"])

    def add_memories(
        self,
        ids: Sequence[str],
        documents: Sequence[str],
        metadatas: Sequence[dict[str, Any]],
        *,
        create: bool = False,
        embed: Callable[[list[str]], Any] | None = None,
    ) -> None:
        """Writes memories as an agent would (summaryctl remember, the demo, tests)."""
        coll = self.create_memory_collection() if create else self.memories()
        problem = self._model_problem(collection_config(coll).get("embedding_function"), "memory")
        if problem:
            raise EmbeddingMismatch(problem)
        embeddings = (embed or self._memory_embedding)(list(documents))
        for at in range(0, len(ids), GET_BATCH):
            b = slice(at, at + GET_BATCH)
            rows = (list(ids[b]), list(embeddings[b]), list(metadatas[b]), list(documents[b]))
            guard("adding memories", lambda r=rows: coll.upsert(*r))  # type: ignore[misc]

    @functools.cached_property
    def _memory_embedding(self) -> Callable[[list[str]], Any]:
        from controller.embeddings.minilm import LocalMiniLMEmbedding

        return LocalMiniLMEmbedding()

    def scan_since(self, watermark_ms: int) -> Iterator[tuple[str, int]]:
        """(sessionId, ms) of each memory timed after watermark_ms, not in the future."""
        where = newer_where(watermark_ms, int(time.time() * 1000) + FUTURE_TOLERANCE_MS)
        for _, meta, _ in self._pages("memory", "scanning new memories", where):
            sid, ts = meta.get("sessionId"), parse_timestamp_ms(meta.get("timestamp"))
            if isinstance(sid, str) and ts is not None:
                yield sid, ts

    def scan_markers(
        self, marker_type: str, watermark_ms: int
    ) -> Iterator[tuple[str, object, int]]:
        """(memory id, sessionId as stored, ms) of every newer memory of marker_type."""
        where = {"$and": [{"type": marker_type}, newer_where(watermark_ms)]}
        for row_id, meta, _ in self._pages("memory", "scanning for sunset markers", where):
            if (ts := parse_timestamp_ms(meta.get("timestamp"))) is not None:
                yield row_id, meta.get("sessionId"), ts

    def scan_appended(
        self, cursor: RowCursor | None
    ) -> tuple[list[tuple[str, int | None]], RowCursor, bool]:
        """(sessionId, ms or None) of the rows added since `cursor` (Chroma lists them in
        insertion order), the new cursor, and whether it was aligned: a deletion shifts the
        offsets, so a misaligned cursor reads nothing and the sweep reconciles all."""
        total = self._on("memory", "counting memories", lambda c: c.count())
        aligned = cursor is not None and self._id_at(cursor.offset - 1) == cursor.last_id
        found: list[tuple[str, int | None]] = []
        offset = cursor.offset if aligned and cursor is not None else total
        while offset < total:
            rows = self.rows_from(offset, min(SCAN_PAGE, total - offset))
            if not rows:
                break
            found += [(sid, ts) for sid, ts, _, _ in rows if sid is not None]
            offset += len(rows)
        return found, RowCursor(total, self._id_at(total - 1)), aligned

    def _id_at(self, offset: int) -> str | None:
        if offset < 0:
            return None
        got = self._get("memory", "reading a memory id", include=[], limit=1, offset=offset)
        return got["ids"][0] if got["ids"] else None

    def rows_from(self, offset: int, limit: int) -> list[WalkedRow]:
        """(sessionId, ms, row id, row_problem) of `limit` rows from `offset`, as added."""
        what = "reading memories in the order they were added"
        got = self._get("memory", what, include=["metadatas"], limit=limit, offset=offset)
        return [
            (
                sid if isinstance(sid := meta.get("sessionId"), str) else None,
                parse_timestamp_ms(meta.get("timestamp")),
                row_id,
                row_problem(meta),
            )
            for row_id, meta, _ in rows(got)
        ]

    def has_memories_besides(self, session_id: str, memory_type: str) -> bool:
        """Whether the session has a memory not of memory_type (untyped counts)."""
        where = {"$and": [{"sessionId": session_id}, {"type": {"$ne": memory_type}}]}
        what = "looking for the session's memories"
        return bool(self._get("memory", what, where=where, limit=1, include=[])["ids"])

    # -- summaries --------------------------------------------------------------------

    def read_summary(self, session_id: str) -> PriorSummary | None:
        return self.read_prior(session_id).summary

    def _row_and_entry(
        self, session_id: str
    ) -> tuple[bool, str | None, dict[str, Any], bool, LedgerEntry | None]:
        """(row found, its document, its keys, a tombstone found, the ledger entry)."""
        row_id, include = summary_row_id(session_id), ["documents", "metadatas"]
        row = self._by_id("summary", "reading the summary of the session", include, [row_id])
        document, meta = row.get(row_id, (None, {}))
        where = {"sessionId": session_id}
        found = self._by_id("ledger", "reading the session's ledger entry", include, where)
        try:
            entry = read_entry(session_id, [(i, d, m) for i, (d, m) in found.items()], meta)
        except UnreadablePriorSummary as exc:  # the entry's head, not JSON of our format
            raise UnreadablePriorSummary(
                f"the ledger entry of session {session_id!r} in "
                f"{self.location.ledger_collection!r} cannot be read ({exc}); it and the row "
                "are left in place (spec.action Rebuild writes them anew from the memories)"
            ) from None
        tombstone = row_id in found and entry is None  # read_entry's None for a head
        return row_id in row, document, meta, tombstone, entry

    def stored_summary(self, session_id: str) -> tuple[str, dict[str, Any]] | None:
        """(row document, the row's and ledger entry's keys) for `summaryctl ledger`."""
        row, document, row_meta, _, ledger = self._row_and_entry(session_id)
        if ledger is not None:
            head = {f"ledger.{k}": v for k, v in ledger.head.items()}
            return document or "", {**row_meta, **ledger.keys, **head}
        return (document or "", dict(row_meta)) if row else None

    def read_prior(self, session_id: str) -> StoredPrior:
        """The stored summary (ledger entry, else row) and whether they agree (docs/ledger.md)."""
        row, document, row_meta, forgotten, entry = self._row_and_entry(session_id)
        digest = document_digest(document or "") if row else None
        if forgotten and row and rewritten_by(document, row_meta) is None:
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
        """Refuses vectors of another dimension or model than the summary collection's (else
        the memory collection's); returns its dimension when known."""
        if self._verified_dimension == dimension:
            return dimension
        held = None
        try:  # the summary collection's record and a vector, else the agents' choice of record
            record = collection_config(self.summaries()).get("embedding_function")
            got = self._get("summary", "sampling an embedding", limit=1, include=["embeddings"])
            embeddings = got.get("embeddings")
            held = len(embeddings[0]) if embeddings is not None and len(embeddings) else None
        except CollectionNotFound:
            record = self.agents_recipe()[0]
            record = None if record and record.get("name") in MINILM_FUNCTIONS else record
        except StoreUnavailable as exc:
            cause = exc.__cause__
            if not isinstance(cause, ChromaError) or "Nothing found on disk" not in str(cause):
                raise
            log.info("summary collection not indexed yet; Chroma checks the dimension")
        problem = self._model_problem(record, "summary")
        if held is not None and held != dimension:
            if problem:  # both: the models first (the more telling), then the sizes
                raise EmbeddingMismatch(f"{problem} (it holds {held}-d, this model {dimension}-d)")
            raise mismatch(self.location.summary_collection, held, dimension)
        if problem:
            raise EmbeddingMismatch(problem)
        if held is not None:
            self._verified_dimension = dimension
        return held

    def ledger_sessions(self) -> Iterator[str]:
        """The session of every ledger entry but tombstones."""
        where = {"ledgerFormat": {"$gte": 1}}
        with contextlib.suppress(CollectionNotFound):
            for _, meta, _ in self._pages("ledger", "listing the ledger", where):
                sid = meta.get("sessionId")
                if isinstance(sid, str) and not is_tombstone(meta):
                    yield sid

    def latest_summaries(self, limit: int) -> list[tuple[str, str, dict[str, Any]]]:
        """The newest summaries as agents read them; CollectionNotFound: not "none yet"."""
        listed = self._pages("summary", "listing summaries", {})
        stamps = {
            i: t if isinstance(t := m.get("timestamp"), int | float) else 0 for i, m, _ in listed
        }
        newest = sorted(stamps, key=stamps.__getitem__, reverse=True)[:limit]
        found = self._by_id("summary", "reading summaries", ["documents", "metadatas"], newest)
        return [(i, found[i][0] or "", found[i][1]) for i in newest if i in found]

    def summary_states(self, session_ids: Sequence[str]) -> dict[str, StoredSummaryState]:
        """memoryCount and timestamp of these sessions' summaries or tombstones."""
        rows = self._metadata("summary", session_ids).items()
        states = {s: _state(m.get("memoryCount"), m.get("timestamp")) for s, m in rows}
        for sid, head in self.ledger_heads([s for s in session_ids if s not in states]).items():
            if is_tombstone(head):
                at = head.get(LAST_MEMORY_KEY, head.get(FORGOTTEN_KEY))  # the agents' clocks
                states[sid] = _state(head.get("memoryCount"), at)
        return states

    def ledger_heads(self, session_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """These sessions' ledger heads: a tombstone (is_tombstone) if forgotten since written."""
        return self._metadata("ledger", session_ids)

    def rows_digests(self, session_ids: Sequence[str]) -> dict[str, str]:
        heads = self.ledger_heads(session_ids).items()
        return {s: d for s, head in heads if isinstance(d := head.get("rowsDigest"), str)}

    def _metadata(
        self, role: CollectionRole, session_ids: Sequence[str]
    ) -> dict[str, dict[str, Any]]:
        ids = [summary_row_id(s) for s in session_ids]
        rows = self._by_id(role, f"reading the {role} metadata", ["metadatas"], ids).values()
        return {m["sessionId"]: m for _, m in rows if isinstance(m.get("sessionId"), str)}

    def written_since(self, session_ids: Sequence[str], since_ms: int) -> set[str]:
        """Sessions whose ledger head was replaced at or after since_ms (no longer stale)."""
        heads = self.ledger_heads(session_ids).items()
        replaced = ("summarizedAt", FORGOTTEN_KEY)  # by a write, or by a forget
        return {s for s, head in heads if max(_int(head.get(k)) for k in replaced) >= since_ms}

    # -- writes (GroupWriter: the group write) -----------------------------------------

    def read_row_state(self, session_id: str) -> RowState:
        return self.read_row_states([session_id])[session_id]

    def read_row_states(self, session_ids: Sequence[str]) -> dict[str, RowState]:
        """Each session's row as a write finds it, in two reads for all."""
        ids = [summary_row_id(s) for s in session_ids]
        where = {"sessionId": {"$in": list(session_ids)}}
        records = self._by_id("ledger", "reading the ledger entries", ["metadatas"], where)
        rows = self._by_id("summary", "reading the rows", ["documents", "metadatas"], ids)
        others: dict[object, list[str]] = {}
        for record_id, (_, meta) in records.items():
            if record_id not in ids:
                others.setdefault(meta.get("sessionId"), []).append(record_id)
        states = {}
        for sid, row_id in zip(session_ids, ids, strict=True):
            head, row = records[row_id][1] if row_id in records else None, rows.get(row_id)
            digest = document_digest(row[0] or "") if row is not None else None
            states[sid] = RowState(recorded_fence(head), digest, head, tuple(others.get(sid, ())))
        return states

    def _by_id(
        self, role: CollectionRole, what: str, include: list[str], which: list[str] | dict[str, Any]
    ) -> dict[str, tuple[str | None, dict[str, Any]]]:
        """(document, metadata) by id of the records `which` (ids, or a where) names; none
        from a missing collection."""
        found: dict[str, tuple[str | None, dict[str, Any]]] = {}
        if which == []:  # no request: an idle sweep asks for none, often of no collection yet
            return found
        with contextlib.suppress(CollectionNotFound), self._missing(role):
            if isinstance(which, list):
                listed = by_ids(self._once(role), what, which, include, SCAN_PAGE)
            else:
                listed = rows(self._get(role, what, where=which, include=include))
            found.update((i, (d, dict(m))) for i, m, d in listed)
        return found

    def drop_summary(self, session_id: str, found: RowState, check: Check | None = None) -> None:
        """Deletes the row, then the ledger records, each only as `found` holds it (a newer
        writer's stay). An entry left is dropped by the next pass; a row alone would read as
        another writer's text."""
        if found.digest is not None:
            where, row_id = {DIGEST_KEY: found.digest}, summary_row_id(session_id)
            what = "deleting the summary row"
            self._checked(check, self._delete, "summary", what, ids=[row_id], where=where)
        if found.head is not None:
            where = entry_as_read(session_id, found.head)
            self._checked(check, self._delete, "ledger", "deleting the ledger entry", where=where)

    def _checked(
        self, check: Check | None, write: Callable[P, None], *args: P.args, **kw: P.kwargs
    ) -> None:
        """A write after `check`: a writer whose claim lapsed stops before its successor's."""
        if check is not None:
            check()
        with contextlib.suppress(CollectionNotFound):
            write(*args, **kw)

    def write_rows(self, writes: Sequence[RowWrite]) -> None:
        """Writes the ledger entries, then the rows (the one place that creates collections)."""
        try:
            found = self.read_row_states([w.session_id for w in writes])
        except Exception as exc:
            for write in writes:
                write.error = exc
            return
        records: list[LedgerRecord] = []
        rows: list[tuple[str, str, Mapping[str, Any]]] = []
        admitted: dict[RowWrite, list[str]] = {}  # each: the records its new head does not name
        for write in writes:
            try:  # the write's own checks, then its own records: a failure is its alone
                state = found[write.session_id]
                fence = write.admit(state)
                planned, left = plan_write(write.session_id, write.metadata, state, fence)
            except Exception as exc:
                write.error = exc
                continue
            records += planned
            row = {k: v for k, v in write.metadata.items() if k in READER_ROW_KEYS}
            rows.append((summary_row_id(write.session_id), write.document, upsert_metadata(row)))
            admitted[write] = left
        if not admitted:
            return
        try:
            self._put("ledger", "writing the ledger entries", records)
            vectors = [w.embedding for w in admitted]
            self._put("summary", "writing the summaries", rows, vectors)
            self._verified_dimension = len(vectors[0])  # accepted: no sample round trip later
        except Exception as exc:
            if len(admitted) == 1 or caused_by(exc, *UNREACHABLE):  # each alone fails too
                for write in admitted:
                    write.error = exc
                return
            # Chroma refused: a bad row (size limit, vector size) must fail alone.
            log.info(
                "a group write of %d rows failed (%s); writing them one by one", len(admitted), exc
            )
            for write in admitted:
                self.write_rows([write])  # read and checked again, as if alone
            return
        # Records the new head does not name go after the rows; if that fails, so does the
        # write, and its retry finds them (read_prior).
        ids = [i for left in admitted.values() for i in left]
        try:
            for batch in batches(ids, DELETE_BATCH):
                self._delete("ledger", "deleting old ledger records", ids=list(batch))
        except Exception as exc:
            for write, left in admitted.items():
                if left:
                    write.error = exc

    def _put(
        self,
        role: CollectionRole,
        what: str,
        rows: Sequence[tuple[str, str, Mapping[str, Any]]],
        vectors: Sequence[Sequence[float]] = (),
    ) -> None:
        """vectors: none for ledger records, whose vector is a constant (never queried)."""
        vectors = vectors or [LEDGER_VECTOR] * len(rows)
        embeddings = cast(Any, [np.asarray(v, dtype=np.float32) for v in vectors])
        ids, documents, metadatas = (list(column) for column in zip(*rows, strict=True))

        def upsert(coll: Collection) -> None:
            try:
                coll.upsert(ids, embeddings, metadatas, documents)
            except InvalidArgumentError as exc:
                if role == "summary" and (found := DIMENSION_ERROR.search(str(exc))):
                    name = self.location.summary_collection
                    raise mismatch(name, int(found.group(1)), int(found.group(2))) from exc
                raise

        self._on(role, what, upsert, create=True)

    def forget_state(
        self,
        session_id: str,
        fence: Mapping[str, int | str],
        *,
        memories: bool,
        request: str,
        by: str = "",
        check: Check | None = None,
    ) -> Forgotten:
        """A tombstone replaces the ledger head first (a forget cut short leaves nothing a pass
        would carry), then the row, segments and memories go (docs/privacy.md)."""
        listed = self._pages("memory", "listing the session", {"sessionId": session_id})
        stamped = [(i, parse_timestamp_ms(m.get("timestamp"))) for i, m, _ in listed]  # no text
        ids, times = [i for i, _ in stamped], [t for _, t in stamped]
        left = [] if memories else ids
        row_id = summary_row_id(session_id)
        row = bool(self._by_id("summary", "reading the summary row", [], [row_id]))
        where = {"$and": [{"sessionId": session_id}, {"segment": {"$gte": 0}}]}
        segments = self._by_id("ledger", "listing the session's ledger segments", [], where)
        head = self.ledger_heads([session_id]).get(session_id, {})
        if is_tombstone(head):  # forgotten before: the memories it removed count too
            times.append(_int(head.get(LAST_MEMORY_KEY, head.get(FORGOTTEN_KEY))) or None)
        entry = len(segments) + bool(head and not is_tombstone(head))  # what a forget found
        retry = request and is_tombstone(head) and head.get(REQUEST_KEY) == request
        before = head if retry else {}  # a retry reports what its first try removed too
        removed = Forgotten(
            row or before.get("removedRow") is True,
            max(entry, _int(before.get("removedRecords"))),
            max(len(ids) if memories else 0, _int(before.get("removedMemories"))),
            len(left),
        )
        now = int(time.time() * 1000)
        tombstone = {
            "sessionId": session_id,
            "ledgerFormat": LEDGER_FORMAT,
            FORGOTTEN_KEY: now,
            LAST_MEMORY_KEY: newest_time(times, now),
            "rowsDigest": digest_text(digest(left)),
            "memoryCount": len(left),
            REQUEST_KEY: request,
            FORGOTTEN_BY_KEY: by,
            "removedRow": removed.row,
            "removedRecords": removed.ledger_records,
            "removedMemories": removed.memories,
            **fence,
        }
        record = LedgerRecord(row_id, "{}", replacing_head(tombstone))
        self._checked(check, self._put, "ledger", "writing the session's tombstone", [record])
        if row:
            self._checked(check, self._delete, "summary", "deleting the summary row", ids=[row_id])
        what = "deleting the session's ledger segments"
        self._checked(check, self._delete, "ledger", what, where=where)
        for batch in batches(ids if memories else [], DELETE_BATCH):
            what = "deleting the session's memories"
            self._checked(check, self._delete, "memory", what, ids=list(batch))
        return removed

    # -- each cluster's authority record in the ledger (core/ledger.py) ----------------

    def read_authority(self, uid: str) -> AuthorityRecord | None:
        return next(iter(self.authorities(uid)), None)

    def authorities(self, uid: str | None = None) -> list[AuthorityRecord]:
        """The record of cluster uid (None: every cluster's); none without a ledger."""
        where = {"authority": uid} if uid is not None else {"record": AUTHORITY_RECORD}
        what = "reading the clusters' authority records"
        found = self._by_id("ledger", what, ["metadatas"], where).values()
        return [r for _, m in found if (r := AuthorityRecord.parse(m))]

    def renew_authority(self, record: AuthorityRecord) -> None:
        """Writes this cluster's record (creating the ledger, as a first write does)."""
        document = f"the operator of cluster {record.uid} writes these summaries"
        written = LedgerRecord(authority_record_id(record.uid), document, record.metadata())
        self._put("ledger", "renewing this cluster's authority record", [written])

    def remove_authorities(self, uids: Sequence[str]) -> None:
        for batch in batches([authority_record_id(uid) for uid in uids], DELETE_BATCH):
            self._delete("ledger", "removing authority records", ids=list(batch))


def newer_where(after_ms: int, upto_ms: int | None = None) -> dict[str, Any]:
    """Timestamps in (after_ms, upto_ms], a range per UNIT_LIMITS band; Chroma truncates float
    bounds, so seconds' bounds sit halfway between two ms."""
    cap = 2**63 - 1  # Chroma's integers are 64-bit
    upto, ranges, band = upto_ms if upto_ms is not None else cap, [], 0
    for limit, scale in UNIT_LIMITS:
        if scale < 0:  # seconds, rounded to the ms
            low, high = ("$gt", (after_ms + 0.5) / 1000), ("$lte", (upto + 0.5) / 1000)
        else:  # ms, µs, ns, floored to the ms
            low, high = ("$gte", max((after_ms + 1) * scale, band)), ("$lt", (upto + 1) * scale)
        bounds = (low, high, ("$lt", limit))
        ranges.append({"$and": [{"timestamp": {op: min(v, cap)}} for op, v in bounds]})
        band = limit
    return {"$or": ranges}


def _int(value: object) -> int:
    """A ledger head's count or time in ms (0: none); a float as its int, as 0.1.0 read it."""
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _state(count: object, ts: object) -> StoredSummaryState:
    return StoredSummaryState(
        memory_count=int(count) if isinstance(count, int | float) else None,
        timestamp_ms=int(ts) if isinstance(ts, int | float) else None,
    )


# -- the one write of a summary: render, embed, then the group write re-reads the row (a
# newer fence or another writer's document refuses it); controller/pipeline.py decides what.

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
PhaseTimer = Callable[[str], contextlib.AbstractContextManager[object]]
untimed: PhaseTimer = contextlib.nullcontext


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
        loc = store.location
        document = render_document(summary, loc.memory_collection, max_chars=loc.document_max_chars)
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
