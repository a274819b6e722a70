"""SessionSummary handlers: each spec (create, change, resume) gets one summarization, run by
controller.pipeline in a worker thread; its outcome or failure becomes status and the Events a
user must see."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NoReturn, cast

import kopf
import urllib3
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError
from pydantic.alias_generators import to_camel

from controller import metrics
from controller.api import (
    GROUP,
    REQUESTED_BY,
    SUMMARIZER_PLURAL,
    SUMMARY_PLURAL,
    VERSION,
    Condition,
    Phase,
    SessionSummarizerSpec,
    SessionSummarySpec,
    SessionSummaryStatus,
    SummaryProvenance,
)
from controller.config import CONFIG, backoff_seconds
from controller.core.claim_rules import Claim, Writer
from controller.core.ledger import FORGOTTEN_BY_KEY, FORGOTTEN_KEY, recorded_fence
from controller.core.memories import FUTURE_TOLERANCE_MS
from controller.core.naming import summary_row_id
from controller.core.summary import StructuredSummary
from controller.core.summary_row import Provenance
from controller.core.text import ms_to_rfc3339, one_line
from controller.core.waiting import wait_delay
from controller.kube import client as kube
from controller.kube.claims import (
    ClaimContended,
    ClaimHeld,
    ClaimLost,
    SessionClaimHandle,
    Sightings,
)
from controller.kube.events import EventRecorder
from controller.pipeline import Outcome, PassInterrupted, summarize_session
from controller.redaction import DEFAULT_REDACTION, Redaction
from controller.runtime import Runtime
from controller.scheduling import Slack, slack_for
from controller.status.conditions import (
    failure_shown,
    masked,
    now_rfc3339,
    set_condition,
    spec_problems,
    summary_readiness,
    with_derived,
)
from controller.store.memory_store import MemoryStore, WriteGuard, is_tombstone
from controller.tracing import PassTrace

WAIT_JITTER = 0.25  # of each wait for another writer's claim, added at random
log = logging.getLogger("controller.handlers.session_summary")


class Retry(kopf.TemporaryError):
    """A retry that is no failure (another writer has the claim, the operator stops): the
    handler logs why, and controller/operator.py leaves out kopf's ERROR line for it."""


def needs_pass_on_resume(body: kopf.Body, **_: Any) -> bool:
    """At operator start, only objects whose current spec was not fully handled."""
    status = body.get("status") or {}
    done = status.get("phase") in ("Summarized", "Empty", "NotFound", "Forgotten")
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
    except Exception as exc:
        shown = failure_shown(exc, redaction)
        if shown is None and invalid_spec and isinstance(exc, ValueError):
            shown = "InvalidSummarizer", masked(exc, 300), True
        if shown is None:
            raise
        raise Failure(*shown) from exc


def forget_session(
    store: MemoryStore,
    session_id: str,
    *,
    memories: bool,
    guard: WriteGuard,
    request: str = "",
    by: str = "",
) -> Outcome:
    """spec.action Forget (docs/privacy.md): the row, the ledger entry (a tombstone stays) and,
    with memories, the memories, the claim checked before each write (a deposed writer neither
    forgets its successor's row nor writes over a forget). request (uid/generation): a retry
    reports the total; by: the forgetting object, named to other namespaces' objects."""
    fence = guard.admit(store.read_row_state(session_id).fence)
    forgotten = store.forget_state(
        session_id, fence, memories=memories, request=request, by=by, check=guard.check
    )
    # A successor granted between our last check and its delete may have written since.
    head = store.read_row_state(session_id).head
    if not is_tombstone(head) or recorded_fence(head) != recorded_fence(fence):
        raise ClaimLost(
            f"session {session_id!r} was written by another writer while it was forgotten "
            "(our claim lapsed meanwhile); the retry forgets it again"
        )
    return Outcome("forgotten", session_id, forgotten.remaining, forgotten=forgotten)


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
    config = runtime.config
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
        held.enter_context(failures_shown(redaction=backends.redaction))
        # The claim's API calls give way to a first summary, as a pass's steps do.
        with trace.phase("claimed"):
            handle.authority = runtime.fence_authority
            handle.acquire()
        held.callback(handle.release)  # best effort: never raises
        # Phase Summarizing only for a pass still running after a while (a timer's thread);
        # the outcome's status waits for that patch (the join), so it never lands over it.
        saying = threading.Timer(config.summarizing_after_seconds, started)
        saying.daemon = True
        saying.start()
        held.callback(saying.join)
        held.callback(saying.cancel)
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
                phase=trace.phase,
            )
        return dataclasses.replace(outcome, taken_over=handle.took_over)


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
        parsed.requested_at if retry == 0 else None, runtime.scheduler.give_way,
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
            bg, first = slack is Slack.BACKGROUND, slack is Slack.FIRST
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
        with trace.phase("status"):
            report(body, patch, parsed, outcome, runtime.events)


