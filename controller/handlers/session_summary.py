"""SessionSummary handlers: each spec (create, change, resume) gets one summarization, run by
controller.pipeline in a worker thread; its outcome or failure becomes status and Events."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import kopf
import urllib3
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from controller import metrics
from controller.api import (
    GROUP,
    SUMMARIZER_PLURAL,
    SUMMARY_PLURAL,
    VERSION,
    SessionSummarizerSpec,
    SessionSummarySpec,
)
from controller.config import CONFIG, backoff_seconds
from controller.core.claim_rules import Claim, Writer
from controller.core.waiting import wait_delay
from controller.erasure import forget_session
from controller.handlers.summary_status import (
    DONE_PHASES,
    Failure,
    record_failure,
    record_waiting,
    report,
    status_with,
)
from controller.kube import client as kube
from controller.kube.claims import ClaimContended, ClaimHeld, SessionClaimHandle, Sightings
from controller.pipeline import Outcome, PassInterrupted, summarize_session
from controller.redaction import DEFAULT_REDACTION, Redaction
from controller.runtime import Runtime
from controller.scheduling import BACKGROUND_TRIGGERS, Slack, slack_for
from controller.status.conditions import failure_shown, masked, spec_problems
from controller.tracing import PassTrace

WAIT_JITTER = 0.25  # of each wait for another writer's claim, added at random
log = logging.getLogger("controller.handlers.session_summary")


class Retry(kopf.TemporaryError):
    """A retry that is no failure (another writer has the claim, the operator stops): the
    handler logs why, and controller/operator.py leaves out kopf's ERROR line for it."""


def needs_pass_on_resume(body: kopf.Body, **_: Any) -> bool:
    """At operator start, only objects whose current spec was not fully handled."""
    status = body.get("status") or {}
    done = status.get("phase") in DONE_PHASES
    return not done or status.get("observedGeneration") != body.metadata.get("generation")


@kopf.index(GROUP, VERSION, SUMMARIZER_PLURAL)
def summarizer_specs(
    namespace: str | None, name: str, spec: kopf.Spec, **_: Any
) -> dict[tuple[str, str], dict[str, Any]]:
    """Every SessionSummarizer's spec by (namespace, name), kept by kopf's watch: no GET a pass."""
    return {(namespace or "", name): dict(spec)}


def _summarizer(
    namespace: str, spec: SessionSummarySpec, summarizer_spec: dict[str, Any] | None
) -> SessionSummarizerSpec:
    """The SessionSummarizer's spec from the index; a miss (a new summarizer) asks the API."""
    if summarizer_spec is None and (found := kube.get_summarizer(namespace, spec.summarizer_ref)):
        summarizer_spec = dict(found.get("spec") or {})
    if summarizer_spec is None:
        ref = f"{namespace}/{spec.summarizer_ref}"
        message = f"SessionSummarizer {ref} does not exist; create it or set spec.summarizerRef"
        raise Failure("SummarizerNotFound", message, retry=True)  # phase Pending below the gate
    return SessionSummarizerSpec.model_validate(summarizer_spec)  # failures_shown: invalid


@contextlib.contextmanager
def failures_shown(
    *, invalid_spec: bool = False, redaction: Redaction = DEFAULT_REDACTION
) -> Iterator[None]:
    """What the work raises as the Failure the object shows (FAILURES), masked by redaction;
    with invalid_spec, any other ValueError is the summarizer's spec (InvalidSummarizer)."""
    try:
        yield
    except ClaimContended:
        raise  # a wait for the claim, not a failure
    except Exception as exc:
        shown = failure_shown(exc, redaction)
        if shown is None and invalid_spec and isinstance(exc, ValueError):
            shown = "InvalidSummarizer", masked(exc, 300), True
        if shown is None:
            raise
        reason, message, retry = shown
        raise Failure(reason, message, retry=retry) from exc


