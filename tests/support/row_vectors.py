"""A stand-in for MiniLM (the memories' and the summary rows' vectors) where a test asserts
what the operator writes and keeps (rows, ledger entries, facts), never what a vector says:
MiniLM's size (384, so rows of other writers and of release 0.1.0 share a collection), a
distinct vector per text, no model run. The pipeline reads no vector but one summary row's
size; a MiniLM call per write cost about a second on a loaded machine."""

from __future__ import annotations

import hashlib

DIMENSIONS = 384


def row_vectors(texts: list[str]) -> list[list[float]]:
    """One vector per text, the same for the same text."""
    vectors = []
    for text in texts:
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
        vectors.append([b / 255 for b in (digest * (DIMENSIONS // len(digest)))])
    return vectors
