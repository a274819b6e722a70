"""Everything the operator process holds while it runs, handed to every handler in kopf's
memo: no product module keeps state of its own (docs/architecture.md, "The runtime")."""

from __future__ import annotations

import asyncio
import functools
import os
import threading
from dataclasses import dataclass, field
from typing import Any
from wsgiref.simple_server import WSGIServer

import urllib3
from cachetools import LRUCache
from kubernetes.client.exceptions import ApiException
from opentelemetry import trace as otel

from controller import tracing
from controller.config import OperatorConfig
from controller.core.ledger import FenceUnavailable
from controller.core.reconcile_plan import ReconcileCycle
from controller.core.sweep_plan import Candidate
from controller.core.text import one_line
from controller.embeddings.minilm import MiniLMWeights
from controller.kube import client as kube
from controller.kube.events import EventRecorder
from controller.scheduling import PassScheduler, SchedulerLimits, usable_cpus
from controller.summarizer_parts import SummarizerParts

PEERING_NAME = "session-summary-operator"  # kopf's peering object (never kopf's "default")
GONE_REMEMBERED = 4096  # deleted SessionSummarizers remembered as deleted (the newest)
PROBE_BACKOFF_MAX_S = 300.0  # failing probes run again at least this often


@dataclass
class TokenBucket:
    """At most `per_minute` grants a minute, with a burst of as many (the marker scan's:
    spec.sweep.markerRequestsPerMinute). The caller passes the time."""

    per_minute: float
    tokens: float | None = None  # None: full
    last_s: float | None = None  # monotonic seconds of the last refill

    def available(self, now_s: float) -> int:
        """Whole grants available at now_s (refills first)."""
        full = float(self.per_minute)
        if self.tokens is None or self.last_s is None:
            self.tokens = full
        else:
            self.tokens = min(full, self.tokens + max(0.0, now_s - self.last_s) * full / 60.0)
        self.last_s = now_s
        return int(self.tokens)

    def take(self, wanted: int, now_s: float) -> int:
        """Grants up to `wanted`; returns how many were granted."""
        granted = max(0, min(wanted, self.available(now_s)))
        assert self.tokens is not None
        self.tokens -= granted
        return granted

    def give_back(self, unused: int) -> None:
        """Grants taken but not used (the session turned out to need nothing)."""
        if self.tokens is not None and unused > 0:
            self.tokens = min(float(self.per_minute), self.tokens + unused)


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
    pending: list[Candidate] = field(default_factory=list)


@dataclass
class Upkeep:
    markers: MarkerMemory = field(default_factory=MarkerMemory)
    reconciler: Reconciler = field(default_factory=Reconciler)
    probed: float | None = None  # monotonic
    probe_wait: float = 0.0  # the failing probes' current backoff (0: not started)

    def probe_due(self, every_s: float, now: float, *, failing: bool) -> bool:
        """While the probes fail: due after every_s, then twice as late each time up to
        PROBE_BACKOFF_MAX_S (a broken summarizer does not keep its endpoints busy). The first
        call only starts the clock (the create/update/resume handler has just probed);
        failing=False starts it over."""
        last, wait = self.probed, max(every_s, self.probe_wait)
        if not failing:
            self.probed, self.probe_wait = None, 0.0
            return False
        if last is not None and now - last < wait:
            return False
        self.probed = now
        if last is not None:
            self.probe_wait = min(2 * wait, max(every_s, PROBE_BACKOFF_MAX_S))
        return last is not None


class UpkeepState:
    """What each SessionSummarizer's timer remembers between ticks in this process (the
    active replica's), dropped when it is deleted; after a restart or a failover it starts
    empty, and the stored summaries and the objects' status tell what was done."""

    def __init__(self) -> None:
        self._by_summarizer: dict[tuple[str, str], Upkeep] = {}
        # Deleted and not seen again: a tick still under way for one gets a memory of its
        # own, kept by nobody (the newest GONE_REMEMBERED).
        self._gone: LRUCache[tuple[str, str], None] = LRUCache(GONE_REMEMBERED)
        self._lock = threading.Lock()

    def of(self, namespace: str, name: str) -> Upkeep:
        with self._lock:
            if (namespace, name) in self._gone:
                return Upkeep()
            return self._by_summarizer.setdefault((namespace, name), Upkeep())

    def seen(self, namespace: str, name: str) -> None:
        """The SessionSummarizer exists (created again after a deletion, say)."""
        with self._lock:
            self._gone.pop((namespace, name), None)

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._by_summarizer.pop((namespace, name), None)
            self._gone[(namespace, name)] = None


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
    weights: MiniLMWeights
    parts: SummarizerParts
    upkeep: UpkeepState
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
        weights = MiniLMWeights()
        return cls(
            config=config,
            events=EventRecorder(instance=config.replica_id),
            scheduler=scheduler,
            weights=weights,
            parts=SummarizerParts(scheduler, weights),
            upkeep=UpkeepState(),
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
                f"store's fences (the operator needs get on it): {one_line(exc, 200)}"
            ) from None
        return str(meta.uid or "") if meta is not None else ""

    def close(self) -> None:
        self.parts.close()
        self.weights.close()
        self.events.close(timeout=2.0)
        tracing.close(self.traces)
        if self.metrics_server is not None:
            self.metrics_server.shutdown()
            self.metrics_server.server_close()
