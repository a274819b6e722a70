"""The test control plane's apiserver audit log (devenv/controlplane.py writes one, Metadata
level, for our resources, kopf's peering, Secrets and Events), read as a list of requests:
how the tests and benches count the API calls and Events the operator makes."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

ON_A_CLOCK = frozenset({"list", "watch"})  # the operator's watches and periodic lists


@dataclass(frozen=True)
class ApiRequest:
    at_ms: int
    user: str
    verb: str
    resource: str  # with "/subresource" when there is one
    name: str
    namespace: str
    code: int

    @property
    def what(self) -> tuple[str, str]:
        return self.verb, self.resource


def _ms(stamp: str) -> int:
    return int(dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000)


def requests(audit: Path, user: str, start_ms: int, end_ms: int) -> list[ApiRequest]:
    """The requests `user` made that the apiserver received in [start_ms, end_ms]."""
    found = []
    for line in audit.read_text().splitlines():
        event = json.loads(line)
        if event.get("user", {}).get("username") != user:
            continue
        at = _ms(event.get("requestReceivedTimestamp", "1970-01-01T00:00:00Z"))
        if not start_ms <= at <= end_ms:
            continue
        ref = event.get("objectRef") or {}
        resource = ref.get("resource", "?") + (
            f"/{ref['subresource']}" if ref.get("subresource") else ""
        )
        found.append(
            ApiRequest(
                at_ms=at,
                user=user,
                verb=event.get("verb", "?"),
                resource=resource,
                name=ref.get("name", ""),
                namespace=ref.get("namespace", ""),
                code=int((event.get("responseStatus") or {}).get("code", 0)),
            )
        )
    return found


def by_call(found: Iterable[ApiRequest]) -> Counter[tuple[str, str]]:
    """(verb, resource) -> how many."""
    return Counter(r.what for r in found)
