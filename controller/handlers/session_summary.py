"""SessionSummary handlers: create, spec change and resume -> one summarization.

Thin: resolve the SessionSummarizer, run controller.pipeline in a worker thread, and turn
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
from pydantic import ValidationError

from controller import metrics
from controller.api import (
    GROUP,
    SUMMARY_PLURAL,
    VERSION,
    Condition,
    Phase,
    SessionSummarizerSpec,
    SessionSummarySpec,
    SessionSummaryStatus,
    ms_to_rfc3339,
    now_rfc3339,
    set_condition,
)
from controller.backends import Backends, backends_for
from controller.config import CONFIG, backoff_seconds
from controller.core.claim_rules import Writer
from controller.core.summary import SummaryValidationError, UnreadablePriorSummary
from controller.embeddings.minilm import EmbeddingError
from controller.handlers.indexes import lookup_summarizer_spec
from controller.kube import client as kube
from controller.kube.claims import ClaimHeld, ClaimLost, SessionClaimHandle
from controller.pipeline import Outcome, summarize_session
from controller.store.errors import (
    CollectionNotFound,
    EmbeddingMismatch,
    InvalidStoreConfig,
    StoreUnavailable,
)
from controller.store.memory_store import forget_store
from controller.summarizers.chat_prompt import InvalidModelOutput, ModelUnavailable

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


def _resolve(
    namespace: str, spec: SessionSummarySpec, summarizer_spec: dict[str, Any] | None
) -> Backends:
    """The live parts of the object's SessionSummarizer, whose spec comes from the
    summarizer index (handlers/indexes.py), not from a GET per summary."""
    if summarizer_spec is None:
        raise Failure(
            "SummarizerNotFound",
            f"SessionSummarizer {namespace}/{spec.summarizer_ref} does not exist; create it "
            "or set spec.summarizerRef",
            retry=True,
            phase="Pending",
        )
    try:
        summarizer = SessionSummarizerSpec.model_validate(summarizer_spec)
    except ValidationError as exc:
        raise Failure("InvalidSummarizer", _one_line(exc), retry=True) from exc
    try:
        return backends_for(summarizer, namespace)
    except kube.SecretError as exc:
        raise Failure("SecretNotFound", str(exc), retry=True) from exc
    except StoreUnavailable as exc:
        raise Failure("StoreUnavailable", str(exc), retry=True) from exc
    except InvalidStoreConfig as exc:  # a ValueError too: before the catch-all below
        raise Failure("InvalidStoreConfig", _one_line(exc), retry=False) from exc
    except ValueError as exc:
        raise Failure("InvalidSummarizer", _one_line(exc), retry=True) from exc


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())[:300]


def summarize_blocking(
    backends: Backends,
    spec: SessionSummarySpec,
    before_write: Callable[[], None] | None = None,
    writer_object: str = "",
) -> Outcome:
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
            writer_object=writer_object,
        )
    except StoreUnavailable as exc:
        forget_store(backends.store.location)
        raise Failure("StoreUnavailable", _one_line(exc), retry=True) from exc
    except CollectionNotFound as exc:
        reason = "MemoryCollectionNotFound" if exc.role == "memory" else "CollectionNotFound"
        raise Failure(reason, _one_line(exc), retry=True) from exc
    except InvalidStoreConfig as exc:
        raise Failure("InvalidStoreConfig", _one_line(exc), retry=False) from exc
    except UnreadablePriorSummary as exc:
        raise Failure(
            "UnreadablePriorSummary",
            f"{_one_line(exc)}; the stored row was left as it is",
            retry=False,
        ) from exc
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


def _claim_scope(backends: Backends) -> str:
    """Which store the session's claim is in: one store however it is addressed."""
    try:
        return backends.store.claim_scope()
    except StoreUnavailable as exc:
        forget_store(backends.store.location)
        raise Failure("StoreUnavailable", _one_line(exc), retry=True) from exc
    except CollectionNotFound as exc:
        raise Failure("MemoryCollectionNotFound", _one_line(exc), retry=True) from exc
    except InvalidStoreConfig as exc:
        raise Failure("InvalidStoreConfig", _one_line(exc), retry=False) from exc


