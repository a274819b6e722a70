"""The one contract every summarizer keeps: given a bounded chunk of a session's memories and
the summary so far, it *proposes* one PassUpdate and never merges: controller.core.merge
applies every proposal the same way, so no summarizer, however wrong, can lose a fact."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from controller.core.memories import Memory
from controller.core.merge import PassUpdate
from controller.core.summary import PriorSummary


@dataclass(frozen=True)
class Proposal:
    """What one pass proposes, and the model tokens it cost (0 without a model)."""

    update: PassUpdate
    tokens_used: int = 0


class Summarizer(Protocol):
    # The pipeline's chunk bounds: tokens of memory text and memories one pass may take.
    @property
    def memory_budget_tokens(self) -> int: ...

    @property
    def max_memories_per_pass(self) -> int: ...

    # True when each item it proposes comes from one memory (the extractive summarizer):
    # a deleted memory then takes only its own items. A model's item may blend several, so
    # the memories behind an item partly gone are summarized again (core/item_sources.py).
    @property
    def one_memory_per_item(self) -> bool: ...

    def propose(
        self, session_id: str, memories: Sequence[Memory], prior: PriorSummary | None
    ) -> Proposal: ...
