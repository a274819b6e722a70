"""Fencing: may a write land over the row's? Pure. A fence is a claim grant's resourceVersion
(it only grows within one etcd history) and the cluster that issued it; another cluster's
is history unless that cluster still renews its record in the store, so two live clusters
never alternate writes (docs/ledger.md, "Fences and the authority that issued them")."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from controller.core.claim_rules import Sighting, sighted

FENCE_KEY = "fence"
AUTHORITY_KEY = "fenceAuthority"
AUTHORITY_RECORD = "authority"  # the `record` key of a cluster's record in the ledger
_INTEGER = re.compile(r"[1-9][0-9]*")

Admission = Literal["write", "newer-grant", "other-authority", "ahead-of-authority"]


class FenceUnavailable(ValueError):
    """No fence: the resourceVersion is no comparable integer, or the cluster's id is unreadable."""


class AuthorityConflict(RuntimeError):
    """The row was written by another cluster whose operator still writes the store."""


@dataclass(frozen=True)
class Fence:
    number: int
    authority: str

    def metadata(self) -> dict[str, int | str]:
        return {FENCE_KEY: self.number, AUTHORITY_KEY: self.authority}


def fence_of(resource_version: str) -> int:
    """A grant's fencing number: its resourceVersion, a positive integer without leading
    zeros (KEP-5504's comparable form; etcd's revision on every etcd-backed server)."""
    if not _INTEGER.fullmatch(resource_version):
        raise FenceUnavailable(
            f"the API server gave the SessionClaim resourceVersion {resource_version!r}, not a "
            "comparable integer (Kubernetes >= 1.35 guarantees one; every etcd-backed server "
            "has one): writes cannot be fenced"
        )
    return int(resource_version)


def recorded_fence(ledger: Mapping[str, Any] | None) -> Fence | None:
    """The fence in a ledger entry's head; None without one ("" authority: an unknown cluster)."""
    number, authority = (ledger or {}).get(FENCE_KEY), (ledger or {}).get(AUTHORITY_KEY)
    if isinstance(number, bool) or not isinstance(number, int):
        return None
    return Fence(number, authority if isinstance(authority, str) else "")


def admission(found: Fence | None, mine: Fence, grant_is_current: bool) -> Admission:
    """May a writer holding grant `mine` write over a row whose ledger carries `found`?
    write: none, ours or older; other-authority: another cluster's (numbers do not compare);
    newer-grant: a newer grant of ours took over; ahead-of-authority: larger while no grant
    came after ours (grant_is_current), so our authority's history went back (etcd restore)."""
    if found is None:
        return "write"
    if found.authority != mine.authority:
        return "other-authority"
    if found.number <= mine.number:
        return "write"
    return "ahead-of-authority" if grant_is_current else "newer-grant"


@dataclass(frozen=True)
class AuthorityRecord:
    """A cluster's record in a store's ledger, renewed by its operator while it runs;
    renewed_ms is compared only for change."""

    uid: str
    holder: str
    renewed_ms: int
    duration_s: float

    def metadata(self) -> dict[str, str | int | float]:
        return {"record": AUTHORITY_RECORD, "authority": self.uid, "holder": self.holder,
                "renewTime": self.renewed_ms, "leaseDurationSeconds": self.duration_s}  # fmt: skip

    @classmethod
    def parse(cls, meta: Mapping[str, Any]) -> AuthorityRecord | None:
        keys = ("authority", "holder", "renewTime", "leaseDurationSeconds")
        try:
            record = cls(*(f(meta[k]) for f, k in zip((str, str, int, float), keys, strict=True)))
        except (KeyError, TypeError, ValueError):
            return None
        return record if record.duration_s > 0 else None


def authority_record_id(uid: str) -> str:
    return f"authority:{uid}"


def still_writing(
    record: AuthorityRecord | None, sighting: Sighting | None, now_s: float
) -> tuple[Sighting | None, bool]:
    """(our sighting, whether `record`'s cluster still writes the store): live, as a claim's
    holder, until its record is unchanged for its lease on our clock."""
    if record is None:
        return sighting, False
    seen = sighted(sighting, record.uid, f"{record.holder}@{record.renewed_ms}", now_s)
    return seen, now_s - seen.seen_at_s < record.duration_s


def conflict_message(session_id: str, found: Fence, mine: Fence, record: AuthorityRecord) -> str:
    return (
        f"the row of session {session_id!r} was written by cluster {found.authority} (fence "
        f"{found.number}), whose operator ({record.holder}) still renews its authority in "
        f"this store; this cluster ({mine.authority}) writes nothing over it. Two clusters "
        "write one store: stop one's operator, then run `summaryctl handover` in the other "
        '(docs/operations.md, "Moving a store to another cluster")'
    )


def takeover_message(session_id: str, found: Fence, mine: Fence, verdict: Admission) -> str:
    where = (
        f"another cluster ({found.authority or 'unknown'}), whose operator no longer writes "
        "this store" if verdict == "other-authority" else "a history of this cluster that "
        "its own no longer orders (an etcd restored from a backup?)"
    )  # fmt: skip
    return (
        f"the row of session {session_id!r} was last written under a claim of {where}, fence "
        f"{found.number}; this cluster's claim (fence {mine.number}) took it over, keeping "
        "its summary as history"
    )
