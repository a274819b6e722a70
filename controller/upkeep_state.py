"""What a SessionSummarizer's timer remembers between ticks in this process (the active
replica's): the sunset markers it acted on, the reconciliation's walk, and when its
probes last ran. Held by the operator's runtime, dropped when the SessionSummarizer is
deleted; after a restart or a failover it starts empty, and the stored summaries and the
objects' status tell what was done."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from cachetools import LRUCache

from controller.core.rate_limit import TokenBucket
from controller.core.reconcile_plan import ReconcileCycle
from controller.core.sweep_plan import Candidate

GONE_REMEMBERED = 4096  # deleted SessionSummarizers remembered as deleted (the newest)
PROBE_BACKOFF_MAX_S = 300.0  # failing probes run again at least this often


@dataclass
class MarkerMemory:
    """What the marker scan already did about the markers in the window, so a marker costs
    one request and every later tick only the scan."""

    acted: dict[str, int] = field(default_factory=dict)  # session -> newest marker handled
    reported: set[str] = field(default_factory=set)  # memory ids of invalid markers reported
    # spec.sweep.markerRequestsPerMinute, as a token bucket (core/rate_limit.py).
    bucket: TokenBucket = field(default_factory=lambda: TokenBucket(60))


@dataclass
class Reconciler:
    """The walk of one summarizer's collection (controller/sweep.py, reconcile_step)."""

    cycle: ReconcileCycle | None = None
    last_done_ms: int | None = None
    last_step: float = 0.0  # monotonic
    due_now: bool = False  # the appended-rows cursor lost its place
    pending: list[Candidate] = field(default_factory=list)


@dataclass
class Upkeep:
    markers: MarkerMemory = field(default_factory=MarkerMemory)
    reconciler: Reconciler = field(default_factory=Reconciler)
    probed: float | None = None  # monotonic
    probe_wait: float = 0.0  # the failing probes' current backoff (0: not started)

    def probe_due(self, every_s: float, now: float, *, failing: bool) -> bool:
        """While the probes fail: due after every_s, then twice as late each time up to
        PROBE_BACKOFF_MAX_S (a broken summarizer does not keep its endpoints busy). The first
        call only starts the clock (the create/update/resume handler has just probed);
        failing=False starts it over."""
        last, wait = self.probed, max(every_s, self.probe_wait)
        if not failing:
            self.probed, self.probe_wait = None, 0.0
            return False
        if last is not None and now - last < wait:
            return False
        self.probed = now
        if last is not None:
            self.probe_wait = min(2 * wait, max(every_s, PROBE_BACKOFF_MAX_S))
        return last is not None


class UpkeepState:
    def __init__(self) -> None:
        self._by_summarizer: dict[tuple[str, str], Upkeep] = {}
        # Deleted and not seen again: a tick still under way for one gets a memory of its
        # own, kept by nobody (the newest GONE_REMEMBERED).
        self._gone: LRUCache[tuple[str, str], None] = LRUCache(GONE_REMEMBERED)
        self._lock = threading.Lock()

    def of(self, namespace: str, name: str) -> Upkeep:
        with self._lock:
            if (namespace, name) in self._gone:
                return Upkeep()
            return self._by_summarizer.setdefault((namespace, name), Upkeep())

    def seen(self, namespace: str, name: str) -> None:
        """The SessionSummarizer exists (created again after a deletion, say)."""
        with self._lock:
            self._gone.pop((namespace, name), None)

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._by_summarizer.pop((namespace, name), None)
            self._gone[(namespace, name)] = None
