"""Where the claim is taken: the claim annotation written with a resourceVersion
precondition (blocking Kubernetes calls; decisions live in controller/claims.py)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException

from controller import kube
from controller.api import GROUP, SUMMARY_PLURAL, VERSION
from controller.claims import CLAIM_ANNOTATION, Claim, decide, parse_claim, still_mine

CONFLICT_RETRIES = 5


class ClaimHeld(Exception):
    """Another live writer holds the claim; retry after it expires."""

    def __init__(self, claim: Claim, now_ms: int) -> None:
        self.claim = claim
        self.retry_after_s = max(0.5, (claim.expires_at_ms - now_ms) / 1000)
        super().__init__(
            f"claimed by {claim.holder} for generation {claim.generation} for another "
            f"{self.retry_after_s:.0f}s"
        )


class ClaimLost(Exception):
    """Our claim expired or was taken before the write; nothing was written."""


class ObjectGone(Exception):
    """The SessionSummary was deleted while we worked."""


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class ClaimHandle:
    namespace: str
    name: str
    holder: str
    ttl_s: float
    margin_s: float
    conflicts: int = 0

    def _get(self) -> dict[str, Any]:
        obj = kube.get_summary(self.namespace, self.name)
        if obj is None:
            raise ObjectGone(f"SessionSummary {self.namespace}/{self.name} no longer exists")
        return obj

    def _write(self, obj: dict[str, Any], claim: Claim | None) -> bool:
        """The precondition patch; False on a resourceVersion conflict."""
        meta = obj["metadata"]
        body = {
            "metadata": {
                "resourceVersion": meta["resourceVersion"],
                "annotations": {CLAIM_ANNOTATION: claim.encode() if claim else None},
            }
        }
        try:
            kube.custom().patch_namespaced_custom_object(
                GROUP, VERSION, self.namespace, SUMMARY_PLURAL, self.name, body
            )
            return True
        except ApiException as exc:
            if exc.status == 409:
                self.conflicts += 1
                return False
            if exc.status == 404:
                raise ObjectGone(
                    f"SessionSummary {self.namespace}/{self.name} was deleted"
                ) from exc
            raise

    def acquire(self) -> Claim:
        """Takes or renews the claim; raises ClaimHeld if another live writer has it."""
        for _ in range(CONFLICT_RETRIES):
            obj = self._get()
            now = _now_ms()
            existing = parse_claim(obj["metadata"].get("annotations"))
            if decide(existing, self.holder, now) == "held":
                assert existing is not None
                raise ClaimHeld(existing, now)
            claim = Claim(self.holder, now + int(self.ttl_s * 1000), obj["metadata"]["generation"])
            if self._write(obj, claim):
                return claim
        raise ClaimHeld(Claim("(contended)", _now_ms() + 1000, 0), _now_ms())

    def verify(self) -> None:
        """Right before the store write: still ours with margin, renewing if it runs short."""
        obj = self._get()
        now = _now_ms()
        existing = parse_claim(obj["metadata"].get("annotations"))
        if still_mine(existing, self.holder, now, int(self.margin_s * 1000)):
            return
        if existing is not None and existing.holder != self.holder and not existing.expired(now):
            raise ClaimLost(f"claim taken over by {existing.holder}; nothing written")
        # Ours but short on time, or abandoned: renew atomically or give up.
        claim = Claim(self.holder, now + int(self.ttl_s * 1000), obj["metadata"]["generation"])
        if not self._write(obj, claim):
            raise ClaimLost("the object changed while renewing the claim; nothing written")

    def release(self) -> None:
        """Clears the claim if it is still ours (best effort: expiry covers a failure)."""
        for _ in range(CONFLICT_RETRIES):
            try:
                obj = self._get()
            except ObjectGone:
                return
            existing = parse_claim(obj["metadata"].get("annotations"))
            if existing is None or existing.holder != self.holder:
                return
            if self._write(obj, None):
                return
