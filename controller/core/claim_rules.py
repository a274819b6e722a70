"""Where the claim is decided: may this writer write this session's summary row now? Pure.
One SessionClaim per summary row, with client-go's Lease semantics: each side reads only its
own monotonic clock (docs/architecture.md, "Exactly one writer")."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from controller.core.text import ms_to_rfc3339


@dataclass(frozen=True)
class Writer:
    replica: str
    owner_uid: str
    owner: str  # namespace/name, for people


@dataclass(frozen=True)
class Claim:
    """A SessionClaim's spec; its times, generation and collection are for people: unread."""

    session_id: str
    collection_id: str
    writer: Writer
    duration_s: float
    generation: int = 0
    collection: str = ""  # where the row is, for people
    acquired_at_ms: int = 0
    renewed_at_ms: int = 0

    def spec(self) -> dict[str, Any]:
        return {
            "sessionId": self.session_id,
            "collectionId": self.collection_id,
            "collection": self.collection,
            "holder": self.writer.replica,
            "ownerUid": self.writer.owner_uid,
            "ownerDisplay": self.writer.owner,
            "generation": self.generation,
            "leaseDurationSeconds": self.duration_s,
            "acquireTime": ms_to_rfc3339(self.acquired_at_ms),
            "renewTime": ms_to_rfc3339(self.renewed_at_ms),
        }


def parse_claim(spec: Mapping[str, Any] | None, default_duration_s: float) -> Claim | None:
    """The claim an object holds, as decisions read it; an unreadable one is none (free)."""
    if not spec:
        return None
    try:
        duration = spec.get("leaseDurationSeconds")
        duration_s = float(duration) if duration is not None else default_duration_s
        if not duration_s > 0:
            return None
        return Claim(
            session_id=str(spec["sessionId"]),
            collection_id=str(spec["collectionId"]),
            writer=Writer(
                str(spec["holder"]), str(spec["ownerUid"]), str(spec.get("ownerDisplay", ""))
            ),
            duration_s=duration_s,
        )
    except (KeyError, ValueError, TypeError):
        return None


@dataclass(frozen=True)
class Sighting:
    """When this contender first saw a claim object as it is now (its resourceVersion), on
    its own monotonic clock (client-go's observedTime)."""

    name: str
    version: str
    seen_at_s: float


def sighted(previous: Sighting | None, name: str, version: str, now_s: float) -> Sighting:
    """Unchanged, the first sighting stands; changed or new, the clock starts now."""
    if previous is not None and previous.name == name and previous.version == version:
        return previous
    return Sighting(name, version, now_s)


def held_for_s(existing: Claim | None, sighting: Sighting, me: Writer, now_s: float) -> float:
    """How long, on our clock, another writer's claim stays live if its holder stops renewing
    now: 0 (take it) when free, unreadable, ours already, or unchanged for its whole duration
    since we saw it as it is."""
    if existing is None or existing.writer == me:
        return 0.0
    return max(0.0, existing.duration_s - (now_s - sighting.seen_at_s))


def holder_may_write(renewed_at_s: float, now_s: float, duration_s: float, margin_s: float) -> bool:
    """Less than duration - margin since the holder sent its last renewal, on its own clock: it
    stops before a contender takes over (docs/architecture.md, "Why the holder stops first")."""
    return now_s - renewed_at_s < duration_s - margin_s


def abandoned(sighting: Sighting, duration_s: float, grace_s: float, now_s: float) -> bool:
    """Unchanged on our clock for its duration and a grace more: a live holder renews it."""
    return now_s - sighting.seen_at_s >= duration_s + grace_s
