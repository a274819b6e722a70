"""SessionSummary handlers: create, spec change and resume -> one summarization.

Thin: resolve the SessionSummarizer, run controller.pipeline in a worker thread, and turn
the outcome or the failure into status, a condition and an Event.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import kopf
import urllib3
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from controller import metrics
from controller.api import (
    GROUP,
    SUMMARY_PLURAL,
    VERSION,
    SessionSummarizerSpec,
    SessionSummarySpec,
)
from controller.backends import Backends, backends_for
from controller.config import CONFIG, backoff_seconds
from controller.core.claim_rules import Sighting, Writer
from controller.core.destinations import EndpointNotAllowed, SecretHostNotAllowed
from controller.core.fencing import FenceUnavailable
from controller.core.row_ownership import RowChangedDuringPass
from controller.core.summary import SummaryValidationError, UnreadablePriorSummary
from controller.core.text import one_line
from controller.core.waiting import wait_delay
from controller.embeddings.minilm import EmbeddingError
from controller.handlers.indexes import lookup_summarizer_spec
from controller.handlers.summary_status import (
    DONE_PHASES,
    Failure,
    record_failure,
    record_waiting,
    report,
    summarizing_status,
)
from controller.kube import client as kube
from controller.kube.claims import ClaimHeld, ClaimLost, SessionClaimHandle
from controller.pipeline import Outcome, PassInterrupted, summarize_session
from controller.runtime import Runtime
from controller.scheduling import BACKGROUND_TRIGGERS, DeadlineExecutor, slack_for
from controller.store.errors import (
    CollectionNotFound,
    EmbeddingMismatch,
    InvalidStoreConfig,
    StoreUnavailable,
)
from controller.store.memory_store import forget_store
from controller.summarizers.chat_prompt import InvalidModelOutput, ModelUnavailable
from controller.upsert import WriteGuard

# Summaries block on Chroma and the model: their own pools, sized for concurrency
# (asyncio's default executor has only cpu_count + 4 threads). The sunset fast path has
# its own pool, so the background's backlog (the sweep's stale sessions, the refreshes of
# active ones) never queues in front of a session that just ended; within a pool, the
# earliest deadline goes first, so a first summary goes ahead of re-summaries
# (controller/scheduling.py; docs/operations.md, "Scheduling").
WORKERS = DeadlineExecutor(CONFIG.workers, thread_name_prefix="summarize")
SWEEP_WORKERS = DeadlineExecutor(max(2, CONFIG.workers // 4), thread_name_prefix="summarize-sweep")
WAIT_JITTER = 0.25  # of each wait for another writer's claim, added at random
log = logging.getLogger("controller.handlers.session_summary")


POOLS = {"foreground": WORKERS, "background": SWEEP_WORKERS}


def stop_workers(timeout_s: float) -> int:
    """At operator exit: queued summaries are dropped (their objects are resumed by the next
    replica or start); running ones, told to stop by the shutdown flag, write a checkpoint
    at their next chunk boundary and release their claims. Waits at most timeout_s for
    them; returns how many were still running then (abandoned: their claims lapse)."""
    deadline = time.monotonic() + timeout_s
    for pool in POOLS.values():
        pool.shutdown(wait=False, cancel_futures=True)
    return sum(pool.join(max(0.0, deadline - time.monotonic())) for pool in POOLS.values())


def needs_pass_on_resume(body: kopf.Body, **_: Any) -> bool:
    """At operator start, only objects whose current spec was not fully handled."""
    status = body.get("status") or {}
    done = status.get("phase") in DONE_PHASES
    return not done or status.get("observedGeneration") != body.metadata.get("generation")


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
        raise Failure("InvalidSummarizer", one_line(exc, 300), retry=True) from exc
    with failures_shown(invalid_spec=True):
        return backends_for(summarizer, namespace)


# What a failure of each kind shows on the object (reason) and whether it is retried; the
# first match wins, so a subclass comes before its base (InvalidModelOutput is a
# SummaryValidationError; InvalidStoreConfig and UnreadablePriorSummary are ValueErrors).
_FAILURES: tuple[tuple[type[Exception], str, bool], ...] = (
    (kube.SecretError, "SecretNotFound", True),
    (FenceUnavailable, "FencingUnavailable", False),
    # Nothing was sent; retried, so annotating the Secret (or allowing the endpoint) is
    # enough, until the failure gate stops it.
    (SecretHostNotAllowed, "SecretHostNotAllowed", True),
    (EndpointNotAllowed, "EndpointNotAllowed", True),
    (StoreUnavailable, "StoreUnavailable", True),
    (InvalidStoreConfig, "InvalidStoreConfig", False),
    (UnreadablePriorSummary, "UnreadablePriorSummary", False),
    (EmbeddingMismatch, "EmbeddingMismatch", False),
    (EmbeddingError, "EmbeddingUnavailable", True),
    (ModelUnavailable, "ModelUnavailable", True),
    (InvalidModelOutput, "InvalidModelOutput", True),
    (SummaryValidationError, "InvalidSummary", True),
    # Another writer rewrote the row during the pass: nothing was written; the retry carries
    # its text (and sets SingleWriter False).
    (RowChangedDuringPass, "OtherWriterDetected", True),
)


@contextlib.contextmanager
def failures_shown(
    backends: Backends | None = None, *, invalid_spec: bool = False
) -> Iterator[None]:
    """Turns what the work below raises into the Failure the object shows. An unreachable
    store drops its cached client; with invalid_spec, any other ValueError is the
    SessionSummarizer's spec (InvalidSummarizer)."""
    try:
        yield
    except CollectionNotFound as exc:
        reason = "MemoryCollectionNotFound" if exc.role == "memory" else "CollectionNotFound"
        raise Failure(reason, one_line(exc, 300), retry=True) from exc
    except Exception as exc:
        for kind, reason, retry in _FAILURES:
            if isinstance(exc, kind):
                if isinstance(exc, StoreUnavailable) and backends is not None:
                    forget_store(backends.store.location)
                # A refusal says what would allow it (a kubectl command): not cut at 300.
                limit = 1000 if isinstance(exc, SecretHostNotAllowed | EndpointNotAllowed) else 300
                message = one_line(exc, limit)
                if isinstance(exc, UnreadablePriorSummary):
                    message += "; the stored row was left as it is"
                raise Failure(reason, message, retry=retry) from exc
        if invalid_spec and isinstance(exc, ValueError):
            raise Failure("InvalidSummarizer", one_line(exc, 300), retry=True) from exc
        raise