# -- the status and Events of a pass's outcome or failure --------------------------------

# Whether the row was as this operator left it when the pass read it (summary_row.rewritten_by).
SINGLE_WRITER = "SingleWriter"
MEMORY_TIMES = "MemoryTimesReadable"
# A tombstone's forgottenBy as a forget writes it: the object, never a person (DNS names).
_FORGETTER = re.compile(r"SessionSummary [a-z0-9][-a-z0-9]{0,62}/[a-z0-9][-a-z0-9.]{0,252}")
# The status fields a Forgotten object keeps: they say the forget was done (the rest went).
FORGET_KEEPS = frozenset(
    {
        "phase",
        "last_phase_transition_time",
        "observed_generation",
        "trigger_source",
        "consecutive_failures",
        "message",
        "conditions",
    }
)


class Failure(Exception):
    """A failure to show on the object; retry: phase Pending while below the failure gate."""

    def __init__(self, reason: str, message: str, retry: bool) -> None:
        super().__init__(message)
        self.reason, self.message, self.retry = reason, message, retry


def current_status(body: kopf.Body) -> SessionSummaryStatus:
    return SessionSummaryStatus.model_validate(dict(body.get("status") or {}))


def status_with(
    body: kopf.Body,
    *,
    phase: Phase,
    reason: str,
    message: str,
    ok: bool | None,
    also: tuple[Condition, ...] = (),
    **fields: Any,
) -> SessionSummaryStatus:
    """The object's status in this phase; ok None (a pass under way) keeps Summarized."""
    previous = current_status(body)
    generation = body.metadata.get("generation")
    # lastPhaseTransitionTime: now when the phase, or the request it answers, changed.
    same = previous.phase == phase and previous.observed_generation == generation
    since = (same and previous.last_phase_transition_time) or now_rfc3339()
    if ok is not None:
        status = "True" if ok else "False"
        also = (Condition(type="Summarized", status=status, reason=reason, message=message), *also)
    conditions = set_condition(previous.conditions, *also, observed_generation=generation)
    conditions = with_derived(conditions, summary_readiness(phase, reason, message, generation))
    return previous.model_copy(
        update={
            "phase": phase,
            "last_phase_transition_time": since,
            "observed_generation": generation,
            "message": message,
            "conditions": conditions,
            **fields,
        }
    )


def record(body: kopf.Body, patch: kopf.Patch, **status: Any) -> None:
    patch.status.update(status_with(body, **status).to_api())


def record_waiting(
    body: kopf.Body, patch: kopf.Patch, held: ClaimHeld, events: EventRecorder
) -> None:
    """Pending, naming the object that owns the session's claim; written (and an Event posted)
    only when that changes: a wait that lasts writes nothing."""
    owner = held.claim.writer.owner
    message = (
        f"waiting: SessionSummary {owner} (replica {held.claim.writer.replica}) is writing "
        f"session {held.claim.session_id!r} in this store; this pass runs when it is done"
    )
    status = status_with(body, phase="Pending", reason="SessionClaimed", message=message, ok=False)
    if status == current_status(body):
        return  # the object says so already
    patch.status.update(status.to_api())
    events.post(body, "Normal", "SessionClaimed", message)


