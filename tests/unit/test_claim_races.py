"""Taking the session's claim when other writers keep winning the race for it
(controller/kube/claims.py): what the pass is told is what the API server last showed,
never a made-up writer. No cluster: a stand-in for the API on which every create finds an
object and every replace finds it changed."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

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
    handle = SessionClaimHandle(
        session_id="s1",
        collection_id="store-1",
        collection="chroma",
        writer=ME,
        duration_s=D,
        margin_s=5.0,
        renew_s=20.0,
    )
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
    assert held.value.lost_races == CONFLICT_RETRIES
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
    assert isinstance(contended.value, ClaimLost)  # nothing written; the pass is retried
    assert not isinstance(contended.value, ClaimHeld)
    assert f"changed under us {CONFLICT_RETRIES} times" in str(contended.value)
    assert api.reads == []


def test_a_holder_found_after_one_lost_race_is_held_and_the_race_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = EveryRaceLost([claim_object(ME, 1), claim_object(RIVAL, 2)])
    with pytest.raises(ClaimHeld) as held:
        acquire_against(monkeypatch, api)
    assert held.value.claim.writer == RIVAL and held.value.lost_races == 1
    assert "changed under us 1 time first" in str(held.value)
