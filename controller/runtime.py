"""Everything the operator process holds while it runs, in kopf's memo (docs/architecture.md,
"The runtime")."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal
from wsgiref.simple_server import WSGIServer

import urllib3
from cachetools import LRUCache
from kubernetes.client.exceptions import ApiException
from opentelemetry import trace as otel

from controller import tracing
from controller.api import SessionSummarizerSpec
from controller.backends import (
    build_embedding_function,
    chat_model_config,
    check_memory_destinations,
    embedding_spec,
    redaction_of,
    store_location,
)
from controller.config import OperatorConfig
from controller.core.ledger import FenceUnavailable
from controller.core.sweep_plan import ReconcileCycle
from controller.embeddings.minilm import EmbeddingFunction, LocalMiniLMEmbedding
from controller.kube import client as kube
from controller.kube.events import EventRecorder
from controller.pipeline import Backends, Embedder
from controller.scheduling import PassScheduler, SchedulerLimits, usable_cpus
from controller.status.conditions import masked
from controller.store.connection import connect
from controller.store.errors import StoreUnavailable, caused_by
from controller.store.memory_store import MemoryStore
from controller.summarizers.chat_prompt import ChatModelConfig
from controller.summarizers.contract import Summarizer
from controller.summarizers.extractive import EXTRACTIVE

PEERING_NAME = "session-summary-operator"  # kopf's peering object (never kopf's "default")
GONE_REMEMBERED = 4096  # deleted SessionSummarizers remembered as deleted (the newest)
PROBE_BACKOFF_MAX_S = 300.0  # failing probes run again at least this often
Who = tuple[str, str]  # the SessionSummarizer's namespace and name
Kind = Literal["store", "embedder", "summarizer"]


@dataclass
class TokenBucket:
    """At most `per_minute` grants a minute, with a burst of as many (the marker scan's:
    spec.sweep.markerRequestsPerMinute). The caller passes the time."""

    per_minute: float
    tokens: float = math.inf  # capped at per_minute by the first refill: full
    last_s: float = 0.0  # monotonic seconds of the last refill

    def available(self, now_s: float) -> int:
        """Whole grants available at now_s (refills first)."""
        gained = max(0.0, now_s - self.last_s) * self.per_minute / 60.0
        self.tokens, self.last_s = min(float(self.per_minute), self.tokens + gained), now_s
        return int(self.tokens)

    def take(self, wanted: int, now_s: float) -> int:
        """Grants up to `wanted`; returns how many were granted."""
        granted = max(0, min(wanted, self.available(now_s)))
        self.tokens -= granted
        return granted


@dataclass
class MarkerMemory:
    """What the marker scan already did about the markers in the window, so a marker costs
    one request and every later tick only the scan."""

    acted: dict[str, int] = field(default_factory=dict)  # session -> newest marker handled
    reported: set[str] = field(default_factory=set)  # memory ids of invalid markers reported
    bucket: TokenBucket = field(default_factory=lambda: TokenBucket(60))


@dataclass
class Reconciler:
    """The walk of one summarizer's collection (controller/sweep.py, reconcile_step)."""

    cycle: ReconcileCycle | None = None
    last_done_ms: int | None = None
    last_step: float = 0.0  # monotonic
    due_now: bool = False  # the appended-rows cursor lost its place
    pending: list[str] = field(default_factory=list)  # session ids the walk asks for


@dataclass
class Upkeep:
    markers: MarkerMemory = field(default_factory=MarkerMemory)
    reconciler: Reconciler = field(default_factory=Reconciler)
    probed: float | None = None  # monotonic
    probe_wait: float = 0.0  # the failing probes' current backoff (0: not started)

    def probe_due(self, every_s: float, now: float, *, failing: bool) -> bool:
        """While the probes fail: due after every_s, then twice as late each time up to
        PROBE_BACKOFF_MAX_S. The first call only starts the clock (the spec handler has just
        probed); failing=False starts it over."""
        last, wait = self.probed, max(every_s, self.probe_wait)
        if not failing:
            self.probed, self.probe_wait = None, 0.0
        elif last is None:
            self.probed = now
        elif now - last >= wait:
            self.probed, self.probe_wait = now, min(2 * wait, max(every_s, PROBE_BACKOFF_MAX_S))
            return True
        return False


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


