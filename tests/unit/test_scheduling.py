"""controller.scheduling: earliest deadline first, for worker threads, CPU cores (one
PassScheduler, one DeadlineQueue under each) and the group
writes to a summary collection (controller/store/memory_store.py)."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.scheduling import (
    FLOW_QUANTUM_S,
    DeadlineQueue,
    PassScheduler,
    SchedulerLimits,
    Slack,
    slack_for,
    usable_cpus,
)
from controller.store.connection import StoreLocation
from controller.store.memory_store import GroupWriter, RowWrite


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
        return self.pool.queue.waiting()

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
        assert len(pool.pool.threads) == 3
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
    with pytest.raises(RuntimeError, match="after the queue was closed"):
        pool.submit(lambda: None)


def test_stop_says_how_many_passes_were_still_running() -> None:
    pool = Pool(2)
    gate = threading.Event()
    try:
        for _ in range(2):
            pool.submit(gate.wait, 10)
        _wait_until(lambda: pool.pool.queue.holding() == 2)
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


def _run_holder_then_waiters(
    gate: DeadlineQueue[None],
    holder: Callable[[], None],
    waiter: Callable[[int], None],
    waiters: int,
    go: threading.Event,
) -> None:
    """The holder takes the one slot; the waiters queue one at a time (so ties keep the
    order of asking); then go is set, and all of them end."""
    first = threading.Thread(target=holder)
    first.start()
    _wait_until(lambda: gate._free == 0)
    threads = []
    for i in range(waiters):
        threads.append(threading.Thread(target=waiter, args=(i,)))
        threads[-1].start()
        _wait_until(lambda n=i + 1: gate.waiting() == n)
    go.set()
    for t in [first, *threads]:
        t.join(10)


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

    _run_holder_then_waiters(gate, holder, waiter, len(marks), release)
    assert order == sorted(range(len(marks)), key=lambda i: (marks[i], i))


@settings(max_examples=30, deadline=None)
@given(marks=deadlines, mine=st.floats(min_value=0, max_value=1000, allow_nan=False))
def test_a_holder_gives_its_slot_between_pieces_only_to_earlier_deadlines(
    marks: list[float], mine: float
) -> None:
    """The local embedding calls between() after each layer: a session that just ended gets
    the core at the next layer, and the holder takes it back before any later deadline."""
    gate: DeadlineQueue[None] = DeadlineQueue(1)
    log: list[object] = []
    queued = threading.Event()
    waited: list[float] = []

    def holder() -> None:
        with gate.turn(mine) as between:
            queued.wait(10)
            for _ in range(3):
                log.append("piece")
                waited.append(between())

    def waiter(i: int) -> None:
        with gate.turn(marks[i]):
            log.append(i)

    _run_holder_then_waiters(gate, holder, waiter, len(marks), queued)
    by_deadline = sorted(range(len(marks)), key=lambda i: (marks[i], i))
    earlier = [i for i in by_deadline if marks[i] < mine]  # a tie stays with the holder
    later = [i for i in by_deadline if marks[i] >= mine]
    assert log == ["piece", *earlier, "piece", "piece", *later]
    assert (waited[0] > 0) == bool(earlier) and waited[1:] == [0.0, 0.0]
    assert gate.waiting() == 0 and gate.holding() == 0


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


class FakeStore:
    """A summary collection as the group writer sees it: write_rows records each group, and
    waits while `hold` is clear; a write whose session is in `refuse` gets an error."""

    def __init__(self, summary_collection: str = "sessions", token: str | None = None) -> None:
        self.location = StoreLocation(
            url="http://s:8000",
            memory_collection="memories",
            summary_collection=summary_collection,
            token=token,
        )
        self.groups: list[list[RowWrite]] = []
        self.hold = threading.Event()
        self.hold.set()
        self.refuse: set[str] = set()
        self.lock = threading.Lock()

    def write_rows(self, writes: list[RowWrite]) -> None:
        with self.lock:
            self.groups.append(list(writes))
        self.hold.wait(10)
        for write in writes:
            if write.session_id in self.refuse:
                write.error = RuntimeError(f"refused {write.session_id}")


def row(session_id: str, dimension: int = 2, due: bool = False) -> RowWrite:
    """A row; its deadline far ahead unless it is due (a session that just ended)."""
    deadline = time.monotonic() + (0 if due else 1000)
    return RowWrite(session_id, "doc", {}, [0.0] * dimension, deadline=deadline)


def test_a_hung_collection_never_holds_up_the_writes_to_another() -> None:
    sched = scheduler(store_writes=2)
    hung, other = FakeStore("hung"), FakeStore("other")
    hung.hold.clear()
    holders = [
        threading.Thread(target=sched.store_write, args=(hung, row(f"h{i}"))) for i in range(4)
    ]
    for t in holders:
        t.start()
    # two groups in flight and one more of rows due (store_write's: now), one write waiting
    _wait_until(lambda: len(hung.groups) == 3)
    done = threading.Thread(target=sched.store_write, args=(other, row("o")))
    done.start()
    done.join(5)
    assert not done.is_alive() and [w.session_id for g in other.groups for w in g] == ["o"]
    hung.hold.set()
    for t in holders:
        t.join(5)
    assert sorted(w.session_id for g in hung.groups for w in g) == ["h0", "h1", "h2", "h3"]


def test_rows_written_with_other_credentials_never_share_a_group() -> None:
    """Two SessionSummarizers naming one summary collection with different tokens: each
    row goes with its own store's client."""
    sched = scheduler()
    mine, theirs = FakeStore(token="a"), FakeStore(token="b")
    mine.hold.clear()
    first = threading.Thread(target=sched.store_write, args=(mine, row("m1")))
    first.start()
    _wait_until(lambda: len(mine.groups) == 1)
    other = threading.Thread(target=sched.store_write, args=(theirs, row("t1")))
    other.start()
    other.join(5)  # not held behind mine: its own group writer
    assert not other.is_alive()
    mine.hold.set()
    first.join(5)
    assert [[w.session_id for w in g] for g in mine.groups] == [["m1"]]
    assert [[w.session_id for w in g] for g in theirs.groups] == [["t1"]]


