"""A SessionSummarizer's status, computed from its inputs. Pure.

Each condition has one owner, and every write goes through
kube.update_summarizer_status (read, apply one of these functions, write with a
resourceVersion precondition), so no writer drops what another wrote:

| condition        | owner                                   | module                        |
| ---------------- | --------------------------------------- | ----------------------------- |
| StoreReachable   | the store probe (`store_reachable`)     | health check and sweep use it |
| ModelReady       | the model probe                         | handlers/summarizer.py        |
| EmbeddingReady   | the embedding probe                     | handlers/summarizer.py        |
| SecretsAllowed   | the Secret probe (`secrets_allowed`)    | handlers/summarizer.py        |
| Swept            | the sweep (`SweepReport`, `SweepFailure`) | handlers/summarizer.py      |
| SunsetMarkers    | the marker scan (`MarkerScanReport`)    | handlers/summarizer.py        |
| ReplicaActive    | the peering reporter (`replica_status`) | controller/kube/peering.py         |
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from controller.api import Condition, SessionSummarizerStatus, set_condition
from controller.core.destinations import SecretVerdict, shown
from controller.core.text import one_line


def with_conditions(
    status: SessionSummarizerStatus, conditions: Iterable[Condition], now: str | None = None
) -> SessionSummarizerStatus:
    """The status with these conditions set (others kept; transition times move only on a
    status change)."""
    merged = status.conditions
    for cond in conditions:
        merged = set_condition(merged, cond, now=now)
    return status.model_copy(update={"conditions": merged})


def store_reachable(url: str, *, reason: str = "HeartbeatOK", message: str = "") -> Condition:
    """StoreReachable: True with HeartbeatOK, else False with the failure's reason."""
    if reason == "HeartbeatOK":
        return Condition(
            type="StoreReachable",
            status="True",
            reason=reason,
            message=message or f"Chroma at {url} answers",
        )
    return Condition(type="StoreReachable", status="False", reason=reason, message=message)


def secrets_allowed(verdicts: Sequence[SecretVerdict], unread: Sequence[str] = ()) -> Condition:
    """SecretsAllowed: True when every Secret the spec sends allows where it goes; False
    with SecretHostNotAllowed when one does not (nothing is sent), or with
    SecretNotAnnotated when one is sent only because unannotated Secrets are still allowed;
    Unknown when a Secret could not be read (the probes say SecretNotFound)."""

    def condition(status: str, reason: str, messages: Sequence[str]) -> Condition:
        more = f" (and {len(messages) - 2} more)" if len(messages) > 2 else ""
        text = one_line("; ".join(messages[:2]) + more, 1000)
        return Condition(type="SecretsAllowed", status=status, reason=reason, message=text)

    refused = [v.refusal for v in verdicts if not v.allowed]
    if refused:
        return condition("False", "SecretHostNotAllowed", refused)
    if unread:
        return condition("Unknown", "SecretNotFound", list(unread))
    warned = [v.warning for v in verdicts if v.warning]
    if warned:
        return condition("False", "SecretNotAnnotated", warned)
    if not verdicts:
        return condition("True", "NoSecrets", ["no Secret is sent"])
    sent = ", ".join(f"{v.use.secret} to {shown(v.use.url)}" for v in verdicts)
    return condition("True", "AllowedBySecrets", [f"each Secret allows where it goes: {sent}"])


@dataclass(frozen=True)
class SweepReport:
    """What a sweep that ran writes: its figures, Swept True, and a reachable store."""

    at: str
    duration_s: float
    found: int
    deferred: int
    created: int
    patched: int
    scanned: int
    deleted: int
    watermark: int | None
    message: str
    store_url: str

    def apply(self, status: SessionSummarizerStatus) -> SessionSummarizerStatus:
        swept = Condition(type="Swept", status="True", reason="SweepOK", message=self.message)
        return with_conditions(status, [swept, store_reachable(self.store_url)]).model_copy(
            update={
                "last_sweep_at": self.at,
                "last_sweep_duration_seconds": round(self.duration_s, 3),
                "candidates_found": self.found,
                "deferred": self.deferred,
                "created": self.created,
                "patched": self.patched,
                "scanned_memories": self.scanned,
                "deleted_by_retention": self.deleted,
                "watermark": self.watermark,
                "message": self.message,
            }
        )


