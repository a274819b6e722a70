"""The live parts of each SessionSummarizer: Chroma client, embedding function and model
summarizer, each kept with the configuration it was built from (Secret values included: a
rotated key takes effect at the next pass) until the spec's next generation or the deletion.
A part no longer kept is closed once no use holds it; one built for a SessionSummarizer not
seen, deleted or changed meanwhile serves its use alone."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal, TypeVar, cast

from controller.api import SessionSummarizerSpec
from controller.backends import (
    EmbeddingSpec,
    build_embedding_function,
    chat_model_config,
    check_memory_destinations,
    embedding_spec,
    redaction_of,
    store_location,
)
from controller.embeddings.minilm import EmbeddingFunction, LocalMiniLMEmbedding, MiniLMWeights
from controller.pipeline import Backends, Embedder
from controller.scheduling import PassScheduler
from controller.store.connection import StoreLocation, connect
from controller.store.errors import StoreUnavailable, caused_by
from controller.store.memory_store import MemoryStore
from controller.summarizers.chat_prompt import ChatModelConfig
from controller.summarizers.contract import Summarizer
from controller.summarizers.extractive import EXTRACTIVE

K = TypeVar("K")
V = TypeVar("V")
Who = tuple[str, str]  # the SessionSummarizer's namespace and name
Kind = Literal["store", "embedder", "summarizer"]


@dataclass(eq=False)
class _Part:
    kind: Kind
    key: Any  # the configuration it was built from (Secret values included)
    value: Any
    users: int = 1  # the uses holding it
    kept: bool = True  # False once dropped: closed when the last use gives it back


@dataclass(eq=False)
class _Generation:
    """The parts kept for one generation of a spec; replaced whole when a new one is seen."""

    number: int | None
    parts: dict[Kind, _Part] = field(default_factory=dict)


@dataclass(frozen=True)
class PartsCount:
    """What the runtime holds now (test_runtime_lifecycle.py checks for leaks)."""

    summarizers: int  # SessionSummarizers seen, not deleted
    clients: int  # open Chroma clients (in use by a pass or not)
    embedders: int
    model_clients: int  # chat-completions summarizers: an HTTP client and a semaphore each
    semaphores: int
    secret_values: int  # Secret values held by the parts' configurations
    store_queues: int  # the scheduler's store write queues


def _secrets_of(key: object) -> int:
    if isinstance(key, StoreLocation):
        return int(key.token is not None)
    if isinstance(key, EmbeddingSpec | ChatModelConfig):
        return int(key.api_key is not None)
    return 0


class SummarizerParts:
    def __init__(self, scheduler: PassScheduler, weights: MiniLMWeights) -> None:
        self._scheduler = scheduler
        self._embedding = partial(build_embedding_function, weights=weights)
        self._kept: dict[Who, _Generation] = {}
        self._live: set[_Part] = set()  # built and not closed yet (kept or in use)
        self._lock = threading.Lock()
        self._closed = False

    # -- use ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def backends(
        self, namespace: str, name: str, spec: SessionSummarizerSpec
    ) -> Iterator[Backends]:
        """Everything a pass needs, held for the pass (blocking). A StoreUnavailable drops
        the store's client. Memory destinations are checked first, before any read."""
        check_memory_destinations(spec, namespace)
        who = (namespace, name)
        location = store_location(spec, namespace)
        embedding = embedding_spec(spec, namespace)
        extractive = spec.model.backend == "extractive"
        config = None if extractive else chat_model_config(spec.model, namespace)
        if config is None:  # extractive: a model client built for an older spec goes now
            self._drop(who, "summarizer")
        with contextlib.ExitStack() as held:
            store = held.enter_context(self._use(who, "store", location, self._connect))
            ef = held.enter_context(self._use(who, "embedder", embedding, self._embedding))
            summarizer = (
                EXTRACTIVE
                if config is None
                else held.enter_context(self._use(who, "summarizer", config, self._summarizer))
            )
            yield Backends(
                store=store,
                embed=self._embedder(ef),
                excluded_types=tuple(spec.excluded_memory_types),
                summarizer=summarizer,
                visibility=spec.visibility.rules(),
                redaction=redaction_of(spec),
            )

    def store(
        self, namespace: str, name: str, spec: SessionSummarizerSpec
    ) -> contextlib.AbstractContextManager[MemoryStore]:
        """The SessionSummarizer's store alone (the sweep, the scans, the probes)."""
        return self._use((namespace, name), "store", store_location(spec, namespace), self._connect)

    @contextlib.contextmanager
    def embedder(
        self, namespace: str, name: str, spec: SessionSummarizerSpec
    ) -> Iterator[Embedder]:
        check_memory_destinations(spec, namespace, "embedding.baseUrl")
        embedding = embedding_spec(spec, namespace)
        with self._use((namespace, name), "embedder", embedding, self._embedding) as ef:
            yield self._embedder(ef)

    # -- lifecycle ------------------------------------------------------------------------

    def spec_changed(self, namespace: str, name: str, generation: int | None) -> None:
        """Drops the parts of an older generation (closed once no use holds them)."""
        with self._lock:
            old = self._kept.get((namespace, name))
            if old is not None and old.number == generation:
                return
            self._kept[(namespace, name)] = _Generation(generation)
            closing = self._unkeep(old.parts.values() if old else ())
        self._close(closing)

    def forget(self, namespace: str, name: str) -> None:
        """The SessionSummarizer is gone: everything built for it is closed."""
        with self._lock:
            old = self._kept.pop((namespace, name), None)
            closing = self._unkeep(old.parts.values() if old else ())
        self._close(closing)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            closing = self._unkeep(p for g in self._kept.values() for p in g.parts.values())
            self._kept.clear()
        self._close(closing)

    def count(self) -> PartsCount:
        with self._lock:
            live, summarizers = list(self._live), len(self._kept)
        models = sum(p.kind == "summarizer" for p in live)
        return PartsCount(
            summarizers=summarizers,
            clients=sum(p.kind == "store" for p in live),
            embedders=sum(p.kind == "embedder" for p in live),
            model_clients=models,
            semaphores=models,
            secret_values=sum(_secrets_of(p.key) for p in live),
            store_queues=self._scheduler.store_queues(),
        )

    # -- inside ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def _use(self, who: Who, kind: Kind, key: K, build: Callable[[K], V]) -> Iterator[V]:
        """who's part of kind for key, held by this use."""
        part = self._take(who, kind, key, build)
        try:
            yield cast(V, part.value)
        except BaseException as exc:
            if kind == "store" and caused_by(exc, StoreUnavailable):
                self._drop(who, kind, part)  # the next use connects anew
            raise
        finally:
            with self._lock:
                part.users -= 1
                closing = [] if part.kept else self._unkeep([part])
            self._close(closing)

    def _take(self, who: Who, kind: Kind, key: K, build: Callable[[K], V]) -> _Part:
        with self._lock:
            if self._closed:
                raise RuntimeError("the operator is stopping: its summarizer parts are closed")
            kept = self._kept.get(who)
            part = kept.parts.get(kind) if kept else None
            if part is not None and part.key == key:
                part.users += 1
                return part
        part = _Part(kind, key, build(key))  # outside the lock: may connect (seconds)
        with self._lock:
            self._live.add(part)
            if kept is None or self._kept.get(who) is not kept:
                part.kept = False  # not seen, or deleted or changed meanwhile: this use's only
                return part
            old = kept.parts.get(kind)
            kept.parts[kind] = part
            closing = self._unkeep([old] if old else [])
        self._close(closing)
        return part

    def _drop(self, who: Who, kind: Kind, only: _Part | None = None) -> None:
        """who's part of kind (if it is `only`, when given) out of the cache."""
        with self._lock:
            kept = self._kept.get(who)
            part = kept.parts.get(kind) if kept else None
            if kept is None or part is None or only not in (None, part):
                return
            del kept.parts[kind]
            closing = self._unkeep([part])
        self._close(closing)

    def _unkeep(self, parts: Iterable[_Part]) -> list[_Part]:
        """Under the lock: unkeeps parts; returns those no use holds, to close now."""
        closing = []
        for part in parts:
            part.kept = False
            if not part.users:
                self._live.discard(part)
                closing.append(part)
        return closing

    def _close(self, parts: list[_Part]) -> None:
        for part in parts:
            close = getattr(part.value, "close", None)
            with contextlib.suppress(Exception):  # closing is best effort
                if callable(close):
                    close()

    # -- builders -------------------------------------------------------------------------

    def _connect(self, location: StoreLocation) -> MemoryStore:
        return MemoryStore(connect(location), location)

    def _embedder(self, ef: EmbeddingFunction) -> Embedder:
        """Local model calls take a core (scheduling.py); an endpoint is I/O, not gated."""
        if not isinstance(ef, LocalMiniLMEmbedding):
            return lambda texts: list(ef(texts))
        scheduler = self._scheduler

        def gated(texts: list[str]) -> list[Any]:
            # Between layers the core may go to a pass that needs it sooner.
            with scheduler.core() as between:
                return list(ef(texts, between))

        return gated

    def _summarizer(self, config: ChatModelConfig) -> Summarizer:
        # Lazy: the openai SDK costs ~14 MB of RSS (bench/operator_rss.py).
        from controller.summarizers.chat_model import ChatModelSummarizer

        return ChatModelSummarizer(config)