def record_failure(
    body: kopf.Body,
    patch: kopf.Patch,
    failure: Failure,
    logger: kopf.Logger,
    events: EventRecorder,
) -> NoReturn:
    """Condition + Event; retry with backoff. Failures count per generation in the status (kopf's
    retries count claim waits too); the Event says the failure's own message (repeats counted)."""
    metrics.FAILURES.labels(reason=failure.reason).inc()
    previous = current_status(body)
    same_generation = previous.observed_generation == body.metadata.get("generation")
    failures = (previous.consecutive_failures or 0) + 1 if same_generation else 1
    gated = not failure.retry or failures >= CONFIG.failure_gate
    delay = backoff_seconds(failures - 1)
    phase: Phase = "Failed" if gated else "Pending"
    message = failure.message
    if failure.retry and gated:
        message = f"{failures} consecutive failures, retrying in {delay:.0f}s: {failure.message}"
    record(
        body,
        patch,
        phase=phase,
        reason=failure.reason,
        message=message,
        ok=False,
        consecutive_failures=failures,
    )
    events.post(body, "Warning", failure.reason, failure.message)
    meta, session_id = body.metadata, body.spec.get("sessionId")
    logger.warning(  # the handler's logger: kopf's format names the object, ours does not
        "SessionSummary %s/%s (session %r): %s: %s",
        meta.namespace, meta.name, session_id, failure.reason, message,
    )  # fmt: skip
    if failure.retry:
        raise kopf.TemporaryError(failure.message, delay=delay) from None
    raise kopf.PermanentError(failure.message) from None


def provenance_status(summary: StructuredSummary, spent: Provenance) -> SummaryProvenance:
    """status.provenance: what the written summary covers and the tokens its passes cost."""
    mark, first, last = summary.watermark, summary.first_memory_at_ms, summary.last_memory_at_ms
    return SummaryProvenance(
        first_memory_at=ms_to_rfc3339(first) if first is not None else None,
        last_memory_at=ms_to_rfc3339(last) if last is not None else None,
        memory_count=summary.memory_count,
        watermark_timestamp=mark.timestamp_ms if mark else None,
        watermark_memory_id=mark.memory_id if mark else None,
        passes=len(spent.passes),
        tokens_in=spent.tokens_in,
        tokens_out=spent.tokens_out,
        document_tokens=spent.document_tokens,
        compaction_ratio=spent.ratio,
    )


def single_writer(body: kopf.Body, outcome: Outcome, events: EventRecorder) -> Condition:
    """SingleWriter: False (and a Warning) when another writer rewrote the row since ours."""
    other, status = outcome.other_writer, "True"
    if other is not None:
        status, reason = "False", "OtherWriterDetected"
        message = (
            f"the row of session {outcome.session_id!r} was rewritten by {other.who} after this "
            f"operator's last write; its text ({other.characters} characters) is carried "
            "verbatim in the summary's earlier text. Two writers on one row race: switch the "
            'other one off (neo: docs/migrating-from-neo.md, "Switch neo\'s summary task off")'
        )
        metrics.OTHER_WRITERS.inc()
    elif outcome.taken_over is not None:
        reason, message = "HistoryFromOtherAuthority", outcome.taken_over
    else:
        reason, message = "NoOtherWriter", "the summary row was as this operator last wrote it"
    if reason != "NoOtherWriter":
        events.post(body, "Warning", reason, message)
    return Condition(type=SINGLE_WRITER, status=status, reason=reason, message=message)


def memory_times(body: kopf.Body, outcome: Outcome, events: EventRecorder) -> Condition:
    """MemoryTimesReadable; a Warning when a pass summarized rows whose time it cannot read."""
    metrics.UNTIMED_MEMORIES.inc(outcome.new_untimed)
    missing, unreadable = outcome.missing_times, outcome.skipped_memories - outcome.missing_times
    if not outcome.skipped_memories:
        message = "every memory of the session has a time the operator can read"
        return Condition(type=MEMORY_TIMES, status="True", reason="AllReadable", message=message)
    said = [f"{missing} without a 'timestamp'"] if missing else []
    said += [f"{unreadable} with one the operator cannot read (epoch seconds, ms, µs or ns, or "
             "ISO-8601)"] if unreadable else []  # fmt: skip
    message = (
        f"of the session's {outcome.memory_count} memories, {' and '.join(said)}: summarized "
        "at the end of the session's order; `summaryctl verify` names them"
    )
    reason = "UnreadableMemories" if unreadable else "MissingMemoryTimes"
    if outcome.new_untimed:
        events.post(body, "Warning", reason, message)
    return Condition(type=MEMORY_TIMES, status="False", reason=reason, message=message)


