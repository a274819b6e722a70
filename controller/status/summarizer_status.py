"""A SessionSummarizer's status from its inputs. Pure. Each condition and field has one owner;
every write applies one of these under a resourceVersion (kube.update_summarizer_status)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from pydantic import ValidationError

from controller.api import Condition, SessionSummarizerStatus
from controller.core.destinations import SecretVerdict, shown
from controller.core.sweep_plan import IgnoredRows
from controller.core.text import cut, one_line
from controller.redaction import DEFAULT_REDACTION, Redaction
from controller.status.conditions import (
    READY_INPUTS,
    condition,
    failure_shown,
    masked,
    now_rfc3339,
    set_condition,
    spec_problems,
    summarizer_readiness,
    with_derived,
)


def with_conditions(
    status: SessionSummarizerStatus,
    conditions: Iterable[Condition],
    *,
    generation: int | None = None,
) -> SessionSummarizerStatus:
    """The status with these conditions set, measured now, of this spec generation if given."""
    at = now_rfc3339()
    stamp = {"observed_generation": generation} if generation is not None else {}
    merged = set_condition(status.conditions, *conditions, now=at, last_probe_time=at, **stamp)
    return status.model_copy(update={"conditions": merged})


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
    at = min(times, default=None)
    derived = [
        c.model_copy(update={"last_probe_time": at})
        for c in summarizer_readiness(conditions, generation)
    ]
    return status.model_copy(update={"conditions": with_derived(conditions, derived)})


def spec_valid(invalid: ValidationError | None) -> Condition:
    """SpecValid: False with InvalidSpec naming each field the operator cannot use."""
    if invalid is None:
        return condition("SpecValid", "True", "SpecAccepted", "")
    return condition("SpecValid", "False", "InvalidSpec", spec_problems(invalid))


def store_reachable(url: str, *, reason: str = "HeartbeatOK", message: str = "") -> Condition:
    """StoreReachable: True with HeartbeatOK, else False with the failure's reason."""
    ok = reason == "HeartbeatOK"
    message = message or (f"Chroma at {url} answers" if ok else "")
    return condition("StoreReachable", "True" if ok else "False", reason, message)


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


def swept(
    status: SessionSummarizerStatus,
    figures: Mapping[str, object],
    message: str,
    store_url: str,
    duration_s: float,
    generation: int | None = None,  # of the spec the sweep ran with
) -> SessionSummarizerStatus:
    """A sweep that ran: its figures (status fields by name), Swept True, the store reachable."""
    ok = Condition(type="Swept", status="True", reason="SweepOK", message=message)
    update = {**figures, "message": message, "last_sweep_duration_seconds": round(duration_s, 3)}
    conditions = [ok, store_reachable(store_url)]
    return with_conditions(status, conditions, generation=generation).model_copy(update=update)


MARKERS_SHOWN = 5


def sunset_markers(
    requested: Sequence[str], invalid: Sequence[str], markers_only: Sequence[str] = ()
) -> Condition | None:
    """SunsetMarkers after a scan that acted: False for markers that name no session or only
    sessions with no other memories; None after one that did nothing (it writes nothing)."""
    parts = []
    if invalid:
        parts.append(
            f"ignored {len(invalid)} sunset marker(s) that name no session: " + _listed(invalid)
        )
    if markers_only:
        parts.append(
            f"ignored the sunset markers of {len(markers_only)} session(s) with no other "
            "memories (nothing to summarize; no SessionSummary made): "
            + _listed(markers_only, quoted=True)
        )
    if requested:
        parts.append(
            f"requested summaries of {len(requested)} session(s) with a sunset marker: "
            + _listed(requested, quoted=True)
        )
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


def _listed(items: Sequence[str], *, quoted: bool = False) -> str:
    """The first MARKERS_SHOWN items (session ids quoted and cut at 60 characters)."""
    head = list(items[:MARKERS_SHOWN])
    if quoted:
        head = [repr(cut(s, 60)) for s in head]
    more = len(items) - MARKERS_SHOWN
    return ", ".join(head) + (f" and {more} more" if more > 0 else "")


def sweep_failure(exc: BaseException, redaction: Redaction = DEFAULT_REDACTION) -> list[Condition]:
    """A sweep that could not run: Swept False, and StoreReachable False when the store failed."""
    named = failure_shown(exc, redaction)
    reason, message, _ = named or ("StoreUnavailable", masked(exc, 300, redaction), True)
    message = message or type(exc).__name__
    swept = Condition(type="Swept", status="False", reason=reason, message=message)
    if reason in ("CollectionNotFound", "MemoryCollectionNotFound", "InvalidStoreConfig"):
        return [swept]
    return [swept, store_reachable("", reason=reason, message=message)]


def failed_sweep(
    status: SessionSummarizerStatus,
    failure: list[Condition],
    at: str,
    generation: int | None = None,  # of the spec the sweep ran with
) -> SessionSummarizerStatus:
    """What a sweep_failure writes; lastSweepAt moves, so the retry waits its turn (sweep_due)."""
    return with_conditions(status, failure, generation=generation).model_copy(
        update={"last_sweep_at": at, "message": f"sweep failed: {failure[0].message}"}
    )
