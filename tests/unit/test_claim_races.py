"""Taking the session's claim when other writers keep winning the race for it
(controller/kube/claims.py): what the pass is told is what the API server last showed,
never a made-up writer; and keeping it when the API server applied a renewal or a release
but its answer was lost. No cluster: stand-ins for the API."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from prometheus_client import REGISTRY
from urllib3.exceptions import ProtocolError

from controller.core.claim_rules import Claim, Writer
from controller.kube import claims as claims_module
from controller.kube.claims import (
    CONFLICT_RETRIES,
    ClaimContended,
    ClaimHeld,
    ClaimLost,
    SessionClaimHandle,
)

ME = Writer("replica-a", "uid-1", "agents/s1")
RIVAL = Writer("replica-b", "uid-2", "agents/s1-by-hand")
D = 60.0


def claim_object(writer: Writer, version: int) -> dict[str, Any]:
    spec = Claim("s1", "store-1", writer, D, generation=1, collection="chroma").spec()
    return {"metadata": {"resourceVersion": str(version)}, "spec": spec}


class EveryRaceLost:
    """Each create finds the claim object there, each replace finds it changed since it was
    read; reads return `reads` in turn (None: gone by then)."""

    def __init__(self, reads: list[dict[str, Any] | None]) -> None:
        self.reads = list(reads)

    def create_cluster_custom_object(self, *args: Any, **kwargs: Any) -> Any:
        raise ApiException(status=409, reason="AlreadyExists")

    def replace_cluster_custom_object(self, *args: Any, **kwargs: Any) -> Any:
        raise ApiException(status=409, reason="Conflict")

    def get_cluster_custom_object(self, *args: Any, **kwargs: Any) -> Any:
        read = self.reads.pop(0)
        if read is None:
            raise ApiException(status=404, reason="NotFound")
        return read


def acquire_against(monkeypatch: pytest.MonkeyPatch, api: EveryRaceLost) -> None:
    monkeypatch.setattr(claims_module, "_api", lambda: api)
    handle = SessionClaimHandle(Claim("s1", "store-1", ME, D, collection="chroma"), 5.0, 20.0)
    handle.acquire()


def test_a_claim_lost_in_every_race_names_the_writer_that_holds_it_when_last_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Our own claim of an earlier pass, taken over each time by someone faster; then read
    # once more: the rival holds it.
    ours = [claim_object(ME, version) for version in range(1, CONFLICT_RETRIES + 1)]
    api = EveryRaceLost([*ours, claim_object(RIVAL, 99)])
    with pytest.raises(ClaimHeld) as held:
        acquire_against(monkeypatch, api)
    assert held.value.claim.writer == RIVAL  # as the API server returned it
    assert held.value.retry_after_s == pytest.approx(D, abs=1.0)  # a claim first seen now
    message = str(held.value)
    assert "agents/s1-by-hand" in message and "replica-b" in message
    assert f"changed under us {CONFLICT_RETRIES} times" in message
    assert "(contended)" not in message
    assert api.reads == []


def test_a_claim_lost_in_every_race_with_no_live_holder_left_names_nobody(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Other writers create and release it between our create and our read, every time,
    # and it is gone again when read last: nobody to wait for, nobody to name.
    api = EveryRaceLost([None] * (CONFLICT_RETRIES + 1))
    with pytest.raises(ClaimContended) as contended:
        acquire_against(monkeypatch, api)
    assert not isinstance(contended.value, ClaimLost)  # a wait, no failure: retried quietly
    assert not isinstance(contended.value, ClaimHeld)
    assert f"changed under us {CONFLICT_RETRIES} times" in str(contended.value)
    assert api.reads == []


def test_a_holder_found_after_one_lost_race_is_held_and_the_race_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = EveryRaceLost([claim_object(ME, 1), claim_object(RIVAL, 2)])
    with pytest.raises(ClaimHeld) as held:
        acquire_against(monkeypatch, api)
    assert held.value.claim.writer == RIVAL
    assert "changed under us 1 time first" in str(held.value)


# -- answers lost on the way back --------------------------------------------------------------


class OneObjectServer:
    """One claim object with resourceVersion preconditions, that can apply a request and
    lose its answer (`drop`: how many of the next replaces and deletes to answer with a
    dropped connection, after applying them)."""

    def __init__(self) -> None:
        self.obj: dict[str, Any] | None = None
        self.version, self.drop = 0, 0

    def _apply(self, body: dict[str, Any] | None, expected: str | None) -> dict[str, Any]:
        if self.obj is None or (expected and expected != self.obj["metadata"]["resourceVersion"]):
            raise ApiException(status=404 if self.obj is None else 409, reason="Conflict")
        self.version += 1
        if body is None:
            self.obj = None
            return {}
        self.obj = {**body, "metadata": {"resourceVersion": str(self.version), "uid": "u1"}}
        if self.drop:
            self.drop -= 1
            raise ProtocolError("Connection aborted.", "RemoteDisconnected")
        return self.obj

    def create_cluster_custom_object(self, *args: Any, **_: Any) -> Any:
        if self.obj is not None:
            raise ApiException(status=409, reason="AlreadyExists")
        self.version += 1
        self.obj = {**args[3], "metadata": {"resourceVersion": str(self.version), "uid": "u1"}}
        return self.obj

    def replace_cluster_custom_object(self, *args: Any, **_: Any) -> Any:
        return self._apply(args[4], args[4]["metadata"]["resourceVersion"])

    def get_cluster_custom_object(self, *_: Any, **__: Any) -> Any:
        if self.obj is None:
            raise ApiException(status=404, reason="NotFound")
        return self.obj

    def delete_cluster_custom_object(self, *_: Any, body: Any, **__: Any) -> Any:
        dropped, self.drop = self.drop, max(0, self.drop - 1)
        self._apply(None, body["preconditions"]["resourceVersion"])
        if dropped:
            raise ProtocolError("Connection aborted.", "RemoteDisconnected")


def renewing(monkeypatch: pytest.MonkeyPatch, server: OneObjectServer) -> SessionClaimHandle:
    monkeypatch.setattr(claims_module, "_api", lambda: server)
    handle = SessionClaimHandle(Claim("s1", "store-1", ME, 30.0, collection="chroma"), 5.0, 0.05)
    handle.acquire()
    return handle


def test_a_renewal_applied_with_its_answer_lost_keeps_the_claim(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = OneObjectServer()
    total = "session_summary_claim_renewals_total"  # counted by the product's metric
    renewed = REGISTRY.get_sample_value(total) or 0.0
    handle = renewing(monkeypatch, server)
    server.drop = 1  # the next renewal is applied, its answer lost
    wait_until(lambda: (REGISTRY.get_sample_value(total) or 0.0) >= renewed + 3)
    handle.check()  # still ours: no ClaimLost
    handle.release()
    assert server.obj is None  # released at once, not left to lapse


def test_a_release_after_a_lost_answer_deletes_the_claim_and_never_raises(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = OneObjectServer()
    handle = renewing(monkeypatch, server)
    handle.renew_s = 3600.0  # no renewal of its own after this one
    server.drop = 1
    wait_until(lambda: server.drop == 0)  # applied; the handle holds the older version
    handle.release()
    assert server.obj is None
    handle = renewing(monkeypatch, server)
    server.drop = 1  # the delete itself is applied and its answer lost
    handle.release()
    assert server.obj is None


def test_a_claim_taken_by_another_writer_is_still_lost_whatever_answers_were_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = OneObjectServer()
    handle = renewing(monkeypatch, server)
    assert server.obj is not None
    server.obj["spec"] = {
        **server.obj["spec"],
        "holder": RIVAL.replica,
        "ownerUid": RIVAL.owner_uid,
    }
    server.version += 1
    server.obj["metadata"] = {"resourceVersion": str(server.version), "uid": "u1"}
    wait_until(lambda: _lost(handle))
    handle.release()
    assert server.obj is not None and server.obj["spec"]["holder"] == RIVAL.replica


def wait_until(predicate: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def _lost(handle: SessionClaimHandle) -> bool:
    try:
        handle.check()
    except ClaimLost:
        return True
    return False
