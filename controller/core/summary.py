"""The structured summary and its row in the neo-agent-sessions collection. Pure.

History sections are append-only: every item of the prior summary is carried forward
verbatim (it may be marked superseded, never dropped). The projection section, Current
State, is replaced each pass. A free-text summary written before this operator (a
LegacySummary) is carried by every later summary verbatim, whole, as `legacy_text`: it is
rendered at the end of the document in a fenced block and stored in the row's metadata.
`validate_summary` is the guard that keeps a failed or lossy pass from replacing a good
summary; it holds whichever backend produced the summary.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any, Literal, get_args

from pydantic import BaseModel, Field, ValidationError, field_validator

from controller.core.memories import Watermark

SECTION_TITLES = (
    "User Requests",
    "Questions & Decisions",
    "Design Choices",
    "Corrections & Feedback",
    "Current State",
)
HISTORY_SECTIONS = SECTION_TITLES[:4]
PROJECTION_SECTIONS = ("Current State",)
SUMMARY_FORMAT = "structured-v1"

Category = Literal[
    "bugfix", "feature", "refactoring", "documentation", "new-app", "analysis", "other"
]
CATEGORIES: tuple[str, ...] = get_args(Category)

ITEM_MAX = 500
TITLE_MAX = 120
LEGACY_HEADING = "## Earlier summary (written before this operator, kept verbatim)"

# Error text a model or a failing pipeline returns instead of a summary. Narrow on purpose:
# "Error handling cleanup" is a fine title, "Error: upstream returned 500" is not.
# Apostrophes may be typographic (’), as models often write them. An exception line such
# as "ValueError: ..." (a traceback's last line) is matched case-sensitively on the name.
_ERROR_TITLE = re.compile(
    r"^\s*(?:(?:an? )?(?:error|exception)\s*(?:[:\d(\[]|occurred|was raised|while|during)"
    r"|(?-i:(?:[a-z_]\w*\.)*[A-Z]\w*(?:Error|Exception))\s*:"
    r"|traceback\b|i['’]?m sorry|i am sorry|sorry,|as an ai\b|as a language model"
    r"|i cannot\b|i can['’]?t\b|i['’]?m unable|i am unable)"
    r"|traceback \(most recent call",
    re.IGNORECASE,
)
_PLACEHOLDER_TITLES = frozenset(
    {"untitled", "summary", "session summary", "title", "n/a", "na", "none", "null", "todo"}
    | {"tbd", "placeholder", "...", "…", "-", "?"}
)


class SummaryValidationError(ValueError):
    """The produced summary must not be stored; the message says why."""


class UnreadablePriorSummary(ValueError):
    """The session's stored summary exists but can be neither read nor carried forward (a
    row of ours whose sections cannot be read, and without a document). Nothing may be
    written over it; the message is one line naming what is wrong."""


class SummaryItem(BaseModel, frozen=True):
    text: str = Field(min_length=1, max_length=ITEM_MAX)
    superseded_by: str | None = None

    @field_validator("text", "superseded_by", mode="before")
    @classmethod
    def _strip(cls, value: object) -> object:
        return value.strip() if isinstance(value, str) else value

    @field_validator("superseded_by")
    @classmethod
    def _empty_reason_is_none(cls, value: str | None) -> str | None:
        return value or None


def _empty_sections() -> dict[str, list[SummaryItem]]:
    return {title: [] for title in SECTION_TITLES}


class StructuredSummary(BaseModel):
    session_id: str
    title: str = Field(min_length=1, max_length=TITLE_MAX)
    category: Category = "other"
    quality: int = Field(default=50, ge=0, le=100)
    productivity: int = Field(default=50, ge=0, le=100)
    impact: int = Field(default=50, ge=0, le=100)
    complexity: int = Field(default=50, ge=0, le=100)
    sections: dict[str, list[SummaryItem]] = Field(default_factory=_empty_sections)
    technologies: list[str] = Field(default_factory=list)
    participating_agents: list[str] = Field(default_factory=list)
    models: list[str] = Field(default_factory=list)
    tools_used: list[str] = Field(default_factory=list)
    total_tool_calls: int = Field(default=0, ge=0)
    memory_count: int = Field(default=0, ge=0)
    first_memory_at_ms: int | None = None
    last_memory_at_ms: int | None = None
    watermark: Watermark | None = None
    user_id: str | None = None
    format_version: int = 1
    # The summary this session had before this operator, kept verbatim (never stripped,
    # cut or split): set by the first pass over a LegacySummary, carried by every later one.
    legacy_text: str | None = None
    # When the row this summary was read from was written (its "summarizedAt"); None for a
    # summary not read from the store.
    summarized_at_ms: int | None = None

    @field_validator("title", mode="before")
    @classmethod
    def _strip_title(cls, value: object) -> object:
        return " ".join(value.split()) if isinstance(value, str) else value

    @field_validator("sections")
    @classmethod
    def _known_sections(cls, value: dict[str, list[SummaryItem]]) -> dict[str, list[SummaryItem]]:
        unknown = set(value) - set(SECTION_TITLES)
        if unknown:
            raise ValueError(f"unknown sections {sorted(unknown)}; allowed: {SECTION_TITLES}")
        return {title: list(value.get(title, [])) for title in SECTION_TITLES}

    def item_count(self) -> int:
        return sum(len(items) for items in self.sections.values())

    def is_empty(self) -> bool:
        """No item in any section and no earlier summary carried: nothing worth storing."""
        return self.item_count() == 0 and not self.legacy_text


class LegacySummary(BaseModel):
    """A free-text summary written by the old system: prior context for the first pass.

    It has no watermark, so the first structured pass covers the whole session.
    """

    session_id: str
    text: str
    memory_count: int | None = None
    timestamp_ms: int | None = None
    title: str | None = None


PriorSummary = StructuredSummary | LegacySummary


# -- the document ---------------------------------------------------------------------------


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _fence(text: str) -> str:
    """A code fence longer than any run of backticks or tildes in the text: nothing inside
    can close it, so markdown in the text cannot change the document's structure."""
    longest = max((len(run) for run in re.findall(r"`+|~+", text)), default=0)
    return "`" * max(3, longest + 1)


