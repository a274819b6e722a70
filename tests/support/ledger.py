"""The operator's ledger collection itself, for tests that read or damage it directly (the
operator reads it only through MemoryStore); a forget with no claim to check."""

from __future__ import annotations

from chromadb.api.models.Collection import Collection

from controller.pipeline import Outcome
from controller.store.memory_store import MemoryStore


def ledger_of(store: MemoryStore) -> Collection:
    return store.client.get_collection(store.location.ledger_collection)


def forget_unguarded(
    store: MemoryStore, session_id: str, *, memories: bool, request: str = "", by: str = ""
) -> Outcome:
    """handlers.session_summary.forget_session's deletes with no claim (no fence admitted,
    none checked): the store's side of a forget alone."""
    forgotten = store.forget_state(session_id, {}, memories=memories, request=request, by=by)
    return Outcome("forgotten", session_id, forgotten.remaining, forgotten=forgotten)
