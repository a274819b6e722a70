"""SessionSummarizer handlers: validate the config, report store/model health, and run the
periodic sweep from a kopf timer.

kopf fixes a timer's interval when the handler is registered, so the timer ticks every
SSO_SWEEP_TICK_SECONDS and the sweep runs when spec.sweep.intervalSeconds has passed since
status.lastSweepAt (which survives restarts and failover).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from controller import metrics
from controller.api import (
    GROUP,
    SUMMARIZER_PLURAL,
    VERSION,
    Condition,
    SessionSummarizerSpec,
    SessionSummarizerStatus,
    now_rfc3339,
)
from controller.backends import store_location
from controller.config import CONFIG
from controller.core.destinations import DestinationRefused
from controller.core.reconcile_plan import RowCursor
from controller.core.summarizer_status import (
    MarkerScanReport,
    ReconcileReport,
    SweepReport,
    sweep_failure,
    with_conditions,
)
from controller.core.text import one_line
from controller.kube import client as kube
from controller.probes import check_embedding, check_secrets, health_conditions
from controller.reconcile import reconcile_soon, reconcile_step
from controller.store.errors import (
    CollectionNotFound,
    InvalidStoreConfig,
    StoreUnavailable,
)
from controller.store.memory_store import forget_store, store_for
from controller.sweep import apply_retention, run_marker_scan, run_sweep


def _status(body: kopf.Body) -> SessionSummarizerStatus:
    return SessionSummarizerStatus.model_validate(dict(body.get("status") or {}))


def _validate(body: kopf.Body) -> SessionSummarizerSpec:
    try:
        return SessionSummarizerSpec.model_validate(dict(body.get("spec") or {}))
    except ValidationError as exc:
        raise kopf.PermanentError(f"invalid spec: {one_line(exc, 300)}") from exc


def _write_status(
    namespace: str, name: str, mutate: Any
) -> tuple[SessionSummarizerStatus, SessionSummarizerStatus] | None:
    return kube.update_summarizer_status(namespace, name, mutate)


def _transitions(
    before: SessionSummarizerStatus, conditions: list[Condition]
) -> list[tuple[Condition, bool]]:
    """(condition, changed) for each: changed when its status or reason differs from before."""
    current = {c.type: c for c in before.conditions or []}
    out = []
    for cond in conditions:
        old = current.get(cond.type)
        out.append((cond, old is None or (old.status, old.reason) != (cond.status, cond.reason)))
    return out


@kopf.on.create(GROUP, VERSION, SUMMARIZER_PLURAL)
@kopf.on.update(GROUP, VERSION, SUMMARIZER_PLURAL, field="spec")
@kopf.on.resume(GROUP, VERSION, SUMMARIZER_PLURAL)
async def check_config(body: kopf.Body, name: str, namespace: str | None, **_: Any) -> None:
    """The health probes own SecretsAllowed, StoreReachable, ModelReady and EmbeddingReady."""
    assert namespace is not None  # SessionSummarizer is namespaced
    spec = _validate(body)
    conditions = await asyncio.to_thread(health_conditions, spec, namespace)
    generation = body.metadata.get("generation")
    for cond in conditions:
        if cond.status == "False":
            kopf.event(body, type="Warning", reason=cond.reason, message=cond.message)
    await asyncio.to_thread(
        _write_status,
        namespace,
        name,
        lambda st: with_conditions(st, conditions).model_copy(
            update={"observed_generation": generation}
        ),
    )


def _sweep_due(spec: SessionSummarizerSpec, status: SessionSummarizerStatus) -> bool:
    if not spec.sweep.enabled:
        return False
    if status.last_sweep_at is None:
        return True
    last = dt.datetime.fromisoformat(status.last_sweep_at.replace("Z", "+00:00"))
    elapsed = (dt.datetime.now(dt.UTC) - last).total_seconds()
    return elapsed >= spec.sweep.interval_seconds


_LAST_PROBE: dict[tuple[str, str, str], float] = {}


def _probe_due(namespace: str, name: str, condition: str) -> bool:
    """At most once per SSO_EMBEDDING_REPROBE_SECONDS per object and condition; the first
    call only starts the clock (the create/update/resume handler has just probed)."""
    key = (namespace, name, condition)
    now, last = time.monotonic(), _LAST_PROBE.get(key)
    if last is not None and now - last < CONFIG.embedding_reprobe_seconds:
        return False
    _LAST_PROBE[key] = now
    return last is not None


async def _reprobe(
    body: kopf.Body, spec: SessionSummarizerSpec, namespace: str, status: SessionSummarizerStatus
) -> None:
    """While EmbeddingReady is False, or SecretsAllowed is not True, probe again every
    SSO_EMBEDDING_REPROBE_SECONDS (30), so the conditions turn True once the endpoint, the
    collection or the Secret's annotation is fixed, without a spec change. When the Secrets
    come to allow their URLs, every probe runs again (they failed for want of them)."""
    current = {c.type: c for c in status.conditions or []}
    name = str(body.metadata.get("name"))
    secrets = current.get("SecretsAllowed")
    if secrets is not None and secrets.status != "True" and _probe_due(namespace, name, "s"):
        cond = await asyncio.to_thread(check_secrets, spec, namespace)
        if cond.status == "True":
            conditions = await asyncio.to_thread(health_conditions, spec, namespace)
            await asyncio.to_thread(
                _write_status, namespace, name, lambda st: with_conditions(st, conditions)
            )
            kopf.event(body, type="Normal", reason=cond.reason, message=cond.message)
            return
    embedding = current.get("EmbeddingReady")
    if embedding is not None and embedding.status == "False" and _probe_due(namespace, name, "e"):
        cond = await asyncio.to_thread(check_embedding, spec, namespace)
        if cond.status == "True":
            await asyncio.to_thread(
                _write_status, namespace, name, lambda st: with_conditions(st, [cond])
            )
            kopf.event(body, type="Normal", reason=cond.reason, message=cond.message)


async def _reconcile(
    body: kopf.Body, spec: SessionSummarizerSpec, namespace: str, name: str, logger: kopf.Logger
) -> None:
    """One step of the reconciliation (sweep.reconcile_step); a store it cannot reach is the
    sweep's to report."""
    try:
        step = await asyncio.to_thread(
            lambda: reconcile_step(
                store_for(store_location(spec, namespace)),
                spec,
                namespace=namespace,
                summarizer_name=name,
                now_ms=int(time.time() * 1000),
                monotonic=time.monotonic(),
            )
        )
    except (
        StoreUnavailable,
        kube.SecretError,
        CollectionNotFound,
        InvalidStoreConfig,
        DestinationRefused,
    ) as exc:
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
    await asyncio.to_thread(_write_status, namespace, name, report.apply)
    logger.info("reconciliation by %s: %s", CONFIG.replica_id, report.message)
    if step.uncovered:
        kopf.event(body, type="Normal", reason="Reconciled", message=report.message)


