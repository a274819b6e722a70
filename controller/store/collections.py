"""Opening the memory, summary and ledger collections, and reading them page by page."""

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

# Does our embedding model match the one a collection records? A different model of the same
# dimension passes Chroma's dimension check and silently ruins every semantic search over
# summaries, so the model a collection's function record names is compared before any write.
MINILM = "all-MiniLM-L6-v2"
MINILM_FUNCTIONS = frozenset({"default", "onnx_mini_lm_l6_v2"})
NEO_FUNCTION = "dynamic_text_embedding_service"
NEO_DEFAULT_MODEL = "text-embedding-qwen3-embedding-8b"


def _model_key(model: str) -> str:
    """Models compare without case or organisation prefix ("sentence-transformers/x" is x)."""
    return model.strip().rsplit("/", 1)[-1].lower()


def embedding_function_problem(
    record: Mapping[str, Any] | None, collection: str, provider: str, model: str
) -> str | None:
    """Why embedding with (provider, model) would not match what the collection records,
    naming both; None when it matches or the record names no known function or model."""
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
            f"{NEO_FUNCTION!r} (neo's endpoint, by default {NEO_DEFAULT_MODEL}, 4096-d) but "
            f"this summarizer embeds with the {described}; set spec.embedding to neo's "
            "endpoint and model (docs/migrating-from-neo.md)"
        )
    if not isinstance(theirs, str) or not theirs.strip() or _model_key(theirs) == _model_key(ours):
        return None
    return (
        f"collection {collection!r} records the embedding function {name!r} with model "
        f"{theirs!r} but this summarizer embeds with the {described}; set spec.embedding to "
        "the model the collection uses"
    )


def _creation_ef(provider: str) -> DefaultEmbeddingFunction | None:
    """The function a new collection records when the memory collection records none: one
    every agent's chromadb can rebuild by name (chromadb's "default" has MiniLM's vectors;
    none matches an arbitrary endpoint)."""
    return DefaultEmbeddingFunction() if provider == "local-minilm" else None


class _Recorded(EmbeddingFunction[Documents]):
    """An embedding function Chroma records but never runs: the writer passes vectors."""

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


@register_embedding_function
class NeoDynamicTextEmbedding(_Recorded):
    """neo memory-core's dynamic_text_embedding_service, registered with chromadb so its
    collections open without a warning and our summary collection can record it."""

    @staticmethod
    def name() -> str:
        return NEO_FUNCTION


def recorded_function(record: Mapping[str, Any]) -> EmbeddingFunction[Documents]:
    """A function Chroma records exactly as `record` (a known function's name and config)."""
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
    config = coll.configuration_json
    return config if isinstance(config, Mapping) else {}


