"""The order a pass gets what it needs of this process: a worker thread, a CPU core for the
local embedding, a place in a group write (store/row_writes.py).

One PassScheduler (made by the runtime) orders all three the same way (DeadlineQueue): a
free slot goes to the earliest *deadline*, the moment a pass was queued plus its class's
slack (Slack): a first summary 0 s, a re-summary 10 s, the background (sweep, refreshes)
30 s. A session that just ended goes ahead of re-summaries and the sweep's backlog, and a
job is passed only by jobs of an earlier class arriving within its slack, so none starves
(docs/operations.md, "Scheduling"). At the core queue and the group writes the deadline
counts from when the pass got its worker.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from controller.core.sweep_plan import REFRESH_TRIGGER
from controller.deadline_queue import DeadlineQueue
from controller.store.row_writes import GroupWriter, RowWrite

if TYPE_CHECKING:
    from controller.store.connection import StoreLocation
    from controller.store.memory_store import MemoryStore

T = TypeVar("T")

BACKGROUND_TRIGGERS = frozenset({"sweep", REFRESH_TRIGGER})


class Slack(float, Enum):
    """Seconds a job of each class may be passed by later jobs of earlier classes."""

    FIRST = 0.0
    AGAIN = 10.0
    BACKGROUND = 30.0


def slack_for(trigger: str, *, has_summary: bool) -> Slack:
    if trigger in BACKGROUND_TRIGGERS:
        return Slack.BACKGROUND
    return Slack.AGAIN if has_summary else Slack.FIRST


class _Once:
    """A job queued in two pools: the first thread to take it runs it, the other skips it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._taken = False

    def take(self) -> bool:
        with self._lock:
            taken, self._taken = self._taken, True
            return not taken


@dataclass
class _Job:
    future: Future[Any]
    run: Callable[[], Any]
    submitted: float = field(default_factory=time.monotonic)
    once: _Once | None = None  # queued in two pools (PassScheduler.submit)
    flow: Hashable = None  # its SessionSummarizer (deadline_queue.py)


