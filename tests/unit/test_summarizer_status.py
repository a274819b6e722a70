"""A SessionSummarizer's status from its inputs (controller/status/conditions.py): each
writer changes only its own conditions, whatever order the writes come in."""

import itertools
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from controller.api import Condition, SessionSummarizerSpec, SessionSummarizerStatus
from controller.handlers.session_summarizer import sweep_due
from controller.status import conditions as status_module
from controller.status.conditions import (
    REQUIRED,
    condition,
    spec_valid,
    store_reachable,
    summarizer_readiness,
    sweep_failure,
    with_conditions,
)
from controller.store.errors import StoreUnavailable

MODEL = Condition(type="ModelReady", status="True", reason="Extractive", message="")
EMBED = Condition(type="EmbeddingReady", status="False", reason="EmbeddingMismatch", message="x")


def report(status: SessionSummarizerStatus) -> SessionSummarizerStatus:
    """What a sweep that ran writes (session_summarizer._sweep)."""
    ok = [condition("Swept", "True", "SweepOK", "scanned 40"), store_reachable("http://c:8000")]
    return with_conditions(status, ok, last_sweep_at="2026-11-23T10:00:00Z", watermark=123)


def failed_sweep(
    status: SessionSummarizerStatus, failure: list[Condition], generation: int | None = None
) -> SessionSummarizerStatus:
    """What a sweep that failed writes (session_summarizer._sweep)."""
    return with_conditions(status, failure, generation=generation, last_sweep_at="t")


def types(status: SessionSummarizerStatus) -> dict[str, str]:
    return {c.type: c.reason for c in status.conditions or []}


def test_a_sweep_keeps_the_health_probes_conditions() -> None:
    status = with_conditions(SessionSummarizerStatus(), [MODEL, EMBED])
    after = report(status)
    assert types(after) == {
        "EmbeddingReady": "EmbeddingMismatch",
        "ModelReady": "Extractive",
        "StoreReachable": "HeartbeatOK",
        "Swept": "SweepOK",
    }
    assert after.watermark == 123


def test_every_order_of_writers_ends_with_every_writers_conditions() -> None:
    writers = [
        lambda s: with_conditions(s, [MODEL]),
        lambda s: with_conditions(s, [EMBED]),
        report,
        lambda s: failed_sweep(s, sweep_failure(StoreUnavailable("down"))),
    ]
    for order in itertools.permutations(writers):
        status = SessionSummarizerStatus()
        for write in order:
            status = write(status)
        assert {"ModelReady", "EmbeddingReady", "Swept", "StoreReachable"} <= set(types(status))


def test_a_missing_memory_collection_fails_the_sweep_but_not_the_store_probe() -> None:
    class CollectionNotFound(RuntimeError):
        role = "memory"

    failure = sweep_failure(CollectionNotFound("memory collection 'x' does not exist"))
    status = failed_sweep(
        with_conditions(SessionSummarizerStatus(), [store_reachable("u")]), failure
    )
    assert types(status) == {"StoreReachable": "HeartbeatOK", "Swept": "MemoryCollectionNotFound"}


def test_a_failure_with_an_empty_message_still_says_what_failed() -> None:
    [swept, store] = sweep_failure(StoreUnavailable(""))
    assert swept.message and swept.reason == store.reason == "StoreUnavailable"


# -- Ready, Reconciling and Stalled: derived on every write (settled) ----------------------


from controller.status.conditions import settled, sunset_markers  # noqa: E402

OWNED = [*REQUIRED, "Swept", "SunsetMarkers"]
conditions = st.lists(
    st.builds(
        Condition,
        type=st.sampled_from(OWNED),
        status=st.sampled_from(["True", "False", "Unknown"]),
        reason=st.sampled_from(["Ok", "StoreUnavailable", "SecretNotAnnotated", "X"]),
        message=st.text(max_size=20),
        observed_generation=st.one_of(st.none(), st.integers(1, 9)),
    ),
    unique_by=lambda c: c.type,
)


