"""Fencing: a deposed writer's late write is refused, or at worst only delays facts. Pure.

Each grant of a row's claim carries a number that only grows: the resourceVersion the API
server gave the claim object when it was granted (created, or taken over). Resource
versions of one resource type are comparable integers (guaranteed since Kubernetes 1.35,
KEP-5504; etcd's revision on every etcd-backed server before), and they grow across a
delete and re-create of the object, so a released or collected claim never hands out a
smaller number again.

A number means something only within the history that issued it, so a fence is the pair
(authority, number): the authority is the cluster's identity (the UID of its kube-system
namespace). The ledger entry of each row records the fence of the grant that wrote it
(FENCE_KEY, AUTHORITY_KEY). Right before an upsert the writer reads it and writes nothing
if a newer grant of the same authority wrote it (admits). A fence of another authority (a
new cluster over the same store), or a number ahead of every grant this authority can have
made since ours (an etcd restored from a backup: its revisions went back), is history, not
a newer writer: the row is taken over and the object says so (takeover). Chroma has no
conditional write, so a writer paused between that read and its upsert can still land a
row older than the one there: docs/architecture.md ("Exactly one writer") shows why that
only delays facts, which the next pass restores, and tests/integration/
test_stale_writes.py checks it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

FENCE_KEY = "fence"
AUTHORITY_KEY = "fenceAuthority"
LEGACY_FENCE_KEY = "claimFence"  # the previous release's fence, on the row itself
UNKNOWN_AUTHORITY = ""  # a fence recorded without one (the previous release's)
_INTEGER = re.compile(r"[1-9][0-9]*")

Admission = Literal["write", "newer-grant", "other-authority", "ahead-of-authority"]


class FenceUnavailable(ValueError):
    """The API server's resourceVersion is not a comparable integer: no fencing number."""


@dataclass(frozen=True)
class Fence:
    """A grant's fencing number and the authority (cluster) that issued it."""

    number: int
    authority: str = UNKNOWN_AUTHORITY

    def metadata(self) -> dict[str, int | str]:
        return {FENCE_KEY: self.number, AUTHORITY_KEY: self.authority}


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


def _integer(value: object) -> int | None:
    return None if isinstance(value, bool) or not isinstance(value, int) else value


def recorded_fence(
    ledger: Mapping[str, Any] | None, row: Mapping[str, Any] | None = None
) -> Fence | None:
    """The fence of the grant that last wrote the row: the ledger entry's, else the one the
    previous release kept on the row itself (its authority unknown); None for a row without
    one (written before fencing, by hand, or by another program)."""
    number = _integer((ledger or {}).get(FENCE_KEY))
    if number is not None:
        authority = (ledger or {}).get(AUTHORITY_KEY)
        return Fence(number, authority if isinstance(authority, str) else UNKNOWN_AUTHORITY)
    legacy = _integer((row or {}).get(LEGACY_FENCE_KEY))
    return Fence(legacy) if legacy is not None else None


def admission(found: Fence | None, mine: Fence, grant_is_current: bool) -> Admission:
    """May a writer holding grant `mine` write over a row whose ledger carries `found`?

    - write: no fence, ours or older, of the same authority (or of an unknown one);
    - other-authority: issued by another cluster, whose numbers do not compare with ours;
    - newer-grant: a newer grant of our authority wrote it: its holder took over from us;
    - ahead-of-authority: a larger number, while our grant is still the current one
      (grant_is_current: the claim object is unchanged since our grant or last renewal, so
      no grant came after ours): our authority's history went back (an etcd restore).
    A fence of unknown authority (the previous release's) compares as ours.
    """
    if found is None:
        return "write"
    if UNKNOWN_AUTHORITY not in (found.authority, mine.authority) and (
        found.authority != mine.authority
    ):
        return "other-authority"
    if found.number <= mine.number:
        return "write"
    return "ahead-of-authority" if grant_is_current else "newer-grant"


def takeover_message(session_id: str, found: Fence, mine: Fence, verdict: Admission) -> str:
    """What the object says when a write took a row over from another history."""
    where = (
        f"another cluster (authority {found.authority})"
        if verdict == "other-authority"
        else "a history of this cluster that its own no longer orders (an etcd restored "
        "from a backup?)"
    )
    return (
        f"the row of session {session_id!r} was last written under a claim of {where}, fence "
        f"{found.number}; this cluster's claim (fence {mine.number}) took it over, keeping "
        "its summary as history"
    )