def report(
    body: kopf.Body,
    patch: kopf.Patch,
    spec: SessionSummarySpec,
    outcome: Outcome,
    events: EventRecorder,
) -> None:
    if outcome.kind == "forgotten":
        report_forgotten(body, patch, spec, outcome, events)
        return
    last_ms = outcome.last_memory_at_ms  # the newest row placed: never a bad clock's future
    common: dict[str, Any] = {
        "memory_count": outcome.memory_count,
        "last_memory_at": ms_to_rfc3339(last_ms) if last_ms else None,
        "trigger_source": spec.trigger,
        "consecutive_failures": 0,
        "skipped_memories": outcome.skipped_memories,
        "redactions": sum(outcome.redactions.values()),
    }
    times = memory_times(body, outcome, events)
    if outcome.untrusted_times:
        named = ", ".join(outcome.untrusted_times)
        warning = (
            f"memories {named} have a time no clock could have given (more than "
            f"{FUTURE_TOLERANCE_MS // 60_000} minutes ahead, or before 2000): they count as "
            "now, so they neither keep the session active nor sort its summary first"
        )
        events.post(body, "Warning", "UntrustedMemoryTime", warning)
    if outcome.kind in ("not-found", "empty"):  # nothing to write
        # A summary there went with the memories it came from (dropped_items).
        went, nothing = outcome.dropped_items, "nothing was written"
        phase: Phase
        if outcome.kind == "not-found":
            phase, reason, event_type = "NotFound", "SessionNotFound", "Warning"
            said = "its summary went with them" if went else nothing
            message = f"no memory carries sessionId {spec.session_id!r}; {said}"
        else:
            phase, reason, event_type = "Empty", "NoSummarizableMemories", "Normal"
            said = "its summary went with the memories it came from" if went else nothing
            message = (
                f"the session's {outcome.memory_count} memories are all excluded types "
                f"(spec.excludedMemoryTypes of the summarizer, or sunset markers); {said}"
            )
        common.update(also=(times,))
        record(body, patch, phase=phase, reason=reason, message=message, ok=False, **common)
        events.post(body, event_type, reason, message)
        return
    summary = outcome.summary
    assert summary is not None
    written_ms = summary.summarized_at_ms  # the row's: a later pass shows the same instant
    common.update(title=summary.title, summary_id=summary_row_id(outcome.session_id))
    earlier = current_status(body).summarized_at if outcome.kind == "up-to-date" else None
    common["summarized_at"] = ms_to_rfc3339(written_ms) if written_ms else earlier or now_rfc3339()
    if outcome.kind == "up-to-date":
        reason, message = "UpToDate", f"summary already covers all {outcome.memory_count} memories"
    else:
        reason, message = "Summarized", _summarized_message(body, spec, outcome)
        spent = outcome.provenance
        assert spent is not None  # a written summary's (pipeline.summarize_session)
        metrics.observe_written(spec.trigger, spent.tokens_in, spent.tokens_out, spent.ratio)
        metrics.LATE_MEMORIES.inc(outcome.late_memories)
        for kind, count in outcome.redactions.items():
            metrics.REDACTIONS.labels(kind).inc(count)
        common.update(
            writer=CONFIG.replica_id,
            passes=outcome.passes,
            model_tokens=outcome.tokens_used,
            provenance=provenance_status(summary, spent),
        )
    common.update(also=(single_writer(body, outcome, events), times))
    record(body, patch, phase="Summarized", reason=reason, message=message, ok=True, **common)
    # An Event says what changed: a first summary, a recovery, a rebuild; a summary brought
    # up to date once more is in the status (summarizedAt, memoryCount), not in an Event.
    first = (body.get("status") or {}).get("phase") != "Summarized"
    if reason == "Summarized" and (spec.action == "Rebuild" or first):
        events.post(body, "Normal", "Rebuilt" if spec.action == "Rebuild" else reason, message)


