"""The SessionClaim as a lease, on the real apiserver: what a pass costs, renewals for a pass
longer than the claim's duration, a deleted or taken claim noticed within one renew
period, a release that never raises, and abandoned claims collected page by page."""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from prometheus_client import REGISTRY

from controller.api import CLAIM_PLURAL, GROUP, VERSION
from controller.core.claim_rules import Claim, Writer
from controller.core.ledger import AuthorityConflict, AuthorityRecord, Fence
from controller.kube import claims as claims_module
from controller.kube import client as kube
from controller.kube.claims import ClaimCollector, ClaimHeld, ClaimLost, SessionClaimHandle
from devenv.processes import wait_for
from tests.integration.harness import Harness
from tests.support.dropping_proxy import dropping_proxy


def handle(
    session: str,
    replica: str,
    uid: str,
    *,
    duration_s: float = 30,
    margin_s: float = 5,
    renew_s: float = 10,
) -> SessionClaimHandle:
    return SessionClaimHandle(
        Claim(session, "claims-test-store", Writer(replica, uid, f"ns/{uid}"), duration_s),
        margin_s=margin_s,
        renew_s=renew_s,
    )


def claim_objects(session: str) -> list[dict[str, Any]]:
    items = kube.custom().list_cluster_custom_object(GROUP, VERSION, CLAIM_PLURAL)["items"]
    return [o for o in items if o["spec"]["sessionId"] == session]


def renewals() -> float:
    """Claims renewed by this process so far (the metric the product counts them in)."""
    return REGISTRY.get_sample_value("session_summary_claim_renewals_total") or 0.0


class CountingApi:
    """The claims' API client, counting the calls made through it."""

    def __init__(self) -> None:
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        self.calls += 1
        return getattr(kube.custom(), name)


@pytest.fixture
def released() -> Iterator[list[SessionClaimHandle]]:
    """Handles to release (their renewer threads stopped) even when a test fails."""
    made: list[SessionClaimHandle] = []
    try:
        yield made
    finally:
        for h in made:
            h.release()


