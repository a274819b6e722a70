"""The pure rules behind a long-running install (issue 29): a SessionSummary's Ready,
Reconciling and Stalled from its phase; how a waiting object backs off; the marker scan's
token bucket; when an Event repeats one already posted; which failed objects a summarizer
change asks again; the priority a joining replica takes."""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.api import Condition
from controller.core.retention import to_ask_again
from controller.core.waiting import wait_delay
from controller.kube import events
from controller.kube.events import EventKey, EventRecorder, event_name
from controller.kube.peering import (
    PRIORITY_STEP,
    TOP_PRIORITY,
    joining_priority,
    leader_of,
    with_own_priority,
)
from controller.runtime import TokenBucket
from controller.status import conditions
from controller.status.conditions import set_condition, summary_readiness, with_derived
from tests.support.waiting import looks_within

PHASES = ["Pending", "Summarizing", "Summarized", "Empty", "NotFound", "Failed", None]

# -- SessionSummary: Ready, Reconciling, Stalled -------------------------------------------


@given(st.sampled_from(PHASES), st.integers(1, 50))
def test_kstatus_reads_every_phase_as_current_in_progress_or_failed(phase, generation) -> None:  # type: ignore[no-untyped-def]
    found = {c.type: c for c in summary_readiness(phase, "Why", "msg", generation)}
    assert found["Ready"].status == ("True" if phase in ("Summarized", "Empty") else "False")
    in_progress = "Reconciling" in found
    failed = "Stalled" in found
    # kstatus: Reconciling True -> InProgress, Stalled True -> Failed; never both.
    assert not (in_progress and failed)
    assert in_progress == (phase in ("Pending", "Summarizing", None))
    assert failed == (phase in ("NotFound", "Failed"))
    assert all(c.status != "False" for t, c in found.items() if t != "Ready")
    assert all(c.observed_generation == generation for c in found.values())


def test_a_derived_condition_that_no_longer_holds_is_removed_and_others_kept() -> None:
    summarized = Condition(type="Summarized", status="False", reason="X", message="")
    waiting = with_derived([summarized], summary_readiness("Pending", "SessionClaimed", "m", 1))
    assert {c.type for c in waiting} == {"Summarized", "Ready", "Reconciling"}
    done = with_derived(waiting, summary_readiness("Summarized", "Summarized", "m", 1))
    assert {c.type for c in done} == {"Summarized", "Ready"}
    failed = with_derived(done, summary_readiness("Failed", "StoreUnavailable", "m", 2))
    assert {c.type for c in failed} == {"Summarized", "Ready", "Stalled"}


def test_ready_keeps_its_transition_time_while_its_status_holds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(conditions, "now_rfc3339", lambda: "t1")
    first = with_derived([], summary_readiness("Pending", "A", "m", 1))
    monkeypatch.setattr(conditions, "now_rfc3339", lambda: "t2")
    again = with_derived(first, summary_readiness("Summarizing", "B", "m", 1))
    ready = {c.type: c for c in again}["Ready"]
    assert ready.last_transition_time == "t1" and ready.reason == "B"


# -- waiting for another writer's claim ------------------------------------------------------


@given(
    st.integers(0, 200),
    st.floats(0.1, 5),
    st.floats(1, 120),
    st.floats(0, 1, exclude_max=True),
)
def test_a_wait_grows_by_doubling_and_never_passes_its_bound(attempt, first, most, rand) -> None:  # type: ignore[no-untyped-def]
    delay = wait_delay(attempt, first_s=first, max_s=most, jitter=0.25, rand=rand)
    assert first <= delay <= max(most, first) * 1.25
    later = wait_delay(attempt + 1, first_s=first, max_s=most, jitter=0.25, rand=rand)
    assert later >= delay


def test_the_stated_looks_per_waiting_minute() -> None:
    # docs/operations.md: at most 6 looks in the first waiting minute, 2 in each later one.
    assert looks_within(60, first_s=1, max_s=30) == 5
    assert looks_within(60, first_s=1, max_s=30) <= 6
    total = looks_within(600, first_s=1, max_s=30)
    assert total - looks_within(60, first_s=1, max_s=30) <= 2 * 9


# -- the marker scan's token bucket ----------------------------------------------------------