class _WorkerPool:
    """Daemon threads running queued passes, earliest deadline first, started as needed up
    to the queue's slots. stop() cancels what is queued; join() waits for the running."""

    def __init__(self, name: str, threads: int, running: threading.local) -> None:
        self.name = name
        self.queue: DeadlineQueue[_Job] = DeadlineQueue(threads)
        self._running = running
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def submit(
        self, deadline: float, fn: Callable[[], T], job: _Job | None = None, flow: Hashable = None
    ) -> Future[T]:
        job = job or _Job(Future(), fn)
        job.flow = flow
        more_than_waiting_threads = self.queue.put(deadline, job, flow)
        with self._lock:
            alive = sum(t.is_alive() for t in self._threads)
            if more_than_waiting_threads and alive < self.queue.slots:
                thread = threading.Thread(
                    target=self._work, name=f"{self.name}_{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)
                thread.start()
        return job.future

    def _work(self) -> None:
        while (got := self.queue.take()) is not None:
            deadline, job = got
            try:
                if job.once is not None and not job.once.take():
                    continue  # the other pool's thread took it
                if not job.future.set_running_or_notify_cancel():
                    continue
                # Its deadline at the shared queues: its slack from now, not from its queueing.
                self._running.deadline = deadline + (time.monotonic() - job.submitted)
                self._running.flow = job.flow
                try:
                    result = job.run()
                except BaseException as exc:  # the caller sees it on the future
                    job.future.set_exception(exc)
                else:
                    job.future.set_result(result)
                finally:
                    self._running.deadline = self._running.flow = None
                    self._running.give_way_left = 0.0  # a step's budget is the pass's own
            finally:
                self.queue.release()

    def queued(self) -> int:
        """Jobs waiting for a worker thread."""
        return self.queue.waiting()

    def running(self) -> int:
        """Jobs running on a worker thread now."""
        return self.queue.holding()

    def stop(self) -> None:
        for job in self.queue.close():
            job.future.cancel()

    def join(self, timeout_s: float) -> int:
        """After stop(): waits at most timeout_s; returns how many threads still run a job."""
        deadline = time.monotonic() + timeout_s
        me = threading.current_thread()
        for thread in list(self._threads):
            if thread is not me:
                thread.join(max(0.0, deadline - time.monotonic()))
        return sum(t.is_alive() for t in self._threads if t is not me)


@dataclass
class _StoreGroup:
    writer: GroupWriter
    users: int = 0  # writes waiting in it or written by it


@dataclass(frozen=True)
class SchedulerLimits:
    workers: int  # passes at once in the foreground (sunset, manual, marker)
    background_workers: int  # passes at once for the sweep and the refreshes
    cores: int  # local embeddings at once
    store_writes: int  # groups of summary rows in flight at once, per summary collection
    # Threads only first summaries use when the foreground's are all taken (0: none).
    first_workers: int = 0
    # Longest a later pass waits per step while a first summary runs (give_way); 0: never.
    give_way_s: float = 0.0
    # ... or ended less than this long ago (the gap between two sunsets of a burst).
    give_way_gap_s: float = 0.0


class PassScheduler:
    """Schedules a pass's use of the process, earliest deadline first at every step: a worker
    thread (two pools, so the background's backlog never queues in front of a session that just
    ended), a CPU core for the local embedding (core()), and a place in a group write to its
    summary collection (store_write(); one group writer per collection, so a hung store holds
    up no other).
    """

    def __init__(self, limits: SchedulerLimits) -> None:
        self.limits = limits
        self._running = threading.local()  # the deadline of the pass this thread runs
        self.pools = {
            "foreground": _WorkerPool("summarize", limits.workers, self._running),
            "background": _WorkerPool("summarize-sweep", limits.background_workers, self._running),
        }
        if limits.first_workers:
            self.pools["first"] = _WorkerPool(
                "summarize-first", limits.first_workers, self._running
            )
        self._cores: DeadlineQueue[None] = DeadlineQueue(limits.cores)
        self._store_writes: dict[StoreLocation, _StoreGroup] = {}
        self._lock = threading.Lock()
        self._firsts = 0  # first summaries running now
        self._first_ended = -math.inf  # when the last one ended (monotonic)
        self._firsts_changed = threading.Condition()

    def submit(
        self,
        deadline: float,
        fn: Callable[[], T],
        *,
        background: bool,
        first: bool = False,
        flow: Hashable = None,
    ) -> Future[T]:
        """Runs fn on a worker of its pool, earliest deadline first within its flow (its
        SessionSummarizer), the flows in turn (deadline_queue.py). A first summary with no
        free foreground thread is queued in the first pool too and runs on whichever takes
        it first, so it never waits behind re-summaries."""
        foreground = self.pools["foreground"]
        extra = self.pools.get("first")
        if first:
            fn = self._as_first(fn)
        if background:
            return self.pools["background"].submit(deadline, fn, flow=flow)
        if first and extra is not None and foreground.queue.free() == 0:
            job = _Job(Future(), fn, once=_Once())
            foreground.submit(deadline, fn, job, flow)
            return extra.submit(deadline, fn, job, flow)
        return foreground.submit(deadline, fn, flow=flow)

    def _as_first(self, fn: Callable[[], T]) -> Callable[[], T]:
        def run() -> T:
            self._running.first = True
            with self._firsts_changed:
                self._firsts += 1
            ended = -math.inf  # one that raised (another writer's claim, say) leaves no gap
            try:
                result = fn()
                ended = time.monotonic()
                return result
            finally:
                self._running.first = False
                with self._firsts_changed:
                    self._first_ended = max(self._first_ended, ended)
                    self._firsts -= 1
                    self._firsts_changed.notify_all()

        return run

    def give_way(self, *, within_step: bool = False) -> float:
        """Called by a pass before each of its steps (and within the local embedding after each
        layer, and by a group's leader with no row due): a pass that is not a first summary waits
        while one runs, and for give_way_gap_s after the last one ended, at most give_way_s a step
        in all, so a session that just ended has the cores and the store to itself. Returns the
        seconds waited.
        """
        mine = self._running
        if not within_step:
            mine.give_way_left = self.limits.give_way_s
        if not self.must_give_way():
            return 0.0
        budget = mine.give_way_left
        began = time.monotonic()
        with self._firsts_changed:
            while (left := budget - (time.monotonic() - began)) > 0 and (
                burst := self._burst_left()
            ) > 0:
                self._firsts_changed.wait(min(left, burst))
        waited = time.monotonic() - began
        mine.give_way_left = budget - waited
        return waited

    def _burst_left(self) -> float:
        """Seconds until the burst of first summaries is over (inf while one runs)."""
        if self._firsts:
            return math.inf
        return self.limits.give_way_gap_s - (time.monotonic() - self._first_ended)

    def must_give_way(self) -> bool:
        """A first-summary burst is on, this thread runs another pass (not a probe or the
        CLI), and its step has give-way budget left."""
        mine = self._running
        return bool(
            getattr(mine, "give_way_left", 0.0) > 0
            and self._burst_left() > 0
            and not getattr(mine, "first", False)
            and getattr(mine, "deadline", None) is not None
        )

    @contextlib.contextmanager
    def background(self) -> Iterator[Callable[[], float]]:
        """Background work outside a pass (sweep, reconciliation, retention), ranked as a
        background pass queued now; yields give_way, to call before each unit of work."""
        mine = self._running
        before = getattr(mine, "deadline", None)
        mine.deadline = time.monotonic() + Slack.BACKGROUND
        try:
            yield self.give_way
        finally:
            mine.deadline = before
            mine.give_way_left = 0.0

    def deadline(self) -> float:
        """This thread's pass's deadline; now outside any pass (probe, CLI, tests)."""
        deadline = getattr(self._running, "deadline", None)
        return time.monotonic() if deadline is None else float(deadline)

    @contextlib.contextmanager
    def core(self) -> Iterator[Callable[[], float]]:
        """A CPU core for the local embedding, which calls the yielded function per layer:
        the core goes to an earlier deadline waiting, or is given up for a first summary
        (give_way, within the step's budget). Queue waits do not count against that budget."""
        flow = getattr(self._running, "flow", None)
        with self._cores.turn(self.deadline(), flow) as slot:

            def between() -> float:
                if self.must_give_way():
                    return slot(lambda: self.give_way(within_step=True))
                return slot()  # the step's budget spent, or no first summary: by deadline

            yield between

    def store_write(self, store: MemoryStore, write: RowWrite) -> None:
        """Writes the row in a group with others for the same store location
        (store/row_writes.py), earliest deadline first; raises what refused or failed it."""
        write.deadline = self.deadline()
        with self._lock:
            entry = self._store_writes.get(store.location)
            if entry is None:
                entry = _StoreGroup(GroupWriter(self.limits.store_writes))
                self._store_writes[store.location] = entry
            entry.users += 1
        try:
            entry.writer.write(store, write, lambda: self.give_way(within_step=True))
        finally:
            with self._lock:
                entry.users -= 1

    def forget_store(self, location: StoreLocation) -> None:
        """Drops the location's group writer once no write uses it."""
        with self._lock:
            entry = self._store_writes.get(location)
            if entry is not None and entry.users == 0:
                del self._store_writes[location]

    def store_queues(self) -> int:
        with self._lock:
            return len(self._store_writes)

    def stop(self, timeout_s: float) -> int:
        """Drops queued passes (resumed later); running ones checkpoint and release their
        claims. Waits at most timeout_s; returns how many still ran."""
        deadline = time.monotonic() + timeout_s
        for pool in self.pools.values():
            pool.stop()
        return sum(pool.join(max(0.0, deadline - time.monotonic())) for pool in self.pools.values())


def usable_cpus(cgroup: Path = Path("/sys/fs/cgroup")) -> int:
    """Cores this process may use: CPU affinity capped by the cgroup v2 limit, at least 1."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    try:
        quota, period = (cgroup / "cpu.max").read_text().split()[:2]
        if quota != "max" and int(period) > 0:
            cpus = min(cpus, -(-int(quota) // int(period)))
    except (OSError, ValueError):
        pass
    return max(1, cpus)