def summarize_claimed(
    runtime: Runtime,
    body: kopf.Body,
    spec: SessionSummarySpec,
    summarizer_spec: dict[str, Any] | None,
    seen: Sightings,
    started: Callable[[], None],
    trace: PassTrace,
) -> Outcome:
    """Takes the session's claim, calls `started` (phase Summarizing) after a while, runs the
    pass while the claim is renewed, and releases it. ClaimHeld: another live writer has it."""
    if runtime.stopping.is_set():
        raise PassInterrupted("the operator is stopping; the next replica resumes this pass")
    namespace, name = str(body.metadata.namespace), str(body.metadata.name)
    config, giving_way = runtime.config, trace.giving_way(runtime.scheduler.give_way)
    with contextlib.ExitStack() as held:
        with failures_shown(invalid_spec=True):
            summarizer = _summarizer(namespace, spec, summarizer_spec)
            backends = held.enter_context(
                runtime.parts.backends(namespace, spec.summarizer_ref, summarizer)
            )
        location = backends.store.location
        handle = SessionClaimHandle(
            Claim(
                session_id=spec.session_id,
                collection_id=location.row_scope,
                writer=Writer(
                    config.replica_id, str(body.metadata.uid or ""), f"{namespace}/{name}"
                ),
                duration_s=config.claim_ttl_seconds,
                generation=int(body.metadata.get("generation") or 0),
                collection=f"{location.describe()} {location.summary_collection}",
            ),
            margin_s=config.claim_margin_seconds,
            renew_s=config.claim_renew_period,
            seen=seen,
            authorities=backends.store.read_authority,
        )
        # The claim's API calls give way to a first summary, as a pass's steps do.
        with giving_way("claimed"), failures_shown(redaction=backends.redaction):
            handle.authority = runtime.fence_authority
            handle.acquire()
        # Phase Summarizing only for a pass still running after a while (a timer's thread);
        # the outcome's status waits for that patch, so it never lands over the outcome.
        saying = threading.Timer(config.summarizing_after_seconds, started)
        saying.daemon = True
        try:
            saying.start()
            with failures_shown(redaction=backends.redaction):
                if spec.action == "Forget":
                    outcome = forget_session(
                        backends.store,
                        spec.session_id,
                        memories=spec.forget_memories,
                        guard=handle,
                        request=f"{body.metadata.uid}/{handle.claim.generation}",
                        by=f"SessionSummary {namespace}/{name}",
                    )
                else:
                    outcome = summarize_session(
                        backends,
                        spec.session_id,
                        writer=config.replica_id,
                        trigger=spec.trigger,
                        guard=handle,
                        stop=runtime.stopping.is_set,
                        group=runtime.scheduler.store_write,
                        rebuild=spec.action == "Rebuild",
                        phase=giving_way,
                    )
            return dataclasses.replace(outcome, taken_over=handle.took_over)
        finally:
            saying.cancel()
            if saying.is_alive():  # its patch under way: the outcome's status comes after it
                saying.join()
            handle.release()  # best effort: never raises


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
    **indexes: Any,  # kopf passes every index by name (summarizer_specs)
) -> None:
    assert namespace is not None  # SessionSummary is namespaced
    runtime = Runtime.of(memo)
    try:
        parsed = SessionSummarySpec.model_validate(dict(spec))
    except ValidationError as exc:  # one the CRD let through (an older CRD stored it)
        failure = Failure("InvalidSpec", spec_problems(exc), retry=False)
        record_failure(body, patch, failure, logger, runtime.events)
    started = time.monotonic()
    summarized = bool((body.get("status") or {}).get("summarizedAt"))  # a re-summary may wait
    slack = slack_for(parsed.trigger, has_summary=summarized)
    found = indexes["summarizer_specs"].get((namespace, parsed.summarizer_ref))
    summarizer_spec = next(iter(found or ()), None)
    trace = PassTrace(
        runtime.traces, parsed.session_id, parsed.trigger, f"{namespace}/{name}",
        parsed.requested_at if retry == 0 else None,
    )  # fmt: skip

    # kopf's memo of this object (kept between attempts, dropped with the object).
    seen = memo.setdefault("claim", Sightings())

    def say_started() -> None:
        """Phase Summarizing, best effort (a pass waiting for a claim stays Pending)."""
        said = f"summarizing (trigger {parsed.trigger})"
        status = status_with(body, phase="Summarizing", reason="Summarizing", message=said, ok=None)
        try:
            kube.patch_summary_status(namespace, name, status.to_api())
        except (ApiException, urllib3.exceptions.HTTPError) as exc:
            log.warning("could not mark %s/%s Summarizing: %s", namespace, name, exc)

    def job() -> Outcome:
        metrics.QUEUE_WAIT_SECONDS.labels(slack.name.lower()).observe(time.monotonic() - started)
        trace.add("queued", trace.begun_ns, time.time_ns())
        return summarize_claimed(
            runtime, body, parsed, summarizer_spec, seen, started=say_started, trace=trace
        )

    with trace:  # every attempt's trace ends, however it ends
        try:
            bg, first = parsed.trigger in BACKGROUND_TRIGGERS, slack is Slack.FIRST
            flow = (namespace, parsed.summarizer_ref)  # served in turn with the others
            done = runtime.scheduler.submit(
                started + slack, job, background=bg, first=first, flow=flow
            )
            outcome = await asyncio.wrap_future(done)
        except (ClaimHeld, ClaimContended) as waiting:
            # Held, or changed under us on every try: backed off by this object's count of looks.
            metrics.CLAIM_CONFLICTS.inc()
            first_s, max_s = CONFIG.claim_retry_seconds, CONFIG.claim_retry_max_seconds
            rand = random.random()
            delay = wait_delay(retry, first_s=first_s, max_s=max_s, jitter=WAIT_JITTER, rand=rand)
            if isinstance(waiting, ClaimHeld):
                metrics.WAITS.inc()
                # Never later than the claim could lapse by this replica's own clock.
                delay = min(delay, waiting.retry_after_s + random.uniform(0, 0.5))
                # Another object has the session: say which (else another replica runs this one).
                if waiting.claim.writer.owner_uid not in (body.metadata.uid, ""):
                    record_waiting(body, patch, waiting, runtime.events)
            logger.info("session %s: %s; looking again in %.1fs", parsed.session_id, waiting, delay)
            raise Retry(str(waiting), delay=delay) from None
        except PassInterrupted as stopped:
            logger.info("session %s: %s", parsed.session_id, stopped)
            raise Retry(str(stopped), delay=backoff_seconds(retry)) from None
        except Failure as failure:
            trace.outcome = "failed"
            metrics.observe_summary("failed", time.monotonic() - started)
            record_failure(body, patch, failure, logger, runtime.events)
        trace.outcome = outcome.kind
        metrics.observe_summary(outcome.kind, time.monotonic() - started)
        metrics.MODEL_TOKENS.inc(max(outcome.tokens_used, 0))
        with trace.phase("status"):
            report(body, patch, parsed, outcome, runtime.events)
