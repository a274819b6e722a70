"""The SessionSummarizer timer's work besides the sweep: the sunset-marker scan, retention
and a reconciliation step, each reporting on the status.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time

import kopf
from kubernetes.client.exceptions import ApiException

from controller import metrics
from controller.api import SessionSummarizerSpec, SessionSummarizerStatus
from controller.config import CONFIG
from controller.core.destinations import DestinationRefused
from controller.core.text import one_line
from controller.kube import client as kube
from controller.reconcile import ReconcileResult, reconcile_step
from controller.runtime import Runtime
from controller.status.conditions import now_rfc3339
from controller.status.summarizer_status import MarkerScanReport, ReconcileReport, RetentionReport
from controller.store.errors import CollectionNotFound, InvalidStoreConfig, StoreUnavailable
from controller.sweep import (
    MarkerScanResult,
    apply_retention,
    retention_policy,
    run_marker_scan,
)

# What a store or its settings can raise: the sweep reports these on the SessionSummarizer;
# the marker scan and the reconciliation leave them to it.
STORE_ERRORS = (
    StoreUnavailable,
    kube.SecretError,
    CollectionNotFound,
    InvalidStoreConfig,
    DestinationRefused,
)


def due(last: str | None, interval_s: float) -> bool:
    """Whether interval_s has passed since the RFC 3339 time last (never: due)."""
    if last is None:
        return True
    then = dt.datetime.fromisoformat(last.replace("Z", "+00:00"))
    return (dt.datetime.now(dt.UTC) - then).total_seconds() >= interval_s


async def marker_scan(
    body: kopf.Body,
    spec: SessionSummarizerSpec,
    namespace: str,
    name: str,
    since: int,
    logger: kopf.Logger,
    runtime: Runtime,
) -> None:
    """The sunset-marker scan (sweep.run_marker_scan) after the sweep's watermark; it owns
    the SunsetMarkers condition and leaves store errors to the sweep to report."""
    generation = body.metadata.get("generation")
    events = runtime.events

    def scan() -> MarkerScanResult:
        with runtime.parts.store(namespace, name, spec) as store:
            return run_marker_scan(
                store,
                spec,
                namespace=namespace,
                summarizer_name=name,
                watermark_ms=since,
                memory=runtime.upkeep.markers(namespace, name),
            )

    try:
        markers = await asyncio.to_thread(scan)
    except STORE_ERRORS as exc:  # every tick while the store is out: the sweep reports it
        logger.debug("marker scan skipped: %s", one_line(exc, 300))
    except ApiException as exc:  # the next tick scans again
        logger.warning("marker scan failed: API %s: %s", exc.status, one_line(exc.reason, 300))
    else:
        report = MarkerScanReport.of(
            (sid for sid, _ in markers.requested),
            (m.describe() for m in markers.invalid),
            markers.markers_only,
            generation,
        )
        if report is not None:
            await asyncio.to_thread(kube.update_summarizer_status, namespace, name, report.apply)
            kind = "Warning" if report.ignored else "Normal"
            events.post(body, type_=kind, reason=report.reason, message=report.message)
            logger.info(
                "marker scan by %s (%d markers read in %.0f ms, %d waiting for a pass "
                "under way, %d left for the next tick): %s",
                CONFIG.replica_id,
                markers.scanned,
                markers.duration_s * 1000,
                markers.waiting,
                markers.left,
                report.message,
            )


async def retention(
    spec: SessionSummarizerSpec,
    namespace: str,
    name: str,
    status: SessionSummarizerStatus,
    logger: kopf.Logger,
    runtime: Runtime,
) -> None:
    """Deletes the summarizer's finished objects past their phase's TTL, once per
    spec.sweep.intervalSeconds (also when sweeps are off: retention is not the sweep's)."""
    if retention_policy(spec).keeps_everything:
        return
    if not due(status.last_retention_at, spec.sweep.interval_seconds):
        return
    at = now_rfc3339()

    def retain() -> int:
        with runtime.scheduler.background() as pause:
            return apply_retention(spec, namespace=namespace, summarizer_name=name, pause=pause)

    try:
        deleted = await asyncio.to_thread(retain)
    except ApiException as exc:
        logger.warning("retention failed: API %s: %s", exc.status, one_line(exc.reason, 300))
        return
    if deleted:
        logger.info(
            "retention by %s: deleted %d expired SessionSummaries", CONFIG.replica_id, deleted
        )
    await asyncio.to_thread(
        kube.update_summarizer_status, namespace, name, RetentionReport(at, deleted).apply
    )


async def reconcile(
    body: kopf.Body,
    spec: SessionSummarizerSpec,
    namespace: str,
    name: str,
    logger: kopf.Logger,
    runtime: Runtime,
) -> None:
    """One step of the reconciliation (sweep.reconcile_step); a store it cannot reach is the
    sweep's to report."""
    events = runtime.events

    def step_once() -> ReconcileResult:
        with (
            runtime.parts.store(namespace, name, spec) as store,
            runtime.scheduler.background() as pause,
        ):
            return reconcile_step(
                store,
                spec,
                namespace=namespace,
                summarizer_name=name,
                now_ms=int(time.time() * 1000),
                monotonic=time.monotonic(),
                state=runtime.upkeep.reconciler(namespace, name),
                pause=pause,
            )

    try:
        step = await asyncio.to_thread(step_once)
    except STORE_ERRORS as exc:
        logger.debug("reconciliation skipped: %s", one_line(exc, 300))
        return
    except ApiException as exc:  # never in the way of the sweep
        logger.warning("reconciliation failed: API %s: %s", exc.status, one_line(exc.reason, 300))
        return
    done = step.finished
    metrics.observe_reconcile(step.read, step.uncovered if done is not None else None)
    if done is None:
        return
    report = ReconcileReport(
        at=now_rfc3339(),
        rows=done.rows,
        uncovered=step.uncovered,
        sessions=step.sessions,
        seconds=(int(time.time() * 1000) - done.started_ms) / 1000,
    )
    await asyncio.to_thread(kube.update_summarizer_status, namespace, name, report.apply)
    logger.info("reconciliation by %s: %s", CONFIG.replica_id, report.message)
    if step.uncovered:
        events.post(body, type_="Normal", reason="Reconciled", message=report.message)
