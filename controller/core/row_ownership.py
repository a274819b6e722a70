"""One writer, detected: is a summary row as we left it? Pure. Chroma's upsert merges
metadata, so another writer's upsert leaves our keys: each row records its document's digest,
and a mismatch names another writer, whose text is carried verbatim."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from controller.core.text import ms_to_rfc3339

DIGEST_KEY = "documentDigest"

# Keys neo computes from a row's text (its summarizer's input, its graph's digestion): each
# write of ours removes them, so neo digests our text as new (docs/migrating-from-neo.md).
# Only neo's SessionService writes the first three: on a row of ours they name neo.
NEO_WRITER_KEYS = ("sourceTier", "degraded", "rawCanonical")
NEO_DERIVED_KEYS = (
    *NEO_WRITER_KEYS,
    *("graphDigested", "digestState", "digestAttempts", "deferReason", "dreamInputRevision"),
)


def document_digest(document: str) -> str:
    return hashlib.sha256(document.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def rewritten_by(document: str | None, meta: Mapping[str, Any]) -> str | None:
    """Who rewrote a row of ours since our last write, or None; without a digest only neo's
    own summary keys (which we never write) tell."""
    digest = meta.get(DIGEST_KEY)
    neo = any(key in meta for key in NEO_WRITER_KEYS)
    if isinstance(digest, str):
        if isinstance(document, str) and document_digest(document) == digest:
            return None
    elif not neo:
        return None
    return NEO_WRITER if neo else UNKNOWN_WRITER


NEO_WRITER = "neo memory-core's summary task (SessionService.summarizeSession)"
UNKNOWN_WRITER = "another writer"


def with_text_of_other_writer(
    legacy_text: str | None, text: str, who: str, our_write_ms: int | None
) -> str | None:
    """The carried text, with another writer's text appended verbatim under a line naming it."""
    if not text:
        return legacy_text
    when = f" of {ms_to_rfc3339(our_write_ms)}" if our_write_ms is not None else ""
    block = f"[Written by {who} over this operator's summary{when}; kept verbatim:]\n\n{text}"
    return f"{legacy_text}\n\n{block}" if legacy_text else block


class RowChangedDuringPass(Exception):
    """Another writer rewrote the session's row during the pass: nothing is written over it;
    the next pass carries its text (from_chroma_row)."""
