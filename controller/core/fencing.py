"""Fencing: a deposed writer's late write is refused, or at worst only delays facts. Pure.

Each grant of a session's claim carries a number that only grows: the resourceVersion the
API server gave the claim object when it was granted (created, or taken over). Resource
versions of one resource type are comparable integers (guaranteed since Kubernetes 1.35,
KEP-5504; etcd's revision on every etcd-backed server before), and they grow across a
delete and re-create of the object, so a released or collected claim never hands out a
smaller number again.

Every row we write records its grant's number (FENCE_KEY). Right before an upsert the
writer reads the row's number and writes nothing if a newer grant wrote it (admits). Chroma
has no conditional write, so a writer paused between that read and its upsert can still
land a row older than the one there: docs/architecture.md ("Exactly one writer") shows why
that only delays facts, which the next pass restores, and tests/integration/
test_stale_writes.py checks it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

FENCE_KEY = "claimFence"
_INTEGER = re.compile(r"[1-9][0-9]*")


class FenceUnavailable(ValueError):
    """The API server's resourceVersion is not a comparable integer: no fencing number."""


def fence_of(resource_version: str) -> int:
    """The fencing number of a grant: its resourceVersion, which must be a positive integer
    without leading zeros (KEP-5504's comparable form)."""
    if not _INTEGER.fullmatch(resource_version):
        raise FenceUnavailable(
            f"the API server gave the SessionClaim resourceVersion {resource_version!r}, not a "
            "comparable integer (Kubernetes >= 1.35 guarantees one; every etcd-backed server "
            "has one): writes cannot be fenced"
        )
    return int(resource_version)


def row_fence(metadata: Mapping[str, Any] | None) -> int | None:
    """The number of the grant that last wrote the row; None for a row without one (written
    before fencing, by hand, or by another program)."""
    value = (metadata or {}).get(FENCE_KEY)
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def admits(found: int | None, mine: int) -> bool:
    """May a writer holding grant `mine` write over a row carrying `found`? Not when a newer
    grant wrote it: its holder took over from us. An equal number is our own grant's row."""
    return found is None or found <= mine
