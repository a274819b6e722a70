"""Requests made on our objects by annotation: who asked for a SessionSummary's current
spec, as its status and Events say it (a forget or a rebuild is audited: docs/privacy.md),
and a request for a SessionSummarizer's probes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controller.core.text import one_line

# summaryctl forget records who ran it here; else the field manager of the last change.
REQUESTED_BY = "memorycore.io/requested-by"
# summaryctl check asks a SessionSummarizer's probes and sweep to run now: a new value here
# is answered in status.lastHandledProbeRequest (as Flux's reconcile.fluxcd.io/requestedAt).
PROBE_REQUESTED = "memorycore.io/probe-requested-at"


def asked_by(body: Mapping[str, Any]) -> str:
    """Who asked for the object's current spec: summaryctl's annotation, else the field
    manager (kubectl, a controller) of its last change of the spec."""
    meta = body.get("metadata") or {}
    named = (meta.get("annotations") or {}).get(REQUESTED_BY)
    if named:
        return one_line(named, 200)
    changes = [
        m
        for m in meta.get("managedFields") or []
        if isinstance(m, Mapping) and "f:spec" in (m.get("fieldsV1") or {})
    ]
    changes.sort(key=lambda m: str(m.get("time") or ""))
    return f"field manager {changes[-1].get('manager')}" if changes else "unknown"
