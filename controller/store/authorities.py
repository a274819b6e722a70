"""Each cluster's authority record in the ledger (core/fencing.py). Mixed into MemoryStore."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from controller.core.fencing import AUTHORITY_RECORD, AuthorityRecord, authority_record_id
from controller.core.ledger import LEDGER_VECTOR
from controller.store.collections import Collections
from controller.store.errors import CollectionNotFound


class Authorities(Collections):
    def read_authority(self, uid: str) -> AuthorityRecord | None:
        return next(iter(self.authorities(uid)), None)

    def authorities(self, uid: str | None = None) -> list[AuthorityRecord]:
        """The record of cluster uid (None: every cluster's); none without a ledger."""
        where = {"authority": uid} if uid is not None else {"record": AUTHORITY_RECORD}
        try:
            got = self._on_ledger(
                "reading the clusters' authority records",
                lambda coll: coll.get(where=cast(Any, where), include=["metadatas"]),
            )
        except CollectionNotFound:
            return []
        return [r for m in got["metadatas"] or [] if (r := AuthorityRecord.parse(m or {}))]

    def renew_authority(self, record: AuthorityRecord) -> None:
        """Writes this cluster's record (creating the ledger, as a first write does)."""
        self._on_ledger(
            "renewing this cluster's authority record",
            lambda coll: coll.upsert(
                ids=[authority_record_id(record.uid)],
                documents=[f"the operator of cluster {record.uid} writes these summaries"],
                metadatas=[cast(Any, record.metadata())],
                embeddings=cast(Any, [list(LEDGER_VECTOR)]),
            ),
            create=True,
        )

    def remove_authorities(self, uids: Sequence[str]) -> None:
        ids = [authority_record_id(uid) for uid in uids]
        if ids:
            self._on_ledger("removing authority records", lambda coll: coll.delete(ids=ids))
