"""Provenance of a summary row: the memory range it covers and, per pass, tokens in (memory
text read) against tokens out (added to the document); the compaction ratio is in / out.
Tokens by the one estimate (core/chunking.py), the same for every backend. Pure.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from controller.core.chunking import estimate_tokens, memory_text
from controller.core.memories import Memory
from controller.core.summary import HISTORY_SECTIONS, StructuredSummary

PASS_TOKENS_KEPT = 100  # per-pass figures stored in the row (the sums cover every pass)


@dataclass(frozen=True)
class PassTokens:
    tokens_in: int
    tokens_out: int


def pass_tokens(memories: Sequence[Memory], added: str) -> PassTokens:
    """One pass's figures from its memories and the text it added (added_text)."""
    tokens_in = sum(estimate_tokens(memory_text(m)) for m in memories)
    return PassTokens(tokens_in, estimate_tokens(added))


def added_text(before: StructuredSummary | None, after: StructuredSummary) -> str:
    """What a pass added: history items and references past the prior's (they only grow), and
    Current State when it changed. Measured on items, not the document, so folding a long
    document never reads as a pass that added nothing, and counting costs what is new."""
    parts: list[str] = []
    for title, items in after.sections.items():
        old = before.sections.get(title, []) if before is not None else []
        new = items[len(old) :] if title in HISTORY_SECTIONS else items if items != old else []
        parts += [item.text for item in new]
    parts += after.references[len(before.references) if before is not None else 0 :]
    return "\n".join(parts)


@dataclass(frozen=True)
class Provenance:
    """What one write of a summary covers and cost."""

    METADATA_KEYS: ClassVar[tuple[str, ...]] = (
        *("passCount", "passTokensIn", "passTokensOut", "passTokensJson", "documentTokens"),
        "compactionRatio",
    )
    passes: list[PassTokens] = field(default_factory=list)
    document_tokens: int = 0

    @property
    def tokens_in(self) -> int:
        return sum(p.tokens_in for p in self.passes)

    @property
    def tokens_out(self) -> int:
        return sum(p.tokens_out for p in self.passes)

    @property
    def ratio(self) -> float | None:
        """Tokens of memory per token of summary; None when nothing was read or written."""
        if self.tokens_in <= 0 or self.tokens_out <= 0:
            return None
        return round(self.tokens_in / self.tokens_out, 2)

    def with_document(self, document: str) -> Provenance:
        return Provenance(list(self.passes), estimate_tokens(document))

    def metadata(self) -> dict[str, str | int | float]:
        """The row's provenance keys (the memory range is in the summary's own keys:
        firstMemoryAt, timestamp, memoryCount, watermarkTimestamp, watermarkMemoryId)."""
        kept = [[p.tokens_in, p.tokens_out] for p in self.passes[:PASS_TOKENS_KEPT]]
        meta: dict[str, str | int | float] = {
            "passCount": len(self.passes),
            "passTokensIn": self.tokens_in,
            "passTokensOut": self.tokens_out,
            "passTokensJson": json.dumps(kept, separators=(",", ":")),
            "documentTokens": self.document_tokens,
        }
        if self.ratio is not None:
            meta["compactionRatio"] = self.ratio
        return meta