class SummarizerParts:
    """Each SessionSummarizer's Chroma client, embedding function and model summarizer, kept
    with the configuration (Secret values included) they were built from until the spec's next
    generation or the deletion, and closed once no use holds them. One built for a summarizer
    not seen, deleted or changed meanwhile serves its use alone. And its timers' Upkeep."""

    def __init__(self, scheduler: PassScheduler, local: LocalMiniLMEmbedding) -> None:
        self._scheduler, self._local = scheduler, local
        self._build: dict[Kind, Callable[[Any], Any]] = {
            "store": lambda location: MemoryStore(connect(location), location),
            "embedder": functools.partial(build_embedding_function, local=local),
            "summarizer": self._summarizer,
        }
        self._kept: dict[Who, _Generation] = {}
        self._upkeep: dict[Who, Upkeep] = {}
        # Deleted, not seen again: a tick still under way gets an Upkeep kept by nobody.
        self._gone: LRUCache[Who, None] = LRUCache(GONE_REMEMBERED)
        self._live: set[_Part] = set()  # built and not closed yet (kept or in use)
        self._lock = threading.Lock()
        self._closed = False

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
        config = None if spec.model.backend == "extractive" else chat_model_config(spec, namespace)
        summarizer: Summarizer = EXTRACTIVE
        if config is None:  # extractive: a model client built for an older spec goes now
            self._drop(who, "summarizer")
        with contextlib.ExitStack() as held:
            store = held.enter_context(self._use(who, "store", location))
            ef = held.enter_context(self._use(who, "embedder", embedding))
            if config is not None:
                summarizer = held.enter_context(self._use(who, "summarizer", config))
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
        return self._use((namespace, name), "store", store_location(spec, namespace))

    @contextlib.contextmanager
    def embedder(
        self, namespace: str, name: str, spec: SessionSummarizerSpec
    ) -> Iterator[Embedder]:
        check_memory_destinations(spec, namespace, "embedding.baseUrl")
        with self._use((namespace, name), "embedder", embedding_spec(spec, namespace)) as ef:
            yield self._embedder(ef)

    def spec_changed(self, namespace: str, name: str, generation: int | None) -> None:
        """Seen (again, after a deletion, say): drops the parts of an older generation (closed
        once no use holds them)."""
        with self._locked() as unkeep:
            self._gone.pop((namespace, name), None)
            old = self._kept.get((namespace, name))
            if old is not None and old.number == generation:
                return
            self._kept[(namespace, name)] = _Generation(generation)
            unkeep(old.parts.values() if old else ())

    def forget(self, namespace: str, name: str) -> None:
        """The SessionSummarizer is gone: everything built for it is closed."""
        with self._locked() as unkeep:
            old = self._kept.pop((namespace, name), None)
            unkeep(old.parts.values() if old else ())
            self._upkeep.pop((namespace, name), None)
            self._gone[(namespace, name)] = None

    def upkeep(self, namespace: str, name: str) -> Upkeep:
        """What its timers remember between ticks, from the first (which may come before the
        spec handler sees it); after a restart nothing: the store and status tell the rest."""
        with self._lock:
            if (namespace, name) in self._gone:
                return Upkeep()
            return self._upkeep.setdefault((namespace, name), Upkeep())

    def close(self) -> None:
        with self._locked() as unkeep:
            self._closed = True
            unkeep(p for g in self._kept.values() for p in g.parts.values())
            self._kept.clear()
        self._local.unload()

    def count(self) -> dict[str, int]:
        """What the runtime holds now, by part (test_runtime_lifecycle.py checks for leaks)."""
        with self._lock:
            live, summarizers = list(self._live), len(self._kept)
        models = sum(p.kind == "summarizer" for p in live)
        return {
            "summarizers": summarizers,  # SessionSummarizers seen, not deleted
            "clients": sum(p.kind == "store" for p in live),  # Chroma's, in use or not
            "embedders": sum(p.kind == "embedder" for p in live),
            "model_clients": models,  # a chat-completions summarizer: a client, a semaphore
            "semaphores": models,
            # Secret values held: a store's token, an endpoint's API key.
            "secret_values": sum(
                getattr(p.key, "token", getattr(p.key, "api_key", None)) is not None for p in live
            ),
            "store_queues": self._scheduler.store_queues(),
        }

    @contextlib.contextmanager
    def _use(self, who: Who, kind: Kind, key: object) -> Iterator[Any]:
        """who's part of kind for key, held by this use."""
        part = self._take(who, kind, key)
        try:
            yield part.value
        except BaseException as exc:
            if kind == "store" and caused_by(exc, StoreUnavailable):
                self._drop(who, kind, part)  # the next use connects anew
            raise
        finally:
            with self._locked() as unkeep:
                part.users -= 1
                if not part.kept:
                    unkeep([part])

    def _take(self, who: Who, kind: Kind, key: object) -> _Part:
        with self._lock:
            if self._closed:
                raise RuntimeError("the operator is stopping: its summarizer parts are closed")
            kept = self._kept.get(who)
            part = kept.parts.get(kind) if kept else None
            if part is not None and part.key == key:
                part.users += 1
                return part
        part = _Part(kind, key, self._build[kind](key))  # outside the lock: may connect
        with self._locked() as unkeep:
            self._live.add(part)
            if kept is None or self._kept.get(who) is not kept:
                part.kept = False  # not seen, or deleted or changed meanwhile: this use's only
                return part
            unkeep([old] if (old := kept.parts.get(kind)) else [])
            kept.parts[kind] = part
        return part

    def _drop(self, who: Who, kind: Kind, only: _Part | None = None) -> None:
        """who's part of kind (if it is `only`, when given) out of the cache."""
        with self._locked() as unkeep:
            kept = self._kept.get(who)
            part = kept.parts.get(kind) if kept else None
            if kept is None or part is None or only not in (None, part):
                return
            del kept.parts[kind]
            unkeep([part])

    @contextlib.contextmanager
    def _locked(self) -> Iterator[Callable[[Iterable[_Part]], None]]:
        """The lock, and unkeep(parts) under it: those no use holds are closed after it."""
        closing: list[_Part] = []

        def unkeep(parts: Iterable[_Part]) -> None:
            for part in parts:
                part.kept = False
                if not part.users:
                    self._live.discard(part)
                    closing.append(part)

        with self._lock:
            yield unkeep
        for part in closing:
            with contextlib.suppress(Exception):  # best effort (a part may have no close())
                part.value.close()

    def _embedder(self, ef: EmbeddingFunction) -> Embedder:
        """Local model calls take a core (scheduling.py); an endpoint is I/O, not gated."""
        if not isinstance(ef, LocalMiniLMEmbedding):
            return lambda texts: list(ef(texts))

        def gated(texts: list[str]) -> list[Any]:
            # Between layers the core may go to a pass that needs it sooner.
            with self._scheduler.core() as between:
                return list(ef(texts, between))

        return gated

    def _summarizer(self, config: ChatModelConfig) -> Summarizer:
        # Lazy: the openai SDK costs ~14 MB of RSS (bench/operator_rss.py).
        from controller.summarizers.chat_model import ChatModelSummarizer

        return ChatModelSummarizer(config)


