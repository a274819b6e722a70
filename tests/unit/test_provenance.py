"""Provenance on every summary row: the memory range covered and, per pass, tokens in vs
tokens out (the compaction ratio)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from controller.core.document import render_document
from controller.core.memories import Memory
from controller.core.merge import PassUpdate, merge_pass
from controller.core.summary import StructuredSummary
from controller.core.summary_row import (
    PassTokens,
    Provenance,
    added_text,
    pass_tokens,
    to_chroma_metadata,
)

T0 = 1_700_000_000_000  # memory times a clock could give (memories.trusted_time)
WRITTEN = T0 + 60_000  # the write, after them


def memory(i: int, prompt: str) -> Memory:
    return Memory(id=f"m{i}", session_id="s", timestamp_ms=T0 + 1_000 * i, prompt=prompt)


def update(request: str) -> PassUpdate:
    return PassUpdate.model_validate(
        {
            "user_requests": [request],
            "questions_and_decisions": [],
            "design_choices": [],
            "corrections_and_feedback": [],
            "current_state": None,
        }
    )


def test_a_pass_reads_its_memories_and_adds_what_the_summary_grew_by() -> None:
    memories = [memory(1, "x" * 4000), memory(2, "y" * 4000)]
    summary = merge_pass(None, update("Do the thing."), memories)
    spent = pass_tokens(memories, added_text(None, summary))
    assert spent.tokens_in > 2000  # 8000 bytes of prompt, plus the labels
    assert 0 < spent.tokens_out < 100
    again = pass_tokens([memory(3, "z")], added_text(summary, summary))
    assert again.tokens_out == 0


def test_the_row_carries_the_memory_range_watermark_and_tokens_per_pass() -> None:
    summary = merge_pass(None, update("Do it."), [memory(1, "a"), memory(7, "b")])
    provenance = Provenance([PassTokens(900, 30), PassTokens(600, 20)]).with_document(
        render_document(summary)
    )
    meta = to_chroma_metadata(
        summary, writer="w", trigger="refresh", summarized_at_ms=WRITTEN, provenance=provenance
    )
    first, last = meta["firstMemoryAt"], meta["timestamp"]
    assert (first, last, meta["memoryCount"]) == (T0 + 1_000, T0 + 7_000, 2)
    assert (meta["watermarkTimestamp"], meta["watermarkMemoryId"]) == (T0 + 7_000, "m7")
    assert meta["triggerSource"] == "refresh"
    assert (meta["passCount"], meta["passTokensIn"], meta["passTokensOut"]) == (2, 1500, 50)
    assert json.loads(str(meta["passTokensJson"])) == [[900, 30], [600, 20]]
    assert meta["compactionRatio"] == 30.0
    assert meta["documentTokens"] == provenance.document_tokens > 0


def test_no_ratio_when_nothing_was_read_or_written() -> None:
    assert Provenance([PassTokens(0, 10)]).ratio is None
    assert Provenance([PassTokens(10, 0)]).ratio is None
    meta = to_chroma_metadata(
        merge_pass(None, update("x y"), [memory(1, "a")]),
        writer="w",
        trigger="sweep",
        summarized_at_ms=WRITTEN,
        provenance=Provenance(),
    )
    assert "compactionRatio" not in meta and meta["passCount"] == 0


@given(
    st.lists(st.text(min_size=1, max_size=30).filter(str.strip), max_size=6),
    st.lists(st.text(min_size=1, max_size=30).filter(str.strip), max_size=6),
)
def test_what_a_pass_added_is_its_new_items_whatever_the_history_before(
    old: list[str], new: list[str]
) -> None:
    """The text a pass added is its new items (and a changed Current State), measured the
    same over a short or a long history: counting it never renders the history."""
    from controller.core.summary import SummaryItem

    def summary(requests: list[str], state: str) -> StructuredSummary:
        items = [SummaryItem(text=t) for t in requests]
        return StructuredSummary(
            session_id="s",
            title="t",
            sections={"User Requests": items, "Current State": [SummaryItem(text=state)]},
        )

    before, after = summary(old, "now"), summary(old + new, "now")
    assert added_text(before, after) == "\n".join(t.strip() for t in new)
    longer = summary(old * 50, "now")
    assert added_text(longer, summary(old * 50 + new, "now")) == added_text(before, after)
    assert added_text(before, summary(old, "changed")) == "changed"
    assert added_text(None, after).startswith("\n".join(t.strip() for t in old))