def _summarized_message(body: kopf.Body, spec: SessionSummarySpec, outcome: Outcome) -> str:
    if spec.action == "Rebuild":  # the superset rule waived, on request: said so
        return (
            f"rebuilt from the session's {outcome.memory_count} living memories in "
            f"{outcome.passes} pass(es), asked by {asked_by(body)}: the previous summary's "
            "text was replaced (spec.action Rebuild)"
        )
    late = outcome.late_memories
    behind = f", {late} of them landed behind the last summary" if late else ""
    message = (
        f"summarized {outcome.new_memories} new of {outcome.memory_count} memories "
        f"in {outcome.passes} pass(es) (trigger {spec.trigger}){behind}"
    )
    if outcome.dropped_items:
        message += f"; {outcome.dropped_items} item(s) whose memories are all deleted dropped"
    return message


def report_forgotten(
    body: kopf.Body,
    patch: kopf.Patch,
    spec: SessionSummarySpec,
    outcome: Outcome,
    events: EventRecorder,
) -> None:
    """spec.action Forget done: phase Forgotten; what went and who asked, also in an Event."""
    gone = outcome.forgotten
    assert gone is not None
    found = [
        "the summary row" if gone.row else "",
        f"{gone.ledger_records} record(s) of the operator's ledger" if gone.ledger_records else "",
        f"{_memories(gone.memories)} of the session" if gone.memories else "",
    ]
    what = ", ledger entry or memory" if spec.forget_memories else " or ledger entry"
    message = (
        f"forgot session {spec.session_id!r}, asked by {asked_by(body)}: removed "
        + ("; ".join(filter(None, found)) or f"nothing: no summary row{what} of it was found")
        + "; its tombstone (ids and counts) keeps the sweep from summarizing it again until its "
        f"memories change; {_memories(gone.remaining)} of it remain"
    )
    done: dict[str, Any] = {"trigger_source": spec.trigger, "consecutive_failures": 0}
    patch.status.update(forgotten_status(body, message, ok=True, **done))
    events.post(body, "Normal", "Forgotten", message)


def forgotten_status(body: kopf.Body, message: str, *, ok: bool, **fields: Any) -> dict[str, Any]:
    """Phase Forgotten: only what says so stays; the rest described the summary (null: deleted)."""
    status = status_with(
        body, phase="Forgotten", reason="Forgotten", message=message, ok=ok, **fields
    )
    status.conditions = [
        c for c in status.conditions or [] if c.type not in (SINGLE_WRITER, MEMORY_TIMES)
    ]
    described = SessionSummaryStatus.model_fields.keys() - FORGET_KEEPS
    return {**status.to_api(), **{to_camel(field): None for field in described}}


def forgotten_by_another(obj: dict[str, Any], tombstone: dict[str, Any]) -> dict[str, Any]:
    """A Summarized object's status once another object forgot its session: when and through
    which object. Anyone with the store token can write a tombstone: a time that is no number
    is unknown, an object that is not `SessionSummary namespace/name` is not named."""
    at, by = tombstone.get(FORGOTTEN_KEY), tombstone.get(FORGOTTEN_BY_KEY)
    when = ms_to_rfc3339(at) if type(at) is int else "an unknown time"
    through = by if isinstance(by, str) and _FORGETTER.fullmatch(by) else "another SessionSummary"
    message = (
        f"session {obj['spec'].get('sessionId')!r} was forgotten at {when} through {through}; "
        "a sunset here summarizes it again if memories remain"
    )
    return forgotten_status(kopf.Body(cast(kopf.RawBody, obj)), message, ok=False)


def asked_by(body: Mapping[str, Any]) -> str:
    """Who asked for the current spec (docs/privacy.md): summaryctl's annotation, else the field
    manager of the spec's last change."""
    meta = body.get("metadata") or {}
    if named := (meta.get("annotations") or {}).get(REQUESTED_BY):
        return one_line(named, 200)
    # The API server keeps managedFields a list of objects (ManagedFieldsEntry).
    changes = [m for m in meta.get("managedFields") or [] if "f:spec" in (m.get("fieldsV1") or {})]
    changes.sort(key=lambda m: str(m.get("time") or ""))
    return f"field manager {changes[-1].get('manager')}" if changes else "unknown"


def _memories(n: int) -> str:
    return f"{n} memory" if n == 1 else f"{n} memories"
