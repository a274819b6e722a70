"""The order a pass gets a worker thread, a CPU core for the local embedding and a place in a
group write: earliest deadline (queued + its class's Slack) first, so a session that just
ended goes first and none starves (docs/operations.md, "Scheduling")."""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import threading
import time
import weakref
from collections.abc import Callable, Hashable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from controller.store.memory_store import GroupWriter, RowWrite

if TYPE_CHECKING:
    from controller.store.connection import StoreLocation
    from controller.store.memory_store import MemoryStore

T = TypeVar("T")
Item = TypeVar("Item")

# Added to a flow's next deadlines per item it had served while it had more queued.
FLOW_QUANTUM_S = 1.0


class Slack(float, Enum):
    """Seconds a job of each class may be passed by later jobs of earlier classes."""

    FIRST = 0.0
    AGAIN = 10.0
    BACKGROUND = 30.0


def slack_for(trigger: str, *, has_summary: bool) -> Slack:
    if trigger in ("sweep", "refresh"):
        return Slack.BACKGROUND
    return Slack.AGAIN if has_summary else Slack.FIRST


# (deadline, order queued, flow, item); a thread waiting in turn() has no item.
_Waiter = tuple[float, int, Hashable, Any]


class DeadlineQueue(Generic[Item]):
    """At most `slots` served at once, the earliest deadline first, flows (a SessionSummarizer
    each) in turn (FLOW_QUANTUM_S). A thread waits for its own turn (turn()), or queues an
    item a worker thread takes later (put(), take())."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._free = slots
        self._cond = threading.Condition()
        self._line: list[_Waiter] = []
        self._served: dict[Hashable, int] = {}  # served since the flow had none waiting
        self._order = itertools.count()
        self._closed = False
        self._takers = 0  # threads waiting in take()

    def _rank(self, waiter: _Waiter) -> tuple[float, float, int]:
        # The deadline again: a float sum may round two of one flow's deadlines to one.
        deadline, order, flow, _ = waiter
        return deadline + FLOW_QUANTUM_S * self._served.get(flow, 0), deadline, order

    def _next(self) -> _Waiter | None:
        return min(self._line, key=self._rank, default=None)

    def _serve(self, waiter: _Waiter) -> None:
        """Under the condition: the waiter leaves the line with a slot."""
        self._line.remove(waiter)
        flow = waiter[2]
        if any(w[2] == flow for w in self._line):
            self._served[flow] = self._served.get(flow, 0) + 1
        else:
            self._served.pop(flow, None)
        self._free -= 1

    @contextlib.contextmanager
    def turn(self, deadline: float, flow: Hashable = None) -> Iterator[Callable[..., float]]:
        """Holds a slot while the block runs, which calls the yielded function between pieces:
        it gives the slot to an earlier deadline waiting when none is free, or to whoever is
        next while pause() runs; then queues again with its own ticket. Returns the wait."""
        ticket: _Waiter = (deadline, next(self._order), flow, None)
        with self._cond:
            self._acquire(ticket)
        holding = True  # False while a yield gave the slot up and has not taken it back

        def between(pause: Callable[[], object] | None = None) -> float:
            nonlocal holding
            with self._cond:
                head = self._next()
                if pause is None and (
                    self._free or head is None or self._rank(head) >= self._rank(ticket)
                ):
                    return 0.0
                began = time.monotonic()
                holding = False
                self._free += 1
                self._wake()
            try:
                if pause is not None:
                    pause()
            finally:
                with self._cond:
                    self._acquire(ticket)
                    holding = True
            return time.monotonic() - began

        try:
            yield between
        finally:
            if holding:
                self.release()

    def _acquire(self, ticket: _Waiter) -> None:
        """Under the condition: waits for the ticket's turn and takes a slot."""
        self._line.append(ticket)
        try:
            while self._free == 0 or self._next() is not ticket:
                self._cond.wait()
        except BaseException:
            self._line.remove(ticket)
            self._wake()
            raise
        self._serve(ticket)
        if self._free and self._line:
            self._cond.notify_all()  # the next in line may take another free slot

    def put(self, deadline: float, item: Item, flow: Hashable = None) -> bool:
        """Queues the item in its flow; True when more items wait than threads wait in
        take() (a pool should start a thread, if it may)."""
        with self._cond:
            if self._closed:
                raise RuntimeError("cannot schedule new work after the queue was closed")
            self._line.append((deadline, next(self._order), flow, item))
            self._wake()
            return len(self._line) > self._takers

    def take(self) -> Item | None:
        """The next item once a slot is free (release() it after); None once closed."""
        with self._cond:
            self._takers += 1
            try:
                while not (self._line and self._free) and not self._closed:
                    self._cond.wait()
            finally:
                self._takers -= 1
            if self._closed:
                return None
            waiter = min(self._line, key=self._rank)
            self._serve(waiter)
            return waiter[3]

    def release(self) -> None:
        with self._cond:
            self._free += 1
            self._wake()

    def _wake(self) -> None:
        """Under the condition: every thread in turn() (each waits for its own ticket, an
        item of None), else one in take() (any can take the next item)."""
        if any(w[3] is None for w in self._line):
            self._cond.notify_all()
        else:
            self._cond.notify()

    def close(self) -> list[Item]:
        """A pool's queue: serves nothing new; returns the items still queued (dropped)."""
        with self._cond:
            self._closed = True
            dropped = [item for _, _, _, item in self._line]
            self._line.clear()
            self._cond.notify_all()
            return dropped

    def waiting(self) -> int:
        with self._cond:
            return len(self._line)

    def holding(self) -> int:
        with self._cond:
            return self.slots - self._free

    def free(self) -> int:
        """Slots no one holds and no waiter is about to take."""
        with self._cond:
            return max(0, self._free - len(self._line))


