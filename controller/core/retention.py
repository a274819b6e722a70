"""What a SessionSummary's phase says of its request. Pure. Which finished objects have
outlived their retention TTL: every terminal phase has one (spec.retention; 0 keeps it), as
a Job has ttlSecondsAfterFinished (docs/configuration.md); the summary stays in Chroma, and a
later sunset or sweep makes the object again. And which a change of their SessionSummarizer
asks again: a pass that failed on its settings, or found no summarizer, is asked again at
once (spec.requestedAt moves: a new generation, which no earlier backoff delays, see
UnmarkedProgress in controller/operator.py); one waiting for another writer's claim is not
failing, and is left alone.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

IN_FLIGHT_PHASES = frozenset({None, "Pending", "Summarizing"})
NOT_FAILURES = frozenset({"SessionClaimed", "Summarizing"})


@dataclass(frozen=True)
class RetentionPolicy:
    """Seconds each terminal phase is kept (0: for ever)."""

    summarized_s: int
    empty_s: int = 0
    not_found_s: int = 0
    failed_s: int = 0

    def ttl(self, phase: object) -> int:
        return {
            "Summarized": self.summarized_s,
            "Forgotten": self.summarized_s,  # what was asked is done, as for Summarized
            "Empty": self.empty_s,
            "NotFound": self.not_found_s,
            "Failed": self.failed_s,
        }.get(str(phase), 0)


def parse_time(when: object) -> dt.datetime | None:
    if not isinstance(when, str):
        return None
    try:
        parsed = dt.datetime.fromisoformat(when.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def finished_at(obj: Mapping[str, Any]) -> dt.datetime | None:
    """When the object's current phase began, as retention measures it."""
    meta, status = obj.get("metadata") or {}, obj.get("status") or {}
    times = [
        status.get("summarizedAt") if status.get("phase") == "Summarized" else None,
        status.get("lastPhaseTransitionTime"),
        *(
            cond.get("lastTransitionTime")
            for cond in status.get("conditions") or []
            if isinstance(cond, Mapping) and cond.get("type") == "Summarized"
        ),
        meta.get("creationTimestamp"),
    ]
    return next((t for t in map(parse_time, times) if t is not None), None)


def holds_request(obj: Mapping[str, Any]) -> bool:
    """A forget or a rebuild whose pass failed: retried until it is done, never replaced by
    a summary (the sweep, the marker scan, the reconciliation) nor collected here."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    return status.get("phase") == "Failed" and spec.get("action", "Summarize") != "Summarize"


def pass_in_flight(obj: Mapping[str, Any]) -> bool:
    """Its request's pass is still to come, running, or (a forget, a rebuild) retried."""
    status, meta = obj.get("status") or {}, obj.get("metadata") or {}
    if status.get("observedGeneration") != meta.get("generation"):
        return status.get("phase") != "Failed" or holds_request(obj)
    return status.get("phase") in IN_FLIGHT_PHASES or holds_request(obj)


def rank(spec: Mapping[str, Any]) -> int:
    """How much a request asks: one asking less never replaces an unfinished one."""
    action = spec.get("action", "Summarize")
    forgets = ("Summarize", "Rebuild", "Forget").index(action)
    return forgets + (action == "Forget" and bool(spec.get("forgetMemories")))


def kept_request(obj: Mapping[str, Any], asked: Mapping[str, Any]) -> str | None:
    """The unfinished Forget or Rebuild of `obj` that a request of spec `asked` would cancel
    (it asks less: a summary, a forget that keeps the memories); None when it may replace it.
    The chart's admission policy applies the same rule (admissionpolicy.yaml)."""
    spec = obj.get("spec") or {}
    return str(spec["action"]) if rank(asked) < rank(spec) and pass_in_flight(obj) else None


def expired(
    objects: Iterable[Mapping[str, Any]],
    *,
    summarizer: str,
    now: dt.datetime,
    policy: RetentionPolicy,
) -> list[tuple[str, str]]:
    """(name, resourceVersion) of this summarizer's objects to delete."""
    doomed = []
    for obj in objects:
        meta, spec, status = obj.get("metadata", {}), obj.get("spec", {}), obj.get("status") or {}
        if spec.get("summarizerRef", "default") != summarizer or holds_request(obj):
            continue
        ttl = policy.ttl(status.get("phase"))  # 0 for a phase not finished
        if ttl <= 0:
            continue
        if status.get("observedGeneration") != meta.get("generation"):
            continue  # a newer pass was asked for
        since = finished_at(obj)
        if since is not None and since < now - dt.timedelta(seconds=ttl):
            doomed.append((meta["name"], meta["resourceVersion"]))
    return doomed


def failed_on(obj: Mapping[str, Any], summarizer: str) -> bool:
    """Whether the object's last pass, for its current request, failed under this summarizer."""
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    if spec.get("summarizerRef", "default") != summarizer:
        return False
    if status.get("observedGeneration") != meta.get("generation"):
        return False  # a newer request is on its way anyway
    if status.get("phase") == "Failed":
        return True
    if status.get("phase") != "Pending":
        return False
    for cond in status.get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == "Summarized":
            return cond.get("status") == "False" and cond.get("reason") not in NOT_FAILURES
    return False


def to_ask_again(objects: Iterable[Mapping[str, Any]], summarizer: str) -> list[tuple[str, str]]:
    """(name, resourceVersion) of the objects to ask again."""
    return [
        (obj["metadata"]["name"], obj["metadata"]["resourceVersion"])
        for obj in objects
        if failed_on(obj, summarizer)
    ]