@given(st.integers(1, 600), st.lists(st.tuples(st.floats(0, 30), st.integers(0, 50)), max_size=40))
def test_no_window_grants_more_than_a_burst_plus_the_rate(per_minute, steps) -> None:  # type: ignore[no-untyped-def]
    bucket = TokenBucket(per_minute)
    now, grants = 0.0, []
    for gap, wanted in steps:
        now += gap
        grants.append((now, bucket.take(wanted, now)))
    for start, _ in grants:
        for end, _ in grants:
            if end < start:
                continue
            window = sum(n for t, n in grants if start <= t <= end)
            assert window <= per_minute + per_minute * (end - start) / 60 + 1e-6


# -- Events: one per state change, repeats counted -----------------------------------------


def key(
    message: str = "store down", reason: str = "StoreUnavailable", name: str = "s1"
) -> EventKey:
    return EventKey("memorycore.io/v1alpha1", "SessionSummary", "ns", name, "uid-1", "Warning",
                    reason, message, "session-summary-operator")  # fmt: skip


class Answer:
    def read(self) -> bytes:
        return b"{}"


class EventsApi:
    """The apiserver's Events as the recorder sees them: name -> count, and each call."""

    def __init__(self, events: dict[str, int] | None = None) -> None:
        self.events, self.calls = dict(events or {}), list[tuple[str, int]]()

    def create_namespaced_event(self, namespace: str, event: Any, **_: Any) -> Answer:
        if event.metadata.name in self.events:
            self.calls.append(("exists", self.events[event.metadata.name]))
            raise events.ApiException(status=409)
        self.events[event.metadata.name] = event.count
        self.calls.append(("create", event.count))
        return Answer()

    def patch_namespaced_event(self, name: str, namespace: str, body: Any, **_: Any) -> Answer:
        if name not in self.events:
            raise events.ApiException(status=404)
        self.events[name] = body["count"]
        self.calls.append(("patch", body["count"]))
        return Answer()

    def read_namespaced_event(self, name: str, namespace: str) -> Any:
        return SimpleNamespace(count=self.events[name])


def posted(monkeypatch: pytest.MonkeyPatch, api: EventsApi, *messages: str) -> EventsApi:
    """Posts a Warning with each message on one object, in order, through a recorder."""
    monkeypatch.setattr(events.kube, "core", lambda: api)
    recorder = EventRecorder()
    obj = {"apiVersion": "memorycore.io/v1alpha1", "kind": "SessionSummary",
           "metadata": {"name": "s1", "namespace": "ns", "uid": "uid-1"}}  # fmt: skip
    for message in messages:
        recorder.post(obj, type_="Warning", reason="StoreUnavailable", message=message)
    recorder.close(timeout=10)
    return api


def test_a_repeated_event_is_counted_on_the_first_one(monkeypatch: pytest.MonkeyPatch) -> None:
    api = posted(monkeypatch, EventsApi(), "store down", "store down", "another")
    assert api.calls == [("create", 1), ("patch", 2), ("create", 1)]
    assert sorted(api.events.values()) == [1, 2]
    assert event_name(key(message="another")) != event_name(key())


LABEL = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)
OBJECT_NAMES = (
    st.lists(LABEL, min_size=1, max_size=12).map(".".join).filter(lambda n: len(n) <= 253)
)


@given(OBJECT_NAMES, st.text(max_size=50))
def test_every_event_name_is_a_valid_object_name(name: str, message: str) -> None:
    made = event_name(key(message=message, name=name))
    assert len(made) <= 253
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*", made)
    assert made == event_name(key(message=message, name=name))


def test_the_recorder_forgets_the_least_recently_used_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(events, "CACHE_SIZE", 2)
    api = posted(monkeypatch, EventsApi(), "a", "b", "a", "c", "a", "c", "b")
    # "b", the least recently used, went when "c" came: its count is read from the apiserver.
    assert api.calls[4:] == [("patch", 3), ("patch", 2), ("exists", 1), ("patch", 2)]


class Expiring(EventsApi):
    def create_namespaced_event(self, namespace: str, event: Any, **_: Any) -> Answer:
        answer = super().create_namespaced_event(namespace, event)
        if len(self.calls) == 1:
            self.events.clear()  # the first one expired by the apiserver's event TTL at once
        return answer


