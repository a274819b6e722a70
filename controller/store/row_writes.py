"""Summary rows of several passes written together (GroupWriter), each checked on its own:
an upsert of sixteen costs Chroma little more than one of one (docs/benchmarks.md). The
write itself is MemoryStore.write_rows."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from controller.core.ledger import RowState
from controller.core.waiting import Pause, no_pause

log = logging.getLogger(__name__)
GROUP_ROWS = 16  # rows a group writes at most: a request of a few MiB with 4,096-d vectors


@dataclass(eq=False)
class RowWrite:
    """One session's row waiting to be written. `admit` checks the row as found right before
    the upsert: it raises to refuse, else returns the keys the ledger records (the fence).
    `error`, after the write: what refused or failed it (None: written)."""

    session_id: str
    document: str
    metadata: Mapping[str, str | int | float | bool]
    embedding: Sequence[float]
    admit: Callable[[RowState], Mapping[str, int | str]] = lambda found: {}
    deadline: float = 0.0  # the pass's (scheduling.py): a group takes the earliest first
    error: BaseException | None = None
    done: bool = False

    def result(self) -> None:
        if self.error is not None:
            raise self.error


class RowWriter(Protocol):
    def write_rows(self, writes: Sequence[RowWrite]) -> None: ...


class GroupWriter:
    """Rows waiting to be written to one summary collection. Whichever pass finds a group
    free writes up to GROUP_ROWS, earliest deadline first, one per session and of one vector
    size; the others wait for their row's result. At most `groups` groups in flight, plus
    one of rows already due."""

    def __init__(self, groups: int = 1, rows: int = GROUP_ROWS) -> None:
        self._groups, self._rows = groups, rows
        self._changed = threading.Condition()
        self._waiting: list[RowWrite] = []
        self._writing: set[str] = set()  # sessions of the groups in flight
        self._leading = 0

    def write(self, store: RowWriter, write: RowWrite, pause: Pause = no_pause) -> None:
        """pause: called before sending a group with no due row (the scheduler's give_way)."""
        with self._changed:
            self._waiting.append(write)
            while not write.done:
                group = self._next()
                if not group:
                    self._changed.wait()
                    continue
                self._leading += 1
                self._changed.release()
                try:
                    if all(w.deadline > time.monotonic() for w in group):
                        pause()
                    store.write_rows(group)  # sets each write's error; raises only on a bug
                except BaseException as exc:  # each member raises it; this write may be elsewhere
                    log.exception("a group write failed")
                    for member in group:  # never "done" with no error and no row written
                        member.error = member.error or exc
                    if not isinstance(exc, Exception):
                        raise
                finally:
                    self._changed.acquire()
                    self._leading -= 1
                    self._writing.difference_update(w.session_id for w in group)
                    for member in group:
                        member.done = True
                    self._changed.notify_all()
        write.result()

    def _next(self) -> list[RowWrite]:
        """Under the lock: the next group, if one may start; one extra of due rows, so they
        wait for one backlog request at most."""
        if self._leading < self._groups:
            return self._take(None)
        return self._take(time.monotonic()) if self._leading == self._groups else []

    def _take(self, due: float | None) -> list[RowWrite]:
        """Under the lock: the next group (with due: only rows due by then)."""
        group: list[RowWrite] = []
        sessions = set(self._writing)
        for write in sorted(self._waiting, key=lambda w: w.deadline):
            if len(group) == self._rows or (due is not None and write.deadline > due):
                break
            size = len(group[0].embedding) if group else len(write.embedding)
            if write.session_id in sessions or len(write.embedding) != size:
                continue
            group.append(write)
            sessions.add(write.session_id)
        for write in group:
            self._waiting.remove(write)
        self._writing.update(w.session_id for w in group)
        return group
