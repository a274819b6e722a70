"""Whether an Event is new, or a repeat to be counted on one already posted. Pure.

As client-go's EventCorrelator, but the Event's name derives from its key and a create that
finds the name taken counts on that Event, so a restart or failover continues a count.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace

from cachetools import LRUCache

CACHE_SIZE = 4096
NAME_MAX = 253
DIGEST_LEN = 16


@dataclass(frozen=True)
class EventKey:
    """What makes two Events the same one (client-go's getEventKey, without the host)."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str
    type: str
    reason: str
    message: str
    component: str


def event_name(key: EventKey) -> str:
    """The Event's name: the object's, a dot and 16 hex digits of the key's hash (a valid
    DNS subdomain whatever the object's name)."""
    parts = (key.api_version, key.kind, key.namespace, key.name, key.uid, key.type)
    text = "\0".join((*parts, key.reason, key.message, key.component))
    digest = hashlib.sha256(text.encode()).hexdigest()[:DIGEST_LEN]
    base = key.name.lower()[: NAME_MAX - DIGEST_LEN - 1].rstrip("-.")
    return f"{base}.{digest}" if base else digest


@dataclass(frozen=True)
class Decision:
    """Create the Event (count 1), or patch it to this count (first_timestamp kept); also
    what the log remembers of a key."""

    name: str
    count: int
    first_timestamp: str

    @property
    def create(self) -> bool:
        return self.count == 1


class EventLog:
    """The keys this process posted recently, least recently used first out."""

    def __init__(self, size: int = CACHE_SIZE) -> None:
        if size < 1:
            raise ValueError("size must be at least 1")
        self._seen: LRUCache[EventKey, Decision] = LRUCache(size)

    def observe(self, key: EventKey, now: str) -> Decision:
        """What to do for one more occurrence of key at now, and remember it."""
        seen = self._seen.get(key)
        new = replace(seen, count=seen.count + 1) if seen else Decision(event_name(key), 1, now)
        self._seen[key] = new
        return new

    def learned(self, key: EventKey, count: int, first_timestamp: str) -> None:
        """The Event already existed (another process, or before a restart): its count."""
        self._seen[key] = Decision(event_name(key), count, first_timestamp)

    def forget(self, key: EventKey) -> None:
        """The Event is gone (expired by the apiserver's event TTL): the next is new."""
        self._seen.pop(key, None)

    def __len__(self) -> int:
        return len(self._seen)
