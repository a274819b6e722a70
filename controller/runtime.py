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
from kubernetes.client.exceptions import ApiException
from opentelemetry import trace as otel

from controller import tracing
from controller.config import OperatorConfig
from controller.core.ledger import FenceUnavailable
from controller.core.text import one_line
from controller.embeddings.minilm import MiniLMWeights
from controller.kube import client as kube
from controller.kube.events import EventRecorder
from controller.scheduling import PassScheduler, SchedulerLimits, usable_cpus
from controller.summarizer_parts import SummarizerParts
from controller.upkeep_state import UpkeepState

PEERING_NAME = "session-summary-operator"  # kopf's peering object (never kopf's "default")


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