@dataclass
class _Pass:
    deadline: float  # at the core queue and the group writes
    flow: Hashable = None  # its SessionSummarizer
    first: bool = False  # a first summary: never gives way
    give_way_left: float = 0.0  # seconds of the current step's give-way budget


class _Current(threading.local):
    """Each thread's pass; None outside one (a probe, the CLI, tests)."""

    running: _Pass | None = None


@dataclass
class _Job:
    future: Future[Any]
    run: Callable[[], Any]
    mine: _Pass  # its deadline is its place in the queue
    once: threading.Lock | None = None  # queued in two pools: the thread that takes it runs it
    submitted: float = field(default_factory=time.monotonic)


class _WorkerPool:
    """Daemon threads running queued passes, started as needed up to the queue's slots."""

    def __init__(self, name: str, threads: int, run: Callable[[_Job], None]) -> None:
        self.name = name
        self.queue: DeadlineQueue[_Job] = DeadlineQueue(threads)
        self._run = run
        self.threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def submit(self, job: _Job) -> Future[Any]:
        more_than_waiting_threads = self.queue.put(job.mine.deadline, job, job.mine.flow)
        with self._lock:  # a thread ends only once the queue is closed, when put() raises
            if more_than_waiting_threads and len(self.threads) < self.queue.slots:
                thread = threading.Thread(
                    target=self._work, name=f"{self.name}_{len(self.threads)}", daemon=True
                )
                self.threads.append(thread)
                thread.start()
        return job.future

    def _work(self) -> None:
        while (job := self.queue.take()) is not None:
            try:
                if job.once is not None and not job.once.acquire(blocking=False):
                    continue  # the other pool's thread took it
                if job.future.set_running_or_notify_cancel():
                    self._run(job)
            finally:
                self.queue.release()


@dataclass(frozen=True)
class SchedulerLimits:
    workers: int  # passes at once in the foreground (sunset, manual, marker)
    background_workers: int  # passes at once for the sweep and the refreshes
    cores: int  # local embeddings at once
    store_writes: int  # groups of summary rows in flight at once, per summary collection
    first_workers: int = 1  # for first summaries alone, when the foreground's are all taken
    give_way_s: float = 0.0  # most a pass waits per step for a first summary (give_way); 0: never
    give_way_gap_s: float = 0.0  # ... or ended less than this long ago (a burst's gap)


