"""What the operator freezes at its start (operator.py:freeze_startup_objects): what was alive
then leaves the collector's generations, garbage of before and after is still collected."""

from __future__ import annotations

import gc
import sys
import weakref
from collections.abc import Iterator

import pytest

from controller.operator import FIRST_CALLS_IMPORT, freeze_startup_objects


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def cycle() -> tuple[Node, weakref.ref[Node]]:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return a, weakref.ref(a)


@pytest.fixture
def frozen() -> Iterator[None]:
    yield
    gc.unfreeze()  # the test process's objects back in the generations


def tracked(obj: object) -> bool:
    return any(o is obj for o in gc.get_objects())


def test_what_lives_at_the_start_leaves_every_generation(frozen: None) -> None:
    kept, _ = cycle()
    assert tracked(kept)
    count = freeze_startup_objects()
    # Frozen objects still die by refcount (another thread may free some at any time): the
    # permanent generation only shrinks after the freeze.
    assert count >= 1 and 0 < gc.get_freeze_count() <= count
    # What the first calls import is imported and frozen too: a name here that a release
    # of the kubernetes client, httpx or pydantic renames fails here, not at a pause.
    assert all(sys.modules.get(name) is not None for name in FIRST_CALLS_IMPORT)
    assert not tracked(kept)  # a full collection no longer walks it
    gc.collect()
    assert kept.other is not None and kept.other.other is kept


def test_garbage_of_before_and_after_the_freeze_is_still_collected(frozen: None) -> None:
    before, dead_before = cycle()
    del before  # a cycle: refcounting alone does not free it
    assert dead_before() is not None
    freeze_startup_objects()
    assert dead_before() is None  # collected, not frozen
    after, dead_after = cycle()
    del after
    gc.collect()
    assert dead_after() is None  # built after the start: in the generations as before
