"""How taking or keeping a claim can fail (kube/claims.py); each becomes a status and Event."""

from __future__ import annotations

from controller.core.claim_rules import Claim


class ClaimHeld(Exception):
    """Another live writer holds the claim; retry after retry_after_s. lost_races: how often
    the claim changed under us before we read this holder."""

    def __init__(self, claim: Claim, retry_after_s: float, lost_races: int = 0) -> None:
        self.claim = claim
        self.retry_after_s = max(0.5, retry_after_s)
        self.lost_races = lost_races
        w = claim.writer
        times = f"{lost_races} time{'s' if lost_races != 1 else ''}"
        raced = f"; the claim changed under us {times} first" if lost_races else ""
        super().__init__(
            f"session {claim.session_id!r} is being summarized by SessionSummary {w.owner} "
            f"on replica {w.replica} (its claim lapses {self.retry_after_s:.0f}s after it "
            f"stops renewing it{raced})"
        )


class ClaimLost(Exception):
    """Our claim lapsed, was taken or fenced, or was never got; nothing was written."""


class ClaimContended(ClaimLost):
    """The claim changed under us on every attempt and no live holder is left to name;
    the pass is retried."""
