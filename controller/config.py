"""Operator process settings, read once from the environment (the chart sets these)."""

from __future__ import annotations

import os
import random
import socket
from dataclasses import dataclass, field


def _int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    return int(raw) if raw else default


def _float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    return float(raw) if raw else default


@dataclass(frozen=True)
class OperatorConfig:
    replica_id: str
    namespaces: tuple[str, ...]  # empty = cluster-wide
    sweep_tick_seconds: float
    metrics_port: int
    health_port: int
    retry_base_seconds: float
    retry_max_seconds: float
    peering_priority: int  # distinct per replica: equal priorities freeze every replica
    peering_lifetime: int  # seconds; a dead leader is replaced after lastseen + lifetime
    claim_ttl_seconds: float
    claim_margin_seconds: float
    claim_retry_seconds: float  # how soon a pass waiting for another writer's claim looks again
    failure_gate: int  # consecutive failures of one session before phase Failed
    write_journal: str | None  # append a line per store write (chaos tests)
    heap_trim_seconds: float  # how often freed heap memory is returned to the OS
    workers: int  # summarizations running at once (blocking store/model calls in threads)
    embedding_reprobe_seconds: float  # how often a failed EmbeddingReady probe is retried
    list_chunk_size: int  # objects per page when listing SessionSummaries (0: one page)
    worker_idle_seconds: float  # how long kopf keeps an idle per-object worker (and its body)
    # Progress/diff-base annotations kopf keeps on our objects use our group's prefix.
    annotation_prefix: str = "memorycore.io"
    extra: dict[str, str] = field(default_factory=dict)


def load() -> OperatorConfig:
    namespaces = tuple(n for n in os.environ.get("SSO_NAMESPACES", "").split(",") if n.strip())
    return OperatorConfig(
        replica_id=os.environ.get("SSO_REPLICA_ID") or f"{socket.gethostname()}-{os.getpid()}",
        namespaces=tuple(n.strip() for n in namespaces),
        sweep_tick_seconds=_float("SSO_SWEEP_TICK_SECONDS", 5.0),
        metrics_port=_int("SSO_METRICS_PORT", 0),
        health_port=_int("SSO_HEALTH_PORT", 0),
        retry_base_seconds=_float("SSO_RETRY_BASE_SECONDS", 2.0),
        retry_max_seconds=_float("SSO_RETRY_MAX_SECONDS", 300.0),
        peering_priority=_int("SSO_PEERING_PRIORITY", random.SystemRandom().randint(1, 2**31 - 1)),
        peering_lifetime=_int("SSO_PEERING_LIFETIME", 15),
        claim_ttl_seconds=_float("SSO_CLAIM_TTL_SECONDS", 60.0),
        claim_margin_seconds=_float("SSO_CLAIM_MARGIN_SECONDS", 5.0),
        claim_retry_seconds=_float("SSO_CLAIM_RETRY_SECONDS", 1.0),
        failure_gate=_int("SSO_FAILURE_GATE", 5),
        write_journal=os.environ.get("SSO_WRITE_JOURNAL") or None,
        heap_trim_seconds=_float("SSO_HEAP_TRIM_SECONDS", 30.0),
        workers=_int("SSO_WORKERS", 32),
        embedding_reprobe_seconds=_float("SSO_EMBEDDING_REPROBE_SECONDS", 30.0),
        list_chunk_size=_int("SSO_LIST_CHUNK_SIZE", 500),
        worker_idle_seconds=_float("SSO_WORKER_IDLE_SECONDS", 0.5),
    )


CONFIG = load()


def backoff_seconds(retry: int, cfg: OperatorConfig = CONFIG) -> float:
    """Exponential backoff for the retry-th retry, capped."""
    return float(min(cfg.retry_base_seconds * (2 ** max(retry, 0)), cfg.retry_max_seconds))
