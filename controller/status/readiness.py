"""Ready, Reconciling and Stalled on both kinds, from what each status already says. Pure.

GitOps tools judge a custom resource by these conditions: kstatus (Flux, kpt, `kubectl
wait`) reads `status.observedGeneration` against `metadata.generation`, then `Reconciling`
True as in progress and `Stalled` True as failed; `Ready` is the Kubernetes convention
(`kubectl wait --for=condition=Ready`, Argo CD's health check in docs/operations.md). The
three are derived on every status write from the conditions and phase the owners write,
never set by a handler, so they cannot disagree. One that does not hold is left out
(kstatus reads only True), except Ready, which is always present.

SessionSummary, from its phase:

| phase                    | Ready                            | Reconciling | Stalled |
| ------------------------ | -------------------------------- | ----------- | ------- |
| Summarized               | True (the Summarized reason)     |             |         |
| Empty                    | True, NoSummarizableMemories     |             |         |
| Forgotten                | True, Forgotten                  |             |         |
| Pending, Summarizing     | False (why: waiting, retrying)   | True        |         |
| NotFound                 | False, SessionNotFound           |             | True    |
| Failed                   | False (the failure's reason)     |             | True    |

SessionSummarizer, from the conditions its probes, sweep and peering reporter own:
Ready True when every required condition is True (SecretNotAnnotated, a deprecation
warning, does not count against it) and the last sweep, if any, ran; Stalled True with the
first failing condition's reason; Reconciling True while a required condition has not been
reported yet. Its observedGeneration is the oldest generation among its inputs.
"""

from __future__ import annotations

from collections.abc import Sequence

from controller.api import Condition, Phase
from controller.status.conditions import set_condition

READY, RECONCILING, STALLED = "Ready", "Reconciling", "Stalled"
DERIVED = (READY, RECONCILING, STALLED)
# What a SessionSummarizer needs to do its work, in the order a failure is named.
REQUIRED = ("SecretsAllowed", "StoreReachable", "EmbeddingReady", "ModelReady", "ReplicaActive")
# Counted only when present (no sweep has run, or sweeps are off; no spec check yet).
WHEN_PRESENT = ("Swept", "SpecValid")
NOT_BLOCKING = frozenset({("SecretsAllowed", "SecretNotAnnotated")})


def _cond(type_: str, status: str, reason: str, message: str, generation: int | None) -> Condition:
    return Condition(
        type=type_,
        status=status,
        reason=reason,
        message=message,
        observed_generation=generation,
    )


def summary_readiness(
    phase: Phase | None, reason: str, message: str, generation: int | None
) -> list[Condition]:
    """The derived conditions of a SessionSummary in this phase (those that hold)."""
    if phase in ("Summarized", "Empty", "Forgotten"):
        return [_cond(READY, "True", reason, message, generation)]
    if phase in ("NotFound", "Failed"):
        return [
            _cond(READY, "False", reason, message, generation),
            _cond(STALLED, "True", reason, message, generation),
        ]
    return [
        _cond(READY, "False", reason, message, generation),
        _cond(RECONCILING, "True", reason, message, generation),
    ]


def summarizer_readiness(
    conditions: Sequence[Condition], generation_now: int | None = None
) -> list[Condition]:
    """The derived conditions of a SessionSummarizer with these (owned) conditions; with no
    input yet, they answer generation_now."""
    found = {c.type: c for c in conditions if c.type not in DERIVED}
    inputs = [found[t] for t in (*REQUIRED, *WHEN_PRESENT) if t in found]
    generations = [c.observed_generation for c in inputs if c.observed_generation is not None]
    generation = min(generations) if generations else generation_now
    failing = [c for c in inputs if c.status == "False" and (c.type, c.reason) not in NOT_BLOCKING]
    if failing:
        first = failing[0]
        message = f"{first.type}: {first.message}"
        more = len(failing) - 1
        if more:
            message += f" (and {more} more: {', '.join(c.type for c in failing[1:])})"
        return [
            _cond(READY, "False", first.reason, message, generation),
            _cond(STALLED, "True", first.reason, message, generation),
        ]
    waiting = [t for t in REQUIRED if t not in found or found[t].status == "Unknown"]
    if waiting:
        message = "not reported yet: " + ", ".join(waiting)
        return [
            _cond(READY, "Unknown", "ChecksPending", message, generation),
            _cond(RECONCILING, "True", "ChecksPending", message, generation),
        ]
    message = "store, model and embedding answer; " + found["ReplicaActive"].message
    return [_cond(READY, "True", "Healthy", message, generation)]


def with_derived(
    conditions: Sequence[Condition] | None, derived: Sequence[Condition], now: str | None = None
) -> list[Condition]:
    """The conditions with the derived ones replaced by `derived` (a derived type not in it
    is removed; lastTransitionTime moves only on a status change, as set_condition does)."""
    wanted = {d.type for d in derived}
    merged = [c for c in conditions or [] if c.type not in DERIVED or c.type in wanted]
    for cond in derived:
        merged = set_condition(merged, cond, now=now)
    return merged
