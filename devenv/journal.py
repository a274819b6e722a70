"""An append-only journal of store writes, for the chaos tests. Each write logs a "begin"
line before the claim's checks, an "admitted" line once they passed (the upsert is next)
and an "end" line with its outcome (written, refused, failed) after the upsert returns, so
a writer killed in between still shows its write as begun. Each line carries the writer's
fencing number (its pass's claim grant). A writer is a replica (holder) serving one
object: the same replica serving two objects of one session is two writers. The lines are
in the order they happened, across processes (one O_APPEND write each): the tests read
that order, not the processes' clocks, which the clock-skew test sets apart. A wrapper
around the pipeline's write_row (and the group write it is given), installed by
devenv.operator; never in the product.

PauseBeforeUpsert (SSO_TEST_PAUSE_BEFORE_UPSERT=SESSION:N) stops the whole process with
SIGSTOP at the N-th admitted write of SESSION: a pause between the fence check and the
upsert, the window fencing cannot close, for the test that shows it harmless."""

from __future__ import annotations

import functools
import json
import os
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from controller import pipeline
from controller.core.ledger import RowState
from controller.core.summary import StructuredSummary
from controller.store.memory_store import (
    GroupWrite,
    MemoryStore,
    RowWrite,
    WriteGuard,
    Written,
    write_alone,
)


@dataclass(frozen=True)
class WriteEvent:
    """A step of one row's write: "begin" before the last claim check, "admitted" once the
    checks passed, "end" with the outcome (a writer killed in between never ends)."""

    phase: Literal["begin", "admitted", "end"]
    session_id: str
    writer: str
    writer_object: str
    at_ms: int
    began_ms: int
    fence: int | None = None
    outcome: Literal["", "written", "refused", "failed"] = ""  # "": not ended


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


def _now_ms() -> int:
    return int(time.time() * 1000)


def journaled(
    write_row: Callable[..., Written], tell: Callable[[WriteEvent], None]
) -> Callable[..., Written]:
    """write_row, telling each write's steps: its group write is wrapped so that "begin"
    comes before the group's claim checks, "admitted" after them and "end" after the
    upsert (refused: the checks raised). The object is the claim's (kube/claims.py)."""

    @functools.wraps(write_row)
    def write(
        store: MemoryStore,
        summary: StructuredSummary,
        *,
        writer: str,
        guard: WriteGuard | None,
        group: GroupWrite = write_alone,
        **rest: Any,
    ) -> Written:
        granted = getattr(guard, "fence", None)  # the claim's grant (SessionClaimHandle)
        fence = granted.number if granted is not None else None
        claim = getattr(guard, "claim", None)  # what the claim asks for (SessionClaimHandle)
        owner = str(claim.writer.owner) if claim is not None else ""

        def told(store: MemoryStore, row: RowWrite) -> None:
            began = _now_ms()

            def event(phase: Any, outcome: Any = "") -> WriteEvent:
                # The begin line's time is the key its other lines carry (`began`): read once.
                at = began if phase == "begin" else _now_ms()
                sid = summary.session_id
                return WriteEvent(phase, sid, writer, owner, at, began, fence, outcome)

            tell(event("begin"))
            checks, refusals = row.admit, list[BaseException]()

            def admit(found: RowState) -> Mapping[str, int | str]:
                try:
                    keys = checks(found)
                except BaseException as exc:
                    refusals.append(exc)
                    raise
                tell(event("admitted"))
                return keys

            row.admit = admit
            outcome = "failed"
            try:
                group(store, row)
                outcome = "written"
            except BaseException as exc:  # the group raises what refused or failed this row
                outcome = "refused" if any(exc is r for r in refusals) else "failed"
                raise
            finally:  # ends whether written or refused (claim lost, store down)
                tell(event("end", outcome))

        return write_row(store, summary, writer=writer, guard=guard, group=told, **rest)

    return write


def watch_writes(journal: str | None, pause: str | None) -> None:
    """Watches this process's store writes: the journal (SSO_WRITE_JOURNAL) and the pause
    (SSO_TEST_PAUSE_BEFORE_UPSERT), in that order; nothing when neither is set. A journal
    that cannot be written fails the write, not silently the test."""
    chain: list[Callable[[WriteEvent], None]] = []
    if journal:
        chain.append(Journal(Path(journal)))
    if pause:
        chain.append(PauseBeforeUpsert(pause))

    def tell(event: WriteEvent) -> None:
        for each in chain:
            each(event)

    if chain:
        pipeline.write_row = journaled(pipeline.write_row, tell)