def test_a_group_that_fails_on_a_bug_fails_its_own_rows_and_its_leader_goes_on() -> None:
    """write_rows raising (a bug: it sets each write's error otherwise) fails the rows of
    that group only; the thread that led it still writes its own row in a later group."""
    writer = GroupWriter(1, rows=1)

    class Buggy(FakeStore):
        def write_rows(self, writes: list[RowWrite]) -> None:
            super().write_rows(writes)
            if any(w.session_id == "boom" for w in writes):
                raise RuntimeError("a bug")

    store = Buggy()
    store.hold.clear()
    outcomes: dict[str, str] = {}

    def write(session_id: str, due: bool) -> None:
        try:
            writer.write(store, row(session_id, due=due))
            outcomes[session_id] = "written"
        except RuntimeError as exc:
            outcomes[session_id] = str(exc)

    first = threading.Thread(target=write, args=("first", False))
    first.start()
    _wait_until(lambda: len(store.groups) == 1)
    later = [threading.Thread(target=write, args=(s, True)) for s in ("boom", "mine")]
    for t in later:
        t.start()
    _wait_until(lambda: len(store.groups) == 2)  # one of them, due, in the extra group
    store.hold.set()
    for t in [first, *later]:
        t.join(5)
    assert outcomes == {"first": "written", "boom": "a bug", "mine": "written"}


def test_a_row_already_due_never_waits_for_a_group_of_rows_that_are_not() -> None:
    """One group at a time, and one more of the rows whose deadline has passed: a session
    that just ended is written while the backlog's group is still being written; a second
    group of due rows waits for one of them."""
    writer, store = GroupWriter(1), FakeStore()
    store.hold.clear()
    backlog = threading.Thread(target=writer.write, args=(store, row("backlog")))
    backlog.start()
    _wait_until(lambda: len(store.groups) == 1)
    sunset = threading.Thread(target=writer.write, args=(store, row("sunset", due=True)))
    sunset.start()
    _wait_until(lambda: len(store.groups) == 2)  # taken while the backlog's is in flight
    later = threading.Thread(target=writer.write, args=(store, row("later", due=True)))
    later.start()
    _wait_until(lambda: len(writer._waiting) == 1)
    assert len(store.groups) == 2  # two in flight: the due row waits
    store.hold.set()
    for t in (backlog, sunset, later):
        t.join(5)
    assert [[w.session_id for w in g] for g in store.groups] == [
        ["backlog"],
        ["sunset"],
        ["later"],
    ]


