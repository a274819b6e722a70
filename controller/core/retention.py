"""Which finished SessionSummary objects have outlived the retention TTL. Pure.

etcd should hold recent work, not one object per session forever: Summarized objects are
deleted once status.summarizedAt is older than spec.retention.summarizedTTLSeconds. The
summary itself stays in Chroma, and a later sunset simply creates the object again.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any


def _parse(when: object) -> dt.datetime | None:
    if not isinstance(when, str):
        return None
    try:
        return dt.datetime.fromisoformat(when.replace("Z", "+00:00"))
    except ValueError:
        return None


def expired(
    objects: Iterable[Mapping[str, Any]], *, summarizer: str, now: dt.datetime, ttl_seconds: int
) -> list[tuple[str, str]]:
    """(name, resourceVersion) of this summarizer's objects to delete; none when ttl is 0."""
    if ttl_seconds <= 0:
        return []
    horizon = now - dt.timedelta(seconds=ttl_seconds)
    doomed = []
    for obj in objects:
        meta, spec, status = obj.get("metadata", {}), obj.get("spec", {}), obj.get("status") or {}
        if spec.get("summarizerRef", "default") != summarizer:
            continue
        if status.get("phase") != "Summarized":
            continue
        if status.get("observedGeneration") != meta.get("generation"):
            continue  # a newer pass was asked for
        summarized = _parse(status.get("summarizedAt"))
        if summarized is not None and summarized < horizon:
            doomed.append((meta["name"], meta["resourceVersion"]))
    return doomed