def summarize_claimed(
    namespace: str,
    name: str,
    uid: str,
    generation: int,
    spec: SessionSummarySpec,
    summarizer_spec: dict[str, Any] | None,
) -> Outcome:
    """Takes the session's claim in its store, summarizes with a claim check right before
    every write, and releases the claim. Raises ClaimHeld when another live writer (another
    replica, or another object naming the same session) has it."""
    backends = _resolve(namespace, spec, summarizer_spec)
    scope = _claim_scope(backends)
    location = backends.store.location
    handle = SessionClaimHandle(
        session_id=spec.session_id,
        collection_id=scope,
        collection=f"{location.describe()} {location.summary_collection}",
        writer=Writer(CONFIG.replica_id, uid, f"{namespace}/{name}"),
        ttl_s=CONFIG.claim_ttl_seconds,
        margin_s=CONFIG.claim_margin_seconds,
        generation=generation,
    )
    handle.acquire()
    try:
        return summarize_blocking(
            backends, spec, before_write=handle.verify, writer_object=f"{namespace}/{name}"
        )
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
    **indexes: Any,  # kopf passes every index by name (handlers/indexes.py)
) -> None:
    assert namespace is not None  # SessionSummary is namespaced
    parsed = SessionSummarySpec.model_validate(dict(spec))
    uid = str(body.metadata.get("uid") or "")
    generation = int(body.metadata.get("generation") or 0)
    started = time.monotonic()
    try:
        pool = SWEEP_WORKERS if parsed.trigger == "sweep" else WORKERS
        outcome = await asyncio.get_running_loop().run_in_executor(
            pool,
            summarize_claimed,
            namespace,
            name,
            uid,
            generation,
            parsed,
            lookup_summarizer_spec(indexes["summarizer_specs"], namespace, parsed.summarizer_ref),
        )
    except ClaimHeld as held:
        metrics.claim_conflict()
        logger.info("session %s: %s", parsed.session_id, held)
        # A live writer releases its claim when done (usually well before expiry); a dead
        # one's claim lapses at expiry. Look again soon, not later than the expiry.
        delay = min(held.retry_after_s, CONFIG.claim_retry_seconds) + random.uniform(0, 0.5)
        if held.claim.writer.owner_uid not in (uid, ""):
            # Another object names the same session: say which one owns it for now.
            _record_waiting(body, patch, held)
        # Else another replica serves this very object: it writes the status.
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


def _record_waiting(body: kopf.Body, patch: kopf.Patch, held: ClaimHeld) -> None:
    """Pending, with the object that owns the session's claim named; one Event per owner."""
    owner = held.claim.writer.owner
    message = (
        f"waiting: SessionSummary {owner} (replica {held.claim.writer.replica}) is writing "
        f"session {held.claim.session_id!r} in this store; this pass runs when it is done"
    )
    previous = {c.type: c for c in _status(body).conditions or []}.get(CONDITION)
    _record(body, patch, phase="Pending", reason="SessionClaimed", message=message, ok=False)
    if previous is None or previous.reason != "SessionClaimed" or owner not in previous.message:
        kopf.event(body, type="Normal", reason="SessionClaimed", message=message)


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
        "skipped_memories": outcome.skipped_memories,
    }
    if outcome.skipped_memories:
        warning = (
            f"{outcome.skipped_memories} of the session's memories have no usable timestamp "
            "and are not in the summary (their metadata 'timestamp' must be epoch milliseconds "
            "or ISO-8601)"
        )
        kopf.event(body, type="Warning", reason="UnreadableMemories", message=warning)
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
            "(spec.excludedMemoryTypes of the summarizer, or sunset markers); nothing was "
            "written"
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
        written_ms = summary.summarized_at_ms
        common["summarized_at"] = (
            ms_to_rfc3339(written_ms)
            if written_ms
            else _status(body).summarized_at or now_rfc3339()
        )
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
        # The time stored in the row, so a later up-to-date pass shows the same instant.
        summarized_at=(
            ms_to_rfc3339(summary.summarized_at_ms) if summary.summarized_at_ms else now_rfc3339()
        ),
        writer=CONFIG.replica_id,
        passes=outcome.passes,
        model_tokens=outcome.tokens_used,
        **common,
    )
    kopf.event(body, type="Normal", reason="Summarized", message=message)
