"""Forgetting a session (spec.action Forget; docs/privacy.md) under its claim and fence check,
like any write: a deposed writer can neither forget its successor's row nor write over a forget."""

from __future__ import annotations

from controller.core.ledger import recorded_fence
from controller.kube.claims import ClaimLost
from controller.pipeline import Outcome
from controller.store.memory_store import MemoryStore, is_tombstone
from controller.upsert import WriteGuard


def forget_session(
    store: MemoryStore,
    session_id: str,
    *,
    memories: bool,
    guard: WriteGuard,
    request: str = "",
    by: str = "",
) -> Outcome:
    """Deletes the row, the ledger entry (a tombstone stays) and, with memories, the memories,
    the claim checked before each write. request (uid/generation): a retry reports the total;
    by: the forgetting object, for the other namespaces' objects that named the row."""
    fence = guard.admit(store.read_row_state(session_id).fence)
    forgotten = store.forget_state(
        session_id, fence, memories=memories, request=request, by=by, check=guard.check
    )
    # A successor granted between our last check and its delete may have written since.
    head = store.read_row_state(session_id).head
    if not is_tombstone(head) or recorded_fence(head) != recorded_fence(fence):
        raise ClaimLost(
            f"session {session_id!r} was written by another writer while it was forgotten "
            "(our claim lapsed meanwhile); the retry forgets it again"
        )
    return Outcome("forgotten", session_id, forgotten.remaining, forgotten=forgotten)
