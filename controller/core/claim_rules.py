"""Where the claim is decided: may this writer write this session's summary row now? Pure.

kopf peering is advisory (a paused replica can still tick for a moment; equal priorities
freeze everyone; takeover waits for lastseen + lifetime), so every store write is guarded
by a claim per *session in a store*, not per object: two SessionSummary objects (a
hand-named one beside the derived name, or two namespaces' summarizers on one Chroma)
that name one session share one claim, because the claim's name is derived from the
store's identity (Chroma's id of the memory collection and the summary collection's name,
MemoryStore.claim_scope) and the session id.

A writer is a replica serving one object: the same replica serving two objects of one
session is two writers. The claim is a cluster-scoped SessionClaim object, created or
replaced with a resourceVersion precondition and deleted when the write is done; a claim
left by a killed writer is abandoned at its expiry and taken over.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from controller.core.naming import summary_object_name

Decision = Literal["take", "renew", "held"]
NAME_HASH_LEN = 20


@dataclass(frozen=True)
class Writer:
    """Who writes: a replica serving one SessionSummary."""

    replica: str
    owner_uid: str
    owner: str  # namespace/name, for people


@dataclass(frozen=True)
class Claim:
    session_id: str
    collection_id: str
    writer: Writer
    expires_at_ms: int
    generation: int = 0
    collection: str = ""  # where the row is, for people

    def expired(self, now_ms: int) -> bool:
        return self.expires_at_ms <= now_ms

    def remaining_s(self, now_ms: int) -> float:
        return max(0.0, (self.expires_at_ms - now_ms) / 1000)

    def spec(self) -> dict[str, Any]:
        return {
            "sessionId": self.session_id,
            "collectionId": self.collection_id,
            "collection": self.collection,
            "holder": self.writer.replica,
            "ownerUid": self.writer.owner_uid,
            "ownerDisplay": self.writer.owner,
            "generation": self.generation,
            "expiresAt": self.expires_at_ms,
        }


def claim_name(collection_id: str, session_id: str) -> str:
    """One name per (summary collection, session): readable slug, exact-id hash."""
    digest = hashlib.sha256(f"{collection_id}\0{session_id}".encode()).hexdigest()
    slug = summary_object_name(session_id).rsplit("-", 1)[0]
    return f"{slug}-{digest[:NAME_HASH_LEN]}"


def parse_claim(spec: Mapping[str, Any] | None) -> Claim | None:
    """The claim an object holds; an unreadable one counts as no claim (free to take)."""
    if not spec:
        return None
    try:
        return Claim(
            session_id=str(spec["sessionId"]),
            collection_id=str(spec["collectionId"]),
            writer=Writer(
                str(spec["holder"]), str(spec["ownerUid"]), str(spec.get("ownerDisplay", ""))
            ),
            expires_at_ms=int(spec["expiresAt"]),
            generation=int(spec.get("generation") or 0),
            collection=str(spec.get("collection") or ""),
        )
    except (KeyError, ValueError, TypeError):
        return None


def decide(existing: Claim | None, me: Writer, now_ms: int) -> Decision:
    """take: free or abandoned (expired); renew: already mine; held: another live writer."""
    if existing is None or existing.expired(now_ms):
        return "take"
    if existing.writer == me:
        return "renew"
    return "held"


def still_mine(existing: Claim | None, me: Writer, now_ms: int, margin_ms: int) -> bool:
    """Right before a write: mine, and not expiring within margin (clock skew, slow write)."""
    return (
        existing is not None
        and existing.writer == me
        and existing.expires_at_ms - now_ms > margin_ms
    )


def abandoned_long_ago(existing: Claim | None, now_ms: int, grace_ms: int) -> bool:
    """A claim that may be garbage-collected: expired more than grace ago (a live writer's
    clock may run behind ours; grace covers the skew), or unreadable."""
    return existing is None or existing.expires_at_ms + grace_ms < now_ms
