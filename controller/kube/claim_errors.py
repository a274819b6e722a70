"""What taking or keeping a session's claim can end in (controller/kube/claims.py): the
handlers turn each into a status and an Event."""

from __future__ import annotations

from controller.core.claim_rules import Claim


class ClaimHeld(Exception):
    """Another live writer holds the session's claim (`claim`, as read from the API);
    retry after retry_after_s. lost_races: how many times the claim changed under us
    before we read this holder (0: it held the claim when we first looked)."""

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
    """Our claim lapsed, was taken, or a newer grant wrote the row; or (ClaimContended) we
    never got it: nothing was written."""


class ClaimContended(ClaimLost):
    """The claim changed under us on every attempt to take it, and no live holder was left
    to wait for when we last read it (released, or lapsed): nothing was written, and there
    is no writer to name; the pass is retried."""
