"""Which memories go into the next pass, and how much of each. Pure. Chunks are bounded by
estimated tokens (UTF-8 bytes / 4: no tokenizer needed) and a memory count; a memory larger
than the budget is cut (UTF-8-safe, with a visible marker), never skipped."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from controller.core.memories import Memory

BYTES_PER_TOKEN = 4
MEMORY_OVERHEAD_TOKENS = 16  # the <memory ...> delimiters and attributes around each memory
CUT_MARKER = " [... cut: {cut} more bytes of this memory not shown]"


def estimate_tokens(text: str) -> int:
    """The documented estimate: ceil(UTF-8 bytes / 4)."""
    size = len(text.encode("utf-8", "replace"))
    return -(-size // BYTES_PER_TOKEN)


def valid_utf8(text: str) -> str:
    """Text that encodes as UTF-8: lone surrogates (possible in JSON-decoded rows) become '?',
    which would otherwise fail an HTTP client's request body, and the pass with it."""
    return text.encode("utf-8", "replace").decode("utf-8")


def truncate_utf8(text: str, max_bytes: int) -> str:
    """At most max_bytes of UTF-8, cut on a code point boundary, the cut marked in the text."""
    text = valid_utf8(text)
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    marker_room = len(CUT_MARKER.format(cut=len(data)).encode())
    keep = max(0, max_bytes - marker_room)
    # A cut inside a multi-byte sequence leaves an incomplete tail: "ignore" drops only it.
    head = data[:keep].decode("utf-8", "ignore")
    cut = len(data) - len(head.encode("utf-8"))
    return head + CUT_MARKER.format(cut=cut)


def memory_text(memory: Memory) -> str:
    """The text of a memory as a summarizer sees it: its prompt, thought and response."""
    parts = [
        f"{label}: {value.strip()}"
        for label, value in (
            ("User Prompt", memory.prompt),
            ("Agent Thought", memory.thought),
            ("Agent Response", memory.response),
        )
        if value.strip()
    ]
    return valid_utf8("\n".join(parts) if parts else memory.document.strip())


def bounded_memory_text(memory: Memory, max_tokens: int) -> str:
    """memory_text cut to max_tokens (estimated), so one huge memory cannot overflow a pass."""
    return truncate_utf8(memory_text(memory), max(1, max_tokens) * BYTES_PER_TOKEN)


def memory_cost(memory: Memory, max_tokens: int) -> int:
    """Estimated tokens the memory takes in a pass, delimiters included."""
    return estimate_tokens(bounded_memory_text(memory, max_tokens)) + MEMORY_OVERHEAD_TOKENS


def chunk_memories(
    memories: Iterable[Memory], *, budget_tokens: int, max_memories: int
) -> Iterator[list[Memory]]:
    """Consecutive chunks, each within budget_tokens and max_memories, lazily; a memory over
    the whole budget gets a chunk of its own (cut when rendered), none is dropped."""
    if budget_tokens < 1 or max_memories < 1:
        raise ValueError("a chunk needs a positive token budget and memory count")
    per_memory = max(1, budget_tokens - MEMORY_OVERHEAD_TOKENS)
    chunk: list[Memory] = []
    used = 0
    for memory in memories:
        cost = memory_cost(memory, per_memory)
        if chunk and (used + cost > budget_tokens or len(chunk) >= max_memories):
            yield chunk
            chunk, used = [], 0
        chunk.append(memory)
        used += cost
    if chunk:
        yield chunk