@given(conditions, st.integers(1, 9))
def test_every_write_leaves_ready_true_exactly_when_every_required_condition_holds(
    owned: list[Condition], generation: int
) -> None:
    after = settled(SessionSummarizerStatus(conditions=owned), generation)
    found = {c.type: c for c in after.conditions or []}
    blocking = [
        c
        for c in owned
        if c.type in (*REQUIRED, "Swept")
        and c.status == "False"
        and (c.type, c.reason) != ("SecretsAllowed", "SecretNotAnnotated")
    ]
    reported = {c.type for c in owned if c.status != "Unknown"}
    ready = found["Ready"]
    if blocking:
        assert ready.status == "False" and found["Stalled"].status == "True"
        assert ready.reason == blocking[0].reason or ready.reason in {c.reason for c in blocking}
        assert "Reconciling" not in found
    elif set(REQUIRED) <= reported:
        assert ready.status == "True" and "Stalled" not in found and "Reconciling" not in found
    else:
        assert ready.status == "Unknown" and found["Reconciling"].status == "True"
    # Every condition says which generation it answers; Ready the oldest of its inputs.
    assert all(c.observed_generation is not None for c in after.conditions or [])
    inputs = [found[t] for t in (*REQUIRED, "Swept") if t in found]
    if inputs:
        assert ready.observed_generation == min(c.observed_generation or 0 for c in inputs)


def test_replica_active_says_nothing_about_the_spec_and_follows_the_generation() -> None:
    cond = Condition(type="ReplicaActive", status="True", reason="Elected", message="r1")
    status = settled(SessionSummarizerStatus(conditions=[cond]), 3)
    assert {c.type: c for c in status.conditions or []}["ReplicaActive"].observed_generation == 3
    status = settled(status, 4)
    assert {c.type: c for c in status.conditions or []}["ReplicaActive"].observed_generation == 4


def test_a_healthy_summarizer_is_ready_and_a_stuck_store_stalls_it() -> None:
    healthy = [
        Condition(type=t, status="True", reason="Ok", message="", observed_generation=2)
        for t in REQUIRED
    ]
    status = settled(SessionSummarizerStatus(conditions=healthy), 2)
    assert types(status)["Ready"] == "Healthy"
    down = sweep_failure(StoreUnavailable("Chroma at u is down"))
    status = settled(failed_sweep(status, down, generation=2), 2)
    found = {c.type: c for c in status.conditions or []}
    assert (found["Ready"].status, found["Ready"].reason) == ("False", "StoreUnavailable")
    assert found["Stalled"].status == "True" and "StoreReachable" in found["Ready"].message


def test_markers_of_sessions_without_memories_are_reported_not_requested() -> None:
    cond = sunset_markers([], [], ["s1", "s2"])
    assert cond is not None and cond.status == "False"
    assert cond.reason == "MarkerWithoutMemories" and "2 session(s)" in cond.message
    assert sunset_markers([], [], []) is None


@pytest.mark.parametrize("pattern", [r"\pL{1000}", r"(?=x)", r"(a)\1", r"a\Z"])
def test_a_spec_the_operator_cannot_use_stalls_its_summarizer_naming_the_field(
    pattern: str,
) -> None:
    """A redaction pattern RE2 refuses (or one over its bound): SpecValid False, and Ready
    False with InvalidSpec even when every probe had passed under the previous spec."""
    spec = {"redaction": {"extraPatterns": [{"name": "mine", "pattern": pattern}]}}
    with pytest.raises(ValidationError) as refused:
        SessionSummarizerSpec.model_validate(spec)
    cond = spec_valid(refused.value)
    assert (cond.type, cond.status, cond.reason) == ("SpecValid", "False", "InvalidSpec")
    assert cond.message.startswith("spec.redaction.extraPatterns.0.pattern: ")
    assert "not a pattern RE2 accepts" in cond.message
    healthy = [
        Condition(type=t, status="True", reason="OK")
        for t in (
            "SecretsAllowed",
            "StoreReachable",
            "EmbeddingReady",
            "ModelReady",
            "ReplicaActive",
        )
    ]
    ready = {c.type: c for c in summarizer_readiness([*healthy, cond])}
    assert (ready["Ready"].status, ready["Ready"].reason) == ("False", "InvalidSpec")
    assert ready["Stalled"].status == "True"
    accepted = {c.type: c for c in summarizer_readiness([*healthy, spec_valid(None)])}
    assert accepted["Ready"].reason == "Healthy"


@given(conditions)
def test_an_unusable_spec_is_the_reason_ready_names_whatever_else_failed(
    owned: list[Condition],
) -> None:
    """A spec the operator cannot use is not probed: the other conditions are what the last
    usable spec (or an older release) measured. Ready names the spec, not a stale probe."""
    invalid = Condition(type="SpecValid", status="False", reason="InvalidSpec", message="x")
    ready = {c.type: c for c in summarizer_readiness([*owned, invalid])}
    assert (ready["Ready"].status, ready["Ready"].reason) == ("False", "InvalidSpec")
    assert ready["Ready"].message.startswith("SpecValid: x")
    assert (ready["Stalled"].status, ready["Stalled"].reason) == ("True", "InvalidSpec")