class Collections:
    """The collections of one Chroma database, each opened once per store."""

    def __init__(self, client: ClientAPI, location: StoreLocation) -> None:
        self.client = client
        self.location = location
        self._handles: dict[CollectionRole, Collection] = {}  # opened once; dropped if gone
        self._verified_dimension: int | None = None  # a collection's dimension never changes
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._handles.clear()
        close = getattr(self.client, "close", None)
        if close is not None:
            close()

    def heartbeat(self) -> int:
        return guard("checking the heartbeat", self.client.heartbeat)

    def _name(self, role: CollectionRole) -> str:
        loc = self.location
        names = {"memory": loc.memory_collection, "summary": loc.summary_collection}
        return names.get(role) or loc.ledger_collection

    def _collection_names(self) -> list[str] | None:
        """Names in the database for a not-found message (None: cannot be listed)."""
        try:
            return [c.name for c in self.client.list_collections(limit=1000)]
        except Exception as exc:
            log.debug("cannot list collections: %s", describe_error(exc))
            return None

    def _open(
        self, role: CollectionRole, create: Callable[[], Collection] | None = None
    ) -> Collection:
        """Gets a collection; if it is missing, creates it only when `create` is given."""
        name = self._name(role)
        if role != "memory" and name == self.location.memory_collection:
            raise InvalidStoreConfig(
                f"the {role} collection {name!r} is the memory collection: the operator's rows "
                "would land among the agents' memories; name another summary collection"
            )
        try:
            # No embedding function: we pass explicit vectors; one could conflict.
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

    def _once(self, role: CollectionRole, create: bool = False) -> Collection:
        """The collection kept for role, else opened and kept. Opened outside the lock, so a
        slow store holds up no use of the collections already open; one handle is kept."""
        with self._lock:
            kept = self._handles.get(role)
        if kept is not None:
            return kept
        makers = {"summary": self._make_summaries, "ledger": self._make_ledger}
        opened = self._open(role, makers[role] if create else None)
        with self._lock:
            return self._handles.setdefault(role, opened)

    def memories(self) -> Collection:
        return self._once("memory")

    def create_memory_collection(self) -> Collection:
        """Opens or creates the memory collection, for summaryctl remember, the demo and
        tests; the operator never calls it."""
        name = self.location.memory_collection
        ef = cast(Any, _creation_ef(self.location.embedding_provider))
        make = lambda: self.client.get_or_create_collection(name, embedding_function=ef)  # noqa: E731
        return self._open("memory", create=make)

    def summaries(self, *, create: bool = False) -> Collection:
        return self._once("summary", create)

    def _make_summaries(self) -> Collection:
        """Creates the summary collection with the memory collection's embedding function
        and distance when our model fits it; else _creation_ef and cosine."""
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
        """Why our embedding model does not match the function `record` names, if it can tell."""
        loc = self.location
        model = (loc.embedding_provider, loc.embedding_model)
        return embedding_function_problem(record, self._name(role), *model)

    def agents_recipe(self) -> tuple[Mapping[str, Any] | None, str | None]:
        """(the memory collection's known embedding function, its hnsw distance), if set."""
        try:
            memories = self._handles.get("memory") or guard(
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
        """The function record our writes must match: the summary collection's, else the
        memory collection's if the agents chose one (not chromadb's default)."""
        try:
            coll = self.summaries()
        except CollectionNotFound:
            record = self.agents_recipe()[0]
            chosen = record is not None and record.get("name") not in MINILM_FUNCTIONS
            return record if chosen else None
        record = collection_config(coll).get("embedding_function")
        return record if isinstance(record, Mapping) else None

    def _make_ledger(self) -> Collection:
        meta = {"memorycore.io/ledger-of": self.location.summary_collection}
        return self.client.get_or_create_collection(self.location.ledger_collection, metadata=meta)

    def _on(
        self,
        role: CollectionRole,
        what: str,
        op: Callable[[Collection], T],
        *,
        create: bool = False,
    ) -> T:
        coll = self._once(role, create)
        with self._missing(role):
            return guard(what, lambda: op(coll))

    def _get(self, role: CollectionRole, what: str, **query: Any) -> Any:
        return self._on(role, what, lambda c: c.get(**query))

    def _delete(self, role: CollectionRole, what: str, **query: Any) -> None:
        self._on(role, what, lambda c: c.delete(**query))

    def _pages(
        self, role: CollectionRole, what: str, where: dict[str, Any], page: int
    ) -> Iterator[tuple[str, Mapping[str, Any], str | None]]:
        with self._missing(role):
            yield from pages(self._once(role), what, where, page)

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


def pages(
    coll: Collection,
    what: str,
    where: dict[str, Any],
    page: int,
    include: Sequence[str] = ("metadatas",),
    *,
    first_with_documents: bool = False,
) -> Iterator[tuple[str, Mapping[str, Any], str | None]]:
    """(id, metadata, document) of every row matching where, page by page (SQLite's variable
    limit); documents only on the first page with first_with_documents."""
    offset = 0
    while True:
        wanted = [*include, "documents"] if first_with_documents and not offset else include
        got = guard(
            what,
            lambda o=offset, i=wanted: coll.get(  # type: ignore[misc]
                where=cast(Where, where or None), include=cast(Any, list(i)), limit=page, offset=o
            ),
        )
        yield from rows(got)
        if len(got["ids"]) < page:
            return
        offset += page


def by_ids(
    coll: Collection, what: str, ids: Sequence[str], include: Sequence[str], size: int
) -> Iterator[tuple[str, Mapping[str, Any], str | None]]:
    """(id, metadata, document) of these rows still there, `size` ids a read (SQLite binds
    at most 32,766)."""
    for batch in batches(ids, size):
        got = guard(what, lambda b=batch: coll.get(ids=list(b), include=cast(Any, list(include))))  # type: ignore[misc]
        yield from rows(got)


def rows(got: Any) -> Iterator[tuple[str, Mapping[str, Any], str | None]]:
    """(id, metadata or {}, document or None) of each row a get answered."""
    ids, none = got["ids"], [None] * len(got["ids"])
    metas, docs = got.get("metadatas") or none, got.get("documents") or none
    for row_id, meta, doc in zip(ids, metas, docs, strict=False):
        yield row_id, meta or {}, doc


def batches(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    """Each item once, `size` a batch: every read or delete of several ids is cut here, and
    Chroma refuses a request that names an id twice (its answer is per id anyway)."""
    items = list(dict.fromkeys(items))
    for start in range(0, len(items), size):
        yield items[start : start + size]
