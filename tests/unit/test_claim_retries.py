"""How the summarize handler hands a pass that did not finish back to kopf: a wait for another
writer (or the operator stopping) is a quiet `Retry`, whose kopf ERROR line the operator drops;
a lost claim is a failure: condition ClaimLost, a Warning Event, counted toward the failure
gate, and kopf's TemporaryError with its ERROR line."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from typing import Any, cast

import kopf
import pytest

from controller.config import CONFIG
from controller.handlers.session_summary import Retry, failures_shown, summarize
from controller.kube.claims import ClaimContended, ClaimLost
from controller.pipeline import PassInterrupted
from controller.runtime import Runtime
from tests.unit.test_invalid_summary_spec import VALID, Recorded, body_with


class Raising:
    """A scheduler whose every pass ends with one exception, raised where summarize_claimed
    raises it (failures_shown)."""

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    def give_way(self) -> float:  # the pass's trace calls it before each phase
        return 0.0

    def submit(self, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()
        try:
            with failures_shown():
                raise self.exc
        except Exception as exc:
            done.set_exception(exc)
        return done


@pytest.mark.parametrize(
    ("raised", "quiet"),
    [
        (ClaimContended("the claim changed on every try"), True),
        (PassInterrupted("the operator is stopping"), True),
        (ClaimLost("claim renewal refused: (422)"), False),
        (ClaimLost("written under a newer claim"), False),
    ],
)
def test_only_a_wait_is_a_quiet_retry_and_a_lost_claim_keeps_kopfs_error(
    raised: Exception, quiet: bool
) -> None:
    events = Recorded()
    runtime = Runtime(CONFIG, events, *cast(Any, (Raising(raised), None)))
    body, patch = body_with(VALID, {}), kopf.Patch()
    call = summarize(
        body=body, spec=kopf.Spec(body), name="s", namespace="ns", patch=patch, retry=0,
        logger=cast(Any, logging.getLogger("test")), memo=kopf.Memo(runtime=runtime),
        summarizer_specs={},
    )  # fmt: skip
    with pytest.raises(kopf.TemporaryError) as caught:
        asyncio.run(call)
    assert isinstance(caught.value, Retry) is quiet, caught.value
    assert str(raised) in str(caught.value)
    shown = [(c["type"], c["status"], c["reason"]) for c in patch.status.get("conditions", [])]
    if quiet:
        assert shown == [] and events.posted == []
    else:
        assert ("Summarized", "False", "ClaimLost") in shown
        assert events.posted == [("Warning", "ClaimLost", str(raised))]
        assert patch.status["consecutiveFailures"] == 1