# -- when each condition was measured, and when a pass contradicts it ----------------------

STAMPS = st.sampled_from(["2026-11-28T10:00:00Z", "2026-11-28T10:05:00Z", "2026-11-28T11:00:00Z"])


def test_every_condition_a_writer_sets_is_measured_at_its_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    at = "2026-11-28T10:00:00Z"
    monkeypatch.setattr(status_module, "now_rfc3339", lambda: at)
    status = with_conditions(SessionSummarizerStatus(), [MODEL, EMBED])
    assert {c.type: c.last_probe_time for c in status.conditions or []} == {
        "ModelReady": at,
        "EmbeddingReady": at,
    }
    monkeypatch.setattr(status_module, "now_rfc3339", lambda: "2026-11-28T10:01:00Z")
    later = with_conditions(status, [MODEL])
    times = {c.type: c.last_probe_time for c in later.conditions or []}
    assert times == {"ModelReady": "2026-11-28T10:01:00Z", "EmbeddingReady": at}
    # Measured again with the same outcome: the transition time stays, the measurement moves.
    model = {c.type: c for c in later.conditions or []}["ModelReady"]
    assert model.last_transition_time == at


@given(st.lists(st.tuples(st.sampled_from(REQUIRED), STAMPS, st.booleans()), min_size=1))
def test_ready_is_as_old_as_its_oldest_measured_input(
    inputs: list[tuple[str, str, bool]],
) -> None:
    conditions = {
        kind: Condition(type=kind, status="True" if ok else "False", reason="R", message="m",
                        last_probe_time=at)
        for kind, at, ok in inputs
    }  # fmt: skip
    settled_status = settled(
        SessionSummarizerStatus(conditions=list(conditions.values())), generation=1
    )
    derived = {c.type: c for c in settled_status.conditions or []}["Ready"]
    assert derived.last_probe_time == min(c.last_probe_time or "" for c in conditions.values())


