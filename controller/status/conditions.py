"""A condition set on a status, and the times a status states (RFC 3339, UTC)."""

from __future__ import annotations

import datetime as dt

from controller.api import Condition


def now_rfc3339(*, precise: bool = False) -> str:
    """Seconds for status fields; milliseconds (precise) where a new value must differ from
    the previous one, as spec.requestedAt must for two sunsets in the same second."""
    now = dt.datetime.now(dt.UTC)
    if precise:
        return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"
    return rfc3339(now)


def rfc3339(when: dt.datetime) -> str:
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_condition(
    conditions: list[Condition] | None, new: Condition, *, now: str | None = None
) -> list[Condition]:
    """Replaces the condition of new.type; lastTransitionTime moves only when status changes."""
    result: list[Condition] = []
    previous = None
    for cond in conditions or []:
        if cond.type == new.type:
            previous = cond
        else:
            result.append(cond)
    changed = previous is None or previous.status != new.status
    transition = (now or now_rfc3339()) if changed else previous.last_transition_time  # type: ignore[union-attr]
    result.append(new.model_copy(update={"last_transition_time": transition}))
    return sorted(result, key=lambda c: c.type)