def render_document(summary: StructuredSummary) -> str:
    """The document text: readable by a person and by the next agent. Deterministic.

    A carried legacy text comes last, byte for byte, in a fenced block under LEGACY_HEADING.
    """
    lines = [f"# {_one_line(summary.title)}"]
    for title in SECTION_TITLES:
        items = summary.sections.get(title) or []
        if not items:
            continue
        lines += ["", f"## {title}"]
        for item in items:
            text = _one_line(item.text)
            if item.superseded_by:
                lines.append(f"- ~~{text}~~ (superseded: {_one_line(item.superseded_by)})")
            else:
                lines.append(f"- {text}")
    if summary.legacy_text is not None:
        fence = _fence(summary.legacy_text)
        lines += ["", LEGACY_HEADING, "", fence, summary.legacy_text, fence]
    return "\n".join(lines) + "\n"


# -- the Chroma row -------------------------------------------------------------------------


def _joined(values: list[str]) -> str:
    """Comma-joined, as neo readers expect; a comma inside a value would split it on reading."""
    return ",".join(v.replace(",", " ").strip() for v in values if v.strip())


def sections_json(summary: StructuredSummary) -> str:
    sections = {
        title: [item.model_dump(exclude_none=True) for item in items]
        for title, items in summary.sections.items()
    }
    return json.dumps(sections, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def to_chroma_metadata(
    summary: StructuredSummary, *, writer: str, trigger: str, summarized_at_ms: int
) -> dict[str, str | int | float | bool]:
    """The neo metadata readers use, plus our extras. A missing value is an omitted key."""
    watermark = summary.watermark
    meta: dict[str, str | int | float | bool | None] = {
        # neo memory-core keys
        "sessionId": summary.session_id,
        "timestamp": summary.last_memory_at_ms,
        "memoryCount": summary.memory_count,
        "title": summary.title,
        "category": summary.category,
        "quality": summary.quality,
        "productivity": summary.productivity,
        "impact": summary.impact,
        "complexity": summary.complexity,
        "technologies": _joined(summary.technologies),
        "participatingAgents": _joined(summary.participating_agents),
        "models": _joined(summary.models),
        "toolsUsed": _joined(summary.tools_used),
        "totalToolCalls": summary.total_tool_calls,
        "userId": summary.user_id or None,
        # ours
        "summaryFormat": SUMMARY_FORMAT,
        "formatVersion": summary.format_version,
        "sectionsJson": sections_json(summary),
        "firstMemoryAt": summary.first_memory_at_ms,
        "watermarkTimestamp": watermark.timestamp_ms if watermark else None,
        "watermarkMemoryId": watermark.memory_id if watermark else None,
        "writer": writer,
        "triggerSource": trigger,
        "summarizedAt": summarized_at_ms,
        "legacySummary": summary.legacy_text or None,
    }
    return {key: value for key, value in meta.items() if value is not None}


def _split(value: object) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()] if isinstance(value, str) else []


