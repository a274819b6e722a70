"""An append-only journal of store writes, for the chaos tests. Each write logs a "begin"
line before the claim's checks, an "admitted" line once they passed (the upsert is next)
and an "end" line with its outcome (written, refused, failed) after the upsert returns, so
a writer killed in between still shows its write as begun. Each line carries the writer's
fencing number (its pass's claim grant). A writer is a replica (holder) serving one
object: the same replica serving two objects of one session is two writers. The lines are
in the order they happened, across processes (one O_APPEND write each): the tests read
that order, not the processes' clocks, which the clock-skew test sets apart. A handler of
the operator's write records (controller.upsert.WRITES), installed by devenv.operator;
never in the product.

PauseBeforeUpsert (SSO_TEST_PAUSE_BEFORE_UPSERT=SESSION:N) stops the whole process with
SIGSTOP at the N-th admitted write of SESSION: a pause between the fence check and the
upsert, the window fencing cannot close, for the test that shows it harmless."""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from controller.upsert import WRITES, WriteEvent


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __call__(self, event: WriteEvent) -> None:
        record: dict[str, object] = {
            "event": event.phase,
            "session": event.session_id,
            "holder": event.writer,
            "object": event.writer_object,
            "t": event.at_ms,
        }
        if event.fence is not None:
            record["fence"] = event.fence
        if event.phase != "begin":
            record["began"] = event.began_ms
        if event.phase == "end":
            record["outcome"] = event.outcome
        line = json.dumps(record, separators=(",", ":")) + "\n"
        # One short O_APPEND write per record: atomic with respect to other processes.
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


class PauseBeforeUpsert:
    """Stops this process (SIGSTOP, every thread) at the nth admitted write of a session;
    whoever sent the test's SIGCONT resumes it right before its upsert."""

    def __init__(self, spec: str) -> None:
        session, _, nth = spec.rpartition(":")
        self.session, self.nth, self.seen = session, int(nth), 0

    def __call__(self, event: WriteEvent) -> None:
        if event.phase != "admitted" or event.session_id != self.session:
            return
        self.seen += 1
        if self.seen == self.nth:
            os.kill(os.getpid(), signal.SIGSTOP)
            # The stop reaches this thread some time after kill() returns (at once on a
            # quiet machine, not under load): without the wait it could start its upsert
            # first, whose answer then comes after the pause, past timeoutSeconds
            # (http_deadline), and the write the test means to land late fails instead.
            time.sleep(0.5)


class _Watching(logging.Handler):
    """Hands each write record's event (controller.upsert.WRITES) to the watchers, in order."""

    def __init__(self, chain: list[Callable[[WriteEvent], None]]) -> None:
        super().__init__(logging.DEBUG)
        self.chain = chain

    def emit(self, record: logging.LogRecord) -> None:
        event = getattr(record, "write", None)
        if isinstance(event, WriteEvent):
            for each in self.chain:
                each(event)

    def handleError(self, record: logging.LogRecord) -> None:
        raise  # a journal that cannot be written fails the write, not silently the test


def watch_writes(journal: str | None, pause: str | None) -> None:
    """Watches this process's store writes: the journal (SSO_WRITE_JOURNAL) and the pause
    (SSO_TEST_PAUSE_BEFORE_UPSERT), in that order; nothing when neither is set."""
    chain: list[Callable[[WriteEvent], None]] = []
    if journal:
        chain.append(Journal(Path(journal)))
    if pause:
        chain.append(PauseBeforeUpsert(pause))
    if chain:
        WRITES.addHandler(_Watching(chain))
        WRITES.setLevel(logging.DEBUG)
        WRITES.propagate = False  # not in the operator's log
