"""Which finished SessionSummaries retention deletes (controller/core/retention.py): every
terminal phase has its TTL, measured from when the phase began for the current request."""

import contextlib
import datetime as dt
from unittest import mock

from hypothesis import given
from hypothesis import strategies as st
from kubernetes.client.exceptions import ApiException

from controller.api import SessionSummarizerSpec
from controller.core.retention import (
    RetentionPolicy,
    expired,
    holds_request,
    kept_request,
    pass_in_flight,
)
from controller.sweep import apply_retention

NOW = dt.datetime(2026, 11, 22, 12, 0, tzinfo=dt.UTC)
TERMINAL_PHASES = ("Summarized", "Empty", "NotFound", "Failed", "Forgotten")
POLICY = RetentionPolicy(summarized_s=60, empty_s=30, not_found_s=20, failed_s=90)


def at(age_s: int) -> str:
    return (NOW - dt.timedelta(seconds=age_s)).strftime("%Y-%m-%dT%H:%M:%SZ")


def obj(
    name: str,
    *,
    phase: str = "Summarized",
    age_s: int = 100,
    ref: str = "default",
    generation: int = 1,
    observed: int = 1,
) -> dict:  # type: ignore[type-arg]
    status = {"phase": phase, "observedGeneration": observed, "lastPhaseTransitionTime": at(age_s)}
    if phase == "Summarized":
        status["summarizedAt"] = at(age_s)
    return {
        "metadata": {"name": name, "resourceVersion": f"rv-{name}", "generation": generation},
        "spec": {"sessionId": name, "summarizerRef": ref},
        "status": status,
    }


def test_summarized_objects_older_than_the_ttl_expire() -> None:
    objs = [obj("old", age_s=100), obj("young", age_s=10)]
    assert expired(objs, summarizer="default", now=NOW, policy=POLICY) == [("old", "rv-old")]


def test_every_terminal_phase_expires_after_its_own_ttl() -> None:
    objs = [
        obj("empty", phase="Empty", age_s=31),
        obj("empty-young", phase="Empty", age_s=29),
        obj("notfound", phase="NotFound", age_s=21),
        obj("failed", phase="Failed", age_s=91),
        obj("failed-young", phase="Failed", age_s=89),
    ]
    names = [n for n, _ in expired(objs, summarizer="default", now=NOW, policy=POLICY)]
    assert names == ["empty", "notfound", "failed"]


def test_unfinished_rerequested_or_foreign_objects_are_kept() -> None:
    objs = [
        obj("pending", phase="Pending", age_s=10**6),
        obj("summarizing", phase="Summarizing", age_s=10**6),
        obj("rerequested", generation=2, observed=1, age_s=10**6),
        obj("other-summarizer", ref="other", age_s=10**6),
        {"metadata": {"name": "fresh", "resourceVersion": "1", "generation": 1}, "spec": {}},
    ]
    assert expired(objs, summarizer="default", now=NOW, policy=POLICY) == []


def test_objects_written_before_phase_times_are_measured_from_the_condition_or_creation() -> None:
    by_condition = obj("cond", phase="Empty")
    del by_condition["status"]["lastPhaseTransitionTime"]
    by_condition["status"]["conditions"] = [
        {"type": "Summarized", "status": "False", "reason": "X", "lastTransitionTime": at(40)}
    ]
    by_creation = obj("created", phase="NotFound")
    del by_creation["status"]["lastPhaseTransitionTime"]
    by_creation["metadata"]["creationTimestamp"] = at(25)
    names = [
        n
        for n, _ in expired(
            [by_condition, by_creation], summarizer="default", now=NOW, policy=POLICY
        )
    ]
    assert names == ["cond", "created"]


def test_a_zero_ttl_keeps_that_phase_forever() -> None:
    keep = RetentionPolicy(summarized_s=0, empty_s=0, not_found_s=0, failed_s=0)
    assert expired([obj("old", age_s=10**6)], summarizer="default", now=NOW, policy=keep) == []


phases = st.sampled_from([*TERMINAL_PHASES, "Pending", "Summarizing", None])


@given(
    st.lists(
        st.tuples(phases, st.integers(0, 200), st.integers(1, 3), st.integers(1, 3)), max_size=30
    ),
    st.tuples(*[st.integers(0, 150)] * 4),
)
def test_an_object_is_deleted_exactly_when_its_finished_phase_outlived_its_ttl(
    rows: list[tuple[str | None, int, int, int]], ttls: tuple[int, int, int, int]
) -> None:
    policy = RetentionPolicy(*ttls)
    objs = [
        obj(f"o{i}", phase=str(phase), age_s=age, generation=gen, observed=seen)
        for i, (phase, age, gen, seen) in enumerate(rows)
    ]
    doomed = {n for n, _ in expired(objs, summarizer="default", now=NOW, policy=policy)}
    for i, (phase, age, gen, seen) in enumerate(rows):
        ttl = policy.ttl(phase)
        should = phase in TERMINAL_PHASES and ttl > 0 and gen == seen and age > ttl
        assert (f"o{i}" in doomed) == should, (phase, age, ttl, gen, seen)


