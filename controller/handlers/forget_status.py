"""What a SessionSummary says once its session was forgotten (spec.action Forget): phase
Forgotten, what was removed, and who asked, in its status and in a Normal Event."""

from __future__ import annotations

import kopf

from controller.api import SessionSummarySpec
from controller.handlers.summary_status import record
from controller.kube.events import EventRecorder
from controller.pipeline import Outcome
from controller.status.requests import asked_by


def report_forgotten(
    body: kopf.Body,
    patch: kopf.Patch,
    spec: SessionSummarySpec,
    outcome: Outcome,
    events: EventRecorder,
) -> None:
    gone = outcome.forgotten
    assert gone is not None
    removed = [
        "the summary row" if gone.row else "no summary row (there was none)",
        f"{gone.ledger_records} record(s) of the operator's ledger (a tombstone of ids and "
        "counts stays, so the sweep does not summarize the session again until its memories "
        "change)",
    ]
    if spec.forget_memories:
        removed.append(f"{_memories(gone.memories)} of the session")
    message = (
        f"forgot session {spec.session_id!r}, asked by {asked_by(body)}: removed "
        + "; ".join(removed)
        + f"; {_memories(gone.remaining)} of it remain"
    )
    record(
        body,
        patch,
        phase="Forgotten",
        reason="Forgotten",
        message=message,
        ok=True,
        memory_count=gone.remaining,
        trigger_source=spec.trigger,
        consecutive_failures=0,
        title=None,
        summary_id=None,
        summarized_at=None,
        provenance=None,
    )
    events.post(body, type_="Normal", reason="Forgotten", message=message)


def _memories(n: int) -> str:
    return f"{n} memory" if n == 1 else f"{n} memories"
