"""Opening the store's collections: the memory collection (read; never created by a read)
and the summary collection (created only by the writer, recording an embedding function
agents can rebuild), and the paged reads every scan uses."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, TypeVar, cast

from chromadb.api import ClientAPI
from chromadb.api.models.Collection import Collection
from chromadb.api.types import (
    DefaultEmbeddingFunction,
    Documents,
    EmbeddingFunction,
    Embeddings,
    Where,
)
from chromadb.errors import NotFoundError
from chromadb.utils.embedding_functions import register_embedding_function

from controller.api import StoreSpec
from controller.core.embedding_match import (
    MINILM_FUNCTIONS,
    NEO_FUNCTION,
    embedding_function_problem,
)
from controller.store.connection import StoreLocation
from controller.store.errors import (
    CollectionNotFound,
    CollectionRole,
    InvalidStoreConfig,
    describe_error,
    guard,
)

log = logging.getLogger(__name__)
T = TypeVar("T")


def _creation_ef(provider: str) -> DefaultEmbeddingFunction | None:
    """The embedding function a new summary collection records when the memory collection
    records none. We write explicit vectors; the record is for the agents, whose chromadb
    rebuilds a function from its name on every query_texts (a name of ours would fail there):
    local-minilm records chromadb's "default" (the same model, identical vectors); openai
    records nothing (no function every agent can rebuild matches an arbitrary endpoint).
    """
    return DefaultEmbeddingFunction() if provider == "local-minilm" else None


class _Recorded(EmbeddingFunction[Documents]):
    """An embedding function Chroma records, never runs: the writer always passes vectors.
    Subclasses name the function (name()) and carry the config recorded with it."""

    recorded_config: ClassVar[dict[str, Any]] = {}

    def __init__(self) -> None:
        pass

    def __call__(self, input: Documents) -> Embeddings:
        raise RuntimeError(f"{self.name()} is recorded, not run: the writer passes vectors")

    @staticmethod
    def name() -> str:
        return "recorded"

    def get_config(self) -> dict[str, Any]:
        return dict(self.recorded_config)

    @classmethod
    def build_from_config(cls, config: dict[str, Any]) -> _Recorded:
        return cls()

    def is_legacy(self) -> bool:
        return False


@register_embedding_function
class NeoDynamicTextEmbedding(_Recorded):
    """neo memory-core's collections record its function as dynamic_text_embedding_service.
    chromadb rebuilds the recorded function whenever it opens a collection and warns that it
    cannot; registered here (in chromadb's registry of known functions, once, at import), a
    neo collection opens quietly, and a summary collection we create records it."""

    @staticmethod
    def name() -> str:
        return NEO_FUNCTION


def recorded_function(record: Mapping[str, Any]) -> EmbeddingFunction[Documents]:
    """A function Chroma records exactly as `record` (a known function's name and config),
    for a new collection to record what the agents' collection records."""
    name, config = str(record["name"]), dict(record.get("config") or {})
    if name == NEO_FUNCTION:
        return NeoDynamicTextEmbedding()
    named = type(
        "RecordedFunction",
        (_Recorded,),
        {"name": staticmethod(lambda: name), "recorded_config": config},
    )
    return cast(EmbeddingFunction[Documents], named())


def collection_config(coll: Collection) -> Mapping[str, Any]:
    """The configuration Chroma records on a collection ({} when it has none)."""
    try:
        config = coll.configuration_json
    except Exception:  # an older server, or a configuration this client cannot read
        return {}
    return config if isinstance(config, Mapping) else {}


class Collections:
    """The two collections of one Chroma database, each opened once per store: the agents'
    memory collection (never created by a read) and the summary collection (created only by
    the summary writer)."""

    def __init__(self, client: ClientAPI, location: StoreLocation) -> None:
        self.client = client
        self.location = location
        self._summaries: Collection | None = None
        self._ledger: Collection | None = None
        self._memories: Collection | None = None  # opened once; dropped if it disappears
        self._verified_dimension: int | None = None  # a collection's dimension never changes
        self._lock = threading.Lock()

    def close(self) -> None:
        """Releases the client: chromadb keeps a client's system (its HTTP sessions, or an
        embedded database) alive until the last client of it is closed."""
        with self._lock:
            self._summaries = self._ledger = self._memories = None
        close = getattr(self.client, "close", None)
        if close is not None:
            close()

    # -- health -----------------------------------------------------------------------

    def heartbeat(self) -> int:
        return guard("checking the heartbeat", self.client.heartbeat)

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
            return guard(f"opening the {role} collection", lambda: self.client.get_collection(name))
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
        return guard(f"creating the {role} collection", create)

    def memories(self) -> Collection:
        """The memory collection, opened once and kept (a summary reads it for the claim's
        scope and for the session's rows); CollectionNotFound if it does not exist (never
        created)."""
        with self._lock:
            if self._memories is None:
                self._memories = self._open("memory", self.location.memory_collection)
            return self._memories

    def create_memory_collection(self) -> Collection:
        """Opens the memory collection, creating it if missing, as the summary collection is
        (_creation_ef). For summaryctl remember, the demo and tests writing into a fresh
        store; the operator never calls it (agents own it)."""
        name = self.location.memory_collection
        ef = cast(Any, _creation_ef(self.location.embedding_provider))
        make = lambda: self.client.get_or_create_collection(name, embedding_function=ef)  # noqa: E731
        return self._open("memory", name, create=make)

    def summaries(self, *, create: bool = False) -> Collection:
        """The summary collection, opened once and kept. Reads pass create=False and get
        CollectionNotFound when it is missing; only the writer passes create=True."""
        with self._lock:
            if self._summaries is None:
                name = self.location.summary_collection
                make = self._make_summaries if create else None
                self._summaries = self._open("summary", name, make)
            return self._summaries

    def _make_summaries(self) -> Collection:
        """Creates the summary collection as the agents created their memory collection, when
        our model fits it: the embedding function it records (the one their readers rebuild:
        neo memory-core's dynamic_text_embedding_service, chromadb's default, ...) and its
        distance. Otherwise the function follows our provider (_creation_ef), with cosine
        distance."""
        record, space = self.agents_recipe()
        loc = self.location
        fits = record is not None and not embedding_function_problem(
            record, loc.summary_collection, loc.embedding_provider, loc.embedding_model
        )
        ef = recorded_function(record) if fits and record else _creation_ef(loc.embedding_provider)
        # The distance as metadata: a configuration without a function would record a
        # "legacy" one, which agents passing their own function conflict with.
        return self.client.get_or_create_collection(
            loc.summary_collection,
            metadata={"hnsw:space": (space if fits else None) or "cosine"},
            embedding_function=cast(Any, ef),
        )

    def agents_recipe(self) -> tuple[Mapping[str, Any] | None, str | None]:
        """(the known embedding function the memory collection records, its hnsw distance),
        each None when it records none; (None, None) while the memory collection is missing.
        Called with the lock held (from summaries())."""
        try:
            memories = self._memories or guard(
                "opening the memory collection",
                lambda: self.client.get_collection(self.location.memory_collection),
            )
        except (NotFoundError, CollectionNotFound):
            return None, None
        config = collection_config(memories)
        record = config.get("embedding_function")
        known = record if isinstance(record, Mapping) and record.get("type") == "known" else None
        hnsw = config.get("hnsw")
        space = hnsw.get("space") if isinstance(hnsw, Mapping) else None
        return known, space if isinstance(space, str) else None

    def summary_function_record(self) -> Mapping[str, Any] | None:
        """The embedding function record our writes must match: the summary collection's;
        before it exists, the memory collection's when the agents chose one (any known
        function but chromadb's default, which it records for every collection created
        without one): neo memory-core, say, embeds summaries with its memories' function."""
        try:
            coll = self.summaries()
        except CollectionNotFound:
            with self._lock:
                record = self.agents_recipe()[0]
            chosen = record is not None and record.get("name") not in MINILM_FUNCTIONS
            return record if chosen else None
        record = collection_config(coll).get("embedding_function")
        return record if isinstance(record, Mapping) else None

    def ledger(self, *, create: bool = False) -> Collection:
        """The operator's ledger (core/ledger.py), opened once and kept; created, like the
        summary collection, only by the writer. Its vectors are a constant: nobody queries
        it by meaning."""
        with self._lock:
            if self._ledger is None:
                name = self.location.ledger_collection

                def make() -> Collection:
                    meta = {"memorycore.io/ledger-of": self.location.summary_collection}
                    return self.client.get_or_create_collection(name, metadata=meta)

                self._ledger = self._open("ledger", name, make if create else None)
            return self._ledger

    def _on_summaries(self, what: str, op: Callable[[Collection], T], *, create: bool = False) -> T:
        """Runs op on the summary collection (see _on)."""
        return self._on("summary", what, op, create=create)

    def _on_ledger(self, what: str, op: Callable[[Collection], T], *, create: bool = False) -> T:
        """Runs op on the ledger collection (see _on)."""
        return self._on("ledger", what, op, create=create)

    def _on(
        self,
        role: CollectionRole,
        what: str,
        op: Callable[[Collection], T],
        *,
        create: bool = False,
    ) -> T:
        """Runs op on the summary or ledger collection. If it was deleted after it was
        opened, the kept handle is dropped (the next writer recreates it) and it reads as
        missing."""
        opened = self.summaries if role == "summary" else self.ledger
        coll = opened(create=create)
        try:
            return guard(what, lambda: op(coll))
        except NotFoundError:
            with self._lock:
                if role == "summary":
                    self._summaries = None
                    self._verified_dimension = None
                else:
                    self._ledger = None
            loc = self.location
            name = loc.summary_collection if role == "summary" else loc.ledger_collection
            raise CollectionNotFound(name, role, loc.describe()) from None

    # -- memories ---------------------------------------------------------------------

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


def pages(
    coll: Collection, what: str, where: dict[str, Any], page: int
) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(id, metadata) of every row matching where, read page by page: one unpaged get of a
    50,000-row session exceeds SQLite's variable limit inside Chroma."""
    for row_id, meta, _ in listing(coll, what, where, page):
        yield row_id, meta


def listing(
    coll: Collection,
    what: str,
    where: dict[str, Any],
    page: int,
    *,
    first_with_documents: bool = False,
) -> Iterator[tuple[str, Mapping[str, Any], str | None]]:
    """(id, metadata, document) of every row matching where, page by page. The document is
    None except on the first page when first_with_documents: a small session is then read
    in one round trip, a large one without carrying every document through the listing."""
    offset = 0
    while True:
        with_documents = first_with_documents and not offset
        include = ["metadatas", "documents"] if with_documents else ["metadatas"]
        got = guard(
            what,
            lambda o=offset, i=include: coll.get(  # type: ignore[misc]
                where=cast(Where, where or None), include=cast(Any, i), limit=page, offset=o
            ),
        )
        docs: list[str | None] = list(got.get("documents") or [])
        for n, (row_id, meta) in enumerate(zip(got["ids"], got["metadatas"] or [], strict=False)):
            yield row_id, meta or {}, docs[n] if n < len(docs) else None
        if len(got["ids"]) < page:
            return
        offset += page


def batches(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
