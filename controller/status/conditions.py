"""Conditions on a status, the reason a failure shows, and Ready, Reconciling and Stalled on
both kinds, derived at each write (kstatus reads Reconciling and Stalled: docs/operations.md;
one that does not hold is left out, Ready never). Pure."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from types import MappingProxyType

from pydantic import ValidationError

from controller.api import Condition, Phase
from controller.core.text import cut, one_line
from controller.redaction import DEFAULT_REDACTION, Redaction

READY, RECONCILING, STALLED = "Ready", "Reconciling", "Stalled"
DERIVED = (READY, RECONCILING, STALLED)
# What a SessionSummarizer needs to do its work, in the order a failure is named.
REQUIRED = ("SecretsAllowed", "StoreReachable", "EmbeddingReady", "ModelReady", "ReplicaActive")
# Ready's inputs, an unusable spec first (the rest is then an older spec's); SpecValid and
# Swept count only when present.
READY_INPUTS = ("SpecValid", *REQUIRED, "Swept")
NOT_BLOCKING = frozenset({("SecretsAllowed", "SecretNotAnnotated")})
# The reason a failure shows and whether a pass retries it, by the exception's class or nearest
# base, by name (status/ imports none of the modules that raise them).
FAILURES = MappingProxyType(
    {
        "SecretError": ("SecretNotFound", True),
        "FenceUnavailable": ("FencingUnavailable", True),
        "AuthorityConflict": ("AuthorityConflict", True),
        "DestinationRefused": ("DestinationRefused", True),  # its own reason; nothing sent
        "StoreUnavailable": ("StoreUnavailable", True),
        "InvalidStoreConfig": ("InvalidStoreConfig", False),
        "CollectionNotFound": ("CollectionNotFound", True),
        "UnreadablePriorSummary": ("UnreadablePriorSummary", False),
        "EmbeddingMismatch": ("EmbeddingMismatch", False),
        "EmbeddingError": ("EmbeddingUnavailable", True),
        "ModelUnavailable": ("ModelUnavailable", True),
        "InvalidModelOutput": ("InvalidModelOutput", True),
        "SummaryValidationError": ("InvalidSummary", True),
        # Another writer rewrote the row: nothing written; the retry carries its text.
        "RowChangedDuringPass": ("OtherWriterDetected", True),
        # Refused, taken, deleted or lapsed: nothing (more) written; the message says why.
        "ClaimLost": ("ClaimLost", True),
    }
)
# A refusal says what would allow it (a command): not cut at 300.
REFUSALS = frozenset({"DestinationRefused", "AuthorityConflict", "ClaimLost"})
# The operator's own words, never another party's: not masked (a Secret's name,
# `Secret k8s/s3-creds`, reads to the rules as a credential said).
OWN_TEXT = frozenset({"SecretError", "DestinationRefused"})


def now_rfc3339(*, precise: bool = False) -> str:
    """Seconds; milliseconds (precise) where two values in one second must differ (requestedAt)."""
    now = dt.datetime.now(dt.UTC)
    millis = f".{now.microsecond // 1000:03d}" if precise else ""
    return now.strftime("%Y-%m-%dT%H:%M:%S") + millis + "Z"


def set_condition(
    conditions: Sequence[Condition] | None,
    *new: Condition,
    now: str | None = None,
    **stamp: object,
) -> list[Condition]:
    """Each new condition replaces its type's (stamped); lastTransitionTime moves on a change."""
    merged = {c.type: c for c in conditions or []}
    for cond in new:
        previous = merged.get(cond.type)
        if previous is not None and previous.status == cond.status:
            transition = previous.last_transition_time
        else:
            transition = now or now_rfc3339()
        merged[cond.type] = cond.model_copy(update={**stamp, "last_transition_time": transition})
    return sorted(merged.values(), key=lambda c: c.type)