def test_a_row_waits_in_its_group_by_the_deadline_of_the_pass_that_writes_it() -> None:
    sched = scheduler()
    store = FakeStore()
    try:
        deadline = sched.submit(time.monotonic() + 10, sched.deadline, background=False)
        written = sched.submit(
            time.monotonic() + 10, lambda: sched.store_write(store, row("a")), background=False
        )
        written.result(10)
        running = deadline.result(10)
    finally:
        sched.stop(5)
    assert store.groups[0][0].deadline >= running  # its pass's, not the moment it asked


def test_a_group_writer_is_dropped_once_nobody_writes_with_it() -> None:
    sched = scheduler()
    store = FakeStore()
    store.hold.clear()
    writing = threading.Thread(target=sched.store_write, args=(store, row("a")))
    writing.start()
    _wait_until(lambda: len(store.groups) == 1)
    assert sched.store_queues() == 1  # in use: kept
    store.hold.set()
    writing.join(5)
    assert sched.store_queues() == 0


def test_a_write_raises_its_own_error_and_the_rest_of_its_group_is_written() -> None:
    writer, store = GroupWriter(1), FakeStore()
    store.hold.clear()
    store.refuse = {"bad"}
    first = threading.Thread(target=writer.write, args=(store, row("first")))
    first.start()
    _wait_until(lambda: len(store.groups) == 1)
    errors: dict[str, BaseException | None] = {}

    def write(session_id: str) -> None:
        try:
            writer.write(store, row(session_id))
            errors[session_id] = None
        except RuntimeError as exc:
            errors[session_id] = exc

    others = [threading.Thread(target=write, args=(s,)) for s in ("good", "bad", "fine")]
    for t in others:
        t.start()
    _wait_until(lambda: len(writer._waiting) == 3)
    store.hold.set()
    for t in [first, *others]:
        t.join(5)
    assert [sorted(w.session_id for w in g) for g in store.groups] == [
        ["first"],
        ["bad", "fine", "good"],
    ]
    assert errors["good"] is None and errors["fine"] is None
    assert str(errors["bad"]) == "refused bad"


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from("abcdef"), st.sampled_from([0, 10, 30]), st.sampled_from([2, 3])),
        min_size=1,
        max_size=20,
    ),
    st.integers(1, 4),
)
def test_a_group_takes_the_earliest_deadlines_one_row_per_session_and_one_vector_size(
    writes: list[tuple[str, int, int]], rows: int
) -> None:
    """Every row is written once; a group holds at most `rows` rows, no session twice and
    one vector size; and a row is left for a later group while one with a later deadline
    is written only when its session or size differs from the group's (no starvation:
    deadlines order the rest)."""
    writer, store = GroupWriter(1, rows=rows), FakeStore()
    store.hold.clear()
    blocker = threading.Thread(target=writer.write, args=(store, row("blocker")))
    blocker.start()
    _wait_until(lambda: len(store.groups) == 1)
    queued = []
    for i, (session, slack, dimension) in enumerate(writes):
        write = row(session, dimension)
        write.deadline += slack + i * 1e-3  # queued in order: ties go to the first
        queued.append(write)
    threads = [threading.Thread(target=writer.write, args=(store, w)) for w in queued]
    for t in threads:
        t.start()
    _wait_until(lambda: len(writer._waiting) == len(queued))
    store.hold.set()
    for t in [blocker, *threads]:
        t.join(5)
    groups = store.groups[1:]
    assert sorted(id(w) for g in groups for w in g) == sorted(id(w) for w in queued)
    for n, group in enumerate(groups):
        assert len(group) <= rows
        assert len({w.session_id for w in group}) == len(group)
        assert len({len(w.embedding) for w in group}) == 1
        latest = max(w.deadline for w in group)
        first = min(group, key=lambda w: w.deadline)
        for later in (w for g in groups[n + 1 :] for w in g):
            if later.deadline < latest:
                assert later.session_id in {w.session_id for w in group} or len(
                    later.embedding
                ) != len(first.embedding), (later, group)
        # the group's first row is the earliest deadline of all rows not written yet
        rest = [w for g in groups[n:] for w in g]
        assert first.deadline == min(w.deadline for w in rest)


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
        _wait_until(lambda: pool.pool.queue.holding() == slots)
        assert len(pool.pool.threads) == slots
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


