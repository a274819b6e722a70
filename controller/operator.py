"""The operator process: kopf settings and `python -m controller run`."""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import datetime as dt
import logging
import os
from typing import Any

import kopf

import controller.handlers  # noqa: F401  (registers the handlers)
from controller import metrics
from controller.config import CONFIG
from controller.handlers.session_summary import stop_workers
from controller.kube.claim_collector import ClaimCollector
from controller.kube.peering import (
    PeeringView,
    ensure_peering_object,
    live_peers,
    priority_conflicts,
    read_peering,
    watch_leader,
)
from controller.metrics import start_metrics_server

PEERING_NAME = "session-summary-operator"
_RUN: dict[str, Any] = {"standalone": True, "peering": PEERING_NAME, "namespaces": ()}
_TASKS: set[asyncio.Task[None]] = set()
log = logging.getLogger("controller.operator")


def _leader_changed(leader: str | None, previous: str | None) -> None:
    metrics.set_active_replica(CONFIG.replica_id, leader == CONFIG.replica_id)
    role = "this replica" if leader == CONFIG.replica_id else "another replica"
    if leader is None:
        log.warning("no active replica (peers share the top priority, or none is alive)")
    else:
        log.info("active replica is now %s (%s; was %s)", leader, role, previous)


async def _trim_heap(interval: float = 30.0) -> None:
    """Hands freed heap pages back to the OS. kopf's initial list of every object leaves
    the heap fragmented, and glibc keeps the freed memory unless asked (malloc_trim)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    while True:
        await asyncio.sleep(interval)
        await asyncio.to_thread(libc.malloc_trim, 0)


async def _collect_abandoned_claims(interval: float) -> None:
    """Deletes the claims of writers that died (kube/claims.py:ClaimCollector), on its own
    timer: also when every sweep is off. What it has seen lives in this task only."""
    collector = ClaimCollector(
        default_duration_s=CONFIG.claim_ttl_seconds, grace_s=CONFIG.claim_ttl_seconds
    )
    while True:
        try:
            deleted = await asyncio.to_thread(collector.collect)
        except Exception as exc:  # the API server may be away for a while: next round
            log.warning("collecting abandoned claims failed: %s", exc)
        else:
            if deleted:
                log.info("deleted %d abandoned session claims", deleted)
        await asyncio.sleep(interval)


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, logger: kopf.Logger, **_: Any) -> None:
    prefix = CONFIG.annotation_prefix
    # Progress and diff-base annotations under our own group, not kopf's shared prefix.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=prefix)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=prefix, key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING  # Events come from handlers, not kopf's log.
    settings.watching.server_timeout = 300
    settings.execution.max_workers = 16
    # Memory with many objects: the initial list comes in pages, not one 10k-object body,
    # and a per-object worker (which holds the object's last body) exits soon after its
    # event instead of 5 s later, so the bodies of a whole listing are never alive at once.
    # Freed, they would leave the heap fragmented: RSS stays at the peak.
    if CONFIG.list_chunk_size > 0:
        settings.watching.chunk_size = CONFIG.list_chunk_size
    settings.queueing.idle_timeout = CONFIG.worker_idle_seconds
    settings.peering.priority = CONFIG.peering_priority
    settings.peering.lifetime = CONFIG.peering_lifetime
    logger.info(
        "replica %s starting (peering %s, priority %d, lifetime %ds)",
        CONFIG.replica_id,
        "off (standalone)" if _RUN["standalone"] else _RUN["peering"],
        CONFIG.peering_priority,
        CONFIG.peering_lifetime,
    )
    if CONFIG.metrics_port > 0:
        start_metrics_server(CONFIG.metrics_port, CONFIG.metrics_address)
    trim = asyncio.get_running_loop().create_task(_trim_heap(CONFIG.heap_trim_seconds))
    _TASKS.add(trim)
    collect = asyncio.get_running_loop().create_task(
        _collect_abandoned_claims(CONFIG.claim_collect_seconds)
    )
    _TASKS.add(collect)
    if _RUN["standalone"]:
        metrics.set_active_replica(CONFIG.replica_id, True)
    else:
        await asyncio.to_thread(ensure_peering_object, _RUN["peering"], _RUN["namespaces"])
        await asyncio.to_thread(_warn_priority_conflict)
    task = asyncio.get_running_loop().create_task(
        watch_leader(
            CONFIG.replica_id,
            _RUN["peering"],
            _RUN["namespaces"],
            _leader_changed,
            standalone=bool(_RUN["standalone"]),
            grace_s=2.0 * CONFIG.peering_lifetime,
        )
    )
    _TASKS.add(task)


def _warn_priority_conflict() -> None:
    """An explicit SSO_PEERING_PRIORITY that a live replica already has: kopf will pause
    both, and nothing will be summarized. Said loudly at start (the ReplicaActive condition
    says it on every SessionSummarizer once kopf sees the tie)."""
    if not os.environ.get("SSO_PEERING_PRIORITY"):
        return
    try:
        status = read_peering(_RUN["peering"], _RUN["namespaces"])
    except Exception as exc:  # the watcher reports later; this is only an early warning
        log.debug("could not read the peering object at start: %s", exc)
        return
    view = PeeringView(live_peers(status, dt.datetime.now(dt.UTC)))
    others = priority_conflicts(view, CONFIG.replica_id, CONFIG.peering_priority)
    if others:
        log.error(
            "SSO_PEERING_PRIORITY=%d is also the priority of live replica(s) %s: kopf will "
            "pause all of them and nothing will be summarized; give each replica its own "
            "priority or leave SSO_PEERING_PRIORITY unset",
            CONFIG.peering_priority,
            ", ".join(others),
        )


def run(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="session-summary-operator")
    parser.add_argument(
        "--namespace",
        "-n",
        action="append",
        default=[],
        help="watch this namespace (repeatable); default: SSO_NAMESPACES or all",
    )
    parser.add_argument(
        "--standalone",
        action="store_true",
        help="no peering: this process is the only replica (local use)",
    )
    parser.add_argument(
        "--peering",
        default=PEERING_NAME,
        help="kopf peering object name (dedicated, never kopf's 'default')",
    )
    parser.add_argument(
        "--liveness", default=None, help="liveness endpoint, e.g. http://0.0.0.0:8080/healthz"
    )
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    namespaces = args.namespace or list(CONFIG.namespaces)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    _RUN.update(standalone=args.standalone, peering=args.peering, namespaces=tuple(namespaces))
    os.environ["POD_ID"] = CONFIG.replica_id  # kopf's peering identity = ours
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per Chroma call otherwise
    try:
        kopf.run(
            clusterwide=not namespaces,
            namespaces=namespaces,
            standalone=args.standalone,
            # A dedicated peering object (mandatory: without its CRD the operator waits
            # rather than risk a second writer); none at all when standalone.
            peering_name=None if args.standalone else args.peering,
            liveness_endpoint=args.liveness,
        )
    finally:
        stop_workers()
