"""How the summarize handler hands a pass that did not finish back to kopf: a wait for another
writer (or the operator stopping) is a quiet `Retry`, whose kopf ERROR line the operator drops;
a lost claim is a failure, and stays kopf's TemporaryError with its ERROR line."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from typing import Any, cast

import kopf
import pytest

from controller.config import CONFIG
from controller.handlers.session_summary import Retry, summarize
from controller.kube.claims import ClaimContended, ClaimLost
from controller.pipeline import PassInterrupted
from controller.runtime import Runtime
from tests.unit.test_invalid_summary_spec import VALID, Recorded, body_with


class Raising:
    """A scheduler whose every pass ends with one exception."""

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    def submit(self, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()
        done.set_exception(self.exc)
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
    runtime = Runtime(CONFIG, Recorded(), *cast(Any, (Raising(raised), None, None, None)))
    body = body_with(VALID, {})
    call = summarize(
        body=body, spec=kopf.Spec(body), name="s", namespace="ns", patch=kopf.Patch(), retry=0,
        logger=cast(Any, logging.getLogger("test")), memo=kopf.Memo(runtime=runtime),
        summarizer_specs={},
    )  # fmt: skip
    with pytest.raises(kopf.TemporaryError) as caught:
        asyncio.run(call)
    assert isinstance(caught.value, Retry) is quiet, caught.value
    assert str(raised) in str(caught.value)
