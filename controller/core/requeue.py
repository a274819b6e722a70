"""Which SessionSummaries a change of their SessionSummarizer asks again. Pure.

A pass that failed on its summarizer's settings, or found no summarizer, is asked again at
once (spec.requestedAt moves), and kopf's progress annotations go so its backoff does not
delay it. A pass waiting for another writer's claim is not failing, and is left alone.
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


# kopf annotations under our prefix that are not a handler's progress.
NOT_PROGRESS = ("last-handled-configuration", "kopf-managed")


def progress_annotations(annotations: Mapping[str, str], prefix: str) -> list[str]:
    """The keys of kopf's per-handler progress records among an object's annotations."""
    return sorted(
        key
        for key in annotations
        if key.startswith(f"{prefix}/") and key.split("/", 1)[1] not in NOT_PROGRESS
    )


def to_ask_again_with_progress(
    objects: Iterable[Mapping[str, Any]], summarizer: str, prefix: str
) -> list[tuple[str, str, list[str]]]:
    """(name, resourceVersion, progress annotations to drop) of the objects to ask again."""
    return [
        (
            obj["metadata"]["name"],
            obj["metadata"]["resourceVersion"],
            progress_annotations(obj["metadata"].get("annotations") or {}, prefix),
        )
        for obj in objects
        if failed_on(obj, summarizer)
    ]
