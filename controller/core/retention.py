"""What a SessionSummary's phase says of its request. Pure. Which finished objects outlived
their TTL (spec.retention, as a Job's ttlSecondsAfterFinished; the summary stays in Chroma),
and which a change of their SessionSummarizer asks again (spec.requestedAt moves): a pass
that failed on its settings or found no summarizer; not one waiting for another's claim."""

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


def _current(obj: Mapping[str, Any], summarizer: str) -> bool:
    """This summarizer's, and its last pass was for its current request."""
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    current = status.get("observedGeneration") == meta.get("generation")
    return spec.get("summarizerRef", "default") == summarizer and current


def _named(obj: Mapping[str, Any]) -> tuple[str, str]:
    return obj["metadata"]["name"], obj["metadata"]["resourceVersion"]


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
    """A forget or rebuild whose pass failed: retried until done, never replaced nor collected."""
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
    """The unfinished Forget or Rebuild of `obj` that a request `asked`, asking less, would
    cancel; None when it may replace it. The chart's admissionpolicy.yaml has the same rule."""
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
        ttl = policy.ttl((obj.get("status") or {}).get("phase"))  # 0 for a phase not finished
        if ttl <= 0 or not _current(obj, summarizer) or holds_request(obj):
            continue
        since = finished_at(obj)
        if since is not None and since < now - dt.timedelta(seconds=ttl):
            doomed.append(_named(obj))
    return doomed


def _failed(status: Mapping[str, Any]) -> bool:
    """Failed, or pending after a pass that failed (not one waiting for a claim)."""
    if status.get("phase") != "Pending":
        return status.get("phase") == "Failed"
    for cond in status.get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == "Summarized":
            return cond.get("status") == "False" and cond.get("reason") not in NOT_FAILURES
    return False


def to_ask_again(objects: Iterable[Mapping[str, Any]], summarizer: str) -> list[tuple[str, str]]:
    """(name, resourceVersion) of this summarizer's objects whose current request failed."""
    return [
        _named(obj)
        for obj in objects
        if _current(obj, summarizer) and _failed(obj.get("status") or {})
    ]
