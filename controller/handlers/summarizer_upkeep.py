"""The SessionSummarizer timer's work besides the sweep: the sunset-marker scan, retention
and a reconciliation step, each reporting on the status.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import time
from collections.abc import Callable
from typing import TypeVar

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
from controller.status.summarizer_status import sunset_markers, with_conditions
from controller.store.errors import CollectionNotFound, InvalidStoreConfig, StoreUnavailable
from controller.sweep import MarkerScanResult, apply_retention, retention_policy, run_marker_scan

# What a store or its settings can raise: the sweep reports these on the SessionSummarizer;
# the marker scan and the reconciliation leave them to it.
STORE_ERRORS = (
    StoreUnavailable,
    kube.SecretError,
    CollectionNotFound,
    InvalidStoreConfig,
    DestinationRefused,
)


T = TypeVar("T")


async def _in_thread(what: str, work: Callable[[], T], logger: kopf.Logger) -> T | None:
    """work() in a worker thread; None when it failed. A store error is the sweep's to
    report; an API error waits for the next tick, never in the way of the sweep."""
    try:
        return await asyncio.to_thread(work)
    except STORE_ERRORS as exc:
        logger.debug("%s skipped: %s", what, one_line(exc, 300))
    except ApiException as exc:
        logger.warning("%s failed: API %s: %s", what, exc.status, one_line(exc.reason, 300))
    return None


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
    generation = body.metadata.get("generation")  # of the spec the scan runs with

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

    markers = await _in_thread("marker scan", scan, logger)
    if markers is None:
        return
    requested = [sid for sid, _ in markers.requested]
    invalid = [m.describe() for m in markers.invalid]
    cond = sunset_markers(requested, invalid, markers.markers_only)
    if cond is not None:
        stamped = functools.partial(with_conditions, conditions=[cond], generation=generation)
        await asyncio.to_thread(kube.update_summarizer_status, namespace, name, stamped)
        kind = "Warning" if cond.status == "False" else "Normal"
        runtime.events.post(body, type_=kind, reason=cond.reason, message=cond.message)
        logger.info(
            "marker scan by %s (%d markers read in %.0f ms, %d waiting for a pass "
            "under way, %d left for the next tick): %s",
            CONFIG.replica_id,
            markers.scanned,
            markers.duration_s * 1000,
            markers.waiting,
            markers.left,
            cond.message,
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

    deleted = await _in_thread("retention", retain, logger)
    if deleted is None:
        return
    if deleted:
        logger.info(
            "retention by %s: deleted %d expired SessionSummaries", CONFIG.replica_id, deleted
        )
    retained = {"last_retention_at": at, "deleted_by_retention": deleted}
    write = kube.update_summarizer_status
    await asyncio.to_thread(write, namespace, name, lambda st: st.model_copy(update=retained))


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

    step = await _in_thread("reconciliation", step_once, logger)
    if step is None:
        return
    done = step.finished
    metrics.observe_reconcile(step.read, step.uncovered if done is not None else None)
    if done is None:
        return
    seconds = (int(time.time() * 1000) - done.started_ms) / 1000
    message = (
        f"reconciled {done.rows} memories in {seconds:.0f}s: {step.uncovered} not accounted "
        f"for by a summary, in {step.sessions} sessions to summarize"
    )
    walked = {
        "reconciled_at": now_rfc3339(),
        "reconciled_rows": done.rows,
        "uncovered_found": step.uncovered,
    }
    write = kube.update_summarizer_status
    await asyncio.to_thread(write, namespace, name, lambda st: st.model_copy(update=walked))
    logger.info("reconciliation by %s: %s", CONFIG.replica_id, message)
    if step.uncovered:
        runtime.events.post(body, type_="Normal", reason="Reconciled", message=message)
