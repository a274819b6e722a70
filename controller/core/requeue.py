"""Which SessionSummaries a change of their SessionSummarizer asks again. Pure.

A pass that failed on its summarizer's settings, or found no summarizer, is asked again at
once (spec.requestedAt moves: a new generation, which no earlier backoff delays, see
UnmarkedProgress in controller/operator.py). A pass waiting for another writer's claim is
not failing, and is left alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

NOT_FAILURES = frozenset({"SessionClaimed", "Summarizing"})


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