@given(
    action=st.sampled_from(["Summarize", "Rebuild", "Forget", None]),
    phase=st.sampled_from(["Failed", *TERMINAL_PHASES, "Pending", "Summarizing", None]),
    observed=st.sampled_from([1, 2, None]),
    age_s=st.integers(0, 10**7),
)
def test_a_failed_forget_or_rebuild_is_never_collected_nor_replaced_by_a_sweep(
    action: str | None, phase: str | None, observed: int | None, age_s: int
) -> None:
    """A request to forget (or rebuild) whose pass failed is retried until it is done:
    retention keeps it, and the sweep, the marker scan and the reconciliation, which patch
    only objects not in flight (retention.pass_in_flight), leave it as it is."""
    one = obj("it", phase=phase or "Pending", age_s=age_s, generation=2, observed=observed or 0)
    if phase is None:
        one["status"].pop("phase")
    if action is not None:
        one["spec"]["action"] = action
    holds = phase == "Failed" and action in ("Rebuild", "Forget")
    assert holds_request(one) == holds
    if holds:
        assert expired([one], summarizer="default", now=NOW, policy=POLICY) == []
        assert pass_in_flight(one)
    else:  # as before: a failed Summarize is asked again by the next sweep that finds it
        assert pass_in_flight(one) == (
            phase in (None, "Pending", "Summarizing") if observed == 2 else phase != "Failed"
        )


class _Killed(BaseException):
    """The process died at this delete."""


class _Objects:
    """SessionSummaries as the API server holds them; the delete at index `fail` fails."""

    def __init__(self, objs: list[dict], how: str) -> None:  # type: ignore[type-arg]
        self.live = {one["metadata"]["name"]: one for one in objs}
        self.how, self.fail, self.calls = how, None, 0  # type: ignore[var-annotated]

    def list(self) -> list[dict]:  # type: ignore[type-arg]
        return list(self.live.values())

    def delete(self, namespace: str, name: str, version: str) -> bool:
        self.calls += 1
        if self.calls - 1 == self.fail:
            if self.how == "killed":
                raise _Killed(name)
            if self.how == "unanswered":
                self.live.pop(name, None)
            raise ApiException(status=504, reason="Gateway Timeout")
        return self.live.pop(name, None) is not None


@given(
    rows=st.lists(
        # ages well apart from the TTLs: the run reads its own clock
        st.tuples(st.sampled_from([*TERMINAL_PHASES, "Pending"]), st.sampled_from([0, 45, 200])),
        min_size=1,
        max_size=12,
    ),
    how=st.sampled_from(["lost", "unanswered", "killed"]),
)
def test_retention_cut_at_any_delete_is_finished_by_the_next_run_and_deletes_nothing_else(
    rows: list[tuple[str, int]], how: str
) -> None:
    """Each of retention's deletes fails in turn (the API server refusing it, applying it
    with its answer lost, or the process killed there); the next run deletes exactly the
    expired objects left, and no other."""
    spec = SessionSummarizerSpec.model_validate(
        {
            "store": {"url": "http://chroma:8000"},
            "retention": {
                "summarizedTTLSeconds": 60,
                "emptyTTLSeconds": 30,
                "notFoundTTLSeconds": 20,
                "failedTTLSeconds": 90,
            },
        }
    )
    now = dt.datetime.now(dt.UTC)
    made = [obj(f"o{i}", phase=phase, age_s=0) for i, (phase, _) in enumerate(rows)]
    for one, (_, age) in zip(made, rows, strict=True):
        when = (now - dt.timedelta(seconds=age)).strftime("%Y-%m-%dT%H:%M:%SZ")
        one["status"]["lastPhaseTransitionTime"] = when
        if "summarizedAt" in one["status"]:
            one["status"]["summarizedAt"] = when
    policy = RetentionPolicy(60, 30, 20, 90)
    doomed = {n for n, _ in expired(made, summarizer="default", now=now, policy=policy)}
    for fail_at in range(len(doomed) + 1):
        api = _Objects(made, how)
        for fail in (fail_at, None):  # the failing run, then the next
            api.fail, api.calls = fail, 0
            with (
                mock.patch("controller.sweep.kube.delete_summary_if_unchanged", api.delete),
                contextlib.suppress(ApiException, _Killed),
            ):
                apply_retention(spec, api.list(), namespace="agents", summarizer="default")
        assert set(api.live) == {one["metadata"]["name"] for one in made} - doomed, fail_at


@given(
    action=st.sampled_from(["Forget", "Rebuild"]),
    memories=st.booleans(),
    phase=st.sampled_from([None, "Pending", "Summarizing", "Summarized", "Empty", "NotFound",
                           "Failed", "Forgotten"]),
    observed=st.sampled_from([None, 1, 2]),
)  # fmt: skip
def test_a_summary_request_never_replaces_an_unfinished_forget_or_rebuild(
    action: str, memories: bool, phase: str | None, observed: int | None
) -> None:
    obj = {
        "metadata": {"generation": 2},
        "spec": {"action": action, "forgetMemories": memories},
        "status": {"phase": phase, "observedGeneration": observed},
    }
    finished = observed == 2 and phase in ("Summarized", "Empty", "NotFound", "Forgotten")
    sunset = {"action": "Summarize", "forgetMemories": False}
    assert kept_request(obj, sunset) == (None if finished else action)
    assert kept_request(obj, {"action": "Forget", "forgetMemories": True}) is None
    keeps_memories = {"action": "Forget", "forgetMemories": False}
    assert kept_request(obj, keeps_memories) == (
        action if action == "Forget" and memories and not finished else None
    )