def _number(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value) if math.isfinite(value) else None


def _score(value: object) -> int:
    number = _number(value)
    return 50 if number is None else max(0, min(100, number))


def _stored_items(raw: object) -> list[SummaryItem]:
    """Items as we stored them. An item that does not fit (over ITEM_MAX) makes the row
    unreadable as sections: it is then carried whole as the document, never cut."""
    if not isinstance(raw, list):
        raise ValueError("a section must be a list")
    items = []
    for entry in raw:
        if isinstance(entry, str):
            entry = {"text": entry}
        if not isinstance(entry, dict) or not isinstance(entry.get("text"), str):
            raise ValueError(f"unreadable section item {entry!r:.80}")
        text = entry["text"].strip()
        if len(text) > ITEM_MAX:
            raise ValueError(f"a stored item is longer than {ITEM_MAX} characters")
        if text:
            reason = entry.get("superseded_by")
            items.append(
                SummaryItem(text=text, superseded_by=reason if isinstance(reason, str) else None)
            )
    return items


def _structured_from_metadata(session_id: str, meta: Mapping[str, Any]) -> StructuredSummary:
    raw_sections = json.loads(str(meta.get("sectionsJson")))
    if not isinstance(raw_sections, dict):
        raise ValueError("sectionsJson is not an object")
    watermark = None
    mark_ts, mark_id = _number(meta.get("watermarkTimestamp")), meta.get("watermarkMemoryId")
    if mark_ts is not None and isinstance(mark_id, str):
        watermark = Watermark(timestamp_ms=mark_ts, memory_id=mark_id)
    legacy_text = meta.get("legacySummary")
    if legacy_text is not None and not isinstance(legacy_text, str):
        raise ValueError("legacySummary is not text")
    category = meta.get("category")
    title = meta.get("title")
    if not isinstance(title, str) or not title.strip():
        title = fallback_title(session_id)
    user_id = meta.get("userId")
    return StructuredSummary(
        session_id=session_id,
        title=title[:TITLE_MAX],
        category=category if category in CATEGORIES else "other",
        quality=_score(meta.get("quality")),
        productivity=_score(meta.get("productivity")),
        impact=_score(meta.get("impact")),
        complexity=_score(meta.get("complexity")),
        sections={str(k): _stored_items(v) for k, v in raw_sections.items()},
        technologies=_split(meta.get("technologies")),
        participating_agents=_split(meta.get("participatingAgents")),
        models=_split(meta.get("models")),
        tools_used=_split(meta.get("toolsUsed")),
        total_tool_calls=max(0, _number(meta.get("totalToolCalls")) or 0),
        memory_count=max(0, _number(meta.get("memoryCount")) or 0),
        first_memory_at_ms=_number(meta.get("firstMemoryAt")),
        last_memory_at_ms=_number(meta.get("timestamp")),
        watermark=watermark,
        user_id=user_id if isinstance(user_id, str) and user_id else None,
        format_version=_number(meta.get("formatVersion")) or 1,
        legacy_text=legacy_text or None,
        summarized_at_ms=_number(meta.get("summarizedAt")),
    )