def test_an_event_found_gone_starts_a_new_count_and_one_found_existing_continues(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = posted(monkeypatch, Expiring(), "store down", "store down", "store down")
    assert api.calls == [("create", 1), ("create", 1), ("patch", 2)]
    # Posted 7 times by another replica or before a restart: counted on.
    api = posted(monkeypatch, EventsApi({event_name(key()): 7}), "store down", "store down")
    assert api.calls == [("exists", 7), ("patch", 8), ("patch", 9)]


# -- failed objects asked again when their summarizer changes -------------------------------


def summary(name: str, phase: str | None, reason: str = "StoreUnavailable", *, ref: str = "default",
            gen: int = 1, seen: int = 1) -> dict:  # type: ignore[type-arg]  # fmt: skip
    conds = [{"type": "Summarized", "status": "False", "reason": reason}]
    return {
        "metadata": {"name": name, "resourceVersion": f"rv-{name}", "generation": gen},
        "spec": {"sessionId": name, "summarizerRef": ref},
        "status": {"phase": phase, "observedGeneration": seen, "conditions": conds},
    }


def test_only_objects_whose_last_pass_failed_under_this_summarizer_are_asked_again() -> None:
    objs = [
        summary("failed", "Failed"),
        summary("retrying", "Pending", "MemoryCollectionNotFound"),
        summary("no-summarizer", "Pending", "SummarizerNotFound"),
        summary("waiting", "Pending", "SessionClaimed"),
        summary("done", "Summarized"),
        summary("elsewhere", "Failed", ref="other"),
        summary("asked-again", "Failed", gen=2, seen=1),
    ]
    asked = to_ask_again(objs, "default")
    assert [n for n, _ in asked] == ["failed", "retrying", "no-summarizer"]


# -- peering: a joining replica never preempts a live leader --------------------------------


@given(
    st.dictionaries(
        st.text(min_size=1, max_size=5), st.integers(-(2**40), TOP_PRIORITY), max_size=6
    ),
    st.text(min_size=1, max_size=5),
    st.integers(1, PRIORITY_STEP),
)
def test_a_joining_replica_ranks_below_every_live_replica(live, me, draw) -> None:  # type: ignore[no-untyped-def]
    mine = joining_priority(live, me, draw)
    others = {i: p for i, p in live.items() if i != me}
    assert all(mine < p for p in others.values())
    if others:
        leader = leader_of(others)
        assert leader_of({**others, me: mine}) == leader  # the leader stays the leader


def test_a_rollout_moves_leadership_only_when_the_leader_goes() -> None:
    import random

    rng = random.Random(7)
    live: dict[str, int] = {}
    for pod in ("old-a", "old-b"):
        live[pod] = joining_priority(live, pod, rng.randint(1, PRIORITY_STEP))
    leader = leader_of(live)
    moves = []
    # maxSurge 1, maxUnavailable 0: a new Pod joins, then an old one goes; twice.
    for new, going in (("new-a", "old-b" if leader == "old-a" else "old-a"), ("new-b", leader)):
        live[new] = joining_priority(live, new, rng.randint(1, PRIORITY_STEP))
        assert leader_of(live) == leader, "a new Pod took over a live leader"
        del live[going]
        now = leader_of(live)
        if now != leader:
            moves.append((leader, now, going))
            leader = now
    assert all(going == before for before, _, going in moves) and len(moves) == 1


def test_a_restarted_container_is_not_the_leader_by_its_predecessors_record() -> None:
    # The leader's container was killed and restarted in the same Pod (the same replica
    # id): until kopf's keep-alive, the peering still holds the dead process's top priority.
    read = {"pod-a": 1_000, "pod-b": 900}
    mine = joining_priority(read, "pod-a", 5)
    assert leader_of(read) == "pod-a"  # what the record alone says
    assert leader_of(with_own_priority(read, "pod-a", mine)) == "pod-b"
    assert with_own_priority(read, "pod-c", 1) == read  # not registered yet: not added


def test_set_condition_is_what_with_derived_builds_on() -> None:
    # Guard: with_derived relies on set_condition sorting by type.
    conds = set_condition([], Condition(type="B", status="True", reason="r"))
    conds = set_condition(conds, Condition(type="A", status="True", reason="r"))
    assert [c.type for c in conds] == ["A", "B"]