def summarize_blocking(
    backends: Backends,
    spec: SessionSummarySpec,
    guard: WriteGuard | None = None,
    writer_object: str = "",
    stop: Callable[[], bool] | None = None,
) -> Outcome:
    with failures_shown(backends):
        return summarize_session(
            backends.store,
            spec.session_id,
            embed=backends.embed,
            writer=CONFIG.replica_id,
            trigger=spec.trigger,
            excluded_types=backends.excluded_types,
            summarizer=backends.summarizer,
            guard=guard,
            writer_object=writer_object,
            visibility=backends.visibility,
            stop=stop,
        )


def _claim_scope(backends: Backends) -> str:
    """Which store the session's claim is in: one store however it is addressed."""
    with failures_shown(backends):
        return backends.store.claim_scope()


@dataclass
class ClaimMemory:
    """What one SessionSummary's passes remember of the session's claim between attempts
    (kept in kopf's per-object memo, forgotten with the object): when we first saw another
    writer's claim as it is now, on our own clock."""

    sighting: Sighting | None = None


def summarize_claimed(
    namespace: str,
    name: str,
    uid: str,
    generation: int,
    spec: SessionSummarySpec,
    summarizer_spec: dict[str, Any] | None,
    seen: ClaimMemory | None = None,
    started: Callable[[], None] | None = None,
    stop: threading.Event | None = None,
) -> Outcome:
    """Takes the session's claim in its store, says the pass started (`started`: phase
    Summarizing), summarizes while a thread renews the claim (checked between passes and,
    with the row's fencing number, right before every write), and releases the claim.
    Raises ClaimHeld when another live writer (another replica, or another object naming
    the same session) has it; PassInterrupted when `stop` is set (the operator is
    stopping), before the claim is taken or at the pass's next chunk boundary."""
    if stop is not None and stop.is_set():
        raise PassInterrupted("the operator is stopping; the next replica resumes this pass")
    backends = _resolve(namespace, spec, summarizer_spec)
    scope = _claim_scope(backends)
    location = backends.store.location
    handle = SessionClaimHandle(
        session_id=spec.session_id,
        collection_id=scope,
        collection=f"{location.describe()} {location.summary_collection}",
        writer=Writer(CONFIG.replica_id, uid, f"{namespace}/{name}"),
        duration_s=CONFIG.claim_ttl_seconds,
        margin_s=CONFIG.claim_margin_seconds,
        renew_s=CONFIG.claim_renew_period,
        generation=generation,
        sighting=seen.sighting if seen else None,
    )
    try:
        with failures_shown(backends):
            handle.acquire()
    finally:
        if seen is not None:
            seen.sighting = handle.sighting
    try:
        if started is not None:
            started()
        return summarize_blocking(
            backends,
            spec,
            guard=handle,
            writer_object=f"{namespace}/{name}",
            stop=stop.is_set if stop is not None else None,
        )
    finally:
        handle.release()  # best effort: never raises


