"""controller.scheduling: earliest deadline first, for worker threads and for CPU slots."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.scheduling import (
    CpuSlots,
    DeadlineExecutor,
    Slack,
    current_deadline,
    slack_for,
    store_write_slots,
    usable_cpus,
)

deadlines = st.lists(st.floats(min_value=0, max_value=1000, allow_nan=False), max_size=25)


def _wait_until(predicate, timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.001)


@settings(max_examples=40, deadline=None)
@given(deadlines)
def test_queued_jobs_run_earliest_deadline_first_ties_in_queue_order(marks: list[float]) -> None:
    pool = DeadlineExecutor(1, thread_name_prefix="t")
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
    pool = DeadlineExecutor(2)
    try:
        assert pool.submit_by(123.5, current_deadline).result(5) == 123.5

        def boom() -> None:
            raise ValueError("no")

        with pytest.raises(ValueError, match="no"):
            pool.submit(boom).result(5)
        assert pool.submit(lambda a, b=0: a + b, 2, b=3).result(5) == 5
    finally:
        pool.shutdown()
    # Outside any job the deadline is now: such work ranks as if queued this instant.
    before = time.monotonic()
    assert before <= current_deadline() <= time.monotonic()


def test_threads_start_as_needed_up_to_the_limit() -> None:
    pool = DeadlineExecutor(3)
    gate = threading.Event()
    try:
        running = [pool.submit(gate.wait) for _ in range(5)]
        _wait_until(lambda: pool.queued() == 2)
        assert len(pool._threads) == 3
        gate.set()
        assert all(f.result(5) for f in running)
    finally:
        gate.set()
        pool.shutdown()


def test_shutdown_lets_the_running_job_finish_and_drops_the_queued_ones() -> None:
    pool = DeadlineExecutor(1)
    gate = threading.Event()
    running = pool.submit(lambda: gate.wait(5) and "finished")
    _wait_until(lambda: pool.queued() == 0)
    queued = [pool.submit(lambda: "never") for _ in range(3)]
    stopper = threading.Thread(target=pool.shutdown, kwargs={"cancel_futures": True})
    stopper.start()
    _wait_until(lambda: all(f.cancelled() for f in queued))
    assert stopper.is_alive()  # waiting for the running job
    gate.set()
    stopper.join(5)
    assert running.result(5) == "finished"
    with pytest.raises(RuntimeError):
        pool.submit(lambda: None)


@settings(max_examples=25, deadline=None)
@given(
    slots=st.integers(min_value=1, max_value=3),
    holds=st.lists(st.floats(min_value=0, max_value=0.003), min_size=1, max_size=12),
)
def test_never_more_holders_than_slots(slots: int, holds: list[float]) -> None:
    gate = CpuSlots(slots)
    lock = threading.Lock()
    inside = [0]
    most = [0]

    def hold(seconds: float) -> None:
        with gate.slot():
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
    gate = CpuSlots(1)
    order: list[int] = []
    release = threading.Event()

    def holder() -> None:
        with gate.slot(deadline=-1):
            release.wait(10)

    def waiter(i: int) -> None:
        with gate.slot(deadline=marks[i]):
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


def test_a_full_store_write_gate_never_holds_up_another_store() -> None:
    hung = store_write_slots("http://hung:8000 (t/db)")
    assert store_write_slots("http://hung:8000 (t/db)") is hung
    release = threading.Event()
    holders = [threading.Thread(target=lambda: _hold(hung, release)) for _ in range(hung.slots)]
    for t in holders:
        t.start()
    _wait_until(lambda: hung._free == 0)
    other = store_write_slots("http://other:8000 (t/db)")
    done = threading.Event()

    def write() -> None:
        with other.slot():
            done.set()

    threading.Thread(target=write).start()
    assert done.wait(5)
    release.set()
    for t in holders:
        t.join(5)


def _hold(gate: CpuSlots, release: threading.Event) -> None:
    with gate.slot():
        release.wait(10)
