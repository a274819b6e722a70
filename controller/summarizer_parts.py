"""The live parts built for each SessionSummarizer (namespace/name): its Chroma client, its
embedding function and its model summarizer, each with the configuration it was built from.

Kept from the spec's generation seen (spec_changed) until the next one or the deletion
(forget), and reused while a use's configuration (Secret values included: read at every
use, so a rotated key takes effect at the next pass) is the same; a different one, or an
unreachable store, builds a new part in its place. A part dropped is closed once no use
holds it. One built for a SessionSummarizer not seen, deleted, or changed meanwhile serves
its use alone (a pass or a timer tick still under way) and is closed after it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, cast

from controller.api import SessionSummarizerSpec
from controller.backends import (
    Backends,
    Embedder,
    chat_model_config,
    check_memory_destinations,
    embedding_spec,
    redaction_of,
    store_location,
)
from controller.embeddings.minilm import LocalMiniLMEmbedding, MiniLMWeights
from controller.embeddings.spec import EmbeddingFunction, EmbeddingSpec, build_embedding_function
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


@dataclass(eq=False)
class _Generation:
    """The parts kept for one generation of a SessionSummarizer's spec; replaced, not
    changed, when a new one is seen, so a part built for the old one is not kept."""

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
        self._weights = weights
        self._kept: dict[Who, _Generation] = {}
        self._draining: set[_Part] = set()  # not kept: closed when the last use gives it back
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
        location = store_location(spec, namespace)
        embedding = embedding_spec(spec, namespace)
        config = (
            None if spec.model.backend == "extractive" else chat_model_config(spec.model, namespace)
        )
        if config is None:  # extractive: a model client built for an older spec goes now
            with self._lock:
                closing = self._drop_kind((namespace, name), "summarizer")
            self._close(closing)
        with self._held((namespace, name)) as hold:
            store = hold("store", location, self._connect)
            ef = hold("embedder", embedding, self._embedding)
            summarizer = (
                EXTRACTIVE if config is None else hold("summarizer", config, self._summarizer)
            )
            yield Backends(
                store=store,
                embed=self._embedder(ef),
                excluded_types=tuple(spec.excluded_memory_types),
                summarizer=summarizer,
                visibility=spec.visibility.rules(),
                redaction=redaction_of(spec),
            )

    @contextlib.contextmanager
    def store(
        self, namespace: str, name: str, spec: SessionSummarizerSpec
    ) -> Iterator[MemoryStore]:
        """The SessionSummarizer's store alone (the sweep, the scans, the probes)."""
        location = store_location(spec, namespace)
        with self._held((namespace, name)) as hold:
            yield hold("store", location, self._connect)

    @contextlib.contextmanager
    def embedder(
        self, namespace: str, name: str, spec: SessionSummarizerSpec
    ) -> Iterator[Embedder]:
        check_memory_destinations(spec, namespace, "embedding.baseUrl")
        embedding = embedding_spec(spec, namespace)
        with self._held((namespace, name)) as hold:
            yield self._embedder(hold("embedder", embedding, self._embedding))

    # -- lifecycle ------------------------------------------------------------------------

    def spec_changed(self, namespace: str, name: str, generation: int | None) -> None:
        """Drops the parts of an older generation (closed once no use holds them)."""
        with self._lock:
            old = self._kept.get((namespace, name))
            if old is not None and old.number == generation:
                return
            self._kept[(namespace, name)] = _Generation(generation)
            closing = self._drop(old.parts.values() if old else ())
        self._close(closing)

    def forget(self, namespace: str, name: str) -> None:
        """The SessionSummarizer is gone: everything built for it is closed."""
        with self._lock:
            old = self._kept.pop((namespace, name), None)
            closing = self._drop(old.parts.values() if old else ())
        self._close(closing)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            closing = self._drop(p for g in self._kept.values() for p in g.parts.values())
            self._kept.clear()
        self._close(closing)

    def count(self) -> PartsCount:
        with self._lock:
            live = [*self._draining, *(p for g in self._kept.values() for p in g.parts.values())]
            models = sum(p.kind == "summarizer" for p in live)
            return PartsCount(
                summarizers=len(self._kept),
                clients=sum(p.kind == "store" for p in live),
                embedders=sum(p.kind == "embedder" for p in live),
                model_clients=models,
                semaphores=models,
                secret_values=sum(_secrets_of(p.key) for p in live),
                store_queues=self._scheduler.store_queues(),
            )

    # -- inside ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def _held(self, who: Who) -> Iterator[Callable[[Kind, K, Callable[[K], V]], V]]:
        taken: list[_Part] = []

        def hold(kind: Kind, key: K, build: Callable[[K], V]) -> V:
            part = self._take(who, kind, key, build)
            taken.append(part)
            return cast(V, part.value)

        try:
            yield hold
        except BaseException as exc:
            if caused_by(exc, StoreUnavailable):  # the next use connects anew
                with self._lock:
                    kept = self._kept.get(who)
                    if kept and kept.parts.get("store") in taken:
                        self._drop_kind(who, "store")  # closed below, when given back
            raise
        finally:
            with self._lock:
                for part in taken:
                    part.users -= 1
                closing = [p for p in taken if p.users == 0 and p in self._draining]
                self._draining.difference_update(closing)
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
            if kept is None or self._kept.get(who) is not kept:
                self._draining.add(part)  # not seen, or deleted or changed meanwhile
                return part
            closing = self._drop_kind(who, kind)
            kept.parts[kind] = part
        self._close(closing)
        return part

    def _drop_kind(self, who: Who, kind: Kind) -> list[_Part]:
        """Under the lock: who's part of kind out of the cache; returns it if no use holds
        it, to be closed now."""
        kept = self._kept.get(who)
        return self._drop([kept.parts.pop(kind)] if kept and kind in kept.parts else [])

    def _drop(self, parts: Iterable[_Part]) -> list[_Part]:
        """Under the lock: parts taken out of the cache; returns those no use holds, to be
        closed now (the others are when given back)."""
        parts = list(parts)
        self._draining.update(p for p in parts if p.users)
        return [p for p in parts if not p.users]

    def _close(self, parts: list[_Part]) -> None:
        for part in parts:
            close = getattr(part.value, "close", None)
            with contextlib.suppress(Exception):  # closing is best effort
                if callable(close):
                    close()
            if part.kind == "store":
                self._scheduler.forget_store(part.value.location)

    # -- builders -------------------------------------------------------------------------

    def _connect(self, location: StoreLocation) -> MemoryStore:
        return MemoryStore(connect(location), location)

    def _embedding(self, spec: EmbeddingSpec) -> EmbeddingFunction:
        return build_embedding_function(spec, self._weights)

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