@dataclass(frozen=True)
class MarkerScanReport:
    """What a marker scan that acted writes: the SunsetMarkers condition, False while the
    last markers it found include some that name no session. Scans that did nothing write
    nothing (they run every tick)."""

    requested: tuple[str, ...]  # sessions whose summary was asked for
    invalid: tuple[str, ...]  # one description per marker that names no session
    SHOWN = 5

    @classmethod
    def of(cls, requested: Iterable[str], invalid: Iterable[str]) -> MarkerScanReport | None:
        report = cls(tuple(requested), tuple(invalid))
        return report if report.requested or report.invalid else None

    @property
    def reason(self) -> str:
        return "InvalidSunsetMarker" if self.invalid else "SummaryRequested"

    @property
    def message(self) -> str:
        parts = []
        if self.invalid:
            parts.append(
                f"ignored {len(self.invalid)} sunset marker(s) that name no session: "
                + self._listed(self.invalid)
            )
        if self.requested:
            ids = [repr(s if len(s) <= 60 else s[:59] + "…") for s in self.requested]
            parts.append(
                f"requested summaries of {len(self.requested)} session(s) with a sunset "
                "marker: " + self._listed(ids)
            )
        return one_line("; ".join(parts), 1000)

    def _listed(self, items: tuple[str, ...] | list[str]) -> str:
        shown = ", ".join(items[: self.SHOWN])
        more = len(items) - self.SHOWN
        return shown + (f" and {more} more" if more > 0 else "")

    @property
    def condition(self) -> Condition:
        return Condition(
            type="SunsetMarkers",
            status="False" if self.invalid else "True",
            reason=self.reason,
            message=self.message,
        )

    def apply(self, status: SessionSummarizerStatus) -> SessionSummarizerStatus:
        return with_conditions(status, [self.condition])


@dataclass(frozen=True)
class SweepFailure:
    """A sweep that could not run: Swept False (and StoreReachable False when the store
    itself failed); lastSweepAt moves so the next attempt waits a full interval."""

    reason: str
    message: str
    store_failed: bool

    @property
    def conditions(self) -> list[Condition]:
        swept = Condition(type="Swept", status="False", reason=self.reason, message=self.message)
        if not self.store_failed:
            return [swept]
        return [swept, store_reachable("", reason=self.reason, message=self.message)]

    def apply(self, status: SessionSummarizerStatus, at: str) -> SessionSummarizerStatus:
        return with_conditions(status, self.conditions).model_copy(
            update={"last_sweep_at": at, "message": f"sweep failed: {self.message}"}
        )


def sweep_failure(exc: BaseException, url: str) -> SweepFailure:
    """The reason a sweep failed, from the exception class (by name: this module does no
    I/O and imports none of the modules that raise them)."""
    kind = type(exc).__name__
    message = one_line(exc, 300) or kind
    if kind == "SecretError":
        return SweepFailure("SecretNotFound", message, store_failed=True)
    if kind in ("SecretHostNotAllowed", "EndpointNotAllowed"):
        return SweepFailure(kind, one_line(exc, 1000), store_failed=True)
    if kind == "CollectionNotFound":
        role = getattr(exc, "role", "memory")
        reason = "MemoryCollectionNotFound" if role == "memory" else "CollectionNotFound"
        return SweepFailure(reason, message, store_failed=False)
    if kind == "InvalidStoreConfig":
        return SweepFailure("InvalidStoreConfig", message, store_failed=False)
    return SweepFailure("StoreUnavailable", message or f"Chroma at {url} failed", store_failed=True)
