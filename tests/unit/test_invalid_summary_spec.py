"""A SessionSummary whose spec the operator cannot use (one the CRD of the day admitted, an
older CRD stored, or an edit slipped past it) says so on the object: phase Failed, Stalled,
a Summarized condition and a Warning Event naming the field, and no retry until the spec
changes. The summarize handler itself, called as kopf calls it."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

import kopf
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry import trace as otel
from pydantic import ValidationError

from controller.api import SessionSummarySpec
from controller.config import CONFIG
from controller.handlers.session_summary import summarize
from controller.kube.events import EventRecorder
from controller.runtime import Runtime
from controller.tracing import PassTrace

VALID = {"sessionId": "s-1", "summarizerRef": "default", "trigger": "manual"}
# field -> values the operator refuses there (the CRD states the same rules today).
REFUSED: dict[str, st.SearchStrategy[Any]] = {
    "sessionId": st.one_of(
        st.sampled_from(["", " ", "\t\n", "\u3000", None, 7, ["s"]]),
        st.text(min_size=1025, max_size=1100),
    ),
    "summarizerRef": st.one_of(
        st.sampled_from(["", "Upper", "-lead", "trail.", "a b", None]),
        st.text(min_size=254, max_size=260, alphabet="a"),
    ),
    "trigger": st.text(max_size=20).filter(
        lambda t: t not in ("sunset", "sweep", "manual", "sunset-marker", "refresh")
    ),
    "action": st.text(max_size=20).filter(lambda a: a not in ("Summarize", "Rebuild", "Forget")),
    "forgetMemories": st.sampled_from(["sometimes", 2, [], {}]),
    "requestedAt": st.one_of(st.text(min_size=65, max_size=80), st.integers()),
}


class Recorded(EventRecorder):
    def __init__(self) -> None:  # no sender thread: nothing is sent
        self.posted: list[tuple[str, str, str]] = []

    def post(self, obj: Any, type_: str, reason: str, message: str) -> None:
        self.posted.append((type_, reason, message))


@st.composite
def invalid_specs(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    field = draw(st.sampled_from(sorted(REFUSED)))
    spec = {**VALID, field: draw(REFUSED[field])}
    if field == "sessionId" and draw(st.booleans()):
        del spec["sessionId"]  # required: missing altogether
    return field, spec


def body_with(spec: dict[str, Any], status: dict[str, Any]) -> kopf.Body:
    return kopf.Body({
        "apiVersion": "memorycore.io/v1alpha1",
        "kind": "SessionSummary",
        "metadata": {"name": "s", "namespace": "ns", "uid": "u", "generation": 2},
        "spec": spec,
        "status": status,
    })  # fmt: skip


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(
    invalid=invalid_specs(),
    status=st.sampled_from([{}, {"phase": "Summarized", "observedGeneration": 1}]),
)
def test_a_spec_the_operator_cannot_use_fails_once_naming_the_field(
    invalid: tuple[str, dict[str, Any]], status: dict[str, Any]
) -> None:
    field, spec = invalid
    with pytest.raises(ValidationError):
        SessionSummarySpec.model_validate(spec)
    events = Recorded()
    runtime = Runtime(CONFIG, events, *cast(Any, (None, None)))
    memo = kopf.Memo(runtime=runtime)
    patch = kopf.Patch()
    body = body_with(spec, status)
    call = summarize(
        body=body, spec=kopf.Spec(body), name="s", namespace="ns", patch=patch, retry=0,
        logger=cast(Any, logging.getLogger("test")), memo=memo, summarizer_specs={},
    )  # fmt: skip
    with pytest.raises(kopf.PermanentError):  # not retried: only a new spec can pass
        asyncio.run(call)
    written = dict(patch["status"])
    conditions = {c["type"]: c for c in written["conditions"]}
    summarized = conditions["Summarized"]
    assert written["phase"] == "Failed" and written["observedGeneration"] == 2
    assert (summarized["status"], summarized["reason"]) == ("False", "InvalidSpec")
    assert f"spec.{field}" in summarized["message"]
    assert conditions["Stalled"]["status"] == "True"
    assert conditions["Ready"]["status"] == "False"
    assert events.posted == [("Warning", "InvalidSpec", summarized["message"])]


date_like = st.builds(
    "{:04d}-{:02d}-{:02d}T{:02d}:{:02d}:{:02d}{}{}".format,
    *(st.integers(0, top) for top in (9999, 19, 39, 29, 69, 69)),
    st.sampled_from(["", ".5", ".123456789", "." + "9" * 30]),
    st.sampled_from(["Z", "z", "", "+00:00", "-00:00", "+23:59", "-23:59", "+24:00", "+99:99"]),
)


@settings(max_examples=500)
@given(st.one_of(date_like, st.text(max_size=64)))
def test_any_requested_at_up_to_its_bound_is_used_as_a_request_and_never_fails_the_pass(
    requested_at: str,
) -> None:
    # Only a change of spec.requestedAt matters (it asks a pass); its time is read only to
    # time the delivery, and a time Python cannot read (month 13, Feb 30, a leap second, year
    # 0, +24:00) or one far away is not timed, never an error (tracing.PassTrace).
    spec = SessionSummarySpec.model_validate({**VALID, "requestedAt": requested_at})
    with PassTrace(otel.NoOpTracerProvider(), "s-1", "manual", "ns/s", spec.requested_at):
        pass


@settings(max_examples=100)
@given(
    session_id=st.one_of(st.text(max_size=40), st.none(), st.integers()),
    name=st.from_regex(r"[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?", fullmatch=True),
    retry=st.booleans(),
    reason=st.sampled_from(["InvalidSpec", "StoreUnavailable", "ModelFailed"]),
    message=st.text(max_size=40),
)
def test_the_log_line_of_a_failed_pass_names_the_object_and_its_session(
    session_id: object, name: str, retry: bool, reason: str, message: str
) -> None:
    """A person reading the operator's log (its own format: no kopf object prefix) finds which
    SessionSummary failed, and for which session: the line used to be only the reason and
    the message."""
    from controller.handlers.session_summary import Failure, record_failure

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("test.failed-pass")
    logger.addHandler(handler)
    body = kopf.Body({**body_with({**VALID, "sessionId": session_id}, {}), "metadata": {
        "name": name, "namespace": "agents", "uid": "u", "generation": 1}})  # fmt: skip
    try:
        with pytest.raises((kopf.TemporaryError, kopf.PermanentError)):
            record_failure(
                body,
                kopf.Patch(),
                Failure(reason, message, retry=retry),
                cast(Any, logger),
                Recorded(),
            )
    finally:
        logger.removeHandler(handler)
    (line,) = [r.getMessage() for r in records]
    assert f"SessionSummary agents/{name} (session {session_id!r}): {reason}: " in line, line


@settings(max_examples=60, deadline=None)
@given(failures=st.one_of(st.integers(0, 2_000), st.integers(0, 10**12)), retry=st.booleans())
def test_a_failure_after_any_number_of_failures_is_recorded_with_a_capped_delay(
    failures: int, retry: bool
) -> None:
    """A session that keeps failing (a model down over a weekend: ~1,000 failures at the
    300 s cap) still gets its failure recorded and its next try within retryMaxSeconds."""
    from controller.handlers.session_summary import Failure, record_failure

    body = kopf.Body({**body_with(VALID, {}), "metadata": {
        "name": "s", "namespace": "agents", "uid": "u", "generation": 1},
        "status": {"observedGeneration": 1, "consecutiveFailures": failures}})  # fmt: skip
    patch = kopf.Patch()
    events = Recorded()
    with pytest.raises((kopf.TemporaryError, kopf.PermanentError)) as raised:
        record_failure(body, patch, Failure("ModelUnavailable", "down", retry=retry),
                       cast(Any, logging.getLogger("test")), events)  # fmt: skip
    assert patch["status"]["consecutiveFailures"] == failures + 1
    assert events.posted == [("Warning", "ModelUnavailable", "down")]
    if retry:
        delay = cast(kopf.TemporaryError, raised.value).delay
        assert delay is not None and 0 < delay <= CONFIG.retry_max_seconds
