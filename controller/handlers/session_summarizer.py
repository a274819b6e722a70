"""SessionSummarizer handlers: the spec check, health probes and timers (sweep, retention,
reconciliation, marker scan). kopf fixes a timer's interval, so a timer ticks every
SSO_SWEEP_TICK_SECONDS and sweeps once spec.sweep.intervalSeconds passed since lastSweepAt."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx2
import kopf
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from controller import metrics
from controller.api import (
    GROUP,
    PROBE_REQUESTED,
    SUMMARIZER_PLURAL,
    VERSION,
    Condition,
    SessionSummarizerSpec,
    SessionSummarizerStatus,
)
from controller.backends import (
    chat_model_config,
    check_memory_destinations,
    redaction_of,
    secret_uses,
    secret_verdict,
)
from controller.config import CONFIG
from controller.core.destinations import DestinationRefused, SecretVerdict, redirect_refusal, shown
from controller.core.ledger import AuthorityRecord, FenceUnavailable
from controller.core.retention import parse_time, to_ask_again
from controller.core.sweep_plan import ReconcileCycle, RowCursor
from controller.core.text import one_line
from controller.core.waiting import Pause
from controller.embeddings.minilm import EmbeddingError
from controller.handlers.session_summary import forgotten_by_another
from controller.http_deadline import AnswerTooLarge
from controller.kube import client as kube
from controller.runtime import Runtime, SummarizerParts, Upkeep
from controller.status.conditions import (
    NOT_BLOCKING,
    REQUIRED,
    condition,
    failure_shown,
    masked,
    memory_rows,
    now_rfc3339,
    secrets_allowed,
    spec_valid,
    store_reachable,
    sunset_markers,
    sweep_failure,
    with_conditions,
)
from controller.store.errors import (
    CollectionNotFound,
    EmbeddingMismatch,
    InvalidStoreConfig,
    StoreUnavailable,
)
from controller.store.memory_store import MemoryStore, is_tombstone
from controller.sweep import (
    Applied,
    MarkerScanResult,
    SweepScan,
    apply_plan,
    apply_retention,
    plan_from_store,
    reconcile_step,
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
T = TypeVar("T")


@dataclass(frozen=True)
class _Tick:
    """A SessionSummarizer as one tick of its timers works on it."""

    body: kopf.Body
    spec: SessionSummarizerSpec
    namespace: str
    name: str
    logger: kopf.Logger
    runtime: Runtime
    generation: int | None  # of the spec read here: kopf's body is live, a later read is newer

    @classmethod
    def of(cls, body: kopf.Body, namespace: str | None, name: str, **kwargs: Any) -> _Tick:
        assert namespace is not None  # SessionSummarizer is namespaced
        try:
            spec = SessionSummarizerSpec.model_validate(dict(body.get("spec") or {}))
        except ValidationError as exc:
            raise kopf.PermanentError(f"invalid spec: {masked(exc, 300)}") from exc
        generation = body.metadata.get("generation")
        return cls(
            body, spec, namespace, name, kwargs["logger"], Runtime.of(kwargs["memo"]), generation
        )

    @functools.cached_property
    def status(self) -> SessionSummarizerStatus:  # as the tick found it
        return SessionSummarizerStatus.model_validate(dict(self.body.get("status") or {}))

    @functools.cached_property
    def upkeep(self) -> Upkeep:  # what its timers remember between ticks
        return self.runtime.parts.upkeep(self.namespace, self.name)

    def store(self) -> contextlib.AbstractContextManager[MemoryStore]:
        return self.runtime.parts.store(self.namespace, self.name, self.spec)

    async def write(self, *conds: Condition, **fields: object) -> SessionSummarizerStatus | None:
        """Conditions (of the tick's spec generation) and fields written under the status's
        resourceVersion (kube.update_summarizer_status): the status before, None if gone."""

        def change(status: SessionSummarizerStatus) -> SessionSummarizerStatus:
            return with_conditions(status, conds, generation=self.generation, **fields)

        update = kube.update_summarizer_status
        written = await asyncio.to_thread(update, self.namespace, self.name, change)
        return written and written[0]

    async def in_thread(self, what: str, work: Callable[[], T]) -> T | None:
        """work() in a worker thread; None when it failed: a store error is the sweep's to report
        (FenceUnavailable: the passes'), an API error waits for the next tick."""
        try:
            return await asyncio.to_thread(work)
        except (*STORE_ERRORS, FenceUnavailable) as exc:
            self.logger.debug("%s skipped: %s", what, masked(exc, 300, redaction_of(self.spec)))
        except ApiException as exc:
            self.logger.warning(
                "%s failed: API %s: %s", what, exc.status, one_line(exc.reason, 300)
            )
        return None


def due(last: str | None, interval_s: float) -> bool:
    """Whether interval_s has passed since the RFC 3339 time last (never, or unreadable: due)."""
    then = parse_time(last)
    return then is None or (dt.datetime.now(dt.UTC) - then).total_seconds() >= interval_s


def _changed(before: SessionSummarizerStatus, cond: Condition) -> bool:
    """Whether cond's status or reason differs from before's (or before had none)."""
    was = [(c.status, c.reason) for c in before.conditions or [] if c.type == cond.type]
    return was != [(cond.status, cond.reason)]


def _ask_failed_again(namespace: str, summarizer: str) -> int:
    """Asks each SessionSummary whose last pass failed under this summarizer again; how many."""
    asked = {"requestedAt": now_rfc3339(precise=True)}
    found = to_ask_again(kube.iter_summaries(namespace, CONFIG.list_chunk_size), summarizer)
    return sum(kube.ask_again(namespace, n, rv, asked) for n, rv in found)


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
    generation = body.metadata.get("generation")  # what was built from an older one is closed
    await asyncio.to_thread(runtime.parts.spec_changed, namespace, name, generation)
    if reason == "create":
        runtime.summarizers_changed.set()  # its activeReplica at the reporter's next poll
    try:
        spec = SessionSummarizerSpec.model_validate(dict(body.get("spec") or {}))
    except ValidationError as exc:  # one the CRD lets through: a pattern over RE2's bound
        await _probed(body, generation, runtime, None, spec_valid(exc))
        return
    await _probed(body, generation, runtime, spec, spec_valid(None))
    if reason in ("create", "update"):
        asked = await asyncio.to_thread(_ask_failed_again, namespace, name)
        if asked:
            message = (
                f"asked {asked} SessionSummar{'y' if asked == 1 else 'ies'} whose last pass "
                f"failed under this summarizer for a new pass (its spec {reason}d)"
            )
            logger.info(message)
            runtime.events.post(body, "Normal", "FailedSummariesRequeued", message)


def sweep_due(spec: SessionSummarizerSpec, status: SessionSummarizerStatus, retry_s: float) -> bool:
    """Every spec.sweep.intervalSeconds; after a failed sweep, every retry_s (clear once fixed)."""
    failed = any(c.type == "Swept" and c.status == "False" for c in status.conditions or [])
    every = min(retry_s, spec.sweep.interval_seconds) if failed else spec.sweep.interval_seconds
    return spec.sweep.enabled and due(status.last_sweep_at, every)


@kopf.on.delete(GROUP, VERSION, SUMMARIZER_PLURAL, optional=True)
async def summarizer_deleted(name: str, namespace: str | None, memo: kopf.Memo, **_: Any) -> None:
    """Closes and drops what this process kept for it. optional: no finalizer waits."""
    assert namespace is not None
    await asyncio.to_thread(Runtime.of(memo).parts.forget, namespace, name)


async def _probed(
    body: kopf.Body,
    generation: int | None,
    runtime: Runtime,
    spec: SessionSummarizerSpec | None,
    *taken: Condition,
) -> None:
    """Writes the health probes' conditions of the spec (none: taken alone) of this generation
    (read before the probes: a timer's body is live), with a Warning Event for each new failure
    (each failure of a spec taken: SpecValid given) and a Normal one for each recovery."""
    namespace, name, conditions = str(body.metadata.namespace), str(body.metadata.name), [*taken]
    if spec is not None:
        conditions += await asyncio.to_thread(
            health_conditions, runtime.parts, spec, namespace, name
        )
    observed = {"observed_generation": generation} if taken else {}

    def measured(st: SessionSummarizerStatus) -> SessionSummarizerStatus:
        return with_conditions(st, conditions, generation=generation, **observed)

    written = await asyncio.to_thread(kube.update_summarizer_status, namespace, name, measured)
    before = written[0] if written else SessionSummarizerStatus()
    was = {c.type: c.status for c in before.conditions or []}
    for cond in conditions:
        changed = _changed(before, cond)
        if cond.status == "False" and (changed or taken):
            runtime.events.post(body, "Warning", cond.reason, cond.message)
        elif changed and cond.status == "True" and was.get(cond.type) not in (None, "True"):
            runtime.events.post(body, "Normal", cond.reason, cond.message)


def _probes_due(tick: _Tick) -> bool:
    """While a probe's condition does not hold: after SSO_EMBEDDING_REPROBE_SECONDS, backing off."""
    failing = any(
        c.type in REQUIRED and c.status != "True" and (c.type, c.reason) not in NOT_BLOCKING
        for c in tick.status.conditions or []
    )
    every, now = tick.runtime.config.embedding_reprobe_seconds, time.monotonic()
    return tick.upkeep.probe_due(every, now, failing=failing)


@kopf.timer(GROUP, VERSION, SUMMARIZER_PLURAL, interval=CONFIG.claim_renew_period)
async def renew_authority(body: kopf.Body, name: str, namespace: str | None, **kw: Any) -> None:
    """This cluster's record in the store (core/ledger.py), on a timer no sweep delays."""
    tick, now_ms = _Tick.of(body, namespace, name, **kw), int(time.time() * 1000)

    def renew() -> None:
        authority = tick.runtime.fence_authority
        with tick.store() as store:
            store.renew_authority(
                AuthorityRecord(authority, CONFIG.replica_id, now_ms, CONFIG.claim_ttl_seconds)
            )

    await tick.in_thread("authority record renewal", renew)


@kopf.timer(
    GROUP, VERSION, SUMMARIZER_PLURAL, interval=CONFIG.sweep_tick_seconds, initial_delay=1.0
)
async def sweep(body: kopf.Body, name: str, namespace: str | None, **kw: Any) -> None:
    """The probes when due, retention, a reconciliation step and the sweep (Swept)."""
    tick = _Tick.of(body, namespace, name, **kw)
    spec, status, runtime = tick.spec, tick.status, tick.runtime
    asked = (body.metadata.get("annotations") or {}).get(PROBE_REQUESTED)
    now = asked is not None and asked != status.last_handled_probe_request  # summaryctl check
    if now or _probes_due(tick):
        await _probed(body, tick.generation, runtime, spec)
    await _retention(tick)
    if spec.reconcile.enabled:  # whether or not sweeps are: the backstop of every pass
        await _reconcile(tick)
    retry_s = runtime.config.embedding_reprobe_seconds
    if sweep_due(spec, status, retry_s) or (now and spec.sweep.enabled):
        await _sweep(tick)
    if now:  # what `summaryctl check` waits for: probes and sweep ran after its request
        await tick.write(last_handled_probe_request=asked)


@kopf.timer(
    GROUP, VERSION, SUMMARIZER_PLURAL, interval=CONFIG.sweep_tick_seconds, initial_delay=1.0
)
async def scan_markers(body: kopf.Body, name: str, namespace: str | None, **kw: Any) -> None:
    """The sunset-marker scan (SunsetMarkers), after the sweep's watermark: a timer of its own,
    as a sweep on a busy store takes minutes and a marker is a session that ended."""
    tick = _Tick.of(body, namespace, name, **kw)
    since, runtime = tick.status.watermark, tick.runtime
    if not tick.spec.sweep.enabled or since is None:
        return

    def scan() -> MarkerScanResult:
        with tick.store() as store:
            return run_marker_scan(
                store,
                tick.spec,
                namespace=tick.namespace,
                summarizer_name=name,
                watermark_ms=since,
                memory=tick.upkeep.markers,
            )

    markers = await tick.in_thread("marker scan", scan)
    if markers is None:
        return
    cond = sunset_markers(markers.requested, markers.invalid, markers.markers_only)
    if cond is not None:
        await tick.write(cond)
        kind = "Warning" if cond.status == "False" else "Normal"
        runtime.events.post(body, kind, cond.reason, cond.message)
        figures = markers.figures
        tick.logger.info("marker scan by %s (%s): %s", CONFIG.replica_id, figures, cond.message)


async def _retention(tick: _Tick) -> None:
    """Once per spec.sweep.intervalSeconds (sweeps off or not), a list of the namespace's
    SessionSummaries a page at a time: those past their phase's TTL deleted, the rest told."""
    if not due(tick.status.last_retention_at, tick.spec.sweep.interval_seconds):
        return
    at = now_rfc3339()

    def retain() -> int:
        deleted, listed = 0, kube.iter_summaries(tick.namespace, CONFIG.list_chunk_size)
        with tick.runtime.scheduler.background() as pause:
            pause()
            while page := list(itertools.islice(listed, CONFIG.list_chunk_size or None)):
                deleted += apply_retention(
                    tick.spec, page, namespace=tick.namespace, summarizer=tick.name, pause=pause
                )
                try:
                    _tell(tick, page, pause)
                except STORE_ERRORS as exc:  # a failure the sweep may never meet
                    said = sweep_failure(exc, redaction_of(tick.spec))[0]
                    message = (
                        "retention could not check finished SessionSummaries against the "
                        f"ledger (retried at the next retention): {said.message}"
                    )
                    tick.runtime.events.post(tick.body, "Warning", said.reason, message)
                    tick.logger.warning("%s", message)
        return deleted

    deleted = await tick.in_thread("retention", retain)
    if deleted is None:
        return
    if deleted:
        tick.logger.info(
            "retention by %s: deleted %d expired SessionSummaries", CONFIG.replica_id, deleted
        )
    await tick.write(last_retention_at=at, deleted_by_retention=deleted)


def _tell(tick: _Tick, page: list[dict[str, Any]], pause: Pause) -> None:
    """This summarizer's finished objects whose session another object (any namespace or
    cluster) changed since: a Summarized one whose ledger head is a tombstone turns Forgotten;
    a Forgotten one whose head is a summary's is asked for a pass, which says what holds."""
    done = [
        obj
        for obj in page
        if (obj.get("spec") or {}).get("summarizerRef", "default") == tick.name
        and (status := obj.get("status") or {}).get("phase") in ("Summarized", "Forgotten")
        and status.get("observedGeneration") == obj["metadata"].get("generation")
    ]
    if not done:
        return
    pause()
    with tick.store() as store:
        heads = store.ledger_heads([str(obj["spec"].get("sessionId")) for obj in done])
    for obj in done:
        meta, head = obj["metadata"], heads.get(str(obj["spec"].get("sessionId")))
        if head is None or is_tombstone(head) == (obj["status"]["phase"] == "Forgotten"):
            continue
        if not is_tombstone(head):  # asked as the sweep asks: a Forget done is not done again
            asked = dict(requestedAt=now_rfc3339(precise=True), trigger="sweep", action="Summarize")
            kube.ask_again(tick.namespace, meta["name"], meta["resourceVersion"], asked)
            continue
        told = forgotten_by_another(obj, head)
        if kube.patch_summary_status(
            meta["namespace"], meta["name"], told, meta["resourceVersion"]
        ):  # else changed since it was listed: a pass of its own says what holds
            tick.runtime.events.post(obj, "Normal", "Forgotten", str(told["message"]))


async def _reconcile(tick: _Tick) -> None:
    """One step of the reconciliation (sweep.reconcile_step)."""

    def step_once() -> ReconcileCycle | None:
        with tick.store() as store, tick.runtime.scheduler.background() as pause:
            return reconcile_step(
                store,
                tick.spec,
                namespace=tick.namespace,
                summarizer_name=tick.name,
                state=tick.upkeep.reconciler,
                pause=pause,
            )

    done = await tick.in_thread("reconciliation", step_once)  # a walk it ended
    if done is None:
        return
    seconds = (int(time.time() * 1000) - done.started_ms) / 1000
    message = (
        f"reconciled {done.rows} memories in {seconds:.0f}s: {done.uncovered} not accounted "
        f"for by a summary, in {len(tick.upkeep.reconciler.pending)} sessions to summarize"
    )
    rows = memory_rows(done.ignored, done.rows)
    before = await tick.write(
        rows, reconciled_at=now_rfc3339(), reconciled_rows=done.rows, uncovered_found=done.uncovered
    )
    tick.logger.info("reconciliation by %s: %s", CONFIG.replica_id, message)
    if done.uncovered:
        tick.runtime.events.post(tick.body, "Normal", "Reconciled", message)
    # Each walk that still finds ignored rows says so again (the recorder counts repeats).
    if rows.status == "False" or (before and _changed(before, rows)):
        kind = "Warning" if rows.status == "False" else "Normal"
        tick.runtime.events.post(tick.body, kind, rows.reason, rows.message)


async def _sweep(tick: _Tick) -> None:
    """One sweep: the sessions it finds asked for, its figures and Swept written."""
    spec, status, events = tick.spec, tick.status, tick.runtime.events
    offset, last_id = status.appended_offset, status.appended_last_id
    cursor = RowCursor(offset, last_id) if offset is not None else None

    def sweep_store() -> tuple[SweepScan, Applied, float]:
        with tick.store() as store, tick.runtime.scheduler.background() as pause:
            started, now = time.monotonic(), int(time.time() * 1000)
            found = plan_from_store(
                store, spec, watermark_ms=status.watermark, now_ms=now, cursor=cursor, pause=pause
            )
            applied = apply_plan(
                found.plan, namespace=tick.namespace, summarizer_name=tick.name, pause=pause
            )
            return found, applied, time.monotonic() - started

    try:
        result, applied, seconds = await asyncio.to_thread(sweep_store)
    except STORE_ERRORS as exc:
        failure = sweep_failure(exc, redaction_of(tick.spec))
        said, failed = failure[0], f"sweep failed: {failure[0].message}"
        # lastSweepAt moves, so the retry waits its turn (sweep_due).
        before = await tick.write(*failure, last_sweep_at=now_rfc3339(), message=failed)
        if before and any(_changed(before, c) for c in failure):
            events.post(tick.body, "Warning", said.reason, said.message)
        tick.logger.warning("sweep failed: %s: %s", said.reason, said.message)
        return
    plan = result.plan
    if not result.aligned:  # the appended-rows cursor lost its place: walk now
        tick.upkeep.reconciler.due_now = True
    metrics.observe_sweep(seconds, plan.found)
    metrics.REFRESH_REQUESTS.inc(applied.refreshed)
    message = (
        f"scanned {result.scanned} new memories and {result.appended} added rows: {plan.found} "
        f"stale, {len(plan.still_active)} still active, {len(plan.fresh)} fresh; created "
        f"{applied.created}, patched {applied.patched}, refreshed {applied.refreshed} grown "
        f"active sessions, {applied.in_flight} already in flight, {applied.left} left for later"
    )
    tick.logger.info("sweep by %s: %s", CONFIG.replica_id, message)
    await tick.write(
        condition("Swept", "True", "SweepOK", message),
        store_reachable(spec.store.url),
        message=message,
        last_sweep_duration_seconds=round(seconds, 3),
        last_sweep_at=now_rfc3339(),
        candidates_found=plan.found,
        deferred=applied.left,
        created=applied.created,
        patched=applied.patched,
        scanned_memories=result.scanned + result.appended,
        watermark=plan.next_watermark_ms,
        appended_offset=result.cursor.offset,
        appended_last_id=result.cursor.last_id,
    )
    if applied.created or applied.patched or applied.refreshed:
        events.post(tick.body, "Normal", "Swept", message)


# -- the health probes, one condition each, on the store and embedder the passes use: a probe
# that loads the local model or connects spares the first pass the wait.


def _shown(exc: Exception, spec: SessionSummarizerSpec) -> tuple[str, str]:
    """(reason, message) as a pass shows the failure, but a missing Secret's message whole."""
    shown = failure_shown(exc, redaction_of(spec))
    assert shown is not None, exc  # a kind FAILURES names
    return shown[0], str(exc) if isinstance(exc, kube.SecretError) else shown[1]


def check_store(
    parts: SummarizerParts, spec: SessionSummarizerSpec, namespace: str, name: str
) -> Condition:
    try:
        with parts.store(namespace, name, spec) as store:
            store.heartbeat()
    except (kube.SecretError, DestinationRefused, InvalidStoreConfig, StoreUnavailable) as exc:
        return condition("StoreReachable", "False", *_shown(exc, spec))  # reconnects at next use
    return store_reachable(spec.store.url)


def check_model(spec: SessionSummarizerSpec, namespace: str) -> Condition:
    from openai import APIConnectionError, APIStatusError  # loads the openai SDK

    from controller.embeddings.remote import openai_client

    ready = functools.partial(condition, "ModelReady", "True")
    unavailable = functools.partial(condition, "ModelReady", "False")
    if spec.model.backend == "extractive":
        return ready("Extractive", "embedded extractive summarizer (no model)")
    try:
        check_memory_destinations(spec, namespace, "model.baseUrl")
        config = chat_model_config(spec, namespace)
        timeout = min(spec.model.timeout_seconds, 10)
        # The passes' client: bound in time and size, and asked where the passes post.
        client, headers = openai_client(config.base_url, config.api_key, timeout, 0)
        url = f"{client.base_url}models"
        with client:
            client.get("models", cast_to=httpx2.Response, options={"headers": headers})
    except (kube.SecretError, DestinationRefused) as exc:
        return unavailable(*_shown(exc, spec))
    except APIStatusError as exc:
        if exc.response.is_redirect:  # the client follows none
            where = exc.response.headers.get("location")
            return unavailable("ModelUnavailable", redirect_refusal(url, exc.status_code, where))
        return unavailable("ModelUnavailable", f"GET {shown(url)} answered {exc.status_code}")
    except (APIConnectionError, AnswerTooLarge) as exc:  # the SDK's error wraps httpx's
        why = masked(exc.__cause__ or exc, 300, redaction_of(spec))
        return unavailable("ModelUnavailable", f"GET {shown(url)}: {why}")
    return ready("EndpointOK", f"{shown(config.base_url)} answers")


def check_embedding(
    parts: SummarizerParts, spec: SessionSummarizerSpec, namespace: str, name: str
) -> Condition:
    """Embeds a probe text (loading the local model, so the first summary after a start or a
    failover does not wait) and compares its dimension with the summary collection's vectors."""
    failed = functools.partial(condition, "EmbeddingReady", "False")
    ok = functools.partial(condition, "EmbeddingReady", "True", "EmbeddingOK")
    try:
        with parts.embedder(namespace, name, spec) as embed:
            vector = embed(["embedding check"])[0]
    except (kube.SecretError, DestinationRefused, EmbeddingError) as exc:
        return failed(*_shown(exc, spec))
    except ValueError as exc:
        return failed("EmbeddingUnavailable", masked(exc, 300, redaction_of(spec)))
    produces = f"{spec.embedding.provider} produces {len(vector)}-d vectors"
    try:
        with parts.store(namespace, name, spec) as store:
            held = store.check_embedding(len(vector))
    except EmbeddingMismatch as exc:
        return failed(*_shown(exc, spec))
    except (StoreUnavailable, kube.SecretError, InvalidStoreConfig, DestinationRefused):
        # StoreReachable reports it; the dimension is checked again before every write.
        return ok(f"{produces} (collection not checked: the store is unreachable)")
    held_by = ", as the summary collection holds" if held else "; the summary collection is empty"
    return ok(produces + held_by)


def check_secrets(spec: SessionSummarizerSpec, namespace: str) -> Condition:
    """Reads the annotations of every Secret the spec would send (nothing is sent here)."""
    verdicts: list[SecretVerdict] = []
    unread: list[str] = []
    for use in secret_uses(spec, namespace):
        try:
            annotations, _ = kube.read_secret(use.namespace, use.name)
            verdicts.append(secret_verdict(use, annotations))  # pure: raises no SecretError
        except kube.SecretError as exc:
            unread.append(str(exc))
    return secrets_allowed(verdicts, unread)


def health_conditions(
    parts: SummarizerParts, spec: SessionSummarizerSpec, namespace: str, name: str
) -> list[Condition]:
    return [
        check_secrets(spec, namespace),
        check_store(parts, spec, namespace, name),
        check_model(spec, namespace),
        check_embedding(parts, spec, namespace, name),
    ]