@kopf.timer(
    GROUP, VERSION, SUMMARIZER_PLURAL, interval=CONFIG.sweep_tick_seconds, initial_delay=1.0
)
async def sweep(
    body: kopf.Body,
    name: str,
    namespace: str | None,
    logger: kopf.Logger,
    **_: Any,
) -> None:
    """The sweep owns the sweep fields and the Swept condition (and reports a store it
    could not reach through the store probe's StoreReachable). The marker scan, every tick
    once the sweep has a watermark, owns SunsetMarkers; the sweep reports its store errors."""
    assert namespace is not None
    spec = _validate(body)
    status = _status(body)
    await _reprobe(body, spec, namespace, status)
    if spec.sweep.enabled and status.watermark is not None:
        since = status.watermark
        try:
            markers = await asyncio.to_thread(
                lambda: run_marker_scan(
                    store_for(store_location(spec, namespace)),
                    spec,
                    namespace=namespace,
                    summarizer_name=name,
                    watermark_ms=since,
                )
            )
        except (
            StoreUnavailable,
            kube.SecretError,
            CollectionNotFound,
            InvalidStoreConfig,
            DestinationRefused,
        ) as exc:
            if isinstance(exc, StoreUnavailable):
                forget_store(store_location(spec, namespace))
            logger.debug("marker scan skipped: %s", one_line(exc, 300))
        except ApiException as exc:  # never in the way of the sweep below
            logger.warning("marker scan failed: API %s: %s", exc.status, one_line(exc.reason, 300))
        else:
            report = MarkerScanReport.of(
                (sid for sid, _ in markers.requested), (m.describe() for m in markers.invalid)
            )
            if report is not None:
                await asyncio.to_thread(_write_status, namespace, name, report.apply)
                kind = "Warning" if report.invalid else "Normal"
                kopf.event(body, type=kind, reason=report.reason, message=report.message)
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
    if spec.sweep.enabled and status.watermark is not None:
        await _reconcile(body, spec, namespace, name, logger)
    if not _sweep_due(spec, status):
        return
    cursor = (
        RowCursor(status.appended_offset, status.appended_last_id)
        if status.appended_offset is not None
        else None
    )
    try:
        store = await asyncio.to_thread(store_for, store_location(spec, namespace))
        result = await asyncio.to_thread(
            run_sweep,
            store,
            spec,
            namespace=namespace,
            summarizer_name=name,
            watermark_ms=status.watermark,
            cursor=cursor,
        )
        deleted = await asyncio.to_thread(
            apply_retention, spec, namespace=namespace, summarizer_name=name
        )
    except (
        StoreUnavailable,
        kube.SecretError,
        CollectionNotFound,
        InvalidStoreConfig,
        DestinationRefused,
    ) as exc:
        failure = sweep_failure(exc, spec.store.url)
        if isinstance(exc, StoreUnavailable):
            forget_store(store_location(spec, namespace))
        written = await asyncio.to_thread(
            _write_status, namespace, name, lambda st: failure.apply(st, now_rfc3339())
        )
        if written is not None and any(
            changed for _, changed in _transitions(written[0], failure.conditions)
        ):
            kopf.event(body, type="Warning", reason=failure.reason, message=failure.message)
        logger.warning("sweep failed: %s: %s", failure.reason, failure.message)
        return
    plan = result.plan
    if not result.aligned:
        reconcile_soon(namespace, name)
    metrics.observe_sweep(result.duration_s, plan.found)
    metrics.refresh_requested(result.applied.refreshed)
    message = (
        f"scanned {result.scanned} new memories and {result.appended} added rows: "
        f"{plan.found} stale, {len(plan.still_active)} "
        f"still active, {len(plan.fresh)} fresh; created {result.created}, "
        f"patched {result.patched}, refreshed {result.applied.refreshed} grown active "
        f"sessions, {result.applied.in_flight} already in flight, "
        f"{result.applied.left} left for later; "
        f"deleted {deleted} expired objects"
    )
    logger.info("sweep by %s: %s", CONFIG.replica_id, message)
    swept = SweepReport(
        at=now_rfc3339(),
        duration_s=result.duration_s,
        found=plan.found,
        deferred=result.applied.left,
        created=result.created,
        patched=result.patched,
        scanned=result.scanned + result.appended,
        deleted=deleted,
        watermark=plan.next_watermark_ms,
        message=message,
        store_url=spec.store.url,
        cursor=(result.cursor.offset, result.cursor.last_id) if result.cursor else None,
    )
    await asyncio.to_thread(_write_status, namespace, name, swept.apply)
    if result.created or result.patched or result.applied.refreshed:
        kopf.event(body, type="Normal", reason="Swept", message=message)
