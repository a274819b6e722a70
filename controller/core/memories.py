"""The memory record as read from the neo-agent-memory collection, in every shape agents
wrote (ISO or epoch times, null documents, toolsUsed as JSON or joined text). Pure."""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from pydantic import BaseModel

from controller.core.text import EPOCH, json_value, listed_names

DEFAULT_EXCLUDED_TYPES = frozenset({"context-injection", "context-refresh", "tick", "heartbeat"})
# Asks for its session to be summarized now (docs/agents.md): a request, never summarized.
SUNSET_MARKER_TYPE = "session-sunset"
# A prompt starting with one is the harness speaking, not the user: left out of the summary.
INJECTION_MARKERS = ("<system-reminder>", "[context refresh]", "<context-refresh>")
INTERACTION_TYPE = "agent-interaction"
SAID = ("prompt", "thought", "response")  # an agent-interaction's parts, as text
# Epoch numbers: seconds, ms, µs or ns by magnitude (docs/summaries.md, "Memory times").
UNIT_LIMITS = ((10**11, -1000), (10**14, 1), (10**17, 1000), (10**20, 1_000_000))
# A time further ahead of the reader's clock is a bad clock's: it counts as "now".
FUTURE_TOLERANCE_MS = 10 * 60 * 1000
# A time before this (2000-01-01) is a bad clock too: no agent wrote memories then.
PAST_FLOOR_MS = 946_684_800_000
_NUMBER = re.compile(r"[+-]?\d+(\.\d+)?")
_INTEGER = re.compile(r"[+-]?\d+")


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
    agent: str | None = None
    model: str | None = None
    tool_calls: int = 0
    tools_used: tuple[str, ...] = ()
    agent_identity: str | None = None


def memory_sort_key(memory: Memory) -> tuple[int, str]:
    return (memory.timestamp_ms, memory.id)


class Watermark(BaseModel, frozen=True):
    """What a summary covers: every memory up to and including this one, in sort-key order."""

    timestamp_ms: int
    memory_id: str

    @classmethod
    def of(cls, memory: Memory) -> Watermark:
        return cls(timestamp_ms=memory.timestamp_ms, memory_id=memory.id)

    def after(self, memory: Memory) -> bool:
        return memory_sort_key(memory) > (self.timestamp_ms, self.memory_id)


# The largest count a JavaScript number (neo's) holds exactly; within Chroma's int64 too.
JS_SAFE_INTEGER = 2**53 - 1


def _epoch_ms(number: int | float) -> int | None:
    """The number in the unit its magnitude says, as milliseconds; None past nanoseconds."""
    for limit, scale in UNIT_LIMITS:
        if abs(number) < limit:
            if scale < 0:
                return round(number * -scale)
            # Integers divide exactly (a nanosecond count is past a float's 53 bits).
            return number // scale if isinstance(number, int) else math.floor(number / scale)
    return None


def parse_timestamp_ms(value: object) -> int | None:
    """Epoch ms from a number or digit string (s, ms, µs or ns by magnitude) or ISO-8601, in
    a JavaScript Date's range; None otherwise."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _epoch_ms(value)  # NaN and infinities are past every limit: None
    if not isinstance(value, str):
        return None
    text = value.strip()
    if _INTEGER.fullmatch(text):  # past 30 digits it is past ns (and int() refuses 4,301)
        return _epoch_ms(int(text)) if len(text.lstrip("+-0")) <= 30 else None
    if _NUMBER.fullmatch(text):
        return _epoch_ms(float(text))
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)  # naive = UTC, as the old writers meant it
    # Integer arithmetic: float timestamps turn .001 into .000999...
    return (when - EPOCH) // dt.timedelta(milliseconds=1)


def trusted_time(timestamp_ms: int, now_ms: int) -> bool:
    """Whether a memory time is one a clock could give: from 2000 to now_ms and a tolerance."""
    return PAST_FLOOR_MS <= timestamp_ms <= now_ms + FUTURE_TOLERANCE_MS


def newest_time(times: Iterable[int | None], now_ms: int) -> int:
    """The newest of these times, a bad clock's counting as now_ms (also when none is known)."""
    known = (t if trusted_time(t, now_ms) else now_ms for t in times if t is not None)
    return max(known, default=now_ms)


def placed(timestamp_ms: int, now_ms: int) -> bool:
    """Not a bad clock's future, which as a watermark would make each later memory late: a
    row not placed is summarized once, at the end of its session's order."""
    return timestamp_ms <= now_ms + FUTURE_TOLERANCE_MS


def render_interaction_document(prompt: str, thought: str, response: str) -> str:
    return f"User Prompt: {prompt}\nAgent Thought: {thought}\nAgent Response: {response}"


def scalar_text(value: object) -> str | None:
    """A metadata scalar as neo reads it as text (String(value)); None for anything else."""
    return _js_string(value) if isinstance(value, str | int | float) else None


def optional_text(value: object) -> str | None:
    return value.strip() or None if isinstance(value, str) else None


def listed_text(value: object) -> str | None:
    """An agent or model as neo's summary writer lists it: a truthy scalar as text, stripped."""
    return optional_text(scalar_text(value)) if _js_truthy(value) else None


