"""The memory record as read from the neo-agent-memory collection. Pure.

Tolerant of legacy rows: ISO-string or seconds timestamps, null documents (rebuilt from
metadata), missing optional fields, toolsUsed as JSON text or a comma-joined string.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Collection, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

DEFAULT_EXCLUDED_TYPES = frozenset({"context-injection", "context-refresh", "tick", "heartbeat"})
_INJECTION_MARKERS = ("<system-reminder>", "[context refresh]", "<context-refresh>")
_SECONDS_LIMIT = 100_000_000_000  # numbers below this are epoch seconds (before year 5138)


class Memory(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    session_id: str
    timestamp_ms: int
    type: str = "agent-interaction"
    prompt: str = ""
    thought: str = ""
    response: str = ""
    document: str = ""
    agent: str | None = None
    model: str | None = None
    tool_calls: int = 0
    tools_used: tuple[str, ...] = ()
    user_id: str | None = None
    agent_identity: str | None = None


class Watermark(BaseModel):
    """What a summary covers: every memory up to and including this one, in (ts, id) order."""

    model_config = ConfigDict(frozen=True)

    timestamp_ms: int
    memory_id: str

    @classmethod
    def of(cls, memory: Memory) -> Watermark:
        return cls(timestamp_ms=memory.timestamp_ms, memory_id=memory.id)

    def after(self, memory: Memory) -> bool:
        return memory_sort_key(memory) > (self.timestamp_ms, self.memory_id)


def memory_sort_key(memory: Memory) -> tuple[int, str]:
    return (memory.timestamp_ms, memory.id)


def parse_timestamp_ms(value: object) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        number = float(value)
        return int(number * 1000) if abs(number) < _SECONDS_LIMIT else int(number)
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        if re.fullmatch(r"-?\d+(\.\d+)?", text):
            return parse_timestamp_ms(float(text))
        try:
            when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        return int(when.timestamp() * 1000)
    return None


def render_interaction_document(prompt: str, thought: str, response: str) -> str:
    return f"User Prompt: {prompt}\nAgent Thought: {thought}\nAgent Response: {response}"


def _text(meta: Mapping[str, Any], key: str) -> str:
    value = meta.get(key)
    return value if isinstance(value, str) else ""


def _optional(meta: Mapping[str, Any], key: str) -> str | None:
    value = meta.get(key)
    return value if isinstance(value, str) and value else None


def _tools(value: object) -> tuple[str, ...]:
    if isinstance(value, list):
        return tuple(str(v).strip() for v in value if str(v).strip())
    if not isinstance(value, str) or not value.strip():
        return ()
    text = value.strip()
    if text.startswith("["):
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        if isinstance(parsed, list):
            return _tools(parsed)
    return tuple(t.strip() for t in text.strip("[]").split(",") if t.strip().strip("\"'"))


def _int(value: object) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, str):
        try:
            return int(float(value))
        except ValueError:
            return 0
    return 0


def memory_from_row(
    row_id: str, document: str | None, metadata: Mapping[str, Any] | None
) -> Memory | None:
    """A Memory from one Chroma row, or None when it has no sessionId or usable timestamp."""
    meta = metadata or {}
    session_id = meta.get("sessionId")
    timestamp = parse_timestamp_ms(meta.get("timestamp"))
    if not isinstance(session_id, str) or not session_id or timestamp is None:
        return None
    type_ = _text(meta, "type") or "agent-interaction"
    prompt, thought, response = (
        _text(meta, "prompt"),
        _text(meta, "thought"),
        _text(meta, "response"),
    )
    if not document and (type_ == "agent-interaction" or prompt or response):
        document = render_interaction_document(prompt, thought, response)
    return Memory(
        id=row_id,
        session_id=session_id,
        timestamp_ms=timestamp,
        type=type_,
        prompt=prompt,
        thought=thought,
        response=response,
        document=document or "",
        agent=_optional(meta, "agent"),
        model=_optional(meta, "model"),
        tool_calls=_int(meta.get("amountToolCalls")),
        tools_used=_tools(meta.get("toolsUsed")),
        user_id=_optional(meta, "userId"),
        agent_identity=_optional(meta, "agentIdentity"),
    )


def is_excluded(memory: Memory, excluded_types: Collection[str]) -> bool:
    """Injected context, ticks and other configured types are never summarized."""
    if memory.type in excluded_types:
        return True
    head = memory.prompt.lstrip()[:40].lower()
    return any(head.startswith(marker) for marker in _INJECTION_MARKERS)
