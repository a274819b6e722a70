"""How soon a SessionSummary that waits for another writer's claim looks again (backing off
as client-go's workqueue does), and the pause of background work. Pure."""

from __future__ import annotations

from collections.abc import Callable

MAX_DOUBLINGS = 32
# What background work calls before each unit of it: the scheduler's give_way, or no_pause.
Pause = Callable[[], object]


def no_pause() -> None:
    pass


def wait_delay(attempt: int, *, first_s: float, max_s: float, jitter: float, rand: float) -> float:
    """Seconds until the next look after `attempt` looks found the claim held; rand in [0, 1)."""
    base = min(first_s * 2 ** min(max(attempt, 0), MAX_DOUBLINGS), max(max_s, first_s))
    return base * (1 + jitter * min(max(rand, 0.0), 1.0))
