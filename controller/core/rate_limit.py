"""A token bucket: at most `per_minute` grants a minute, with a burst of as many. Pure (the
caller passes the time). Markers, which whoever writes memories can write, take their grants
from one (spec.sweep.markerRequestsPerMinute)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TokenBucket:
    per_minute: float
    tokens: float | None = None  # None: full
    last_s: float | None = None  # monotonic seconds of the last refill

    def available(self, now_s: float) -> int:
        """Whole grants available at now_s (refills first)."""
        full = float(self.per_minute)
        if self.tokens is None or self.last_s is None:
            self.tokens = full
        else:
            self.tokens = min(full, self.tokens + max(0.0, now_s - self.last_s) * full / 60.0)
        self.last_s = now_s
        return int(self.tokens)

    def take(self, wanted: int, now_s: float) -> int:
        """Grants up to `wanted`; returns how many were granted."""
        granted = max(0, min(wanted, self.available(now_s)))
        assert self.tokens is not None
        self.tokens -= granted
        return granted

    def give_back(self, unused: int) -> None:
        """Grants taken but not used (the session turned out to need nothing)."""
        if self.tokens is not None and unused > 0:
            self.tokens = min(float(self.per_minute), self.tokens + unused)
