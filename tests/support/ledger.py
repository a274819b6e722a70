"""The operator's ledger collection itself, for tests that read or damage it directly (the
operator reads it only through MemoryStore)."""

from __future__ import annotations

from chromadb.api.models.Collection import Collection

from controller.store.memory_store import MemoryStore


def ledger_of(store: MemoryStore) -> Collection:
    return store.client.get_collection(store.location.ledger_collection)
