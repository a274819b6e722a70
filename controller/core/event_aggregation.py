"""Whether an Event is new, or a repeat to be counted on one already posted. Pure. As
client-go's EventCorrelator, but the name derives from the key: a restart continues a count."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

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
    """The object's name, a dot and a hash of the key: a DNS subdomain whatever the name."""
    parts = (key.api_version, key.kind, key.namespace, key.name, key.uid, key.type)
    text = "\0".join((*parts, key.reason, key.message, key.component))
    digest = hashlib.sha256(text.encode()).hexdigest()[:DIGEST_LEN]
    base = key.name.lower()[: NAME_MAX - DIGEST_LEN - 1].rstrip("-.")
    return f"{base}.{digest}" if base else digest


class EventLog:
    """The count of each key this process posted recently, least recently used first out."""

    def __init__(self, size: int = CACHE_SIZE) -> None:
        self._counts: LRUCache[EventKey, int] = LRUCache(size)

    def observe(self, key: EventKey) -> int:
        """The count with one more occurrence: 1 creates the Event, more patch its count."""
        count = self._counts.get(key, 0) + 1
        self._counts[key] = count
        return count

    def learned(self, key: EventKey, count: int) -> None:
        self._counts[key] = count

    def forget(self, key: EventKey) -> None:
        self._counts.pop(key, None)
