"""Chunks bounded by the input token budget; UTF-8-safe cuts of over-long memories."""

from __future__ import annotations

import itertools

import pytest

from controller.core.chunking import (
    MEMORY_OVERHEAD_TOKENS,
    bounded_memory_text,
    chunk_memories,
    estimate_tokens,
    memory_text,
    truncate_utf8,
)
from controller.core.memories import Memory


def memory(i: int, prompt: str = "", response: str = "done") -> Memory:
    return Memory(
        id=f"m{i:05d}",
        session_id="s",
        timestamp_ms=1_000 + i,
        prompt=prompt or f"step {i}",
        response=response,
    )


def test_estimate_is_utf8_bytes_over_four_rounded_up() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("abcd") == 1
    assert estimate_tokens("abcde") == 2
    assert estimate_tokens("日本語") == 3  # 9 bytes: other scripts are not underestimated


def test_chunks_stay_within_the_budget_and_keep_every_memory_in_order() -> None:
    memories = [memory(i, prompt="word " * (i % 37)) for i in range(500)]
    chunks = list(chunk_memories(memories, budget_tokens=300, max_memories=1000))
    assert [m for chunk in chunks for m in chunk] == memories
    assert len(chunks) > 1
    for chunk in chunks:
        texts = (bounded_memory_text(m, 300) for m in chunk)
        assert sum(estimate_tokens(t) + MEMORY_OVERHEAD_TOKENS for t in texts) <= 300


def test_max_memories_bounds_a_chunk_when_the_budget_would_allow_more() -> None:
    chunks = list(
        chunk_memories([memory(i) for i in range(25)], budget_tokens=10**6, max_memories=10)
    )
    assert [len(c) for c in chunks] == [10, 10, 5]


def test_a_memory_over_the_whole_budget_gets_a_chunk_of_its_own_and_is_not_dropped() -> None:
    huge = memory(1, prompt="x" * 50_000)
    memories = [memory(0), huge, memory(2)]
    chunks = list(chunk_memories(memories, budget_tokens=200, max_memories=100))
    assert chunks == [[memories[0]], [huge], [memories[2]]]
    shown = bounded_memory_text(huge, 200 - MEMORY_OVERHEAD_TOKENS)
    assert estimate_tokens(shown) <= 200 - MEMORY_OVERHEAD_TOKENS
    assert shown.startswith("User Prompt: xxx") and "cut:" in shown


def test_chunking_is_lazy_so_a_stream_of_memories_is_never_held_whole() -> None:
    endless = (memory(i) for i in itertools.count())
    first = next(chunk_memories(endless, budget_tokens=1000, max_memories=7))
    assert len(first) == 7


def test_no_budget_is_refused() -> None:
    with pytest.raises(ValueError):
        next(chunk_memories([memory(0)], budget_tokens=0, max_memories=1))


@pytest.mark.parametrize(
    "text", ["é" * 300, "日本語のテキスト" * 50, "🙂👍🏽" * 80, "a" + "𝄞" * 200]
)
def test_a_cut_never_splits_a_code_point_and_is_marked(text: str) -> None:
    for limit in range(60, 260, 7):  # every alignment against multi-byte characters
        cut = truncate_utf8(text, limit)
        encoded = cut.encode("utf-8")  # raises if a code point had been split
        assert len(encoded) <= limit
        assert "more bytes of this memory not shown" in cut
        head = cut.split(" [... cut:")[0]
        assert text.startswith(head)


def test_text_within_the_limit_is_untouched() -> None:
    assert truncate_utf8("short ünïcode", 100) == "short ünïcode"


def test_lone_surrogates_from_json_rows_become_encodable_text() -> None:
    broken = memory(0, prompt="half an emoji \ud83d here")
    text = memory_text(broken)
    text.encode("utf-8")
    assert "half an emoji ? here" in text


def test_memory_text_falls_back_to_the_document_when_fields_are_empty() -> None:
    row = Memory(
        id="x", session_id="s", timestamp_ms=1, type="implementation_plan", document="Plan: A"
    )
    assert memory_text(row) == "Plan: A"
