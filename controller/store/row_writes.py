"""Writing summary rows: each pass's row checked on its own, several passes' rows written
together (GroupWriter), since an upsert of sixteen costs Chroma little more than one of one
(docs/benchmarks.md). One read of the group's rows, each pass's own checks, one upsert of
the ledger records and one of the rows; a refused group is sent again row by row. Chroma has
no conditional write: a check and its upsert race no more than for a write alone."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from chromadb.api.models.Collection import Collection
from chromadb.errors import InvalidArgumentError

from controller.core.fencing import recorded_fence
from controller.core.ledger import LEDGER_VECTOR, LedgerRecord, RowState, plan_write
from controller.core.naming import summary_row_id
from controller.core.row_ownership import document_digest
from controller.core.summary_row import READER_ROW_KEYS, upsert_metadata
from controller.core.waiting import Pause, no_pause
from controller.store.collections import Collections
from controller.store.errors import (
    DIMENSION_ERROR,
    CollectionNotFound,
    StoreUnreachable,
    mismatch,
)

log = logging.getLogger(__name__)
GROUP_ROWS = 16  # rows a group writes at most: a request of a few MiB with 4,096-d vectors


def _no_checks(found: RowState) -> Mapping[str, int | str]:
    return {}


@dataclass(eq=False)
class RowWrite:
    """One session's row waiting to be written. `admit` checks the row as found right before
    the upsert: it raises to refuse, else returns the keys the ledger records (the fence).
    `error`, after the write: what refused or failed it (None: written)."""

    session_id: str
    document: str
    metadata: Mapping[str, str | int | float | bool]
    embedding: Sequence[float]
    admit: Callable[[RowState], Mapping[str, int | str]] = _no_checks
    deadline: float = 0.0  # the pass's (scheduling.py): a group takes the earliest first
    error: BaseException | None = None
    done: bool = False

    def result(self) -> None:
        if self.error is not None:
            raise self.error


@dataclass(frozen=True)
class _Admitted:
    """An admitted write; `leftovers`: ledger records the new head does not name."""

    write: RowWrite
    row: dict[str, Any]
    records: tuple[LedgerRecord, ...]
    leftovers: tuple[str, ...]


class RowWrites(Collections):
    """Reads a row as a write finds it and writes rows, one or several sessions at once."""

    def read_row_state(self, session_id: str) -> RowState:
        return self.read_row_states([session_id])[session_id]

    def read_row_states(self, session_ids: Sequence[str]) -> dict[str, RowState]:
        """Each session's row as a write finds it: its fence (core/fencing.py), document
        digest (None: no row), ledger head and other records. Two reads for all."""
        ids = [summary_row_id(s) for s in session_ids]
        where = {"sessionId": {"$in": list(session_ids)}}
        records = self._by_id(self._on_ledger, "reading the ledger entries", ["metadatas"], where)
        rows = self._by_id(self._on_summaries, "reading the rows", ["documents", "metadatas"], ids)
        others: dict[object, list[str]] = {}
        for record_id, (_, meta) in records.items():
            if record_id not in ids:
                others.setdefault(meta.get("sessionId"), []).append(record_id)
        states = {}
        for sid, row_id in zip(session_ids, ids, strict=True):
            found, row = records.get(row_id), rows.get(row_id)
            head = found[1] if found else None
            fence = recorded_fence(head)
            digest = document_digest(row[0] or "") if row is not None else None
            states[sid] = RowState(fence, digest, head, tuple(others.get(sid, ())))
        return states

    @staticmethod
    def _by_id(
        on: Callable[..., Any], what: str, include: list[str], which: list[str] | dict[str, Any]
    ) -> dict[str, tuple[str | None, dict[str, Any]]]:
        """(document, metadata) by id of the records `which` (ids or a where) names."""
        ids, where = (which, None) if isinstance(which, list) else (None, which)
        try:
            got = on(
                what, lambda c: c.get(ids=ids, where=cast(Any, where), include=cast(Any, include))
            )
        except CollectionNotFound:
            return {}
        docs = got.get("documents") or [None] * len(got["ids"])
        metas = got.get("metadatas") or [None] * len(got["ids"])
        return {i: (d, dict(m or {})) for i, d, m in zip(got["ids"], docs, metas, strict=False)}

    def drop_summary(self, session_id: str) -> None:
        """Deletes the session's row, then its ledger records: an entry left is read and
        dropped again by the next pass; a row alone would read as another writer's text."""
        row_id = summary_row_id(session_id)
        with contextlib.suppress(CollectionNotFound):
            self._on_summaries("deleting the summary row", lambda c: c.delete(ids=[row_id]))
        with contextlib.suppress(CollectionNotFound):
            where = cast(Any, {"sessionId": session_id})
            self._on_ledger("deleting the ledger entry", lambda c: c.delete(where=where))

    def write_rows(self, writes: Sequence[RowWrite]) -> None:
        """Writes these sessions' ledger entries, then their rows (summary_<sessionId>);
        each write's `error` says what refused or failed it. The one place that creates the
        summary and ledger collections. Stale keys are removed from the row
        (summary_row.upsert_metadata): Chroma's upsert would keep them."""
        try:
            found = self.read_row_states([w.session_id for w in writes])
        except Exception as exc:
            for write in writes:
                write.error = exc
            return
        admitted: list[_Admitted] = []
        for write in writes:
            try:  # the write's own checks, then its own records: a failure is its alone
                state = found[write.session_id]
                fence = write.admit(state)
                row = {k: v for k, v in write.metadata.items() if k in READER_ROW_KEYS}
                plan = plan_write(write.session_id, write.metadata, state.head, fence, state.digest)
                left = tuple(r for r in state.records if r not in plan.named)
                admitted.append(_Admitted(write, upsert_metadata(row), plan.records, left))
            except Exception as exc:
                write.error = exc
        if not admitted:
            return
        try:
            self._upsert(admitted)
        except StoreUnreachable as exc:  # the store, not a row: each alone would fail too
            for one in admitted:
                one.write.error = exc
        except Exception as exc:
            if len(admitted) == 1:
                admitted[0].write.error = exc
                return
            # Chroma refused: a bad row (size limit, vector size) must fail alone.
            log.info(
                "a group write of %d rows failed (%s); writing them one by one", len(admitted), exc
            )
            for one in admitted:
                self.write_rows([one.write])  # read and checked again, as if alone
            return
        # Records the new head does not name go after the rows; if that fails, so does the
        # write, and its retry finds them (read_prior).
        done = [one for one in admitted if one.write.error is None and one.leftovers]
        if done:
            ids = [i for one in done for i in one.leftovers]
            try:
                self._on_ledger("deleting old ledger records", lambda c: c.delete(ids=ids))
            except Exception as exc:
                for one in done:
                    one.write.error = exc

    def _upsert(self, admitted: list[_Admitted]) -> None:
        records = [r for one in admitted for r in one.records]
        self._on_ledger(
            "writing the ledger entries",
            lambda coll: coll.upsert(
                ids=[r.record_id for r in records],
                documents=[r.document for r in records],
                metadatas=[r.metadata for r in records],
                embeddings=cast(Any, [np.asarray(LEDGER_VECTOR, dtype=np.float32)] * len(records)),
            ),
            create=True,
        )

        def upsert(coll: Collection) -> None:
            try:
                coll.upsert(
                    ids=[summary_row_id(one.write.session_id) for one in admitted],
                    documents=[one.write.document for one in admitted],
                    metadatas=[cast(Any, one.row) for one in admitted],
                    embeddings=cast(
                        Any, [np.asarray(one.write.embedding, dtype=np.float32) for one in admitted]
                    ),
                )
            except InvalidArgumentError as exc:
                found = DIMENSION_ERROR.search(str(exc))
                if found:
                    name = self.location.summary_collection
                    raise mismatch(name, int(found.group(1)), int(found.group(2))) from exc
                raise

        self._on_summaries("writing the summaries", upsert, create=True)
        # Chroma accepted this dimension: later writes need no sample round trip.
        self._verified_dimension = len(admitted[0].write.embedding)


class GroupWriter:
    """Rows waiting to be written to one summary collection. Whichever pass finds a group
    free writes up to GROUP_ROWS, earliest deadline first, one per session and of one vector
    size; the others wait and then return or raise their row's error. At most `groups`
    groups in flight, plus one of rows already due (_next)."""

    def __init__(self, groups: int = 1, rows: int = GROUP_ROWS) -> None:
        self._groups, self._rows = groups, rows
        self._changed = threading.Condition()
        self._waiting: list[RowWrite] = []
        self._writing: set[str] = set()  # sessions of the groups in flight
        self._leading = 0

    def write(self, store: RowWrites, write: RowWrite, pause: Pause = no_pause) -> None:
        """pause: called before sending a group with no due row (the scheduler's give_way,
        so background rows wait while a just-ended session is summarized)."""
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
        """Under the lock: the next group, if one may start. One extra group of due rows (a
        session that just ended) may run, so they wait for one backlog request at most."""
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
