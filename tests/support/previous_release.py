"""A session's row as the previous release wrote it, made from this release's write of it:
the writer's whole state on the row, the digest of its document and the grant's fence as
claimFence; no ledger entry. For the upgrade tests (test_ledger, test_neo_client)."""

from __future__ import annotations

from controller.core.naming import summary_row_id
from controller.core.summary_row import document_digest
from controller.store.memory_store import MemoryStore
from tests.support.ledger import ledger_of

LEGACY_FENCE_KEY = "claimFence"
# Keys of this release's ledger that the previous release never wrote.
NEWER_KEYS = frozenset({"maskedWith"})


def rewrite_as_previous_release(store: MemoryStore, sid: str, fence: int) -> None:
    """Turns the session's row and ledger entry, as this release wrote them, into the one
    row the previous release would have left (same document and vector)."""
    stored = store.stored_summary(sid)
    assert stored is not None
    document, keys = stored
    heavy = {k: v for k, v in keys.items() if not k.startswith("ledger.") and k not in NEWER_KEYS}
    heavy[LEGACY_FENCE_KEY] = fence
    assert heavy["documentDigest"] == document_digest(document)
    row_id = summary_row_id(sid)
    embeddings = store.summaries().get(ids=[row_id], include=["embeddings"])["embeddings"]
    assert embeddings is not None
    ledger_of(store).delete(where={"sessionId": sid})
    store.summaries().upsert(
        ids=[row_id],
        documents=[document],
        metadatas=[heavy],
        embeddings=[list(embeddings[0])],  # type: ignore[arg-type]
    )