def test_a_first_summary_is_counted_out_before_its_caller_hears_it_ended() -> None:
    """What the caller does on hearing that a first summary ended (its done callback, as the
    handler's wrap_future) never gives way to that first summary."""
    sched = PassScheduler(
        SchedulerLimits(
            workers=1, background_workers=1, cores=1, store_writes=1, give_way_s=0.5,
            give_way_gap_s=0,
        )
    )  # fmt: skip
    hold, heard = threading.Event(), list[float]()
    try:
        first = sched.submit(time.monotonic(), hold.wait, background=False, first=True)
        first.add_done_callback(
            lambda _: heard.append(
                sched.submit(time.monotonic(), sched.give_way, background=True).result(5)
            )
        )
        hold.set()
        _wait_until(lambda: bool(heard))
    finally:
        hold.set()
        sched.stop(5)
    assert heard == [0.0]


@pytest.mark.parametrize(
    ("gap", "pause", "between"),
    [
        (1.0, 0.1, False),  # the next first summary comes within the gap: one burst
        (0.1, 0.6, True),  # it comes after the gap: the later pass goes on in between
        (0.0, 0.3, True),  # no gap: it goes on as soon as the first one ends
    ],
)
def test_a_later_pass_gives_way_through_a_gap_between_first_summaries_up_to_the_gap(
    gap: float, pause: float, between: bool
) -> None:
    """Two first summaries, `pause` apart: a later pass paused by the first goes on before
    the second only if the pause is longer than give_way_gap_s; else it waits on through
    the second one and then the gap, within its step's budget."""
    sched = PassScheduler(
        SchedulerLimits(
            workers=2, background_workers=1, cores=1, store_writes=1, first_workers=1,
            give_way_s=10, give_way_gap_s=gap,
        )
    )  # fmt: skip
    go = [threading.Event(), threading.Event()]
    ended: list[float] = []

    def first(n: int) -> None:
        go[n].wait(10)
        ended.append(time.monotonic())

    try:
        sched.submit(time.monotonic(), lambda: first(0), background=False, first=True)
        _wait_until(lambda: sched._firsts == 1)
        later = sched.submit(
            time.monotonic() + 30,
            lambda: (sched.give_way(), time.monotonic())[1],
            background=True,
        )
        time.sleep(0.1)
        go[0].set()
        _wait_until(lambda: sched._firsts == 0)
        time.sleep(pause)
        went_on_in_between = later.done()
        second = sched.submit(time.monotonic(), lambda: first(1), background=False, first=True)
        time.sleep(0.1)
        go[1].set()
        second.result(5)
        resumed = later.result(5)
    finally:
        for event in go:
            event.set()
        sched.stop(5)
    assert went_on_in_between == between
    if between:
        assert ended[0] + gap * 0.9 <= resumed < ended[1]
    else:
        assert resumed >= ended[1] + gap * 0.9  # the gap counts from the last one's end


@pytest.mark.parametrize("outcome", ["returned", "raised"])
def test_only_a_first_summary_with_an_outcome_leaves_a_gap_and_the_step_budget_caps_it(
    outcome: str,
) -> None:
    """After a first summary that returned, a later step waits out the gap, at most its
    budget (give_way_s); one that raised (another writer's claim, a failure) leaves none."""
    sched = PassScheduler(
        SchedulerLimits(
            workers=1, background_workers=1, cores=1, store_writes=1, give_way_s=0.3,
            give_way_gap_s=60,
        )
    )  # fmt: skip

    def first() -> None:
        if outcome == "raised":
            raise RuntimeError("claim held elsewhere")

    try:
        done = sched.submit(time.monotonic(), first, background=False, first=True)
        with contextlib.suppress(RuntimeError):
            done.result(5)
        _wait_until(lambda: sched._firsts == 0)
        waited = sched.submit(time.monotonic(), sched.give_way, background=True).result(5)
    finally:
        sched.stop(5)
    if outcome == "returned":
        assert 0.25 <= waited <= 3.0
    else:
        assert waited == 0.0


def test_with_no_first_summary_ever_no_pass_gives_way_whatever_the_gap() -> None:
    sched = PassScheduler(
        SchedulerLimits(
            workers=1, background_workers=1, cores=1, store_writes=1, give_way_s=10,
            give_way_gap_s=1e9,
        )
    )  # fmt: skip
    try:
        assert sched.submit(time.monotonic(), sched.give_way, background=True).result(5) == 0.0
    finally:
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


