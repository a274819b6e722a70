"""The order summaries run in, and how many may use a CPU core for the embedding at once.

Two queues decide it: which queued summarization a free worker thread takes next
(DeadlineExecutor), and which running one may embed next (CpuSlots, as many slots as the
process has usable cores). Both serve the earliest *deadline* first, where a job's
deadline is the moment it was queued plus the slack of its class (Slack):

- a first summary (sunset, manual or marker, of an object that has never written one): 0 s;
- a re-summary (the same triggers, for an object that has written one): 10 s;
- the background (the sweep's and the refreshes' passes): 30 s.

So a session that just ended goes ahead of a queue of re-summaries and of the sweep's
backlog, and the order is still fair: a job is passed only by jobs whose deadline is
earlier than its own, and every job queued after that deadline has a later one, so a job
can be passed only by jobs of an earlier class that arrive within its slack after it;
none is starved (docs/operations.md, "Scheduling").
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

from controller.core.sweep_plan import REFRESH_TRIGGER

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


_RUNNING = threading.local()  # the deadline of the job this worker thread runs


def current_deadline() -> float:
    """The deadline of the job running on this thread; now for work outside any job (the
    CLI, tests), which then ranks as a first summary queued this instant."""
    deadline = getattr(_RUNNING, "deadline", None)
    return time.monotonic() if deadline is None else float(deadline)


class DeadlineExecutor(Executor):
    """A thread pool that runs the queued job with the earliest deadline first (ties: the
    one queued first). Threads start as needed, up to max_workers, and stay. They are
    daemon threads: the process calls shutdown() when it stops (controller.operator), which
    lets running jobs finish (and release their claims) and cancels the queued ones."""

    def __init__(self, max_workers: int, thread_name_prefix: str = "worker") -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        self._max_workers = max_workers
        self._prefix = thread_name_prefix
        self._cond = threading.Condition()
        self._queue: list[tuple[float, int, Future[Any], Callable[[], Any]]] = []
        self._order = itertools.count()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._shutdown = False

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        """Queued with the deadline now (first come, first served among such jobs)."""
        return self.submit_by(time.monotonic(), fn, *args, **kwargs)

    def submit_by(
        self, deadline: float, fn: Callable[..., T], /, *args: Any, **kwargs: Any
    ) -> Future[T]:
        future: Future[T] = Future()
        with self._cond:
            if self._shutdown:
                raise RuntimeError("cannot schedule new work after shutdown")
            heapq.heappush(
                self._queue, (deadline, next(self._order), future, lambda: fn(*args, **kwargs))
            )
            if self._idle == 0 and len(self._threads) < self._max_workers:
                thread = threading.Thread(
                    target=self._work,
                    name=f"{self._prefix}_{len(self._threads)}",
                    daemon=True,
                )
                self._threads.append(thread)
                thread.start()
            else:
                self._cond.notify()
        return future

    def queued(self) -> int:
        """Jobs waiting for a worker thread."""
        with self._cond:
            return len(self._queue)

    def _work(self) -> None:
        while True:
            with self._cond:
                self._idle += 1
                while not self._queue and not self._shutdown:
                    self._cond.wait()
                self._idle -= 1
                if not self._queue:
                    return  # shut down and nothing left
                deadline, _, future, job = heapq.heappop(self._queue)
            if not future.set_running_or_notify_cancel():
                continue
            _RUNNING.deadline = deadline
            try:
                result = job()
            except BaseException as exc:  # the caller sees it on the future
                future.set_exception(exc)
            else:
                future.set_result(result)
            finally:
                _RUNNING.deadline = None

    def running(self) -> int:
        """Jobs running on a worker thread now."""
        with self._cond:
            return max(0, sum(t.is_alive() for t in self._threads) - self._idle)

    def join(self, timeout_s: float) -> int:
        """After shutdown(): waits at most timeout_s for the threads to finish their jobs;
        returns how many are still running one."""
        deadline = time.monotonic() + timeout_s
        for thread in list(self._threads):
            if thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))
        return sum(t.is_alive() for t in self._threads if t is not threading.current_thread())

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._cond:
            self._shutdown = True
            if cancel_futures:
                for _, _, future, _ in self._queue:
                    future.cancel()
                self._queue.clear()
            self._cond.notify_all()
        if wait:
            for thread in list(self._threads):
                if thread is not threading.current_thread():
                    thread.join()


class CpuSlots:
    """At most `slots` holders at once; a free slot goes to the waiter with the earliest
    deadline (ties: the one that asked first)."""

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError("slots must be at least 1")
        self.slots = slots
        self._free = slots
        self._cond = threading.Condition()
        self._waiting: list[tuple[float, int]] = []
        self._order = itertools.count()

    @contextlib.contextmanager
    def slot(self, deadline: float | None = None) -> Iterator[None]:
        ticket = (current_deadline() if deadline is None else deadline, next(self._order))
        with self._cond:
            heapq.heappush(self._waiting, ticket)
            while self._free == 0 or self._waiting[0] != ticket:
                self._cond.wait()
            heapq.heappop(self._waiting)
            self._free -= 1
            if self._free and self._waiting:
                self._cond.notify_all()  # the next in line may take another free slot
        try:
            yield
        finally:
            with self._cond:
                self._free += 1
                self._cond.notify_all()

    def waiting(self) -> int:
        with self._cond:
            return len(self._waiting)


def usable_cpus(cgroup: Path = Path("/sys/fs/cgroup")) -> int:
    """Cores this process may use: its CPU affinity, capped by a cgroup v2 CPU limit (a
    Pod's resources.limits.cpu, rounded up), at least 1."""
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


_CPU_SLOTS: list[CpuSlots] = []
_STORE_WRITES: dict[str, CpuSlots] = {}
_GATES_LOCK = threading.Lock()


def cpu_slots() -> CpuSlots:
    """The local embedding's gate (controller/backends.py): CPU-bound work past
    the cores only slows every holder down, and a slot goes to the earliest deadline.
    Made on first use: the settings are read then, not when a module is imported."""
    from controller.config import CONFIG

    with _GATES_LOCK:
        if not _CPU_SLOTS:
            _CPU_SLOTS.append(CpuSlots(CONFIG.cpu_slots or usable_cpus()))
        return _CPU_SLOTS[0]


def store_write_slots(store: str) -> CpuSlots:
    """The summary writes to one store (controller/pipeline.py). Chroma applies them one
    after the other, so a queue of them there is first come, first served; a few at a time
    from here keeps the store as busy and lets the earliest deadline write next. One gate
    per store: a slow or hung store never holds up the writes to another."""
    from controller.config import CONFIG

    with _GATES_LOCK:
        slots = _STORE_WRITES.get(store)
        if slots is None:
            slots = _STORE_WRITES[store] = CpuSlots(CONFIG.store_write_slots)
        return slots
