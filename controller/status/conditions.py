"""Conditions on a status, the reason a failure shows, and Ready, Reconciling and Stalled on
both kinds, derived at each write (kstatus reads Reconciling and Stalled: docs/operations.md;
one that does not hold is left out, Ready never); a SessionSummarizer's status, each condition
and field with one owner, written under a resourceVersion (kube.update_summarizer_status). Pure."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType

from pydantic import ValidationError

from controller.api import Condition, Phase, SessionSummarizerStatus
from controller.core.destinations import SecretVerdict, shown
from controller.core.sweep_plan import IgnoredRows
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
MARKERS_SHOWN = 5  # of each list in SunsetMarkers


def now_rfc3339(*, precise: bool = False) -> str:
    """Seconds; milliseconds (precise) where two values in one second must differ (requestedAt)."""
    spec = "milliseconds" if precise else "seconds"
    return dt.datetime.now(dt.UTC).isoformat(timespec=spec).replace("+00:00", "Z")


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
        reason = type(exc).__name__  # SecretHostNotAllowed, EndpointNotAllowed, ...
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
    conditions: Sequence[Condition] | None, derived: Sequence[Condition], probed: str | None = None
) -> list[Condition]:
    """The conditions with the derived ones replaced by `derived` (one not in it removed)."""
    wanted = {d.type for d in derived}
    kept = [c for c in conditions or [] if c.type not in DERIVED or c.type in wanted]
    return set_condition(kept, *derived, last_probe_time=probed)


def with_conditions(
    status: SessionSummarizerStatus,
    conditions: Iterable[Condition],
    *,
    generation: int | None = None,
    **fields: object,
) -> SessionSummarizerStatus:
    """The status with these conditions (measured now, of generation if given) and fields set."""
    at = now_rfc3339()
    stamp = {"observed_generation": generation} if generation is not None else {}
    merged = set_condition(status.conditions, *conditions, now=at, last_probe_time=at, **stamp)
    return status.model_copy(update={**fields, "conditions": merged})


def settled(status: SessionSummarizerStatus, generation: int | None) -> SessionSummarizerStatus:
    """What every status write stores: each condition of the generation it was computed for
    (ReplicaActive, which says nothing of the spec, and any without one: the current one), and
    the derived ones, as old as their oldest input."""
    conditions = [
        c.model_copy(update={"observed_generation": generation})
        if c.type == "ReplicaActive" or c.observed_generation is None
        else c
        for c in status.conditions or []
    ]
    times = [c.last_probe_time for c in conditions if c.type in READY_INPUTS and c.last_probe_time]
    derived = summarizer_readiness(conditions, generation)
    merged = with_derived(conditions, derived, min(times, default=None))
    return status.model_copy(update={"conditions": merged})


def spec_valid(invalid: ValidationError | None) -> Condition:
    """SpecValid: False with InvalidSpec naming each field the operator cannot use."""
    if invalid is None:
        return condition("SpecValid", "True", "SpecAccepted", "")
    return condition("SpecValid", "False", "InvalidSpec", spec_problems(invalid))


def store_reachable(url: str) -> Condition:
    """StoreReachable True: the store at url answers (a failure's is False with its reason)."""
    return condition("StoreReachable", "True", "HeartbeatOK", f"Chroma at {url} answers")


def secrets_allowed(verdicts: Sequence[SecretVerdict], unread: Sequence[str] = ()) -> Condition:
    """SecretsAllowed: True when each Secret sent allows where it goes; False when one refuses
    (nothing sent) or is not annotated (sent still); Unknown when one could not be read."""

    def said(status: str, reason: str, messages: Sequence[str]) -> Condition:
        more = f" (and {len(messages) - 2} more)" if len(messages) > 2 else ""
        text = one_line("; ".join(messages[:2]) + more, 1000)
        return Condition(type="SecretsAllowed", status=status, reason=reason, message=text)

    refused = [v.refusal for v in verdicts if not v.allowed]
    if refused:
        return said("False", "SecretHostNotAllowed", refused)
    if unread:
        return said("Unknown", "SecretNotFound", list(unread))
    warned = [v.warning for v in verdicts if v.warning]
    if warned:
        return said("False", "SecretNotAnnotated", warned)
    if not verdicts:
        return said("True", "NoSecrets", ["no Secret is sent"])
    sent = ", ".join(f"{v.use.secret} to {shown(v.use.url)}" for v in verdicts)
    return said("True", "AllowedBySecrets", [f"each Secret allows where it goes: {sent}"])


def sunset_markers(
    requested: Sequence[str], invalid: Sequence[str], markers_only: Sequence[str] = ()
) -> Condition | None:
    """SunsetMarkers after a scan that acted: False for markers that name no session or only
    sessions with no other memories; None after one that did nothing (it writes nothing)."""
    parts = []
    for items, said, quoted in (
        (invalid, "ignored {} sunset marker(s) that name no session", False),
        (
            markers_only,
            "ignored the sunset markers of {} session(s) with no other memories (nothing to "
            "summarize; no SessionSummary made)",
            True,
        ),
        (requested, "requested summaries of {} session(s) with a sunset marker", True),
    ):
        if items:
            head = [repr(cut(s, 60)) if quoted else s for s in items[:MARKERS_SHOWN]]
            more = f" and {len(items) - MARKERS_SHOWN} more" if len(items) > MARKERS_SHOWN else ""
            parts.append(f"{said.format(len(items))}: {', '.join(head)}{more}")
    if not parts:
        return None
    status, reason = "True", "SummaryRequested"
    if invalid or markers_only:
        status, reason = "False", "InvalidSunsetMarker" if invalid else "MarkerWithoutMemories"
    return condition("SunsetMarkers", status, reason, one_line("; ".join(parts), 1000))


def memory_rows(ignored: Mapping[str, IgnoredRows], rows: int) -> Condition:
    """MemoryRowsUsable after a walk of `rows` rows: False while it found rows it cannot act on."""
    if not ignored:
        message = f"the last walk found every memory row usable ({rows} rows)"
        return condition("MemoryRowsUsable", "True", "AllRowsUsable", message)
    parts = []
    for problem, found in sorted(ignored.items()):
        more = f" and {found.count - len(found.ids)} more" if found.count > len(found.ids) else ""
        ids = ", ".join(repr(cut(i, 80)) for i in found.ids)
        parts.append(f"{found.count} where the row {problem} (memory ids {ids}{more})")
    total = sum(found.count for found in ignored.values())
    message = one_line(f"ignored {total} of {rows} memory rows: " + "; ".join(parts), 1000)
    return condition("MemoryRowsUsable", "False", "IgnoredMemoryRows", message)


def sweep_failure(exc: BaseException, redaction: Redaction = DEFAULT_REDACTION) -> list[Condition]:
    """A sweep that could not run: Swept False, and StoreReachable False when the store failed."""
    named = failure_shown(exc, redaction)
    reason, message, _ = named or ("StoreUnavailable", masked(exc, 300, redaction), True)
    message = message or type(exc).__name__
    swept = condition("Swept", "False", reason, message)
    if reason in ("CollectionNotFound", "MemoryCollectionNotFound", "InvalidStoreConfig"):
        return [swept]
    return [swept, condition("StoreReachable", "False", reason, message)]