def test_a_later_pass_gives_its_core_up_while_a_first_summary_runs_within_its_step_budget() -> None:
    """The local embedding calls the core's function after each layer: a sweep's pass
    holding the core gives it up while a first summary runs and takes it back after it; its
    waits in one step add up to at most give_way_s."""
    sched = PassScheduler(
        SchedulerLimits(workers=1, background_workers=1, cores=1, store_writes=1, give_way_s=10)
    )
    log: list[str] = []
    holding, go_on = threading.Event(), threading.Event()

    def background() -> list[float]:
        sched.give_way()  # a step begins: nothing runs yet
        with sched.core() as between:
            log.append("later holds the core")
            holding.set()
            go_on.wait(10)
            waits = [float(between()) for _ in range(3)]
            log.append("later has the core again")
            return waits

    def first() -> None:
        with sched.core():
            log.append("first has the core")
            time.sleep(0.2)

    try:
        later = sched.submit(time.monotonic(), background, background=True)
        holding.wait(5)
        done = sched.submit(time.monotonic(), first, background=False, first=True)
        _wait_until(lambda: sched._firsts == 1)
        go_on.set()
        done.result(5)
        waits = later.result(5)
    finally:
        go_on.set()
        sched.stop(5)
    assert log == ["later holds the core", "first has the core", "later has the core again"]
    assert waits[0] >= 0.15 and waits[1:] == [0.0, 0.0]

    # The budget is the step's: spent by waiting before it, nothing is left inside it.
    sched = PassScheduler(
        SchedulerLimits(workers=1, background_workers=1, cores=1, store_writes=1, give_way_s=0.2)
    )
    hold = threading.Event()

    def spent() -> list[float]:
        waits = [sched.give_way()]
        with sched.core() as between:
            waits += [float(between()) for _ in range(3)]
        return waits

    try:
        sched.submit(time.monotonic(), lambda: hold.wait(10), background=False, first=True)
        _wait_until(lambda: sched._firsts == 1)
        waits = sched.submit(time.monotonic(), spent, background=True).result(5)
    finally:
        hold.set()
        sched.stop(5)
    assert 0.15 <= waits[0] <= 3 and waits[1:] == [0.0, 0.0, 0.0]


def test_with_its_budget_spent_a_pass_keeps_its_core_from_later_deadlines() -> None:
    """A first summary runs on and on: the pass that gave way for its whole budget goes on
    by deadline, and a later pass waiting for the core does not get it between layers."""
    sched = PassScheduler(
        SchedulerLimits(workers=1, background_workers=2, cores=1, store_writes=1, give_way_s=0.2)
    )
    hold, holding, go_on = threading.Event(), threading.Event(), threading.Event()
    log: list[str] = []

    def earlier() -> None:
        sched.give_way()  # spends the step's budget: the first summary runs throughout
        with sched.core() as between:
            holding.set()
            go_on.wait(10)
            for _ in range(3):
                log.append("earlier")
                between()

    def later() -> None:
        with sched.core():
            log.append("later")

    try:
        sched.submit(time.monotonic(), lambda: hold.wait(10), background=False, first=True)
        _wait_until(lambda: sched._firsts == 1)
        done = sched.submit(time.monotonic(), earlier, background=True)
        holding.wait(5)
        other = sched.submit(time.monotonic() + 30, later, background=True)
        _wait_until(lambda: sched._cores.waiting() == 1)
        go_on.set()
        done.result(5)
        other.result(5)
    finally:
        hold.set()
        go_on.set()
        sched.stop(5)
    assert log == ["earlier", "earlier", "earlier", "later"]


def test_a_pause_that_raises_leaves_the_slots_as_they_were() -> None:
    gate: DeadlineQueue[None] = DeadlineQueue(2)

    def boom() -> None:
        raise RuntimeError("pause failed")

    with pytest.raises(RuntimeError, match="pause failed"), gate.turn(1.0) as slot:
        assert gate.holding() == 1
        slot(boom)
    assert gate.holding() == 0 and gate.free() == 2 and gate.waiting() == 0
    with gate.turn(1.0), gate.turn(2.0):  # both slots are there to take
        assert gate.holding() == 2