def _say_started(namespace: str, name: str, body: kopf.Body, trigger: str) -> Callable[[], None]:
    """Writes phase Summarizing once a pass has its claim (a pass that only waits for one
    stays Pending). Best effort: the pass's outcome is written anyway."""

    def started() -> None:
        try:
            kube.patch_summary_status(namespace, name, summarizing_status(body, trigger))
        except (ApiException, urllib3.exceptions.HTTPError) as exc:
            log.warning("could not mark %s/%s Summarizing: %s", namespace, name, exc)

    return started


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
    memo: kopf.Memo,
    **indexes: Any,  # kopf passes every index by name (handlers/indexes.py)
) -> None:
    assert namespace is not None  # SessionSummary is namespaced
    runtime = Runtime.of(memo)
    parsed = SessionSummarySpec.model_validate(dict(spec))
    uid = str(body.metadata.get("uid") or "")
    generation = int(body.metadata.get("generation") or 0)
    started = time.monotonic()
    # Written a summary before: this pass is a re-summary (scheduling: it may wait a bit).
    slack = slack_for(
        parsed.trigger, has_summary=bool((body.get("status") or {}).get("summarizedAt"))
    )
    summarizer_spec = lookup_summarizer_spec(
        indexes["summarizer_specs"], namespace, parsed.summarizer_ref
    )
    on_start = _say_started(namespace, name, body, parsed.trigger)

    # kopf's memo of this object (kept between attempts, dropped with the object).
    seen = memo.setdefault("claim", ClaimMemory())

    def job() -> Outcome:
        metrics.observe_queue_wait(slack.name.lower(), time.monotonic() - started)
        return summarize_claimed(
            namespace,
            name,
            uid,
            generation,
            parsed,
            summarizer_spec,
            seen,
            started=on_start,
            stop=runtime.stopping,
        )

    try:
        pool = SWEEP_WORKERS if parsed.trigger in BACKGROUND_TRIGGERS else WORKERS
        outcome = await asyncio.wrap_future(pool.submit_by(started + slack, job))
    except ClaimHeld as held:
        metrics.claim_conflict()
        metrics.claim_wait()
        # Backed off by this object's own count of looks (core/waiting.py), and never later
        # than the claim could lapse as this replica has watched it (its own clock, never
        # the other writer's expiry against ours): a dead writer's session is taken over
        # as soon as the lease rules allow.
        backoff = wait_delay(
            retry,
            first_s=CONFIG.claim_retry_seconds,
            max_s=CONFIG.claim_retry_max_seconds,
            jitter=WAIT_JITTER,
            rand=random.random(),
        )
        delay = min(backoff, held.retry_after_s + random.uniform(0, 0.5))
        logger.info("session %s: %s; looking again in %.1fs", parsed.session_id, held, delay)
        if held.claim.writer.owner_uid not in (uid, ""):
            # Another object names the same session: say which one owns it for now.
            record_waiting(body, patch, held, runtime.events)
        # Else another replica serves this very object: it writes the status.
        raise kopf.TemporaryError(str(held), delay=delay) from None
    except ClaimLost as lost:
        metrics.claim_conflict()
        logger.warning("session %s: %s", parsed.session_id, lost)
        raise kopf.TemporaryError(str(lost), delay=backoff_seconds(retry)) from None
    except PassInterrupted as stopped:
        logger.info("session %s: %s", parsed.session_id, stopped)
        raise kopf.TemporaryError(str(stopped), delay=backoff_seconds(retry)) from None
    except Failure as failure:
        metrics.observe_summary("failed", time.monotonic() - started)
        metrics.observe_failure(failure.reason)
        record_failure(body, patch, failure, logger, parsed, runtime.events)
    metrics.observe_summary(outcome.kind, time.monotonic() - started)
    metrics.add_model_tokens(outcome.tokens_used)
    report(body, patch, parsed, outcome, runtime.events)
