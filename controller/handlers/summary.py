"""SessionSummary handlers: create, spec change and resume -> one summarization.

Thin: resolve the SessionSummarizer, run controller.summarize in a worker thread, and turn
the outcome or the failure into status, a condition and an Event.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NoReturn

import kopf
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from controller import kube, metrics
from controller.api import (
    GROUP,
    SUMMARY_PLURAL,
    VERSION,
    Condition,
    Phase,
    SessionSummarySpec,
    SessionSummaryStatus,
    ms_to_rfc3339,
    now_rfc3339,
    set_condition,
)
from controller.backends import backends_for
from controller.claiming import ClaimHandle, ClaimHeld, ClaimLost, ObjectGone
from controller.config import CONFIG, backoff_seconds
from controller.embeddings import EmbeddingError
from controller.model_backend import InvalidModelOutput, ModelUnavailable
from controller.store import EmbeddingMismatch, StoreUnavailable, forget_store
from controller.summarize import Outcome, summarize_session
from controller.summary import SummaryValidationError

CONDITION = "Summarized"
# Summaries block on Chroma and the model: their own pools, sized for concurrency
# (asyncio's default executor has only cpu_count + 4 threads). The sunset fast path has
# its own pool, so a sweep's backlog never queues in front of a session that just ended.
WORKERS = ThreadPoolExecutor(max_workers=CONFIG.workers, thread_name_prefix="summarize")
SWEEP_WORKERS = ThreadPoolExecutor(
    max_workers=max(2, CONFIG.workers // 4), thread_name_prefix="summarize-sweep"
)
DONE_PHASES = {"Summarized", "Empty", "NotFound"}


class Failure(Exception):
    """A failure to report on the object: reason (CamelCase), message, and whether to retry.
    phase is what the object shows while retries continue below the failure gate."""

    def __init__(self, reason: str, message: str, *, retry: bool, phase: Phase = "Pending") -> None:
        super().__init__(message)
        self.reason, self.message, self.retry, self.phase = reason, message, retry, phase


def needs_pass_on_resume(body: kopf.Body, **_: Any) -> bool:
    """At operator start, only objects whose current spec was not fully handled."""
    status = body.get("status") or {}
    done = status.get("phase") in DONE_PHASES
    return not done or status.get("observedGeneration") != body.metadata.get("generation")


def _status(body: kopf.Body) -> SessionSummaryStatus:
    return SessionSummaryStatus.model_validate(dict(body.get("status") or {}))


def _record(
    body: kopf.Body,
    patch: kopf.Patch,
    *,
    phase: Phase,
    reason: str,
    message: str,
    ok: bool,
    **fields: Any,
) -> None:
    previous = _status(body)
    generation = body.metadata.get("generation")
    condition = Condition(
        type=CONDITION,
        status="True" if ok else "False",
        reason=reason,
        message=message,
        observed_generation=generation,
    )
    status = previous.model_copy(
        update={
            "phase": phase,
            "observed_generation": generation,
            "message": message,
            "conditions": set_condition(previous.conditions, condition),
            **fields,
        }
    )
    patch.status.update(status.to_api())


def _resolve(namespace: str, spec: SessionSummarySpec) -> Any:
    try:
        _, summarizer = kube.get_summarizer(namespace, spec.summarizer_ref)
    except ApiException as exc:
        if exc.status == 404:
            raise Failure(
                "SummarizerNotFound",
                f"SessionSummarizer {namespace}/{spec.summarizer_ref} does not exist; create it "
                "or set spec.summarizerRef",
                retry=True,
                phase="Pending",
            ) from exc
        raise
    except ValidationError as exc:
        raise Failure("InvalidSummarizer", _one_line(exc), retry=True) from exc
    try:
        return backends_for(summarizer, namespace)
    except kube.SecretError as exc:
        raise Failure("SecretNotFound", str(exc), retry=True) from exc
    except StoreUnavailable as exc:
        raise Failure("StoreUnavailable", str(exc), retry=True) from exc
    except ValueError as exc:
        raise Failure("InvalidSummarizer", _one_line(exc), retry=True) from exc


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())[:300]


def summarize_blocking(
    namespace: str, spec: SessionSummarySpec, before_write: Callable[[], None] | None = None
) -> Outcome:
    backends = _resolve(namespace, spec)
    try:
        return summarize_session(
            backends.store,
            spec.session_id,
            embed=backends.embed,
            writer=CONFIG.replica_id,
            trigger=spec.trigger,
            excluded_types=backends.excluded_types,
            summarizer=backends.summarizer,
            before_write=before_write,
        )
    except StoreUnavailable as exc:
        forget_store(backends.store.location)
        raise Failure("StoreUnavailable", _one_line(exc), retry=True) from exc
    except EmbeddingMismatch as exc:
        raise Failure("EmbeddingMismatch", _one_line(exc), retry=False) from exc
    except EmbeddingError as exc:
        raise Failure("EmbeddingUnavailable", _one_line(exc), retry=True) from exc
    except ModelUnavailable as exc:
        raise Failure("ModelUnavailable", _one_line(exc), retry=True) from exc
    except InvalidModelOutput as exc:
        raise Failure("InvalidModelOutput", _one_line(exc), retry=True) from exc
    except SummaryValidationError as exc:
        raise Failure("InvalidSummary", _one_line(exc), retry=True) from exc


def summarize_claimed(namespace: str, name: str, spec: SessionSummarySpec) -> Outcome:
    """Takes the object's claim, summarizes with a claim re-check right before the write,
    and releases the claim. Raises ClaimHeld when another live writer has it."""
    handle = ClaimHandle(
        namespace, name, CONFIG.replica_id, CONFIG.claim_ttl_seconds, CONFIG.claim_margin_seconds
    )
    handle.acquire()
    try:
        return summarize_blocking(namespace, spec, before_write=handle.verify)
    finally:
        handle.release()


@kopf.on.create(GROUP, VERSION, SUMMARY_PLURAL)
@kopf.on.update(GROUP, VERSION, SUMMARY_PLURAL, field="spec")
@kopf.on.resume(GROUP, VERSION, SUMMARY_PLURAL, when=needs_pass_on_resume)
async def summarize(
    body: kopf.Body,
    spec: kopf.Spec,
    name: str,
    namespace: str | None,
    patch: kopf.Patch,
    retry: int,
    logger: kopf.Logger,
    **_: Any,
) -> None:
    assert namespace is not None  # SessionSummary is namespaced
    parsed = SessionSummarySpec.model_validate(dict(spec))
    started = time.monotonic()
    try:
        pool = SWEEP_WORKERS if parsed.trigger == "sweep" else WORKERS
        outcome = await asyncio.get_running_loop().run_in_executor(
            pool, summarize_claimed, namespace, name, parsed
        )
    except ObjectGone:
        return
    except ClaimHeld as held:
        # Not ours to report: the holder writes status. Retry once its claim lapses.
        metrics.claim_conflict()
        logger.info("session %s: %s", parsed.session_id, held)
        delay = held.retry_after_s + random.uniform(0, 1)
        raise kopf.TemporaryError(str(held), delay=delay) from None
    except ClaimLost as lost:
        metrics.claim_conflict()
        logger.warning("session %s: %s", parsed.session_id, lost)
        raise kopf.TemporaryError(str(lost), delay=backoff_seconds(retry)) from None
    except Failure as failure:
        metrics.observe_summary("failed", time.monotonic() - started)
        metrics.observe_failure(failure.reason)
        _record_failure(body, patch, failure, logger, parsed)
    metrics.observe_summary(outcome.kind, time.monotonic() - started)
    metrics.add_model_tokens(outcome.tokens_used)
    _report(body, patch, parsed, outcome)


def _record_failure(
    body: kopf.Body,
    patch: kopf.Patch,
    failure: Failure,
    logger: kopf.Logger,
    spec: SessionSummarySpec,
) -> NoReturn:
    """Condition + Event; retry with exponential backoff. Failures are counted per
    generation (kopf keeps retrying an unfinished handler across spec changes), so the gate
    resets on a spec change, and on success."""
    previous = _status(body)
    same_generation = previous.observed_generation == body.metadata.get("generation")
    failures = (previous.consecutive_failures or 0) + 1 if same_generation else 1
    gated = not failure.retry or failures >= CONFIG.failure_gate
    delay = backoff_seconds(failures - 1)
    phase: Phase = "Failed" if gated else failure.phase
    message = failure.message
    if failure.retry and gated:
        message = f"{failures} consecutive failures, retrying in {delay:.0f}s: {failure.message}"
    _record(
        body,
        patch,
        phase=phase,
        reason=failure.reason,
        message=message,
        ok=False,
        consecutive_failures=failures,
    )
    kopf.event(body, type="Warning", reason=failure.reason, message=message)
    logger.warning("session %s: %s: %s", spec.session_id, failure.reason, message)
    if failure.retry:
        raise kopf.TemporaryError(failure.message, delay=delay) from None
    raise kopf.PermanentError(failure.message) from None


def _report(body: kopf.Body, patch: kopf.Patch, spec: SessionSummarySpec, outcome: Outcome) -> None:
    last_at = ms_to_rfc3339(outcome.last_memory_at_ms) if outcome.last_memory_at_ms else None
    common: dict[str, Any] = {
        "memory_count": outcome.memory_count,
        "last_memory_at": last_at,
        "trigger_source": spec.trigger,
        "consecutive_failures": 0,
    }
    if outcome.kind == "not-found":
        message = f"no memory carries sessionId {spec.session_id!r}; nothing was written"
        _record(
            body,
            patch,
            phase="NotFound",
            reason="SessionNotFound",
            message=message,
            ok=False,
            **common,
        )
        kopf.event(body, type="Warning", reason="SessionNotFound", message=message)
        return
    if outcome.kind == "empty":
        message = (
            f"the session's {outcome.memory_count} memories are all excluded types "
            "(spec.excludedMemoryTypes of the summarizer); nothing was written"
        )
        _record(
            body,
            patch,
            phase="Empty",
            reason="NoSummarizableMemories",
            message=message,
            ok=False,
            **common,
        )
        kopf.event(body, type="Normal", reason="NoSummarizableMemories", message=message)
        return
    summary = outcome.summary
    assert summary is not None
    if outcome.kind == "up-to-date":
        message = f"summary already covers all {outcome.memory_count} memories"
        _record(
            body,
            patch,
            phase="Summarized",
            reason="UpToDate",
            message=message,
            ok=True,
            title=summary.title,
            summary_id=outcome.summary_id,
            **common,
        )
        return
    message = (
        f"summarized {outcome.new_memories} new of {outcome.memory_count} memories "
        f"in {outcome.passes} pass(es)"
    )
    _record(
        body,
        patch,
        phase="Summarized",
        reason="Summarized",
        message=message,
        ok=True,
        title=summary.title,
        summary_id=outcome.summary_id,
        summarized_at=now_rfc3339(),
        writer=CONFIG.replica_id,
        passes=outcome.passes,
        model_tokens=outcome.tokens_used,
        **common,
    )
    kopf.event(body, type="Normal", reason="Summarized", message=message)
