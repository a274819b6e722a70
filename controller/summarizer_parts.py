"""The live parts built for each SessionSummarizer (namespace/name): its Chroma client, its
embedder, its model summarizer, and the Secret values they were built with.

Built on first use and reused; replaced (the old one closed once no running pass uses it)
when the spec, a Secret's value (read at every use: a rotated key takes effect at the next
pass) or the store's reachability changes. `forget` closes them all on deletion.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from cachetools import LRUCache

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
from controller.embeddings.spec import EmbeddingSpec, build_embedding_function
from controller.scheduling import PassScheduler
from controller.store.connection import StoreLocation, connect
from controller.store.errors import StoreUnavailable
from controller.store.memory_store import MemoryStore
from controller.summarizers.chat_prompt import ChatModelConfig
from controller.summarizers.contract import Summarizer
from controller.summarizers.extractive import EXTRACTIVE

# Deleted SessionSummarizers remembered (the newest), for passes still under way.
GONE_REMEMBERED = 4096
K = TypeVar("K")
V = TypeVar("V")


@dataclass(eq=False)
class _Part(Generic[K, V]):
    key: K  # what it was built from (Secret values included)
    value: V
    close: Callable[[], None]
    users: int = 0
    retired: bool = False


@dataclass
class _Slot(Generic[K, V]):
    current: _Part[K, V] | None = None


@dataclass
class _SummarizerParts:
    generation: int | None = None
    store: _Slot[StoreLocation, MemoryStore] = field(default_factory=_Slot)
    embedder: _Slot[EmbeddingSpec, Embedder] = field(default_factory=_Slot)
    summarizer: _Slot[ChatModelConfig, Summarizer] = field(default_factory=_Slot)

    def slots(self) -> tuple[_Slot[Any, Any], ...]:
        return (self.store, self.embedder, self.summarizer)


@dataclass(frozen=True)
class PartsCount:
    """What the runtime holds now (test_runtime_lifecycle.py checks for leaks)."""

    summarizers: int  # SessionSummarizers with parts
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


def _closer(value: object) -> Callable[[], None]:
    close = getattr(value, "close", None)
    return close if callable(close) else (lambda: None)


class SummarizerParts:
    def __init__(self, scheduler: PassScheduler, weights: MiniLMWeights) -> None:
        self._scheduler = scheduler
        self._weights = weights
        self._by_summarizer: dict[tuple[str, str], _SummarizerParts] = {}
        self._in_use: set[_Part[Any, Any]] = set()
        # Deleted SessionSummarizers: a pass still under way gets parts closed after it.
        self._gone: LRUCache[tuple[str, str], None] = LRUCache(GONE_REMEMBERED)
        # Bumped by spec_changed and forget: a part built meanwhile is stale, not kept.
        self._epoch: dict[tuple[str, str], int] = {}
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
            self._retire_now(namespace, name, lambda p: p.summarizer)
        with self._held(namespace, name) as hold:
            store = hold(lambda p: p.store, location, self._connect)
            embed = hold(lambda p: p.embedder, embedding, self._embedder)
            summarizer = (
                EXTRACTIVE
                if config is None
                else hold(lambda p: p.summarizer, config, self._summarizer)
            )
            yield Backends(
                store=store,
                embed=embed,
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
        with self._held(namespace, name) as hold:
            yield hold(lambda p: p.store, location, self._connect)

    @contextlib.contextmanager
    def embedder(
        self, namespace: str, name: str, spec: SessionSummarizerSpec
    ) -> Iterator[Embedder]:
        check_memory_destinations(spec, namespace, "embedding.baseUrl")
        embedding = embedding_spec(spec, namespace)
        with self._held(namespace, name) as hold:
            yield hold(lambda p: p.embedder, embedding, self._embedder)

    # -- lifecycle ------------------------------------------------------------------------

    def spec_changed(self, namespace: str, name: str, generation: int | None) -> None:
        """Closes parts of an older generation (once no pass uses them)."""
        who = (namespace, name)
        with self._lock:
            self._gone.pop(who, None)
            parts = self._by_summarizer.setdefault(who, _SummarizerParts(generation))
            if parts.generation == generation:
                return
            parts.generation = generation
            self._bump(who)
            closing = [self._retire(slot) for slot in parts.slots()]
        self._close_now(closing)

    def forget(self, namespace: str, name: str) -> None:
        """The SessionSummarizer is gone: everything built for it is closed."""
        who = (namespace, name)
        with self._lock:
            self._gone[who] = None
            # Dropped, not bumped: an in-flight build's epoch can only match if 0 (in _gone).
            self._epoch.pop(who, None)
            parts = self._by_summarizer.pop(who, None)
            closing = [self._retire(slot) for slot in parts.slots()] if parts else []
        self._close_now(closing)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            closing = [
                self._retire(slot)
                for parts in self._by_summarizer.values()
                for slot in parts.slots()
            ]
            self._by_summarizer.clear()
        self._close_now(closing)

    def count(self) -> PartsCount:
        with self._lock:
            live = [
                slot.current
                for parts in self._by_summarizer.values()
                for slot in parts.slots()
                if slot.current is not None
            ]
            live += self._draining
            return PartsCount(
                summarizers=len(self._by_summarizer),
                clients=sum(isinstance(p.value, MemoryStore) for p in live),
                embedders=sum(isinstance(p.key, EmbeddingSpec) for p in live),
                model_clients=sum(isinstance(p.key, ChatModelConfig) for p in live),
                semaphores=sum(isinstance(p.key, ChatModelConfig) for p in live),
                secret_values=sum(_secrets_of(p.key) for p in live),
                store_queues=self._scheduler.store_queues(),
            )

    # -- inside ---------------------------------------------------------------------------

    @property
    def _draining(self) -> list[_Part[Any, Any]]:
        """Retired parts a pass still uses (closed when it is done)."""
        return [p for p in self._in_use if p.retired]

    @contextlib.contextmanager
    def _held(self, namespace: str, name: str) -> Iterator[Callable[..., Any]]:
        taken: list[_Part[Any, Any]] = []

        def hold(
            which: Callable[[_SummarizerParts], _Slot[K, V]], key: K, build: Callable[[K], V]
        ) -> V:
            part = self._take(namespace, name, which, key, build)
            taken.append(part)
            return part.value

        try:
            yield hold
        except BaseException as exc:
            if _caused_by(exc, StoreUnavailable):
                self._drop(namespace, name, [p for p in taken if isinstance(p.value, MemoryStore)])
            raise
        finally:
            self._give_back(taken)

    def _take(
        self,
        namespace: str,
        name: str,
        which: Callable[[_SummarizerParts], _Slot[K, V]],
        key: K,
        build: Callable[[K], V],
    ) -> _Part[K, V]:
        who = (namespace, name)
        with self._lock:
            if self._closed:
                raise RuntimeError("the operator is stopping: its summarizer parts are closed")
            parts = self._by_summarizer.get(who)
            part = which(parts).current if parts is not None else None
            if part is not None and part.key == key:
                part.users += 1
                self._in_use.add(part)
                return part
            epoch = self._epoch.get(who, 0)
        value = build(key)  # outside the lock: may connect (seconds, or a timeout)
        fresh: _Part[K, V] = _Part(key, value, _closer(value), users=1)
        closing: list[_Part[Any, Any] | None] = []
        with self._lock:
            self._in_use.add(fresh)
            if self._closed or who in self._gone or self._epoch.get(who, 0) != epoch:
                fresh.retired = True  # this use only: closed when it is given back
            else:
                slot = which(self._by_summarizer.setdefault(who, _SummarizerParts()))
                closing.append(self._retire(slot))
                slot.current = fresh
        self._close_now(closing)
        return fresh

    def _bump(self, who: tuple[str, str]) -> None:
        """Under the lock."""
        self._epoch[who] = self._epoch.get(who, 0) + 1

    def _retire_now(
        self, namespace: str, name: str, which: Callable[[_SummarizerParts], _Slot[Any, Any]]
    ) -> None:
        with self._lock:
            parts = self._by_summarizer.get((namespace, name))
            closing = [self._retire(which(parts))] if parts is not None else []
        self._close_now(closing)

    def _give_back(self, taken: list[_Part[Any, Any]]) -> None:
        closing = []
        with self._lock:
            for part in taken:
                part.users -= 1
                if part.users == 0:
                    self._in_use.discard(part)
                    if part.retired:
                        closing.append(part)
        self._close_now(closing)

    def _drop(self, namespace: str, name: str, stores: list[_Part[Any, Any]]) -> None:
        with self._lock:
            parts = self._by_summarizer.get((namespace, name))
            for part in stores:
                if parts is not None and parts.store.current is part:
                    self._retire(parts.store)

    def _retire(self, slot: _Slot[Any, Any]) -> _Part[Any, Any] | None:
        """Under the lock: takes the slot's part out; returns it if it can close now."""
        part, slot.current = slot.current, None
        if part is None:
            return None
        part.retired = True
        return part if part.users == 0 else None

    def _close_now(self, parts: Sequence[_Part[Any, Any] | None]) -> None:
        for part in parts:
            if part is None:
                continue
            with contextlib.suppress(Exception):  # closing is best effort
                part.close()
            if isinstance(part.value, MemoryStore):
                self._scheduler.forget_store(part.value.location)

    # -- builders -------------------------------------------------------------------------

    def _connect(self, location: StoreLocation) -> MemoryStore:
        return MemoryStore(connect(location), location)

    def _embedder(self, spec: EmbeddingSpec) -> Embedder:
        """Local model calls take a core (scheduling.py); an endpoint is I/O, not gated."""
        ef = build_embedding_function(spec, self._weights)
        scheduler = self._scheduler

        if isinstance(ef, LocalMiniLMEmbedding):

            def gated(texts: list[str]) -> list[Any]:
                # Between layers the core may go to a pass that needs it sooner.
                with scheduler.core() as between:
                    return list(ef(texts, between))

            return _Closing(gated, _closer(ef))
        return _Closing(lambda texts: list(ef(texts)), _closer(ef))

    def _summarizer(self, config: ChatModelConfig) -> Summarizer:
        # Lazy: the openai SDK costs ~14 MB of RSS (bench/operator_rss.py).
        from controller.summarizers.chat_model import ChatModelSummarizer

        return ChatModelSummarizer(config)


class _Closing:
    """An embedder that closes the function it calls."""

    def __init__(self, call: Embedder, close: Callable[[], None]) -> None:
        self._call = call
        self.close = close

    def __call__(self, texts: list[str]) -> Any:
        return self._call(texts)


def _caused_by(exc: BaseException, kind: type[BaseException]) -> bool:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False