def test_a_free_claim_costs_one_create_and_one_delete_and_a_held_one_is_refused(
    harness: Harness, released: list[SessionClaimHandle], monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = handle("calls-1", "r1", "uid-a")
    released.append(mine)
    api, renewed = CountingApi(), renewals()
    monkeypatch.setattr(claims_module, "_api", lambda: api)
    mine.acquire()
    mine.check()  # no call
    assert mine.fence is not None
    assert mine.admit(None) == mine.fence.metadata()  # no call either
    assert api.calls == 1  # the create
    other = handle("calls-1", "r1", "uid-b")  # the same replica serving another object
    with pytest.raises(ClaimHeld) as held:
        other.acquire()
    assert "ns/uid-a" in str(held.value)
    before_release = api.calls
    mine.release()
    assert api.calls == before_release + 1 and renewals() == renewed  # the delete
    assert claim_objects("calls-1") == []


def test_a_pass_longer_than_the_duration_keeps_its_claim_by_renewing_it(
    harness: Harness, released: list[SessionClaimHandle]
) -> None:
    # Durations long beside a loaded machine's stalls; the claim must outlive 2.5 of them.
    mine = handle("renew-1", "r1", "uid-a", duration_s=4, margin_s=1, renew_s=0.5)
    contender = handle("renew-1", "r2", "uid-b", duration_s=4, margin_s=1, renew_s=0.5)
    released += [mine, contender]
    renewed = renewals()
    mine.acquire()
    deadline = time.monotonic() + 10  # two and a half durations
    attempts = 0
    while time.monotonic() < deadline:
        with pytest.raises(ClaimHeld):
            contender.acquire()
        attempts += 1
        time.sleep(0.5)
    mine.check()  # still ours: renewed all along
    assert renewals() - renewed >= 2  # it outlived two durations only by renewing
    assert attempts >= 3, attempts  # and was contended across them
    assert claim_objects("renew-1")[0]["spec"]["holder"] == "r1"


def test_a_deleted_or_taken_claim_is_noticed_within_one_renew_period(
    harness: Harness, released: list[SessionClaimHandle]
) -> None:
    deleted = handle("noticed-1", "r1", "uid-a", duration_s=30, renew_s=0.5)
    released.append(deleted)
    deleted.acquire()
    kube.custom().delete_cluster_custom_object(GROUP, VERSION, CLAIM_PLURAL, deleted.name)
    wait_for(lambda: _lost(deleted), 2.0, 0.05, message="the deletion noticed")
    with pytest.raises(ClaimLost, match="deleted or taken"):
        deleted.admit(None)

    # Taken: an object of another writer where ours was (as after a takeover).
    taken = handle("noticed-2", "r1", "uid-a", duration_s=30, renew_s=0.5)
    released.append(taken)
    taken.acquire()
    kube.custom().delete_cluster_custom_object(GROUP, VERSION, CLAIM_PLURAL, taken.name)
    thief = handle("noticed-2", "r9", "uid-z", duration_s=30, renew_s=0.5)
    released.append(thief)
    thief.acquire()
    wait_for(lambda: _lost(taken), 2.0, 0.05, message="the takeover noticed")
    # The new grant's fencing number is larger: a row it wrote refuses the old writer.
    assert thief.fence is not None and taken.fence is not None
    assert thief.fence.number > taken.fence.number
    thief.check()
    # Releasing the lost claim leaves the thief's alone.
    taken.release()
    assert [o["spec"]["holder"] for o in claim_objects("noticed-2")] == ["r9"]


def _lost(h: SessionClaimHandle) -> bool:
    try:
        h.check()
    except ClaimLost:
        return True
    return False


def test_a_newer_grants_row_refuses_the_older_writer(
    harness: Harness, released: list[SessionClaimHandle]
) -> None:
    first = handle("fence-1", "r1", "uid-a", duration_s=30)
    released.append(first)
    first.acquire()
    assert first.fence is not None
    first.release()
    second = handle("fence-1", "r2", "uid-b", duration_s=30)
    released.append(second)
    second.acquire()
    assert second.fence is not None and second.fence.number > first.fence.number  # re-create
    assert second.admit(first.fence) == second.fence.metadata()
    assert second.admit(second.fence) == second.fence.metadata()  # its own checkpoint
    assert second.took_over is None
    # A third writer takes the claim over: its row refuses the second writer, whose renewer
    # may not have noticed yet (the admission reads the claim once to tell).
    kube.custom().delete_cluster_custom_object(GROUP, VERSION, CLAIM_PLURAL, second.name)
    third = handle("fence-1", "r3", "uid-c", duration_s=30)
    released.append(third)
    third.acquire()
    assert third.fence is not None and third.fence.number > second.fence.number
    with pytest.raises(ClaimLost, match="newer claim"):
        second.admit(third.fence)


def test_a_fence_of_another_history_is_taken_over_and_said_so(
    harness: Harness, released: list[SessionClaimHandle]
) -> None:
    """A row written under another cluster's claims, or under numbers ahead of every grant
    this cluster made since ours (an etcd restored from a backup), is history: the current
    holder writes over it and says so, never refused forever."""
    mine = handle("history-1", "r1", "uid-a", duration_s=30)
    mine.authority = "this-cluster-uid"
    released.append(mine)
    mine.acquire()
    assert mine.fence is not None
    other_cluster = Fence(mine.fence.number + 10**9, "another-cluster-uid")
    assert mine.admit(other_cluster) == mine.fence.metadata()
    assert mine.took_over is not None and "another cluster" in mine.took_over
    mine.took_over = None
    restored = Fence(mine.fence.number + 10**9, mine.fence.authority)  # ahead of the etcd
    assert mine.admit(restored) == mine.fence.metadata()
    assert mine.took_over is not None and "etcd restored" in mine.took_over


def test_a_fence_of_a_cluster_still_writing_the_store_is_refused_until_it_is_retired(
    harness: Harness, released: list[SessionClaimHandle]
) -> None:
    """Another cluster's fence is history only once that cluster's operator no longer
    renews its record in the store: while it does, the write is refused, both clusters
    named, whatever the fence's number; once an admin removed its record (summaryctl
    handover), the row is taken over at the next look."""
    store = harness.store("claims-memory", f"claims-authority-{uuid.uuid4().hex[:8]}")
    store.renew_authority(AuthorityRecord("other-cluster-uid", "other-operator-0", 1, 60))
    mine = handle("history-2", "r1", "uid-a", duration_s=30)
    mine.authority, mine.authorities = "this-cluster-uid", store.read_authority
    released.append(mine)
    mine.acquire()
    assert mine.fence is not None
    for number in (1, mine.fence.number, mine.fence.number + 10**9):
        with pytest.raises(AuthorityConflict) as refused:
            mine.admit(Fence(number, "other-cluster-uid"))
        assert "other-cluster-uid" in str(refused.value) and "this-cluster-uid" in str(
            refused.value
        )
        store.renew_authority(AuthorityRecord("other-cluster-uid", "other-operator-0", number, 60))
    assert mine.took_over is None
    store.remove_authorities(["other-cluster-uid"])
    assert mine.admit(Fence(7, "other-cluster-uid")) == mine.fence.metadata()
    assert mine.took_over is not None and "other-cluster-uid" in mine.took_over


class _FailingApi:
    """An API client whose delete fails as an unreachable or unwell API server does."""

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    def delete_cluster_custom_object(self, *args: Any, **kwargs: Any) -> None:
        raise self.exc


@pytest.mark.parametrize(
    "exc",
    [ApiException(status=500, reason="etcdserver: leader changed"), ConnectionResetError(104)],
    ids=["api-error", "connection-reset"],
)
def test_release_never_raises_and_counts_the_failure(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, exc: Exception
) -> None:
    from controller import metrics

    h = handle(f"release-{type(exc).__name__.lower()}", "r1", "uid-a")
    h.acquire()
    before = metrics.CLAIM_RELEASE_FAILURES._value.get()
    monkeypatch.setattr(claims_module, "_api", lambda: _FailingApi(exc))
    h.release()  # the pass's real outcome is never hidden by this
    assert metrics.CLAIM_RELEASE_FAILURES._value.get() == before + 1
    monkeypatch.undo()
    assert len(claim_objects(h.claim.session_id)) == 1  # left to lapse; collected later
    kube.custom().delete_cluster_custom_object(GROUP, VERSION, CLAIM_PLURAL, h.name)


def test_abandoned_claims_are_collected_page_by_page_and_live_ones_stay(
    harness: Harness, released: list[SessionClaimHandle], monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = [handle(f"dead-{i}", "gone", f"uid-{i}", duration_s=1, renew_s=0.3) for i in range(5)]
    for h in dead:
        h.acquire()
        h._stop.set()  # the writer died: nobody renews or releases its claim
    live = handle("alive-1", "r1", "uid-live", duration_s=1, margin_s=0.2, renew_s=0.3)
    released.append(live)
    live.acquire()
    monkeypatch.setattr(kube, "list_pages", functools.partial(kube.list_pages, page_size=2))
    collector = ClaimCollector(default_duration_s=1)
    assert collector.collect() == 0  # first sighting: a whole duration and grace to wait
    time.sleep(2.2)
    assert collector.collect() >= 5  # and any other test's leftovers
    assert all(claim_objects(h.claim.session_id) == [] for h in dead)
    assert len(claim_objects("alive-1")) == 1  # renewed all along
    live.check()


def test_a_renewal_and_a_release_whose_answers_are_lost_keep_the_pass_and_free_the_claim(
    harness: Harness, released: list[SessionClaimHandle], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over real HTTP to the real apiserver, through a proxy that applies a request and
    drops its answer: the holder's renewal moved the claim on under its name, so its next
    renewal conflicts; it reads the claim, finds it still its own (same object, holder and
    acquisition) and goes on. A release after such a renewal, and a release whose own
    answer is lost, delete the claim instead of leaving it to lapse."""
    with dropping_proxy() as proxy:
        monkeypatch.setattr(claims_module, "_api", proxy.api)
        mine = handle("lost-answer-1", "r1", "uid-a", duration_s=30, renew_s=0.3)
        released.append(mine)
        mine.acquire()
        proxy.drop = 1
        wait_for(lambda: proxy.dropped == 1, 5.0, 0.02, message="a renewal's answer dropped")
        after_drop = renewals()
        wait_for(lambda: renewals() >= after_drop + 2, 10.0, 0.05, message="renewed on")
        mine.check()  # the pass goes on
        assert [o["spec"]["holder"] for o in claim_objects("lost-answer-1")] == ["r1"]

        mine.renew_s = 3600.0  # the renewer's next attempt comes 2 s after a failure
        proxy.drop = 1
        wait_for(lambda: proxy.dropped == 2, 5.0, 0.02, message="another answer dropped")
        mine.release()  # holds the version before the applied renewal
        assert claim_objects("lost-answer-1") == []

        again = handle("lost-answer-2", "r1", "uid-a", duration_s=30, renew_s=10)
        released.append(again)
        again.acquire()
        proxy.drop = 1  # the delete itself is applied, its answer lost
        again.release()
        assert proxy.dropped == 3 and claim_objects("lost-answer-2") == []
