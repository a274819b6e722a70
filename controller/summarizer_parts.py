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
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, cast

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
Who = tuple[str, str]  # the SessionSummarizer's namespace and name
Kind = Literal["store", "embedder", "summarizer"]


@dataclass(eq=False)
class _Part:
    kind: Kind
    key: Any  # the configuration it was built from (Secret values included)
    value: Any
    users: int = 0
    retired: bool = False  # replaced or its summarizer gone: closed once no pass uses it

    def close(self) -> None:
        close = getattr(self.value, "close", None)
        with contextlib.suppress(Exception):  # closing is best effort
            if callable(close):
                close()


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


class SummarizerParts:
    def __init__(self, scheduler: PassScheduler, weights: MiniLMWeights) -> None:
        self._scheduler = scheduler
        self._weights = weights
        self._current: dict[tuple[Who, Kind], _Part] = {}
        self._generation: dict[Who, int | None] = {}  # of the spec the parts were built for
        self._in_use: set[_Part] = set()
        # Deleted SessionSummarizers: a pass still under way gets parts closed after it.
        self._gone: LRUCache[Who, None] = LRUCache(GONE_REMEMBERED)
        # Bumped by spec_changed, dropped by forget: a part built meanwhile is not kept.
        self._epoch: dict[Who, int] = {}
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
                closing = self._retire((namespace, name), "summarizer")
            self._close(closing)
        with self._held((namespace, name)) as hold:
            store = hold("store", location, self._connect)
            embed = hold("embedder", embedding, self._embedder)
            summarizer = (
                EXTRACTIVE if config is None else hold("summarizer", config, self._summarizer)
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
        with self._held((namespace, name)) as hold:
            yield hold("store", location, self._connect)

    @contextlib.contextmanager
    def embedder(
        self, namespace: str, name: str, spec: SessionSummarizerSpec
    ) -> Iterator[Embedder]:
        check_memory_destinations(spec, namespace, "embedding.baseUrl")
        embedding = embedding_spec(spec, namespace)
        with self._held((namespace, name)) as hold:
            yield hold("embedder", embedding, self._embedder)

    # -- lifecycle ------------------------------------------------------------------------

    def spec_changed(self, namespace: str, name: str, generation: int | None) -> None:
        """Closes parts of an older generation (once no pass uses them)."""
        who = (namespace, name)
        with self._lock:
            self._gone.pop(who, None)
            if self._generation.setdefault(who, generation) == generation:
                return  # first seen (nothing built yet for a spec) or unchanged
            self._generation[who] = generation
            self._epoch[who] = self._epoch.get(who, 0) + 1
            closing = self._retire(who)
        self._close(closing)

    def forget(self, namespace: str, name: str) -> None:
        """The SessionSummarizer is gone: everything built for it is closed."""
        who = (namespace, name)
        with self._lock:
            self._gone[who] = None
            # Dropped, not bumped: an in-flight build's epoch can only match if 0 (in _gone).
            self._epoch.pop(who, None)
            self._generation.pop(who, None)
            closing = self._retire(who)
        self._close(closing)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            closing = self._retire(None)
            self._generation.clear()
        self._close(closing)

    def count(self) -> PartsCount:
        with self._lock:
            live = [*self._current.values(), *(p for p in self._in_use if p.retired)]
            models = sum(p.kind == "summarizer" for p in live)
            return PartsCount(
                summarizers=len(self._generation),
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
            if _caused_by(exc, StoreUnavailable):  # the next use connects anew
                with self._lock:
                    if self._current.get((who, "store")) in taken:
                        self._retire(who, "store")  # closed below, when given back
            raise
        finally:
            closing = []
            with self._lock:
                for part in taken:
                    part.users -= 1
                    if part.users == 0:
                        self._in_use.discard(part)
                        if part.retired:
                            closing.append(part)
            self._close(closing)

    def _take(self, who: Who, kind: Kind, key: K, build: Callable[[K], V]) -> _Part:
        with self._lock:
            if self._closed:
                raise RuntimeError("the operator is stopping: its summarizer parts are closed")
            part = self._current.get((who, kind))
            if part is not None and part.key == key:
                part.users += 1
                self._in_use.add(part)
                return part
            epoch = self._epoch.get(who, 0)
        value = build(key)  # outside the lock: may connect (seconds, or a timeout)
        fresh = _Part(kind, key, value, users=1)
        closing: list[_Part] = []
        with self._lock:
            self._in_use.add(fresh)
            if self._closed or who in self._gone or self._epoch.get(who, 0) != epoch:
                fresh.retired = True  # this use only: closed when it is given back
            else:
                self._generation.setdefault(who, None)
                closing = self._retire(who, kind)
                self._current[(who, kind)] = fresh
        self._close(closing)
        return fresh

    def _retire(self, who: Who | None, kind: Kind | None = None) -> list[_Part]:
        """Under the lock: takes out the current parts of who (all when None) of kind (all
        when None); returns those no pass uses, to be closed now."""
        closing = []
        for at in [k for k in self._current if who in (None, k[0]) and kind in (None, k[1])]:
            part = self._current.pop(at)
            part.retired = True
            if part.users == 0:
                closing.append(part)
        return closing

    def _close(self, parts: Sequence[_Part]) -> None:
        for part in parts:
            part.close()
            if part.kind == "store":
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

            return _Closing(gated, ef)
        return _Closing(lambda texts: list(ef(texts)), ef)

    def _summarizer(self, config: ChatModelConfig) -> Summarizer:
        # Lazy: the openai SDK costs ~14 MB of RSS (bench/operator_rss.py).
        from controller.summarizers.chat_model import ChatModelSummarizer

        return ChatModelSummarizer(config)


class _Closing:
    """An embedder that closes the function it calls."""

    def __init__(self, call: Embedder, inner: object) -> None:
        self._call = call
        self.close = getattr(inner, "close", None) or (lambda: None)

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