@given(
    swept=st.sampled_from([None, "True", "False"]),
    interval=st.integers(5, 3600),
    retry=st.integers(1, 3600),
    ago=st.integers(0, 7200),
)
def test_a_failed_sweep_runs_again_at_the_retry_cadence_a_good_one_at_its_interval(
    swept: str | None, interval: int, retry: int, ago: int
) -> None:
    """Swept=False MemoryCollectionNotFound must not outlive the collection's arrival by a
    whole interval (five minutes by default)."""
    last = (datetime.now(UTC) - timedelta(seconds=ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
    conditions = [Condition(type="Swept", status=swept, reason="R", message="")] if swept else []
    status = SessionSummarizerStatus(last_sweep_at=last, conditions=conditions)
    spec = SessionSummarizerSpec.model_validate({"sweep": {"intervalSeconds": interval}})
    every = min(retry, interval) if swept == "False" else interval
    if abs(ago - every) > 2:  # clear of the second the check itself takes
        assert sweep_due(spec, status, retry) is (ago >= every)
    off = SessionSummarizerSpec.model_validate({"sweep": {"enabled": False}})
    assert not sweep_due(off, status, retry)


@given(
    every=st.floats(0.5, 60),
    ticks=st.lists(st.tuples(st.floats(0.1, 400), st.booleans()), min_size=1, max_size=40),
)
def test_failing_probes_run_again_backing_off_and_start_over_once_they_hold(
    every: float, ticks: list[tuple[float, bool]]
) -> None:
    """Probes that keep failing run again after `every`, then twice as late each time, never
    later than PROBE_BACKOFF_MAX_S (or `every`, if larger); once they hold, a new failure
    starts the clock over."""
    from controller.runtime import PROBE_BACKOFF_MAX_S, Upkeep

    upkeep, now = Upkeep(), 0.0
    last: float | None = None
    wait = every
    for step, failing in ticks:
        now += step
        due = upkeep.probe_due(every, now, failing=failing)
        if not failing:
            assert not due
            last, wait = None, every
            continue
        if last is None:  # the first failing tick only starts the clock
            assert not due
            last = now
            continue
        assert due == (now - last >= wait), (now, last, wait)
        if due:
            last, wait = now, min(2 * wait, max(every, PROBE_BACKOFF_MAX_S))


@pytest.mark.parametrize("store", ["down", "up"])
@pytest.mark.parametrize("edited_during", ["probes", "retention", "reconciliation"])
def test_a_ticks_conditions_are_stamped_with_the_generation_it_ran_with(
    edited_during: str, store: str
) -> None:
    """kopf hands a timer the live body: a spec edited while the tick runs (its probes, its
    retention, its reconciliation step) must not get the conditions of the tick's probes and
    sweep (of the old spec) as its own, or a probe or sweep of the old store URL would say
    the new one is reachable or failing."""
    import asyncio
    import contextlib
    import logging
    from types import SimpleNamespace
    from typing import Any, cast
    from unittest import mock

    import kopf

    from controller.config import CONFIG
    from controller.core.sweep_plan import ReconcileCycle, RowCursor, SweepPlan
    from controller.handlers import session_summarizer
    from controller.runtime import Runtime
    from controller.status.conditions import settled
    from controller.sweep import Applied, SweepScan
    from tests.unit.test_invalid_summary_spec import Recorded

    raw: dict[str, Any] = {
        "metadata": {"name": "default", "namespace": "ns", "generation": 3},
        "spec": SessionSummarizerSpec().to_api(),
        "status": {},
    }
    body = kopf.Body(raw)  # live: reads `raw` as it is now

    def edit(stage: str) -> None:
        if stage == edited_during:  # the user's edit lands during this stage
            raw["metadata"]["generation"] = 4

    def probes(*_: Any) -> list[Condition]:
        edit("probes")
        return [MODEL]

    async def retention(*_: Any) -> None:
        edit("retention")

    def reconcile_step(*_: Any, **__: Any) -> ReconcileCycle:  # the walk of the tick's spec
        edit("reconciliation")
        return ReconcileCycle(started_ms=0, rows=1)

    def plan_from_store(*_: Any, **__: Any) -> SweepScan:
        if store == "down":
            raise StoreUnavailable("the store is down")
        return SweepScan(SweepPlan(next_watermark_ms=123), 40, 2, RowCursor(5, "r"), True)

    def apply_plan(*_: Any, **__: Any) -> Applied:
        return Applied(0, 0, 0, 0)

    written: list[SessionSummarizerStatus] = []

    def update(_ns: str, _name: str, change: Any) -> tuple[Any, Any]:
        # as the API server's object is at the write: a condition with no generation gets its
        written.append(settled(change(SessionSummarizerStatus()), raw["metadata"]["generation"]))
        return SessionSummarizerStatus(), written[-1]

    background = SimpleNamespace(background=lambda: contextlib.nullcontext(lambda: 0.0))
    runtime = Runtime(CONFIG, Recorded(), *cast(Any, (background, None)))
    with (
        mock.patch.object(session_summarizer, "health_conditions", probes),
        mock.patch.object(session_summarizer, "_probes_due", lambda tick: True),
        mock.patch.object(session_summarizer, "_retention", retention),
        mock.patch.object(session_summarizer, "reconcile_step", reconcile_step),
        mock.patch.object(
            session_summarizer._Tick,
            "upkeep",
            SimpleNamespace(reconciler=SimpleNamespace(pending=[])),
        ),
        mock.patch.object(session_summarizer, "sweep_due", lambda *_: True),
        mock.patch.object(session_summarizer._Tick, "store", lambda _: contextlib.nullcontext()),
        mock.patch.object(session_summarizer, "plan_from_store", plan_from_store),
        mock.patch.object(session_summarizer, "apply_plan", apply_plan),
        mock.patch("controller.kube.client.update_summarizer_status", update),
    ):
        asyncio.run(
            session_summarizer.sweep(
                body=body,
                name="default",
                namespace="ns",
                logger=logging.getLogger("t"),
                memo=kopf.Memo(runtime=runtime),
            )
        )
    derived = {"Ready", "Reconciling", "Stalled"}  # of the status as written: the newest spec
    stamped = {
        (c.type, c.observed_generation)
        for st in written
        for c in st.conditions or []
        if c.type not in derived
    }
    assert {t for t, _ in stamped} >= {"ModelReady", "MemoryRowsUsable", "StoreReachable"}, stamped
    assert {g for _, g in stamped} == {3}, stamped
    swept = written[-1]  # the sweep's, with its figures; lastSweepAt moves either way
    assert swept.last_sweep_at is not None
    if store == "down":
        assert swept.message == "sweep failed: the store is down"
    else:
        assert swept.message and swept.message.startswith("scanned 40 new memories and 2 added")
        assert swept.watermark == 123 and (took := swept.last_sweep_duration_seconds) is not None
        assert 0 <= took == round(took, 3)  # measured around the scans and the requests
        assert (swept.appended_offset, swept.appended_last_id) == (5, "r")
