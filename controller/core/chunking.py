"""Which memories go into the next pass, and how much of each. Pure. Chunks are bounded by
estimated tokens (UTF-8 bytes / 4) and a count; a memory over the budget is cut, not skipped."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from controller.core.memories import Memory

BYTES_PER_TOKEN = 4
MEMORY_OVERHEAD_TOKENS = 16  # the <memory ...> delimiters and attributes around each memory
CUT_MARKER = " [... cut: {cut} more bytes of this memory not shown]"


def estimate_tokens(text: str) -> int:
    return -(-len(text.encode("utf-8", "replace")) // BYTES_PER_TOKEN)  # ceil


def valid_utf8(text: str) -> str:
    """Text that encodes as UTF-8: a lone surrogate (JSON rows may hold one) becomes '?'."""
    return text.encode("utf-8", "replace").decode("utf-8")


def truncate_utf8(text: str, max_bytes: int) -> str:
    """At most max_bytes of UTF-8, cut on a code point boundary, the cut marked in the text."""
    text = valid_utf8(text)
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    keep = max(0, max_bytes - len(CUT_MARKER.format(cut=len(data)).encode()))  # room for it
    # A cut inside a multi-byte sequence leaves an incomplete tail: "ignore" drops only it.
    head = data[:keep].decode("utf-8", "ignore")
    cut = len(data) - len(head.encode("utf-8"))
    return head + CUT_MARKER.format(cut=cut)


def memory_text(memory: Memory) -> str:
    labels = ("User Prompt", "Agent Thought", "Agent Response")
    said = zip(labels, (memory.prompt, memory.thought, memory.response), strict=True)
    parts = [f"{label}: {value.strip()}" for label, value in said if value.strip()]
    return valid_utf8("\n".join(parts) if parts else memory.document.strip())


def bounded_memory_text(memory: Memory, max_tokens: int) -> str:
    """memory_text cut to max_tokens (estimated), so one huge memory cannot overflow a pass."""
    return truncate_utf8(memory_text(memory), max(1, max_tokens) * BYTES_PER_TOKEN)


def chunk_memories(
    memories: Iterable[Memory], *, budget_tokens: int, max_memories: int
) -> Iterator[list[Memory]]:
    """Consecutive chunks within both bounds, lazily; a memory over the budget has its own."""
    if budget_tokens < 1 or max_memories < 1:
        raise ValueError("a chunk needs a positive token budget and memory count")
    per_memory = max(1, budget_tokens - MEMORY_OVERHEAD_TOKENS)
    chunk: list[Memory] = []
    used = 0
    for memory in memories:
        cost = estimate_tokens(bounded_memory_text(memory, per_memory)) + MEMORY_OVERHEAD_TOKENS
        if chunk and (used + cost > budget_tokens or len(chunk) >= max_memories):
            yield chunk
            chunk, used = [], 0
        chunk.append(memory)
        used += cost
    if chunk:
        yield chunk