def test_a_group_of_rows_none_of_them_due_waits_for_its_pause_a_due_one_never_does() -> None:
    """The leader of a group pauses (the scheduler's give_way) before it sends a group of
    the background's rows; meanwhile a row already due is written by the group for due
    rows, and a group holding a due row is sent at once."""
    writer, store = GroupWriter(1), FakeStore()
    paused, go_on, pauses = threading.Event(), threading.Event(), []

    def pause() -> None:
        pauses.append(threading.current_thread().name)
        paused.set()
        go_on.wait(10)

    backlog = threading.Thread(target=writer.write, args=(store, row("backlog"), pause))
    backlog.start()
    paused.wait(5)
    assert store.groups == []  # the backlog's group waits, unsent
    writer.write(store, row("sunset", due=True), pause)  # returns: written meanwhile
    assert [[w.session_id for w in g] for g in store.groups] == [["sunset"]]
    go_on.set()
    backlog.join(5)
    assert [[w.session_id for w in g] for g in store.groups] == [["sunset"], ["backlog"]]
    assert pauses == [backlog.name]  # the due row's own group never paused


def test_background_work_outside_a_pass_gives_way_like_a_pass_and_only_inside() -> None:
    """The sweep's thread is no pass's: inside scheduler.background() its give_way waits
    while a first summary runs (at most give_way_s in all); after it, the thread is code
    outside any pass again and never waits."""
    sched = PassScheduler(
        SchedulerLimits(workers=1, background_workers=1, cores=1, store_writes=1, give_way_s=10)
    )
    hold = threading.Event()
    waited: list[float] = []

    def sweep() -> None:
        with sched.background() as pause:
            waited.append(pause())
        # Outside it again: no pass's deadline on the thread, so never a wait.
        waited.append(float(sched._current.running is None))

    try:
        sched.submit(time.monotonic(), lambda: hold.wait(10), background=False, first=True)
        _wait_until(lambda: sched._firsts == 1)
        thread = threading.Thread(target=sweep)
        thread.start()
        time.sleep(0.3)
        assert waited == []  # waiting while the first summary runs
        hold.set()
        thread.join(5)
    finally:
        hold.set()
        sched.stop(5)
    assert 0.2 < waited[0] < 5
    assert waited[1] == 1.0  # the thread's deadline is restored (none)


@pytest.mark.parametrize("units", [2, 5, 40])
def test_background_work_gives_way_give_way_s_in_all_however_many_units(units: int) -> None:
    """A sweep looks at many sessions while sunsets stream in: its block gives way at most
    give_way_s in all, then every pause returns at once (a pause per unit, each waiting
    give_way_s, stalled the sweep for minutes: bench.sweep_drain --sunsets 3)."""
    sched = PassScheduler(
        SchedulerLimits(workers=1, background_workers=1, cores=1, store_writes=1, give_way_s=0.1)
    )
    hold = threading.Event()
    try:
        sched.submit(time.monotonic(), lambda: hold.wait(30), background=False, first=True)
        _wait_until(lambda: sched._firsts == 1)
        with sched.background() as pause:
            waits = [pause() for _ in range(units)]
        with sched.background() as pause:  # the next block (the next sweep) has its own
            again = pause()
    finally:
        hold.set()
        sched.stop(5)
    assert waits[0] >= 0.1
    assert waits[1:] == [0.0] * (units - 1)
    assert again >= 0.1


def test_a_group_write_that_dies_leaves_no_row_of_it_done_without_an_error() -> None:
    """A group write that ends in an exception, of any kind, is every member's failure: a
    row that rode along in the group never reads as written when it was not."""

    class Dies(BaseException):
        pass

    class DyingStore(FakeStore):
        def write_rows(self, writes: list[RowWrite]) -> None:
            super().write_rows(writes)
            raise Dies("the thread is going away")

    writer, store = GroupWriter(1), DyingStore()
    outcomes: dict[str, BaseException | None] = {}

    def ride(write: RowWrite) -> None:
        try:
            writer.write(store, write)
        except BaseException as exc:
            outcomes[write.session_id] = exc
        else:
            outcomes[write.session_id] = None

    store.hold.clear()  # the first group waits: the next two rows gather into one group
    writes = [row("a"), row("b"), row("c")]
    threads = [threading.Thread(target=ride, args=(w,)) for w in writes]
    threads[0].start()
    wait_until(lambda: len(store.groups) == 1)
    for t in threads[1:]:
        t.start()
    wait_until(lambda: len(writer._waiting) == 2)  # b and c, queued behind a's group
    store.hold.set()
    for t in threads:
        t.join(5)
    assert [[w.session_id for w in g] for g in store.groups] == [["a"], ["b", "c"]]
    assert sorted(outcomes) == ["a", "b", "c"]
    assert all(isinstance(o, Dies) for o in outcomes.values()), outcomes
    assert all(w.done and isinstance(w.error, Dies) for w in writes)


