"""Where the claim is taken: the session's SessionClaim object, created, renewed and
deleted with resourceVersion preconditions (blocking Kubernetes calls; the decisions live
in controller/core/claim_rules.py).

One summary costs two API calls when nobody else wants the session: a create (the claim
is free) and a delete with our resourceVersion (release). The check right before each
store write reads nothing: while our claim has more than the margin left by our clock,
no other writer can have taken it (takeover needs it expired by theirs; the margin covers
clock skew). When it runs short it is renewed with our resourceVersion as precondition,
which fails if anyone else wrote it since.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from controller.api import API_VERSION, CLAIM_KIND, CLAIM_PLURAL, GROUP, VERSION
from controller.core.claim_rules import (
    Claim,
    Writer,
    abandoned_long_ago,
    claim_name,
    decide,
    parse_claim,
)
from controller.kube import client as kube

CONFLICT_RETRIES = 5


class ClaimHeld(Exception):
    """Another live writer holds the session's claim; retry after it expires."""

    def __init__(self, claim: Claim, now_ms: int) -> None:
        self.claim = claim
        self.retry_after_s = max(0.5, claim.remaining_s(now_ms))
        w = claim.writer
        super().__init__(
            f"session {claim.session_id!r} is being summarized by SessionSummary {w.owner} "
            f"on replica {w.replica} (claim expires in {self.retry_after_s:.0f}s)"
        )


class ClaimLost(Exception):
    """Our claim expired or was taken before the write; nothing was written."""


def _now_ms() -> int:
    return int(time.time() * 1000)


def _api() -> client.CustomObjectsApi:
    return kube.custom()


@dataclass
class SessionClaimHandle:
    """The claim of one writer on one session's summary row, for one summarization."""

    session_id: str
    collection_id: str
    collection: str  # for people: where the row is
    writer: Writer
    ttl_s: float
    margin_s: float
    generation: int = 0
    conflicts: int = 0
    api_calls: int = 0
    _resource_version: str | None = field(default=None, repr=False)
    _claim: Claim | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return claim_name(self.collection_id, self.session_id)

    def _new_claim(self, now_ms: int) -> Claim:
        return Claim(
            session_id=self.session_id,
            collection_id=self.collection_id,
            writer=self.writer,
            expires_at_ms=now_ms + int(self.ttl_s * 1000),
            generation=self.generation,
            collection=self.collection,
        )

    def _body(self, claim: Claim, resource_version: str | None) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "name": self.name,
            "labels": {"app.kubernetes.io/managed-by": "session-summary-operator"},
        }
        if resource_version is not None:
            meta["resourceVersion"] = resource_version
        return {
            "apiVersion": API_VERSION,
            "kind": CLAIM_KIND,
            "metadata": meta,
            "spec": claim.spec(),
        }

    def _create(self, claim: Claim) -> bool:
        """False when a claim object exists already."""
        self.api_calls += 1
        try:
            made = _api().create_cluster_custom_object(
                GROUP, VERSION, CLAIM_PLURAL, self._body(claim, None)
            )
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        self._took(claim, made)
        return True

    def _replace(self, claim: Claim, resource_version: str) -> bool:
        """False on a resourceVersion conflict (someone wrote it since) or if it is gone."""
        self.api_calls += 1
        try:
            made = _api().replace_cluster_custom_object(
                GROUP, VERSION, CLAIM_PLURAL, self.name, self._body(claim, resource_version)
            )
        except ApiException as exc:
            if exc.status in (404, 409):
                self.conflicts += 1
                return False
            raise
        self._took(claim, made)
        return True

    def _get(self) -> dict[str, Any] | None:
        self.api_calls += 1
        try:
            return cast(
                dict[str, Any],
                _api().get_cluster_custom_object(GROUP, VERSION, CLAIM_PLURAL, self.name),
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _took(self, claim: Claim, made: Any) -> None:
        self._claim = claim
        self._resource_version = str(made["metadata"]["resourceVersion"])

    def acquire(self) -> Claim:
        """Takes the session's claim, or renews our own; raises ClaimHeld if another live
        writer has it."""
        for _ in range(CONFLICT_RETRIES):
            if self._create(self._new_claim(_now_ms())):
                assert self._claim is not None
                return self._claim
            obj = self._get()
            if obj is None:
                continue  # released between our create and our read: create again
            now = _now_ms()
            existing = parse_claim(obj.get("spec"))
            if decide(existing, self.writer, now) == "held":
                assert existing is not None
                raise ClaimHeld(existing, now)
            if self._replace(self._new_claim(now), obj["metadata"]["resourceVersion"]):
                assert self._claim is not None
                return self._claim
        now = _now_ms()
        contended = Claim(
            self.session_id,
            self.collection_id,
            Writer("(contended)", "", "(contended)"),
            now + 1000,
        )
        raise ClaimHeld(contended, now)

    def verify(self) -> None:
        """Right before a store write: ours with more than the margin left, else renewed
        with our resourceVersion as precondition; raises ClaimLost (nothing may be written)."""
        if self._claim is None or self._resource_version is None:
            raise ClaimLost("no claim taken; nothing written")
        now = _now_ms()
        if self._claim.expires_at_ms - now > self.margin_s * 1000:
            return
        if not self._replace(self._new_claim(now), self._resource_version):
            self._claim = None
            raise ClaimLost(
                f"the claim on session {self.session_id!r} changed while it was being renewed; "
                "nothing written"
            )

    def release(self) -> None:
        """Deletes the claim if it is still the version we wrote (best effort: expiry covers
        a failure)."""
        if self._resource_version is None:
            return
        self.api_calls += 1
        try:
            _api().delete_cluster_custom_object(
                GROUP,
                VERSION,
                CLAIM_PLURAL,
                self.name,
                body=client.V1DeleteOptions(
                    preconditions=client.V1Preconditions(resource_version=self._resource_version)
                ),
            )
        except ApiException as exc:
            if exc.status not in (404, 409):
                raise
        finally:
            self._claim = self._resource_version = None


def collect_abandoned_claims(grace_s: float, now_ms: int | None = None) -> int:
    """Deletes claims whose writer died long ago (expired by more than grace); returns how
    many. Each delete is conditional on the version read, so a claim taken over meanwhile
    stays."""
    now = now_ms if now_ms is not None else _now_ms()
    listing = cast(dict[str, Any], _api().list_cluster_custom_object(GROUP, VERSION, CLAIM_PLURAL))
    deleted = 0
    for obj in listing.get("items") or []:
        if not abandoned_long_ago(parse_claim(obj.get("spec")), now, int(grace_s * 1000)):
            continue
        meta = obj["metadata"]
        try:
            _api().delete_cluster_custom_object(
                GROUP,
                VERSION,
                CLAIM_PLURAL,
                meta["name"],
                body=client.V1DeleteOptions(
                    preconditions=client.V1Preconditions(resource_version=meta["resourceVersion"])
                ),
            )
            deleted += 1
        except ApiException as exc:
            if exc.status not in (404, 409):
                raise
    return deleted