def from_chroma_row(
    session_id: str, document: str | None, metadata: Mapping[str, Any] | None
) -> PriorSummary | None:
    """The prior summary of a session from its row, or None when there is nothing to build on.

    Rows we wrote come back structured. Anything else with text, including a structured
    row whose sections cannot be read, comes back as legacy free text: the next pass
    carries that text forward, verbatim, instead of starting from nothing. A row of ours
    that can be neither read nor carried (no document) raises UnreadablePriorSummary: it is
    not "no prior", and nothing may be written over it.
    """
    meta = metadata or {}
    has_text = isinstance(document, str) and bool(document.strip())
    if meta.get("summaryFormat") == SUMMARY_FORMAT:
        try:
            return _structured_from_metadata(session_id, meta)
        except (ValueError, TypeError, ValidationError) as exc:
            if not has_text:
                reason = " ".join(str(exc).split())[:160]
                raise UnreadablePriorSummary(
                    f"the stored summary of session {session_id!r} cannot be read ({reason}) "
                    "and has no document to carry forward; it is left in place"
                ) from None
    if not isinstance(document, str) or not has_text:
        return None
    title = meta.get("title")
    return LegacySummary(
        session_id=session_id,
        text=document.strip(),
        memory_count=_number(meta.get("memoryCount")),
        timestamp_ms=_number(meta.get("timestamp")),
        title=title.strip() or None if isinstance(title, str) else None,
    )


def fallback_title(session_id: str) -> str:
    return f"Session {session_id[:12]}"


# -- the guard ------------------------------------------------------------------------------


def looks_like_error_text(text: str) -> bool:
    """Error text or a refusal where content should be (e.g. a failed model call)."""
    return _ERROR_TITLE.search(text) is not None


def title_problem(title: str) -> str | None:
    """Why a title must not be stored (error text or a placeholder), or None when it is fine."""
    if _ERROR_TITLE.search(title):
        return f"the title looks like error text: {title[:80]!r}"
    if _one_line(title).lower().strip(" .:!") in _PLACEHOLDER_TITLES | {""}:
        return f"the title is a placeholder: {title[:80]!r}"
    return None


def normalized(text: str) -> str:
    """The form two item texts are compared in: case and whitespace do not matter."""
    return " ".join(text.lower().split())


def missing_history_items(
    summary: StructuredSummary, prior: StructuredSummary
) -> list[tuple[str, str]]:
    """(section, text) of every prior history item the new summary does not carry."""
    missing = []
    for title in HISTORY_SECTIONS:
        present = {normalized(item.text) for item in summary.sections.get(title, [])}
        for item in prior.sections.get(title, []):
            if normalized(item.text) not in present:
                missing.append((title, item.text))
    return missing


def carried_legacy_text(prior: PriorSummary | None) -> str | None:
    """The legacy text a summary built on this prior must carry verbatim, if any."""
    if isinstance(prior, LegacySummary):
        return prior.text
    return prior.legacy_text if prior is not None else None


def validate_summary(summary: StructuredSummary, prior: PriorSummary | None) -> None:
    """Raises SummaryValidationError unless the summary may replace the prior one.

    Refused: a summary without a single item (or carried legacy text), error text or a
    placeholder as the title, a summary of another session, any loss of a prior history
    item (superseded items count as present: marking is allowed, dropping is not), and a
    legacy text of the prior (the LegacySummary's text, or the one a structured prior
    carries) that is not carried exactly.
    """
    if summary.is_empty():
        raise SummaryValidationError("the summary has no items in any section")
    problem = title_problem(summary.title)
    if problem:
        raise SummaryValidationError(problem)
    if prior is not None and prior.session_id != summary.session_id:
        raise SummaryValidationError(
            f"the summary is of session {summary.session_id!r}, the prior of {prior.session_id!r}"
        )
    carried = carried_legacy_text(prior)
    if carried is not None and summary.legacy_text != carried:
        what = "drops" if summary.legacy_text is None else "alters"
        raise SummaryValidationError(
            f"the summary {what} the earlier summary of the session it must carry verbatim "
            f"({len(carried)} characters, starting {carried[:60]!r})"
        )
    if isinstance(prior, StructuredSummary):
        missing = missing_history_items(summary, prior)
        if missing:
            section, text = missing[0]
            raise SummaryValidationError(
                f"{len(missing)} item(s) of the prior summary would be lost, "
                f"e.g. {section}: {text[:80]!r}"
            )