def wait_until(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


# -- flows: each SessionSummarizer's queue served in turn ---------------------------------


def _drain(queue: DeadlineQueue[tuple[str, float, int]]) -> list[tuple[str, float, int]]:
    out = []
    while queue.waiting():
        got = queue.take()
        assert got is not None
        out.append(got)
        queue.release()
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abcd"), st.floats(0, 100)), max_size=60))
def test_every_item_is_served_once_and_each_flow_earliest_deadline_first(
    puts: list[tuple[str, float]],
) -> None:
    queue: DeadlineQueue[tuple[str, float, int]] = DeadlineQueue(1)
    for i, (flow, deadline) in enumerate(puts):
        queue.put(deadline, (flow, deadline, i), flow)
    served = _drain(queue)
    assert sorted(served, key=lambda x: x[2]) == [(f, d, i) for i, (f, d) in enumerate(puts)]
    for flow in "abcd":
        mine = [(d, i) for f, d, i in served if f == flow]
        assert mine == sorted(mine)  # ties in the order queued


@settings(max_examples=200, deadline=None)
@given(
    backlog=st.integers(1, 300),
    later_s=st.floats(0, 60),
    flows=st.integers(1, 4),
)
def test_a_flow_with_a_backlog_holds_another_back_by_one_item_per_quantum_it_was_earlier(
    backlog: int, later_s: float, flows: int
) -> None:
    """`backlog` items in each of `flows` busy flows queued at 0, then one of a quiet flow
    queued later_s after them: it is served after at most flows * (later_s / quantum + 1)
    of theirs, however long their backlog (first come, first served: after all of them)."""
    queue: DeadlineQueue[tuple[str, float, int]] = DeadlineQueue(1)
    for f in range(flows):
        for i in range(backlog):
            queue.put(0.0, (f"busy-{f}", 0.0, i), f"busy-{f}")
    queue.put(later_s, ("quiet", later_s, 0), "quiet")
    served = [flow for flow, _, _ in _drain(queue)]
    ahead = served.index("quiet")
    assert ahead <= flows * (later_s / FLOW_QUANTUM_S + 1)
    # The busy flows in turn: none gets two ahead of another.
    firsts = served[: flows * min(backlog, 5)]
    counts = [firsts.count(f"busy-{f}") for f in range(flows)]
    assert max(counts) - min(counts) <= 1 + firsts.count("quiet")


def test_a_flow_whose_queue_emptied_starts_again_without_its_earlier_turns() -> None:
    queue: DeadlineQueue[tuple[str, float, int]] = DeadlineQueue(1)
    for i in range(5):
        queue.put(0.0, ("a", 0.0, i), "a")
    assert len(_drain(queue)) == 5
    queue.put(3.0, ("a", 3.0, 5), "a")
    queue.put(2.0, ("b", 2.0, 0), "b")
    queue.put(2.5, ("b", 2.5, 1), "b")
    # a's five earlier turns count no more (they would put its 3.0 at 8.0, after both of
    # b's); b's own first turn puts its 2.5 at 3.5, after a's 3.0.
    assert [x[0] for x in _drain(queue)] == ["b", "a", "b"]


@settings(max_examples=25, deadline=None)
@given(backlog=st.integers(1, 12), later_s=st.floats(0, 8))
def test_a_flow_waiting_for_the_core_is_held_back_by_one_turn_per_quantum_it_was_earlier(
    backlog: int, later_s: float
) -> None:
    """The local embedding's core (turn()) is fair between flows as the worker queue is:
    `backlog` passes of a busy flow wait at 0, then one of a quiet flow at later_s; it gets
    the core after at most later_s / quantum + 1 of theirs, however many wait."""
    gate: DeadlineQueue[None] = DeadlineQueue(1)
    order: list[str] = []
    release = threading.Event()
    marks = [0.0] * backlog + [later_s]

    def holder() -> None:
        with gate.turn(-1):
            release.wait(10)

    def waiter(i: int) -> None:
        flow = "quiet" if i == backlog else "busy"
        with gate.turn(marks[i], flow):
            order.append(flow)

    _run_holder_then_waiters(gate, holder, waiter, len(marks), release)
    assert len(order) == backlog + 1
    assert order.index("quiet") <= later_s / FLOW_QUANTUM_S + 1
    assert gate.waiting() == 0 and gate.holding() == 0
