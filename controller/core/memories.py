"""The memory record as read from the neo-agent-memory collection. Pure.

Agents have written this collection for a long time, so rows come in several shapes: ISO or
epoch-seconds timestamps, null documents, toolsUsed as JSON text or a comma-joined string,
counts stored as text. `memory_from_row` accepts all of them and gives up on a row only when
it cannot say which session it belongs to or when it happened.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Collection, Mapping
from typing import Any

from pydantic import BaseModel

DEFAULT_EXCLUDED_TYPES = frozenset({"context-injection", "context-refresh", "tick", "heartbeat"})
# A memory of this type asks for its session to be summarized now, without Kubernetes
# credentials (docs/agents.md): the sweep's marker scan finds it. It is a request, not
# content, so it is never summarized, whatever a summarizer's excludedMemoryTypes says.
SUNSET_MARKER_TYPE = "session-sunset"
# Text the harness injects into a "prompt" (reminders, context refreshes) is not the user
# speaking; a row whose prompt starts with one of these is left out of the summary.
INJECTION_MARKERS = ("<system-reminder>", "[context refresh]", "<context-refresh>")
INTERACTION_TYPE = "agent-interaction"
# Numbers below this are epoch seconds: as milliseconds they would be before March 1973,
# as seconds they reach to the year 5138.
_SECONDS_LIMIT = 100_000_000_000
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_NUMBER = re.compile(r"[+-]?\d+(\.\d+)?")


class Memory(BaseModel, frozen=True):
    id: str
    session_id: str
    timestamp_ms: int
    type: str = INTERACTION_TYPE
    # What was said: an agent-interaction's three parts, else the row's document.
    prompt: str = ""
    thought: str = ""
    response: str = ""
    document: str = ""
    # Who did it, and with which tools.
    agent: str | None = None
    model: str | None = None
    tool_calls: int = 0
    tools_used: tuple[str, ...] = ()
    user_id: str | None = None
    agent_identity: str | None = None


def memory_sort_key(memory: Memory) -> tuple[int, str]:
    """The total order of a session's memories: time, then id to break ties."""
    return (memory.timestamp_ms, memory.id)


class Watermark(BaseModel, frozen=True):
    """What a summary covers: every memory up to and including this one, in sort-key order."""

    timestamp_ms: int
    memory_id: str

    @classmethod
    def of(cls, memory: Memory) -> Watermark:
        return cls(timestamp_ms=memory.timestamp_ms, memory_id=memory.id)

    def after(self, memory: Memory) -> bool:
        """True when the memory is not yet covered."""
        return memory_sort_key(memory) > (self.timestamp_ms, self.memory_id)


def parse_timestamp_ms(value: object) -> int | None:
    """Epoch milliseconds from a number (ms, or seconds when small), digits, or ISO-8601."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        number = float(value)
        if not math.isfinite(number):
            return None
        return round(number * 1000) if abs(number) < _SECONDS_LIMIT else int(number)
    if not isinstance(value, str):
        return None
    text = value.strip()
    if _NUMBER.fullmatch(text):
        return parse_timestamp_ms(float(text))
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)  # naive = UTC, as the old writers meant it
    # Integer arithmetic: float timestamps turn .001 into .000999...
    return (when - _EPOCH) // dt.timedelta(milliseconds=1)


def render_interaction_document(prompt: str, thought: str, response: str) -> str:
    """The document text agents write for an agent-interaction memory."""
    return f"User Prompt: {prompt}\nAgent Thought: {thought}\nAgent Response: {response}"


def _text(meta: Mapping[str, Any], key: str) -> str:
    value = meta.get(key)
    return value if isinstance(value, str) else ""


def _optional_text(meta: Mapping[str, Any], key: str) -> str | None:
    value = meta.get(key)
    return value.strip() or None if isinstance(value, str) else None


def _tool_names(value: object) -> tuple[str, ...]:
    """toolsUsed as a list, JSON array text, or a comma-joined string; order kept, no repeats."""
    if isinstance(value, str):
        text = value.strip()
        parsed: object = None
        if text.startswith("["):
            try:
                parsed = json.loads(text)
            except ValueError:
                parsed = None
        names = parsed if isinstance(parsed, list) else text.strip("[]").split(",")
    elif isinstance(value, list | tuple):
        names = list(value)
    else:
        return ()
    cleaned = (str(n).strip().strip("\"'").strip() for n in names if n is not None)
    return tuple(dict.fromkeys(n for n in cleaned if n))


def _count(value: object) -> int:
    """amountToolCalls as int, float or text; anything unreadable counts as 0."""
    if isinstance(value, bool) or value is None:
        return 0
    if isinstance(value, str):
        if not _NUMBER.fullmatch(value.strip()):
            return 0
        value = float(value)
    if isinstance(value, int | float) and math.isfinite(value):
        return max(0, int(value))
    return 0


def memory_from_row(
    row_id: str, document: str | None, metadata: Mapping[str, Any] | None
) -> Memory | None:
    """A Memory from one Chroma row, or None when it has no sessionId or usable timestamp."""
    meta = metadata or {}
    session_id = meta.get("sessionId")
    timestamp = parse_timestamp_ms(meta.get("timestamp"))
    if not isinstance(session_id, str) or not session_id.strip() or timestamp is None:
        return None
    stored_type = _text(meta, "type").strip()
    prompt, thought, response = (
        _text(meta, "prompt"),
        _text(meta, "thought"),
        _text(meta, "response"),
    )
    if not document:
        is_interaction = stored_type == INTERACTION_TYPE or (
            not stored_type and bool(prompt or response)
        )
        document = render_interaction_document(prompt, thought, response) if is_interaction else ""
    return Memory(
        id=row_id,
        session_id=session_id,
        timestamp_ms=timestamp,
        type=stored_type or INTERACTION_TYPE,
        prompt=prompt,
        thought=thought,
        response=response,
        document=document,
        agent=_optional_text(meta, "agent"),
        model=_optional_text(meta, "model"),
        tool_calls=_count(meta.get("amountToolCalls")),
        tools_used=_tool_names(meta.get("toolsUsed")),
        user_id=_optional_text(meta, "userId"),
        agent_identity=_optional_text(meta, "agentIdentity"),
    )


def is_excluded(memory: Memory, excluded_types: Collection[str] = DEFAULT_EXCLUDED_TYPES) -> bool:
    """Whether a memory stays out of the summary: a sunset marker, a configured type, or
    injected context.

    Injected context is recognised only by a marker at the very start of the prompt
    (case-insensitive), so a user who merely mentions a marker is still summarized.
    """
    if memory.type == SUNSET_MARKER_TYPE or memory.type in excluded_types:
        return True
    head = memory.prompt.lstrip()[:64].lower()
    return head.startswith(INJECTION_MARKERS)
