"""A condition set on a status, and the times a status states (RFC 3339, UTC)."""

from __future__ import annotations

import datetime as dt

from pydantic import ValidationError

from controller.api import Condition
from controller.core.text import one_line


def now_rfc3339(*, precise: bool = False) -> str:
    """Seconds for status fields; milliseconds (precise) where a new value must differ from
    the previous one, as spec.requestedAt must for two sunsets in the same second."""
    now = dt.datetime.now(dt.UTC)
    millis = f".{now.microsecond // 1000:03d}" if precise else ""
    return now.strftime("%Y-%m-%dT%H:%M:%S") + millis + "Z"


def set_condition(
    conditions: list[Condition] | None, new: Condition, *, now: str | None = None
) -> list[Condition]:
    """Replaces the condition of new.type; lastTransitionTime moves only when status changes."""
    kept = [c for c in conditions or [] if c.type != new.type]
    previous = {c.type: c for c in conditions or []}.get(new.type)
    if previous is not None and previous.status == new.status:
        transition = previous.last_transition_time
    else:
        transition = now or now_rfc3339()
    kept.append(new.model_copy(update={"last_transition_time": transition}))
    return sorted(kept, key=lambda c: c.type)


def spec_problems(invalid: ValidationError) -> str:
    """Each field of a spec the operator cannot use, and why: a condition's message."""
    errors = invalid.errors()
    return one_line(
        "; ".join(f"spec.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in errors), 1000
    )
