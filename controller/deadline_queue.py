"""The queue every step of a pass waits in (controller/scheduling.py): at most `slots`
served at once, the earliest deadline first, fair between flows."""

from __future__ import annotations

import contextlib
import heapq
import itertools
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from typing import Generic, Protocol, TypeVar

Item = TypeVar("Item")

# What one served item of a flow adds to the deadlines of the flow's next ones, while the
# flow has items queued: a flow with a backlog is served in turn with the others.
FLOW_QUANTUM_S = 1.0


class Slot(Protocol):
    """Called by a slot's holder between pieces of its work (DeadlineQueue.turn)."""

    def __call__(self, pause: Callable[[], object] | None = None) -> float: ...


class QueueClosed(RuntimeError):
    """The queue was closed (the process is stopping): nothing new is served."""


class DeadlineQueue(Generic[Item]):
    """At most `slots` served at once; a free slot goes to the waiter with the earliest
    deadline (ties: the one queued first). Two doors: a thread waits for its own turn
    (turn(), a gate around a blocking call), or queues an item that a worker thread takes
    later (put() and take(), a thread pool's queue).

    Both doors are fair between flows (a SessionSummarizer each), as the API server's
    priority and fairness is between its flows: a queue per flow, and the next served is the
    flow whose earliest deadline, plus FLOW_QUANTUM_S for each item or turn the flow had
    served since it last had none waiting, is earliest. So 200 sunsets of one flow queued
    before one of another flow hold it back by at most one item per second they were queued
    earlier, and within a flow the earliest deadline still goes first."""

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError("slots must be at least 1")
        self.slots = slots
        self._free = slots
        self._cond = threading.Condition()
        self._line: list[tuple[float, int, Hashable]] = []  # turn()'s tickets
        self._line_served: dict[Hashable, int] = {}  # turns served while the flow waited
        self._order = itertools.count()
        self._closed = False
        self._flows: dict[Hashable, list[tuple[float, int, Item]]] = {}  # queued items
        self._served: dict[Hashable, int] = {}  # items served since the flow's queue was empty
        self._queued = 0
        self._takers = 0  # threads waiting in take()
        self._tickets = 0  # threads waiting in turn()

    @contextlib.contextmanager
    def turn(self, deadline: float, flow: Hashable = None) -> Iterator[Slot]:
        """Blocks until this caller's turn, holds a slot while the block runs. The block
        gets a function to call between pieces of its work (_yield_slot): it gives the slot
        up to an earlier deadline waiting for one, or for as long as a pause runs, and
        takes it back in its own turn."""
        ticket: tuple[float, int, Hashable] = (deadline, next(self._order), flow)
        with self._cond:
            self._acquire(ticket)
        holding = [True]  # False while a yield gave the slot up and has not taken it back
        try:
            yield lambda pause=None: self._yield_slot(ticket, holding, pause)
        finally:
            if holding[0]:
                self.release()

    def _acquire(self, ticket: tuple[float, int, Hashable]) -> None:
        """Under the condition: waits for the ticket's turn and takes a slot; a wait that
        raises takes its ticket out of the line."""
        self._line.append(ticket)
        self._tickets += 1
        try:
            while self._free == 0 or self._next_ticket() is not ticket:
                self._cond.wait()
        except BaseException:
            self._line.remove(ticket)
            self._wake()
            raise
        finally:
            self._tickets -= 1
        self._line.remove(ticket)
        flow = ticket[2]
        if any(t[2] == flow for t in self._line):
            self._line_served[flow] = self._line_served.get(flow, 0) + 1
        else:
            self._line_served.pop(flow, None)
        self._free -= 1
        if self._free and self._line:
            self._cond.notify_all()  # the next in line may take another free slot

    def _ticket_turn(self, ticket: tuple[float, int, Hashable]) -> tuple[float, float, int]:
        # The deadline again after the sum: within a flow (the same quantum added) a float
        # sum may round two deadlines to one; they still go in deadline order.
        deadline, order, flow = ticket
        return deadline + FLOW_QUANTUM_S * self._line_served.get(flow, 0), deadline, order

    def _next_ticket(self) -> tuple[float, int, Hashable] | None:
        return min(self._line, key=self._ticket_turn, default=None)

    def _yield_slot(
        self,
        ticket: tuple[float, int, Hashable],
        holding: list[bool],
        pause: Callable[[], object] | None,
    ) -> float:
        """Gives the holder's slot to a waiter with an earlier deadline, when no slot is
        free; or, with pause, to whoever is next in line (an earlier or a later deadline)
        for as long as pause() runs. The holder then queues again with its own ticket,
        ahead of every later one still waiting, also when pause() raises. Returns the
        seconds it waited."""
        with self._cond:
            head = self._next_ticket()
            if pause is None and (
                self._free or head is None or self._ticket_turn(head) >= self._ticket_turn(ticket)
            ):
                return 0.0
            began = time.monotonic()
            holding[0] = False
            self._free += 1
            self._wake()
        try:
            if pause is not None:
                pause()
        finally:
            with self._cond:
                self._acquire(ticket)
                holding[0] = True
        return time.monotonic() - began

    def put(self, deadline: float, item: Item, flow: Hashable = None) -> bool:
        """Queues the item in its flow; True when more items wait than threads wait in
        take() (a pool should start a thread, if it may)."""
        with self._cond:
            if self._closed:
                raise QueueClosed("cannot schedule new work after the queue was closed")
            heapq.heappush(self._flows.setdefault(flow, []), (deadline, next(self._order), item))
            self._queued += 1
            self._wake()
            return self._queued > self._takers

    def take(self) -> tuple[float, Item] | None:
        """The next queued item (the class doc), once a slot is free (the caller release()s
        it after); None once the queue is closed (close() dropped what was queued)."""
        with self._cond:
            self._takers += 1
            try:
                while not (self._queued and self._free) and not self._closed:
                    self._cond.wait()
            finally:
                self._takers -= 1
            if self._closed:
                return None
            flow = min(self._flows, key=self._turn_of)
            queued = self._flows[flow]
            deadline, _, item = heapq.heappop(queued)
            self._queued -= 1
            if queued:
                self._served[flow] = self._served.get(flow, 0) + 1
            else:
                del self._flows[flow]
                self._served.pop(flow, None)
            self._free -= 1
            return deadline, item

    def _turn_of(self, flow: Hashable) -> tuple[float, float, int]:
        deadline, order, _ = self._flows[flow][0]
        return deadline + FLOW_QUANTUM_S * self._served.get(flow, 0), deadline, order

    def release(self) -> None:
        with self._cond:
            self._free += 1
            self._wake()

    def _wake(self) -> None:
        """Under the condition. A thread waiting in turn() waits for its own ticket, so all
        of them are woken to see whose turn it is; of the threads waiting in take(), any
        one can take the next item, so one is (not a pool's every idle thread)."""
        if self._tickets:
            self._cond.notify_all()
        else:
            self._cond.notify()

    def close(self) -> list[Item]:
        """Serves nothing new; returns the items still queued (dropped)."""
        with self._cond:
            self._closed = True
            dropped = [item for queued in self._flows.values() for _, _, item in queued]
            self._flows.clear()
            self._served.clear()
            self._queued = 0
            self._cond.notify_all()
            return dropped

    def waiting(self) -> int:
        with self._cond:
            return len(self._line) + self._queued

    def holding(self) -> int:
        with self._cond:
            return self.slots - self._free

    def free(self) -> int:
        """Slots no one holds and no queued item is about to take."""
        with self._cond:
            return max(0, self._free - len(self._line) - self._queued)