class PassScheduler:
    """A pass's worker thread (two pools: the background's backlog never queues in front of a
    session that just ended), core and group write (one writer per collection: a hung store
    holds up no other)."""

    def __init__(self, limits: SchedulerLimits) -> None:
        self.limits = limits
        self._current = _Current()
        self.pools = {
            "foreground": _WorkerPool("summarize", limits.workers, self._run),
            "background": _WorkerPool("summarize-sweep", limits.background_workers, self._run),
            "first": _WorkerPool("summarize-first", limits.first_workers, self._run),
        }
        self._cores: DeadlineQueue[None] = DeadlineQueue(limits.cores)
        # A location's group writer lives while a write uses it.
        self._store_writes: weakref.WeakValueDictionary[StoreLocation, GroupWriter] = (
            weakref.WeakValueDictionary()
        )
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
        """Runs fn on a worker of its pool. A first summary with no free foreground thread is
        queued in the first pool too, so it never waits behind re-summaries."""
        job = _Job(Future(), fn, _Pass(deadline, flow, first))
        if background:
            return self.pools["background"].submit(job)
        foreground = self.pools["foreground"]
        if first and foreground.queue.free() == 0:
            job.once = threading.Lock()
            foreground.submit(job)
            return self.pools["first"].submit(job)
        return foreground.submit(job)

    def _run(self, job: _Job) -> None:
        """On a worker thread: the job as this thread's pass, a first summary counted."""
        # Its deadline at the shared queues: its slack from now, not from its queueing.
        job.mine.deadline += time.monotonic() - job.submitted
        self._current.running = job.mine
        if job.mine.first:
            with self._firsts_changed:
                self._firsts += 1
        ended = -math.inf  # a first summary that raised (another writer's claim) leaves no gap
        try:
            try:
                result = job.run()
                ended = time.monotonic()
            finally:  # counted out before its caller hears of it
                self._current.running = None
                if job.mine.first:
                    with self._firsts_changed:
                        self._first_ended = max(self._first_ended, ended)
                        self._firsts -= 1
                        self._firsts_changed.notify_all()
        except BaseException as exc:  # the caller sees it on the future
            job.future.set_exception(exc)
        else:
            job.future.set_result(result)

    def give_way(self, *, within_step: bool = False) -> float:
        """Called before each step of a pass (and within one): a pass that is not a first
        summary waits while one runs or ended less than give_way_gap_s ago, at most
        give_way_s a step. Returns the seconds waited (0 outside a pass)."""
        mine = self._current.running
        if mine is None:
            return 0.0
        if not within_step:
            mine.give_way_left = self.limits.give_way_s
        if not self._must_give_way(mine):
            return 0.0
        began = time.monotonic()
        with self._firsts_changed:
            while (left := mine.give_way_left - (time.monotonic() - began)) > 0 and (
                burst := self._burst_left()
            ) > 0:
                self._firsts_changed.wait(min(left, burst))
        waited = time.monotonic() - began
        mine.give_way_left -= waited
        return waited

    def _burst_left(self) -> float:
        """Seconds until the burst of first summaries is over (inf while one runs)."""
        if self._firsts:
            return math.inf
        return self.limits.give_way_gap_s - (time.monotonic() - self._first_ended)

    def _must_give_way(self, mine: _Pass) -> bool:
        return mine.give_way_left > 0 and not mine.first and self._burst_left() > 0

    @contextlib.contextmanager
    def background(self) -> Iterator[Callable[[], float]]:
        """Background work outside a pass (sweep, reconciliation, retention) as a background
        pass queued now, one step (give_way_s in all); yields give_way, to call per unit."""
        before, budget = self._current.running, self.limits.give_way_s
        self._current.running = _Pass(time.monotonic() + Slack.BACKGROUND, give_way_left=budget)
        try:
            yield lambda: self.give_way(within_step=True)
        finally:
            self._current.running = before

    def deadline(self) -> float:
        """This thread's pass's deadline; now outside any pass (probe, CLI, tests)."""
        mine = self._current.running
        return time.monotonic() if mine is None else mine.deadline

    @contextlib.contextmanager
    def core(self) -> Iterator[Callable[[], float]]:
        """A CPU core for the local embedding, which calls the yielded function per layer to
        give the core to an earlier deadline or, within the step's budget, a first summary."""
        mine = self._current.running
        with self._cores.turn(self.deadline(), mine.flow if mine else None) as slot:

            def between() -> float:
                if mine is not None and self._must_give_way(mine):
                    return slot(lambda: self.give_way(within_step=True))
                return slot()  # the step's budget spent, or no first summary: by deadline

            yield between

    def store_write(self, store: MemoryStore, write: RowWrite) -> None:
        """Writes the row in a group for its store location; raises what refused or failed it."""
        write.deadline = self.deadline()
        with self._lock:
            writer = self._store_writes.setdefault(
                store.location, GroupWriter(self.limits.store_writes)
            )
        writer.write(store, write, lambda: self.give_way(within_step=True))

    def store_queues(self) -> int:
        with self._lock:
            return len(self._store_writes)

    def stop(self, timeout_s: float) -> int:
        """Drops queued passes (resumed later); returns how many still run after timeout_s."""
        deadline = time.monotonic() + timeout_s
        for pool in self.pools.values():
            for job in pool.queue.close():
                job.future.cancel()
        me = threading.current_thread()
        threads = [t for pool in self.pools.values() for t in pool.threads if t is not me]
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return sum(t.is_alive() for t in threads)


def usable_cpus(cgroup: Path = Path("/sys/fs/cgroup")) -> int:
    """Cores this process may use: CPU affinity capped by the cgroup v2 limit, at least 1."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    with contextlib.suppress(OSError, ValueError):
        quota, period = (cgroup / "cpu.max").read_text().split()[:2]
        if quota != "max" and int(period) > 0:
            cpus = min(cpus, -(-int(quota) // int(period)))
    return max(1, cpus)
