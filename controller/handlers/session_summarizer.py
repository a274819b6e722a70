"""SessionSummarizer handlers: validate the config, report store/model health, and run the
periodic sweep from a kopf timer.

kopf fixes a timer's interval when the handler is registered, so the timer ticks every
SSO_SWEEP_TICK_SECONDS and the sweep runs when spec.sweep.intervalSeconds has passed since
status.lastSweepAt (which survives restarts and failover).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import kopf
from pydantic import ValidationError

from controller import metrics
from controller.api import (
    GROUP,
    SUMMARIZER_PLURAL,
    VERSION,
    Condition,
    SessionSummarizerSpec,
    SessionSummarizerStatus,
)
from controller.config import CONFIG
from controller.core.fencing import AuthorityRecord, FenceUnavailable
from controller.core.reconcile_plan import RowCursor
from controller.core.requeue import to_ask_again_with_progress
from controller.core.text import one_line
from controller.handlers import summarizer_upkeep as upkeep
from controller.kube import client as kube
from controller.probes import health_conditions
from controller.runtime import Runtime
from controller.status.conditions import now_rfc3339
from controller.status.readiness import NOT_BLOCKING, REQUIRED
from controller.status.requests import PROBE_REQUESTED
from controller.status.summarizer_status import (
    failed_sweep,
    spec_valid,
    sweep_failure,
    swept,
    with_conditions,
)
from controller.sweep import run_sweep


def _status(body: kopf.Body) -> SessionSummarizerStatus:
    return SessionSummarizerStatus.model_validate(dict(body.get("status") or {}))


def _validate(body: kopf.Body) -> SessionSummarizerSpec:
    try:
        return SessionSummarizerSpec.model_validate(dict(body.get("spec") or {}))
    except ValidationError as exc:
        raise kopf.PermanentError(f"invalid spec: {one_line(exc, 300)}") from exc


def _transitions(
    before: SessionSummarizerStatus, conditions: list[Condition]
) -> list[tuple[Condition, bool]]:
    """(condition, changed) for each: changed when its status or reason differs from before."""
    current = {c.type: (c.status, c.reason) for c in before.conditions or []}
    return [(c, current.get(c.type) != (c.status, c.reason)) for c in conditions]


def _ask_failed_again(namespace: str, summarizer: str) -> int:
    """Asks every SessionSummary of this summarizer whose last pass failed for a new pass
    (core/requeue.py); returns how many."""
    requested_at = now_rfc3339(precise=True)
    found = to_ask_again_with_progress(
        kube.iter_summaries(namespace, CONFIG.list_chunk_size), summarizer, CONFIG.annotation_prefix
    )
    return sum(kube.ask_again(namespace, n, rv, requested_at, keys) for n, rv, keys in found)


@kopf.on.create(GROUP, VERSION, SUMMARIZER_PLURAL)
@kopf.on.update(GROUP, VERSION, SUMMARIZER_PLURAL, field="spec")
@kopf.on.resume(GROUP, VERSION, SUMMARIZER_PLURAL)
async def take_summarizer_spec(
    body: kopf.Body,
    name: str,
    namespace: str | None,
    reason: str,
    memo: kopf.Memo,
    logger: kopf.Logger,
    **_: Any,
) -> None:
    """A spec new, changed or seen at start: old parts are closed, SpecValid and the health
    probes are written, and failed SessionSummaries are asked again (new or changed)."""
    assert namespace is not None  # SessionSummarizer is namespaced
    runtime = Runtime.of(memo)
    events = runtime.events
    generation = body.metadata.get("generation")
    await asyncio.to_thread(runtime.summarizer_seen, namespace, name, generation)
    if reason == "create":
        runtime.summarizers_changed.set()  # its activeReplica at the reporter's next poll
    try:
        spec = SessionSummarizerSpec.model_validate(dict(body.get("spec") or {}))
    except ValidationError as exc:  # one the CRD lets through: a pattern over RE2's bound
        await _probe(body, exc, namespace, name, runtime, first=True)
        return
    await _probe(body, spec, namespace, name, runtime, first=True)
    if reason in ("create", "update"):
        asked = await asyncio.to_thread(_ask_failed_again, namespace, name)
        if asked:
            message = (
                f"asked {asked} SessionSummar{'y' if asked == 1 else 'ies'} whose last pass "
                f"failed under this summarizer for a new pass (its spec {reason}d)"
            )
            logger.info(message)
            events.post(body, type_="Normal", reason="FailedSummariesRequeued", message=message)


def sweep_due(spec: SessionSummarizerSpec, status: SessionSummarizerStatus, retry_s: float) -> bool:
    """Every spec.sweep.intervalSeconds; a sweep that failed (Swept False: no memory
    collection yet, an unreachable store) again every retry_s, so it clears once fixed."""
    failed = any(c.type == "Swept" and c.status == "False" for c in status.conditions or [])
    every = min(retry_s, spec.sweep.interval_seconds) if failed else spec.sweep.interval_seconds
    return spec.sweep.enabled and upkeep.due(status.last_sweep_at, every)


@kopf.on.delete(GROUP, VERSION, SUMMARIZER_PLURAL, optional=True)
async def summarizer_deleted(name: str, namespace: str | None, memo: kopf.Memo, **_: Any) -> None:
    """Closes and drops what this process kept for it. optional: no finalizer waits."""
    assert namespace is not None
    await asyncio.to_thread(Runtime.of(memo).summarizer_gone, namespace, name)


async def _probe(
    body: kopf.Body,
    spec: SessionSummarizerSpec | ValidationError,
    namespace: str,
    name: str,
    runtime: Runtime,
    *,
    first: bool = False,
) -> None:
    """Runs every health probe and writes its condition, with a Warning Event for each new
    failure and a Normal one for each recovery. An unusable spec is SpecValid False, unprobed."""
    generation = body.metadata.get("generation")
    if isinstance(spec, ValidationError):
        conditions = [spec_valid(spec)]
    else:
        conditions = await asyncio.to_thread(
            health_conditions, runtime.parts, spec, namespace, name
        )
        conditions = [spec_valid(None), *conditions] if first else conditions
    observed = {"observed_generation": generation} if first else {}
    written = await asyncio.to_thread(
        kube.update_summarizer_status,
        namespace,
        name,
        lambda st: with_conditions(st, conditions, generation=generation).model_copy(
            update=observed
        ),
    )
    before = written[0] if written else SessionSummarizerStatus()
    was = {c.type: c.status for c in before.conditions or []}
    for cond, changed in _transitions(before, conditions):
        if cond.status == "False" and (changed or first):
            runtime.events.post(body, type_="Warning", reason=cond.reason, message=cond.message)
        elif changed and cond.status == "True" and was.get(cond.type) not in (None, "True"):
            runtime.events.post(body, type_="Normal", reason=cond.reason, message=cond.message)


def _probes_due(
    status: SessionSummarizerStatus, name: str, namespace: str, runtime: Runtime
) -> bool:
    """While a probe's condition does not hold, every probe runs again after
    SSO_EMBEDDING_REPROBE_SECONDS (30), backing off (UpkeepState.probe_due): the conditions
    turn True once the store, the endpoint, the collection or the Secret is fixed."""
    failing = any(
        c.type in REQUIRED and c.status != "True" and (c.type, c.reason) not in NOT_BLOCKING
        for c in status.conditions or []
    )
    every = runtime.config.embedding_reprobe_seconds
    return runtime.upkeep.probe_due(namespace, name, every, time.monotonic(), failing=failing)


@kopf.timer(GROUP, VERSION, SUMMARIZER_PLURAL, interval=CONFIG.claim_renew_period)
async def renew_authority(
    body: kopf.Body, name: str, namespace: str | None, logger: kopf.Logger, memo: kopf.Memo,
    **_: Any,
) -> None:  # fmt: skip
    """Renews this cluster's record in the store, so other clusters see it still writes
    (core/fencing.py); its own timer, which no sweep delays."""
    assert namespace is not None
    runtime, spec, now_ms = Runtime.of(memo), _validate(body), int(time.time() * 1000)

    def renew() -> None:
        mine = (runtime.fence_authority, CONFIG.replica_id, now_ms, CONFIG.claim_ttl_seconds)
        with runtime.parts.store(namespace, name, spec) as store:
            store.renew_authority(AuthorityRecord(*mine))

    try:
        await asyncio.to_thread(renew)
    except (*upkeep.STORE_ERRORS, FenceUnavailable) as exc:  # the sweep and passes report them
        logger.debug("authority record not renewed: %s", one_line(exc, 300))


@kopf.timer(
    GROUP, VERSION, SUMMARIZER_PLURAL, interval=CONFIG.sweep_tick_seconds, initial_delay=1.0
)
async def sweep(
    body: kopf.Body,
    name: str,
    namespace: str | None,
    logger: kopf.Logger,
    memo: kopf.Memo,
    **_: Any,
) -> None:
    """The sweep (Swept), retention and the reconciliation's steps, on its own clock (the
    marker scan has a timer of its own: scan_markers)."""
    assert namespace is not None
    runtime = Runtime.of(memo)
    spec = _validate(body)
    status = _status(body)
    asked = (body.metadata.get("annotations") or {}).get(PROBE_REQUESTED)
    now = asked is not None and asked != status.last_handled_probe_request  # summaryctl check
    if now or _probes_due(status, name, namespace, runtime):
        await _probe(body, spec, namespace, name, runtime)
    await upkeep.retention(spec, namespace, name, status, logger, runtime)
    if spec.reconcile.enabled:  # whether or not sweeps are: the backstop of every pass
        await upkeep.reconcile(body, spec, namespace, name, logger, runtime)
    if sweep_due(spec, status, runtime.config.embedding_reprobe_seconds) or (
        now and spec.sweep.enabled
    ):
        await _sweep(body, spec, namespace, name, status, logger, runtime)
    if now:  # what `summaryctl check` waits for: probes and sweep ran after its request
        answered = {"last_handled_probe_request": asked}
        write = kube.update_summarizer_status
        await asyncio.to_thread(write, namespace, name, lambda st: st.model_copy(update=answered))


@kopf.timer(
    GROUP, VERSION, SUMMARIZER_PLURAL, interval=CONFIG.sweep_tick_seconds, initial_delay=1.0
)
async def scan_markers(
    body: kopf.Body, name: str, namespace: str | None, logger: kopf.Logger, memo: kopf.Memo,
    **_: Any,
) -> None:  # fmt: skip
    """The sunset-marker scan (SunsetMarkers) every tick, after the sweep's watermark. A
    timer of its own: a sweep that measures hundreds of active sessions on a busy store
    takes minutes, and a marker is a session that ended, not to wait for it."""
    assert namespace is not None
    spec, watermark = _validate(body), _status(body).watermark
    if spec.sweep.enabled and watermark is not None:
        await upkeep.marker_scan(body, spec, namespace, name, watermark, logger, Runtime.of(memo))


async def _sweep(
    body: kopf.Body,
    spec: SessionSummarizerSpec,
    namespace: str,
    name: str,
    status: SessionSummarizerStatus,
    logger: kopf.Logger,
    runtime: Runtime,
) -> None:
    """One sweep: the sessions it finds asked for, its figures and Swept written."""
    events = runtime.events
    generation = body.metadata.get("generation")
    cursor = (
        RowCursor(status.appended_offset, status.appended_last_id)
        if status.appended_offset is not None
        else None
    )

    def sweep_store() -> Any:
        with (
            runtime.parts.store(namespace, name, spec) as store,
            runtime.scheduler.background() as pause,
        ):
            return run_sweep(
                store,
                spec,
                namespace=namespace,
                summarizer_name=name,
                watermark_ms=status.watermark,
                cursor=cursor,
                pause=pause,
            )

    try:
        result = await asyncio.to_thread(sweep_store)
    except upkeep.STORE_ERRORS as exc:
        failure, at = sweep_failure(exc), now_rfc3339()
        written = await asyncio.to_thread(
            kube.update_summarizer_status,
            namespace,
            name,
            lambda st: failed_sweep(st, failure, at, generation),
        )
        said = failure[0]
        if written is not None and any(changed for _, changed in _transitions(written[0], failure)):
            events.post(body, type_="Warning", reason=said.reason, message=said.message)
        logger.warning("sweep failed: %s: %s", said.reason, said.message)
        return
    plan = result.plan
    if not result.aligned:  # the appended-rows cursor lost its place: walk now
        runtime.upkeep.reconciler(namespace, name).due_now = True
    metrics.observe_sweep(result.duration_s, plan.found)
    metrics.REFRESH_REQUESTS.inc(result.applied.refreshed)
    message = (
        f"scanned {result.scanned} new memories and {result.appended} added rows: "
        f"{plan.found} stale, {len(plan.still_active)} "
        f"still active, {len(plan.fresh)} fresh; created {result.applied.created}, "
        f"patched {result.applied.patched}, refreshed {result.applied.refreshed} grown active "
        f"sessions, {result.applied.in_flight} already in flight, "
        f"{result.applied.left} left for later"
    )
    logger.info("sweep by %s: %s", CONFIG.replica_id, message)
    figures: dict[str, object] = {
        "last_sweep_at": now_rfc3339(),
        "candidates_found": plan.found,
        "deferred": result.applied.left,
        "created": result.applied.created,
        "patched": result.applied.patched,
        "scanned_memories": result.scanned + result.appended,
        "watermark": plan.next_watermark_ms,
    }
    if result.cursor:
        figures.update(appended_offset=result.cursor.offset, appended_last_id=result.cursor.last_id)

    def report(st: SessionSummarizerStatus) -> SessionSummarizerStatus:
        return swept(st, figures, message, spec.store.url, result.duration_s, generation)

    await asyncio.to_thread(kube.update_summarizer_status, namespace, name, report)
    if result.applied.created or result.applied.patched or result.applied.refreshed:
        events.post(body, type_="Normal", reason="Swept", message=message)