def spec_problems(invalid: ValidationError) -> str:
    """Each field of a spec the operator cannot use, and why: a condition's message."""
    problems = (f"spec.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in invalid.errors())
    return one_line("; ".join(problems), 1000)


def masked(
    text: object, limit: int, redaction: Redaction = DEFAULT_REDACTION, *, flat: bool = True
) -> str:
    """A failure's text as shown: masked (a server's answer may quote any credential), at most
    limit characters, one line when flat. Only the first 2*limit are masked (bounded time), and
    the cut falls outside every secret found there: a secret cut at that end (`password="a b`)
    is one the rules miss, which the shorter placeholders before it would pull into view."""
    whole = str(text)
    start = cut(whole, 2 * limit, "", parts=False)
    if len(start) < len(whole):
        end = len(cut(start, limit, ""))
        start = start[: min([end, *(s for s, e, _ in redaction.spans(start) if s < end < e)])]
    start = redaction.text(start)
    return one_line(start, limit) if flat else cut(start, limit, "")


def own_text(exc: BaseException | None) -> bool:
    """Whether exc is of a kind OWN_TEXT names (by class or base)."""
    return any(c.__name__ in OWN_TEXT for c in type(exc).__mro__)


def failure_shown(
    exc: BaseException, redaction: Redaction = DEFAULT_REDACTION
) -> tuple[str, str, bool] | None:
    """(reason, message, retry) of a failure of a kind FAILURES names, masked, else None."""
    named = next((c.__name__ for c in type(exc).__mro__ if c.__name__ in FAILURES), None)
    if named is None:
        return None
    reason, retry = FAILURES[named]
    limit = 1000 if named in REFUSALS else 300
    message = one_line(exc, limit) if own_text(exc) else masked(exc, limit, redaction)
    if named == "DestinationRefused":
        reason = str(getattr(exc, "reason", reason))
    elif named == "CollectionNotFound" and getattr(exc, "role", "memory") == "memory":
        reason = "MemoryCollectionNotFound"
    elif named == "UnreadablePriorSummary":
        message += "; the stored row was left as it is"
    return reason, message, retry


def condition(
    type_: str, status: str, reason: str, message: str, generation: int | None = None
) -> Condition:
    return Condition(
        type=type_, status=status, reason=reason, message=message, observed_generation=generation
    )


def summary_readiness(
    phase: Phase | None, reason: str, message: str, generation: int | None
) -> list[Condition]:
    """A SessionSummary's derived conditions: Ready when done; Stalled NotFound or Failed."""
    if phase in ("Summarized", "Empty", "Forgotten"):
        holding = [(READY, "True")]
    elif phase in ("NotFound", "Failed"):
        holding = [(READY, "False"), (STALLED, "True")]
    else:
        holding = [(READY, "False"), (RECONCILING, "True")]
    return [condition(type_, status, reason, message, generation) for type_, status in holding]


def summarizer_readiness(
    conditions: Sequence[Condition], generation_now: int | None = None
) -> list[Condition]:
    """A SessionSummarizer's derived conditions: Ready when every input holds; Stalled with the
    first failing one's reason; Reconciling while one is unreported. Their generation: the
    inputs' oldest (none yet: generation_now)."""
    found = {c.type: c for c in conditions if c.type not in DERIVED}
    inputs = [found[t] for t in READY_INPUTS if t in found]
    generations = [c.observed_generation for c in inputs if c.observed_generation is not None]
    generation = min(generations) if generations else generation_now
    failing = [c for c in inputs if c.status == "False" and (c.type, c.reason) not in NOT_BLOCKING]
    waiting = [t for t in REQUIRED if t not in found or found[t].status == "Unknown"]
    if failing:
        first, *rest = failing
        message = f"{first.type}: {first.message}"
        if rest:
            message += f" (and {len(rest)} more: {', '.join(c.type for c in rest)})"
        reason, holding = first.reason, [(READY, "False"), (STALLED, "True")]
    elif waiting:
        message = "not reported yet: " + ", ".join(waiting)
        reason, holding = "ChecksPending", [(READY, "Unknown"), (RECONCILING, "True")]
    else:
        message = "store, model and embedding answer; " + found["ReplicaActive"].message
        reason, holding = "Healthy", [(READY, "True")]
    return [condition(type_, status, reason, message, generation) for type_, status in holding]


def with_derived(
    conditions: Sequence[Condition] | None, derived: Sequence[Condition]
) -> list[Condition]:
    """The conditions with the derived ones replaced by `derived` (one not in it removed)."""
    wanted = {d.type for d in derived}
    kept = [c for c in conditions or [] if c.type not in DERIVED or c.type in wanted]
    return set_condition(kept, *derived)
