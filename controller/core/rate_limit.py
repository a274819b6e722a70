"""A token bucket: at most `per_minute` grants a minute, with a burst of as many. Pure.

The marker scan takes its grants from one (the caller passes the time and keeps it): a
sunset marker is a memory, so whoever writes memories can write markers, each costing a
SessionSummary and a pass. The bucket bounds that at `spec.sweep.markerRequestsPerMinute`,
whatever the tick or the number of markers.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TokenBucket:
    per_minute: float
    tokens: float | None = None  # None: full
    last_s: float | None = None  # monotonic seconds of the last refill

    def available(self, now_s: float) -> int:
        """Whole grants available at now_s (refills first)."""
        self._refill(now_s)
        assert self.tokens is not None
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

    def _refill(self, now_s: float) -> None:
        capacity = float(self.per_minute)
        if self.tokens is None or self.last_s is None:
            self.tokens, self.last_s = capacity, now_s
            return
        elapsed = max(0.0, now_s - self.last_s)
        self.tokens = min(capacity, self.tokens + elapsed * capacity / 60.0)
        self.last_s = now_s
