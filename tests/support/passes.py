"""One pass the way the pipeline runs it (the summarizer proposes, the merge merges, the
result is validated), for tests that look at a single pass."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from controller.core.chunking import chunk_memories
from controller.core.memories import Memory
from controller.core.merge import PassUpdate
from controller.core.summary import PriorSummary, StructuredSummary
from controller.pipeline import run_pass
from controller.summarizers.contract import Proposal, Summarizer
from controller.summarizers.extractive import EXTRACTIVE


@dataclass(frozen=True)
class PassResult:
    """One validated pass (pipeline.run_pass): the merged summary and the model tokens it cost."""

    summary: StructuredSummary
    tokens_used: int = 0


def source_key(memory_id: str) -> str:
    """A memory's key in an item-source entry, as item_sources.record stores it."""
    return hashlib.blake2b(memory_id.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def chunks_for(
    summarizer: Summarizer, memories: Iterable[Memory], *, chunk_size: int | None = None
) -> Iterator[list[Memory]]:
    """The pipeline's chunks (summarize_session's chunk_size overrides the summarizer's)."""
    return chunk_memories(
        memories,
        budget_tokens=summarizer.memory_budget_tokens,
        max_memories=chunk_size or summarizer.max_memories_per_pass,
    )


def summarize_extractive(
    session_id: str,
    memories: Sequence[Memory],
    prior: PriorSummary | None = None,
) -> StructuredSummary:
    return run_pass(session_id, memories, prior, EXTRACTIVE)[0]


class Passes:
    """A summarizer called like a function: one validated pass per call. Attributes are the
    summarizer's (config, response_format, ...)."""

    def __init__(self, summarizer: Summarizer) -> None:
        self.summarizer = summarizer

    def __call__(
        self, session_id: str, memories: Sequence[Memory], prior: PriorSummary | None
    ) -> PassResult:
        return PassResult(*run_pass(session_id, memories, prior, self.summarizer))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.summarizer, name)


def passes_over(
    summarizer: Summarizer,
    session_id: str,
    memories: Sequence[Memory],
    prior: PriorSummary | None,
) -> PassResult:
    """A backlog in the pipeline's chunks, one pass per chunk, each building on the last;
    the tokens add up."""
    current, tokens, passes = prior, 0, 0
    for chunk in chunks_for(summarizer, memories):
        current, used = run_pass(session_id, chunk, current, summarizer)
        tokens, passes = tokens + used, passes + 1
    assert isinstance(current, StructuredSummary) and passes, "no memories"
    return PassResult(current, tokens)


class Verbatim:
    """A model that proposes what it read, whole: each memory's prompt as a request (uncut:
    the merge cuts and quotes it), its response as Current State, and the prior's first
    request superseded by the chunk's first prompt. What reaches the merge from a model,
    without one."""

    memory_budget_tokens = 100_000
    max_memories_per_pass = 400
    one_memory_per_item = False

    def propose(
        self, session_id: str, memories: Sequence[Memory], prior: PriorSummary | None
    ) -> Proposal:
        first = prior.sections["User Requests"][:1] if isinstance(prior, StructuredSummary) else []
        marks = [
            {"section": "user_requests", "item": item.text, "superseded_by": memories[0].prompt}
            for item in first
            if memories
        ]
        update = PassUpdate(
            user_requests=[m.prompt for m in memories],
            questions_and_decisions=[],
            design_choices=[],
            corrections_and_feedback=[],
            current_state=[m.response for m in memories[-1:]],
            supersede=marks,
            title="Verbatim notes",
        )
        return Proposal(update)