TOOL_NAME_MAX = 50  # neo keeps the first 50 characters (UTF-16 code units) of a tool name
_TOOL_KEYS = ("name", "toolAction", "toolSummary")
_JS_INT = re.compile(r"[\s\ufeff]*([+-]?\d+)")


def _js_string(value: object) -> str:
    """JavaScript's String(value) for a value JSON can hold."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)  # null, true, false
    if isinstance(value, float):
        if not math.isfinite(value):
            return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
        if value.is_integer() and abs(value) < 1e21:
            return str(int(value))
        return repr(value).replace("e+0", "e+").replace("e-0", "e-")
    if isinstance(value, list):
        return ",".join("" if v is None else _js_string(v) for v in value)
    if isinstance(value, dict):
        return "[object Object]"
    return str(value)


def _no_constant(name: str) -> object:
    """JSON.parse refuses NaN and Infinity, which Python's json accepts."""
    raise ValueError(f"{name} is not JSON")


def _js_truthy(value: object) -> bool:
    return value not in (None, False, 0, "") and not (isinstance(value, float) and value != value)


def _cut(text: str) -> str:
    """text.substring(0, 50) in UTF-16 units; a pair cut in half becomes U+FFFD, as in JS."""
    units = text.encode("utf-16-le", "surrogatepass")
    if len(units) <= 2 * TOOL_NAME_MAX:
        return text
    return units[: 2 * TOOL_NAME_MAX].decode("utf-16-le", "replace")


def _tool_identifier(item: object) -> str:
    """One tool of a toolsUsed array, as neo reads it (a string of JSON as what it parses to)."""
    if isinstance(item, str):
        text = item
        try:
            item = json_value(text, parse_constant=_no_constant)
        except ValueError:
            return _cut(text)
        if item is None:  # JSON.parse("null").name throws: neo keeps the string
            return "null"
    if isinstance(item, dict):
        found = next((item[k] for k in _TOOL_KEYS if _js_truthy(item.get(k))), "unknown_tool")
        return _cut(_js_string(found))
    return "unknown_tool"


def tool_names(value: object) -> tuple[str, ...]:
    """toolsUsed as neo 13.1.0's summary writer reads it (SessionService.summarizeSession),
    each name cut to 50 characters, then split on commas as neo's readers do; no repeats."""
    if not _js_truthy(value) or not isinstance(value, str | int | float | bool):
        return ()
    text = value if isinstance(value, str) else _js_string(value)
    try:
        parsed = json_value(text, parse_constant=_no_constant)
    except ValueError:
        parsed = text  # not JSON: one name
    if isinstance(parsed, list):
        return tuple(listed_names(_tool_identifier(item) for item in parsed if _js_truthy(item)))
    return tuple(listed_names([_cut(_js_string(parsed))]))


def tool_call_count(value: object) -> int:
    """amountToolCalls as neo adds it up, parseInt(value, 10) ("12 calls" is 12); negative: 0."""
    if not _js_truthy(value) or isinstance(value, bool):
        return 0
    found = _JS_INT.match(_js_string(value))
    if not found or found.group(1).startswith("-"):
        return 0
    digits = found.group(1).lstrip("+0")  # 17 digits are past the cap already
    return min(JS_SAFE_INTEGER, int(digits[:17] or 0))


def memory_from_row(
    row_id: str, document: str | None, metadata: Mapping[str, Any] | None
) -> Memory | None:
    """A Memory from one Chroma row, or None when it has no sessionId or usable timestamp."""
    meta = metadata or {}
    session_id = meta.get("sessionId")
    timestamp = parse_timestamp_ms(meta.get("timestamp"))
    if not isinstance(session_id, str) or not session_id.strip() or timestamp is None:
        return None
    stored_type = optional_text(meta.get("type")) or ""
    prompt, thought, response = (scalar_text(meta.get(k)) or "" for k in SAID)
    interaction = stored_type == INTERACTION_TYPE or (not stored_type and bool(prompt or response))
    if not document and interaction:
        document = render_interaction_document(prompt, thought, response)
    return Memory(
        id=row_id,
        session_id=session_id,
        timestamp_ms=timestamp,
        type=stored_type or INTERACTION_TYPE,
        prompt=prompt,
        thought=thought,
        response=response,
        document=document or "",
        agent=listed_text(meta.get("agent")),
        model=listed_text(meta.get("model")),
        tool_calls=tool_call_count(meta.get("amountToolCalls")),
        tools_used=tool_names(meta.get("toolsUsed")),
        agent_identity=optional_text(meta.get("agentIdentity")),  # neo: only as text
    )


def is_excluded(memory: Memory, excluded_types: Collection[str] = DEFAULT_EXCLUDED_TYPES) -> bool:
    """A sunset marker, an excluded type, or a prompt that starts with an injection marker."""
    injected = memory.prompt.lstrip()[:64].lower().startswith(INJECTION_MARKERS)
    return injected or memory.type == SUNSET_MARKER_TYPE or memory.type in excluded_types
