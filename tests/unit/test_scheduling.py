"""controller.scheduling: earliest deadline first, for worker threads, CPU cores and store
writes (one PassScheduler, one DeadlineQueue under each: controller/deadline_queue.py)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.deadline_queue import DeadlineQueue, QueueClosed
from controller.scheduling import (
    PassScheduler,
    SchedulerLimits,
    Slack,
    slack_for,
    usable_cpus,
)


def scheduler(workers: int = 1, store_writes: int = 2) -> PassScheduler:
    return PassScheduler(
        SchedulerLimits(workers=workers, background_workers=2, cores=1, store_writes=store_writes)
    )


class Pool:
    """The foreground pool of a scheduler of its own, as the tests below use it."""

    def __init__(self, workers: int) -> None:
        self.scheduler = scheduler(workers)
        self.pool = self.scheduler.pools["foreground"]

    def submit(self, fn, *args, **kwargs):  # type: ignore[no-untyped-def]
        return self.submit_by(time.monotonic(), fn, *args, **kwargs)

    def submit_by(self, deadline, fn, *args, **kwargs):  # type: ignore[no-untyped-def]
        return self.scheduler.submit(deadline, lambda: fn(*args, **kwargs), background=False)

    def queued(self) -> int:
        return self.pool.queued()

    def shutdown(self) -> None:
        self.scheduler.stop(10)


deadlines = st.lists(st.floats(min_value=0, max_value=1000, allow_nan=False), max_size=25)


def _wait_until(predicate, timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.001)


@settings(max_examples=40, deadline=None)
@given(deadlines)
def test_queued_jobs_run_earliest_deadline_first_ties_in_queue_order(marks: list[float]) -> None:
    pool = Pool(1)
    gate = threading.Event()
    ran: list[int] = []
    try:
        blocker = pool.submit(gate.wait)
        _wait_until(lambda: pool.queued() == 0)  # the one worker is busy with the blocker
        futures = [pool.submit_by(d, ran.append, i) for i, d in enumerate(marks)]
        gate.set()
        blocker.result(5)
        for f in futures:
            f.result(5)
    finally:
        gate.set()
        pool.shutdown()
    assert ran == sorted(range(len(marks)), key=lambda i: (marks[i], i))


def test_a_job_sees_its_deadline_results_and_errors_reach_the_caller() -> None:
    pool = Pool(2)
    try:
        # Its deadline, counted from when it got its worker (at once here: within 1 s).
        assert 123.5 <= pool.submit_by(123.5, pool.scheduler.deadline).result(5) < 124.5

        def boom() -> None:
            raise ValueError("no")

        with pytest.raises(ValueError, match="no"):
            pool.submit(boom).result(5)
        assert pool.submit(lambda a, b=0: a + b, 2, b=3).result(5) == 5
    finally:
        pool.shutdown()
    # Outside any job the deadline is now: such work ranks as if queued this instant.
    before = time.monotonic()
    assert before <= pool.scheduler.deadline() <= time.monotonic()


def test_threads_start_as_needed_up_to_the_limit() -> None:
    pool = Pool(3)
    gate = threading.Event()
    try:
        running = [pool.submit(gate.wait) for _ in range(5)]
        _wait_until(lambda: pool.queued() == 2)
        assert len(pool.pool._threads) == 3
        gate.set()
        assert all(f.result(5) for f in running)
    finally:
        gate.set()
        pool.shutdown()


def test_stop_lets_the_running_job_finish_and_drops_the_queued_ones() -> None:
    pool = Pool(1)
    gate = threading.Event()
    running = pool.submit(lambda: gate.wait(5) and "finished")
    _wait_until(lambda: pool.queued() == 0)
    queued = [pool.submit(lambda: "never") for _ in range(3)]
    left: list[int] = []
    stopper = threading.Thread(target=lambda: left.append(pool.scheduler.stop(5)))
    stopper.start()
    _wait_until(lambda: all(f.cancelled() for f in queued))
    assert stopper.is_alive()  # waiting for the running job
    gate.set()
    stopper.join(5)
    assert running.result(5) == "finished" and left == [0]
    with pytest.raises(QueueClosed):
        pool.submit(lambda: None)


def test_stop_says_how_many_passes_were_still_running() -> None:
    pool = Pool(2)
    gate = threading.Event()
    try:
        for _ in range(2):
            pool.submit(gate.wait, 10)
        _wait_until(lambda: pool.pool.running() == 2)
        assert pool.scheduler.stop(0.05) == 2
    finally:
        gate.set()


@settings(max_examples=25, deadline=None)
@given(
    slots=st.integers(min_value=1, max_value=3),
    holds=st.lists(st.floats(min_value=0, max_value=0.003), min_size=1, max_size=12),
)
def test_never_more_holders_than_slots(slots: int, holds: list[float]) -> None:
    gate: DeadlineQueue[None] = DeadlineQueue(slots)
    lock = threading.Lock()
    inside = [0]
    most = [0]

    def hold(seconds: float) -> None:
        with gate.turn(time.monotonic()):
            with lock:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            time.sleep(seconds)
            with lock:
                inside[0] -= 1

    threads = [threading.Thread(target=hold, args=(h,)) for h in holds]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert most[0] <= slots
    assert gate.waiting() == 0 and inside[0] == 0


@settings(max_examples=30, deadline=None)
@given(deadlines)
def test_a_free_slot_goes_to_the_earliest_deadline(marks: list[float]) -> None:
    gate: DeadlineQueue[None] = DeadlineQueue(1)
    order: list[int] = []
    release = threading.Event()

    def holder() -> None:
        with gate.turn(-1):
            release.wait(10)

    def waiter(i: int) -> None:
        with gate.turn(marks[i]):
            order.append(i)

    first = threading.Thread(target=holder)
    first.start()
    _wait_until(lambda: gate._free == 0)
    threads = []
    for i in range(len(marks)):  # one at a time, so ties keep the order of asking
        threads.append(threading.Thread(target=waiter, args=(i,)))
        threads[-1].start()
        _wait_until(lambda n=i + 1: gate.waiting() == n)
    release.set()
    for t in [first, *threads]:
        t.join(10)
    assert order == sorted(range(len(marks)), key=lambda i: (marks[i], i))


@pytest.mark.parametrize(
    ("trigger", "has_summary", "slack"),
    [
        ("sunset", False, Slack.FIRST),
        ("manual", False, Slack.FIRST),
        ("sunset-marker", False, Slack.FIRST),
        ("sunset", True, Slack.AGAIN),
        ("manual", True, Slack.AGAIN),
        ("sweep", False, Slack.BACKGROUND),
        ("refresh", True, Slack.BACKGROUND),
    ],
)
def test_the_class_of_a_pass(trigger: str, has_summary: bool, slack: Slack) -> None:
    assert slack_for(trigger, has_summary=has_summary) is slack


def test_classes_are_ordered_first_again_background() -> None:
    assert Slack.FIRST < Slack.AGAIN < Slack.BACKGROUND


@pytest.mark.parametrize(
    ("cpu_max", "cap"),
    [
        ("max 100000\n", None),
        ("150000 100000\n", 2),
        ("50000 100000\n", 1),
        ("200000 100000\n", 2),
        ("garbage\n", None),
        (None, None),
    ],
)
def test_usable_cpus_follows_a_cgroup_cpu_limit(
    tmp_path: Path, cpu_max: str | None, cap: int | None
) -> None:
    if cpu_max is not None:
        (tmp_path / "cpu.max").write_text(cpu_max)
    affinity = len(os.sched_getaffinity(0))
    assert usable_cpus(tmp_path) == (affinity if cap is None else min(affinity, cap))


def test_a_full_store_write_queue_never_holds_up_another_store() -> None:
    sched = scheduler(store_writes=2)
    release = threading.Event()

    def hold() -> None:
        with sched.store_write("http://hung:8000 (t/db)"):
            release.wait(10)

    holders = [threading.Thread(target=hold) for _ in range(2)]
    for t in holders:
        t.start()
    _wait_until(lambda: sched._store_writes["http://hung:8000 (t/db)"].queue.holding() == 2)
    done = threading.Event()

    def write() -> None:
        with sched.store_write("http://other:8000 (t/db)"):
            done.set()

    threading.Thread(target=write).start()
    assert done.wait(5)
    release.set()
    for t in holders:
        t.join(5)


def test_a_store_queue_is_dropped_once_nobody_waits_in_it() -> None:
    sched = scheduler()
    with sched.store_write("http://a:8000 (t/db)"):
        sched.forget_store("http://a:8000 (t/db)")  # in use: kept
        assert sched.store_queues() == 1
    sched.forget_store("http://a:8000 (t/db)")
    assert sched.store_queues() == 0


@settings(max_examples=20, deadline=None)
@given(st.lists(st.sampled_from([0, 10, 30]), max_size=25))
def test_at_the_store_write_queue_a_pass_s_slack_counts_from_its_worker(slacks: list[int]) -> None:
    """The store write goes to the pass whose slack (counted from when it got its worker)
    ends first, not to the first to ask; equal slacks: the one that got its worker first.
    (Each pass is queued, and gets its worker, well within 10 s of the others.)"""
    sched = PassScheduler(
        SchedulerLimits(workers=len(slacks) + 1, background_workers=2, cores=1, store_writes=1)
    )
    queue_key = "http://s:8000 (t/db)"
    release = threading.Event()
    order: list[int] = []

    def holder() -> None:
        with sched.store_write(queue_key):
            release.wait(10)

    def write(i: int) -> None:
        with sched.store_write(queue_key):
            order.append(i)

    try:
        first = sched.submit(-1.0, holder, background=False)
        _wait_until(lambda: sched._store_writes[queue_key].queue.holding() == 1)
        futures = []
        for i, slack in enumerate(slacks):
            deadline = time.monotonic() + slack  # as the handler queues a pass
            futures.append(sched.submit(deadline, lambda i=i: write(i), background=False))
            _wait_until(lambda n=i + 1: sched._store_writes[queue_key].queue.waiting() == n)
        release.set()
        for f in [first, *futures]:
            f.result(10)
    finally:
        release.set()
        sched.stop(5)
    assert order == sorted(range(len(slacks)), key=lambda i: (slacks[i], i))


def test_a_pass_that_waited_for_a_worker_does_not_outrank_a_new_one_at_the_shared_queues() -> None:
    """A pass queued behind a busy pool keeps its place there, but its deadline at the core
    and store-write queues is its slack from the moment it got a worker."""
    sched = PassScheduler(SchedulerLimits(workers=1, background_workers=2, cores=1, store_writes=1))
    release = threading.Event()
    try:
        sched.submit(time.monotonic(), lambda: release.wait(10), background=False)
        queued_at = time.monotonic()
        waited = sched.submit(queued_at + 1.0, sched.deadline, background=False)
        time.sleep(1.5)  # its deadline passes while it waits for the worker
        release.set()
        running_deadline = waited.result(10)
        fresh = sched.submit(time.monotonic(), sched.deadline, background=False).result(10)
    finally:
        release.set()
        sched.stop(5)
    assert running_deadline >= queued_at + 1.0 + 1.5  # its 1 s of slack, from its worker
    assert fresh <= running_deadline  # a new first summary goes ahead of it there


@settings(max_examples=30, deadline=None)
@given(st.integers(min_value=2, max_value=4))
def test_jobs_queued_while_threads_are_idle_use_every_free_slot(slots: int) -> None:
    """Jobs submitted back to back, with threads idle or just waking up, all run at once
    when there are slots for them: none waits behind another for a thread."""
    pool = Pool(slots)
    release = threading.Event()
    try:
        pool.submit(lambda: None).result(5)  # one thread started, now idle in take()
        futures = [pool.submit(release.wait, 10) for _ in range(slots)]
        _wait_until(lambda: pool.pool.running() == slots)
        assert len(pool.pool._threads) == slots
    finally:
        release.set()
        pool.shutdown()
    assert all(f.result(5) for f in futures)


def test_a_first_summary_never_waits_for_a_worker_behind_re_summaries() -> None:
    """Every foreground thread taken and re-summaries queued (their deadlines long past): a
    first summary starts at once on the first pool's thread; the re-summaries keep their
    order and all run."""
    sched = PassScheduler(
        SchedulerLimits(workers=1, background_workers=2, cores=1, store_writes=1, first_workers=1)
    )
    release = threading.Event()
    ran: list[str] = []
    try:
        sched.submit(time.monotonic(), lambda: release.wait(10), background=False)
        agains = [
            sched.submit(time.monotonic() - 100, lambda i=i: ran.append(f"again-{i}"),
                         background=False)
            for i in range(3)
        ]  # fmt: skip
        first = sched.submit(
            time.monotonic(), lambda: ran.append("first"), background=False, first=True
        )
        first.result(5)  # while the foreground's one thread is still taken
        assert ran == ["first"]
        release.set()
        for f in agains:
            f.result(5)
    finally:
        release.set()
        sched.stop(5)
    assert ran == ["first", "again-0", "again-1", "again-2"]


def test_a_first_summary_takes_a_free_foreground_thread_before_the_first_pool() -> None:
    sched = PassScheduler(
        SchedulerLimits(workers=2, background_workers=2, cores=1, store_writes=1, first_workers=1)
    )
    try:
        name = sched.submit(
            time.monotonic(), lambda: threading.current_thread().name, background=False,
            first=True,
        ).result(5)  # fmt: skip
    finally:
        sched.stop(5)
    assert name.startswith("summarize_")


def test_a_burst_of_first_summaries_also_takes_foreground_threads_as_they_free_up() -> None:
    """First summaries beyond the first pool's threads are queued in the foreground too: a
    foreground thread that frees up takes the next one (each runs once)."""
    sched = PassScheduler(
        SchedulerLimits(workers=1, background_workers=2, cores=1, store_writes=1, first_workers=1)
    )
    busy, hold_first = threading.Event(), threading.Event()
    runs: list[str] = []
    try:
        sched.submit(time.monotonic(), lambda: busy.wait(10), background=False)
        f1 = sched.submit(
            time.monotonic(), lambda: (runs.append("f1"), hold_first.wait(10)), background=False,
            first=True,
        )  # fmt: skip
        _wait_until(lambda: runs == ["f1"])  # on the first pool's one thread, held there
        f2 = sched.submit(time.monotonic(), lambda: runs.append("f2"), background=False, first=True)
        busy.set()  # the foreground's thread frees up: it takes f2 (f1's copy is skipped)
        f2.result(5)
        assert not f1.done()
        hold_first.set()
        f1.result(5)
    finally:
        busy.set()
        hold_first.set()
        sched.stop(5)
    assert runs == ["f1", "f2"]


@pytest.mark.parametrize("background", [True, False])
def test_a_later_pass_gives_way_between_its_steps_while_a_first_summary_runs(
    background: bool,
) -> None:
    """A sweep's pass or a re-summary waits before its next step while a first summary
    runs, and goes on as soon as it ends; a first summary and code outside any pass never
    wait."""
    sched = PassScheduler(
        SchedulerLimits(
            workers=2, background_workers=2, cores=1, store_writes=1, first_workers=1,
            give_way_s=10,
        )
    )  # fmt: skip
    first_running, first_done = threading.Event(), threading.Event()
    try:
        first = sched.submit(
            time.monotonic(),
            lambda: (first_running.set(), first_done.wait(10), sched.give_way())[2],
            background=False,
            first=True,
        )
        first_running.wait(5)
        later = sched.submit(time.monotonic() + 30, sched.give_way, background=background)
        time.sleep(0.3)
        assert not later.done()  # it waits while the first summary runs
        assert sched.give_way() == 0.0  # not a pass's thread: no wait
        first_done.set()
        assert first.result(5) == 0.0  # the first summary itself never waited
        assert 0.2 < later.result(5) < 5  # it went on when the first summary ended
        assert sched.submit(time.monotonic(), sched.give_way, background=True).result(5) == 0.0
    finally:
        first_done.set()
        sched.stop(5)


@pytest.mark.parametrize(("limit", "least", "most"), [(0.3, 0.25, 3.0), (0.0, 0.0, 0.0)])
def test_giving_way_is_bounded_per_step_and_off_at_zero(
    limit: float, least: float, most: float
) -> None:
    sched = PassScheduler(
        SchedulerLimits(workers=1, background_workers=1, cores=1, store_writes=1, give_way_s=limit)
    )
    hold = threading.Event()
    try:
        sched.submit(time.monotonic(), lambda: hold.wait(10), background=False, first=True)
        _wait_until(lambda: sched._firsts == 1)
        waited = sched.submit(time.monotonic(), sched.give_way, background=True).result(5)
    finally:
        hold.set()
        sched.stop(5)
    assert least <= waited <= most
