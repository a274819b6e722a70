"""kopf indexes: what the summarize handler looks up about other resources, kept current
by kopf's watches instead of read with a GET on every summary."""

from __future__ import annotations

from typing import Any

import kopf

from controller.api import GROUP, SUMMARIZER_PLURAL, VERSION

SummarizerKey = tuple[str, str]  # (namespace, name)


@kopf.index(GROUP, VERSION, SUMMARIZER_PLURAL)
def summarizer_specs(
    namespace: str | None, name: str, spec: kopf.Spec, **_: Any
) -> dict[SummarizerKey, dict[str, Any]]:
    """Every SessionSummarizer's spec by (namespace, name)."""
    return {(namespace or "", name): dict(spec)}


def lookup_summarizer_spec(
    index: kopf.Index[SummarizerKey, dict[str, Any]], namespace: str, name: str
) -> dict[str, Any] | None:
    """The spec of that SessionSummarizer, or None when there is none (yet)."""
    found = index.get((namespace, name))
    return next(iter(found), None) if found else None