@dataclass(frozen=True)
class RunOptions:
    standalone: bool = True
    peering: str = PEERING_NAME
    namespaces: tuple[str, ...] = ()


@dataclass
class Runtime:
    config: OperatorConfig
    events: EventRecorder
    scheduler: PassScheduler
    parts: SummarizerParts
    options: RunOptions = RunOptions()
    traces: otel.TracerProvider = field(default_factory=otel.NoOpTracerProvider)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    metrics_server: WSGIServer | None = None
    stopping: threading.Event = field(default_factory=threading.Event)
    leader: str | None = None
    summarizers_changed: threading.Event = field(default_factory=threading.Event)

    @classmethod
    def start(cls, config: OperatorConfig, options: RunOptions) -> Runtime:
        scheduler = PassScheduler(
            SchedulerLimits(
                workers=config.workers,
                background_workers=max(2, config.workers // 4),
                first_workers=max(2, config.workers // 4),
                cores=config.cpu_slots or usable_cpus(),
                store_writes=config.store_write_slots,
                give_way_s=config.give_way_seconds,
                give_way_gap_s=config.give_way_gap_seconds,
            )
        )
        return cls(
            config=config,
            events=EventRecorder(instance=config.replica_id),
            scheduler=scheduler,
            parts=SummarizerParts(scheduler, LocalMiniLMEmbedding()),
            options=options,
            traces=tracing.tracer_provider(os.environ),
        )

    @classmethod
    def of(cls, memo: Any) -> Runtime:
        runtime = memo.get("runtime") if hasattr(memo, "get") else None
        if not isinstance(runtime, Runtime):
            raise RuntimeError("the operator's runtime is missing from kopf's memo (see run())")
        return runtime

    @functools.cached_property
    def fence_authority(self) -> str:
        """The cluster's identity in the claims' fences: kube-system's UID, read on first use
        (FenceUnavailable while it cannot be). Blocking."""
        try:
            meta = kube.core().read_namespace("kube-system").metadata
        except (ApiException, urllib3.exceptions.HTTPError) as exc:
            raise FenceUnavailable(
                "cannot read the UID of namespace kube-system, this cluster's identity in the "
                f"store's fences (the operator needs get on it): {masked(exc, 200)}"
            ) from None
        return str(meta.uid or "") if meta is not None else ""

    def close(self) -> None:
        self.parts.close()  # the local model's weights too
        self.events.close(timeout=2.0)
        tracing.close(self.traces)
        if self.metrics_server is not None:
            self.metrics_server.shutdown()
            self.metrics_server.server_close()
