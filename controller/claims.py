"""Where the claim is decided: may this replica write this session's summary now? Pure.

kopf peering is advisory (a paused replica can still tick for a moment; equal priorities
freeze everyone; takeover waits for lastseen + lifetime), so every store write is guarded
by a per-object claim: an annotation on the SessionSummary with holder, expiry and the
generation served, written with a resourceVersion precondition. A conflict means someone
else changed the object first; the claim is then re-read and decided again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

CLAIM_ANNOTATION = "memorycore.io/claim"

Decision = Literal["take", "renew", "held"]


@dataclass(frozen=True)
class Claim:
    holder: str
    expires_at_ms: int
    generation: int

    def expired(self, now_ms: int) -> bool:
        return self.expires_at_ms <= now_ms

    def encode(self) -> str:
        return json.dumps(
            {"holder": self.holder, "expiresAt": self.expires_at_ms, "generation": self.generation},
            separators=(",", ":"),
            sort_keys=True,
        )


def parse_claim(annotations: Mapping[str, str] | None) -> Claim | None:
    """The claim on an object; an unreadable annotation counts as no claim (expired)."""
    raw = (annotations or {}).get(CLAIM_ANNOTATION)
    if not raw:
        return None
    try:
        data = json.loads(raw)
        return Claim(str(data["holder"]), int(data["expiresAt"]), int(data["generation"]))
    except (ValueError, KeyError, TypeError):
        return None


def decide(existing: Claim | None, me: str, now_ms: int) -> Decision:
    """take: free or abandoned (expired); renew: already mine; held: another live holder."""
    if existing is None or existing.expired(now_ms):
        return "take"
    if existing.holder == me:
        return "renew"
    return "held"


def still_mine(existing: Claim | None, me: str, now_ms: int, margin_ms: int) -> bool:
    """Right before a write: mine, and not expiring within margin (clock skew, slow write)."""
    return (
        existing is not None
        and existing.holder == me
        and existing.expires_at_ms - now_ms > margin_ms
    )
