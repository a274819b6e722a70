"""One pass the way the pipeline runs it (the summarizer proposes, the merge merges, the
result is validated), for tests that look at a single pass."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from controller.core.memories import Memory
from controller.core.summary import PriorSummary, StructuredSummary
from controller.pipeline import PassResult, chunks_for, run_pass
from controller.summarizers.contract import Summarizer
from controller.summarizers.extractive import ExtractiveSummarizer


def summarize_extractive(
    session_id: str,
    memories: Sequence[Memory],
    prior: PriorSummary | None = None,
    *,
    now_ms: int | None = None,
) -> StructuredSummary:
    summarizer = ExtractiveSummarizer(now_ms=now_ms)
    return run_pass(session_id, memories, prior, summarizer).summary


class Passes:
    """A summarizer called like a function: one validated pass per call. Attributes are the
    summarizer's (config, response_format, ...)."""

    def __init__(self, summarizer: Summarizer) -> None:
        self.summarizer = summarizer

    def __call__(
        self, session_id: str, memories: Sequence[Memory], prior: PriorSummary | None
    ) -> PassResult:
        return run_pass(session_id, memories, prior, self.summarizer)

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
    current, tokens = prior, 0
    result = None
    for chunk in chunks_for(summarizer, memories):
        result = run_pass(session_id, chunk, current, summarizer)
        current, tokens = result.summary, tokens + result.tokens_used
    assert result is not None, "no memories"
    return PassResult(result.summary, tokens)
