"""The structured summary and its row in the neo-agent-sessions collection. Pure.

History sections are append-only (items carried forward verbatim, possibly marked
superseded); the projection section (Current State) is replaced each pass. validate_summary
is the guard that keeps a worse summary from replacing a good one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from controller.memories import Watermark

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
CATEGORIES: tuple[str, ...] = Category.__args__  # type: ignore[attr-defined]

ITEM_MAX = 500
_ERROR_TITLE = re.compile(
    r"^\s*(error\b|i'?m sorry|i am sorry|as an ai|i cannot|sorry,)|traceback \(most recent", re.I
)


class SummaryValidationError(ValueError):
    """The produced summary must not be stored; the message says why."""


class SummaryItem(BaseModel):
    model_config = ConfigDict(frozen=True)

    text: str = Field(min_length=1, max_length=ITEM_MAX)
    superseded_by: str | None = None

    @field_validator("text", mode="before")
    @classmethod
    def _strip(cls, value: object) -> object:
        return value.strip() if isinstance(value, str) else value


def _empty_sections() -> dict[str, list[SummaryItem]]:
    return {title: [] for title in SECTION_TITLES}


class StructuredSummary(BaseModel):
    session_id: str
    title: str = Field(min_length=1, max_length=120)
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
    total_tool_calls: int = 0
    memory_count: int = 0
    first_memory_at_ms: int | None = None
    last_memory_at_ms: int | None = None
    watermark: Watermark | None = None
    user_id: str | None = None
    format_version: int = 1

    @field_validator("sections")
    @classmethod
    def _known_sections(cls, value: dict[str, list[SummaryItem]]) -> dict[str, list[SummaryItem]]:
        unknown = set(value) - set(SECTION_TITLES)
        if unknown:
            raise ValueError(f"unknown sections {sorted(unknown)}; allowed: {SECTION_TITLES}")
        return {title: list(value.get(title, [])) for title in SECTION_TITLES}

    def item_count(self) -> int:
        return sum(len(items) for items in self.sections.values())


class LegacySummary(BaseModel):
    """A free-text summary written by the old system: prior context for the first pass."""

    session_id: str
    text: str
    memory_count: int | None = None
    timestamp_ms: int | None = None
    title: str | None = None


PriorSummary = StructuredSummary | LegacySummary


def render_document(summary: StructuredSummary) -> str:
    """The document text: readable by a person and by the next agent."""
    lines = [f"# {summary.title}"]
    for title in SECTION_TITLES:
        items = summary.sections.get(title) or []
        if not items:
            continue
        lines += ["", f"## {title}"]
        for item in items:
            if item.superseded_by:
                lines.append(f"- ~~{item.text}~~ (superseded: {item.superseded_by})")
            else:
                lines.append(f"- {item.text}")
    return "\n".join(lines) + "\n"


def _joined(values: list[str]) -> str:
    return ",".join(v for v in values if v)


def to_chroma_metadata(
    summary: StructuredSummary, *, writer: str, trigger: str, summarized_at_ms: int
) -> dict[str, str | int | float | bool]:
    """The neo metadata readers use, plus our extras. Never a None value."""
    sections = {
        title: [item.model_dump(exclude_none=True) for item in items]
        for title, items in summary.sections.items()
    }
    meta: dict[str, str | int | float | bool | None] = {
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
        "userId": summary.user_id,
        "summaryFormat": SUMMARY_FORMAT,
        "sectionsJson": json.dumps(sections, sort_keys=True, separators=(",", ":")),
        "firstMemoryAt": summary.first_memory_at_ms,
        "watermarkTimestamp": summary.watermark.timestamp_ms if summary.watermark else None,
        "watermarkMemoryId": summary.watermark.memory_id if summary.watermark else None,
        "writer": writer,
        "triggerSource": trigger,
        "summarizedAt": summarized_at_ms,
    }
    return {k: v for k, v in meta.items() if v is not None and v != ""}


def _split(value: object) -> list[str]:
    return [v for v in str(value).split(",") if v] if isinstance(value, str) else []


def _int_or(value: object, default: int | None) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else default


def from_chroma_row(
    session_id: str, document: str | None, metadata: Mapping[str, Any] | None
) -> PriorSummary | None:
    """The prior summary from its row: structured when we wrote it, else legacy free text."""
    meta = dict(metadata or {})
    if meta.get("summaryFormat") == SUMMARY_FORMAT:
        try:
            sections = json.loads(str(meta.get("sectionsJson", "{}")))
            watermark = None
            if "watermarkTimestamp" in meta and "watermarkMemoryId" in meta:
                watermark = Watermark(
                    timestamp_ms=int(meta["watermarkTimestamp"]),
                    memory_id=str(meta["watermarkMemoryId"]),
                )
            return StructuredSummary(
                session_id=session_id,
                title=str(meta.get("title") or f"Session {session_id[:12]}"),
                category=meta.get("category", "other"),
                quality=_int_or(meta.get("quality"), 50) or 0,
                productivity=_int_or(meta.get("productivity"), 50) or 0,
                impact=_int_or(meta.get("impact"), 50) or 0,
                complexity=_int_or(meta.get("complexity"), 50) or 0,
                sections=sections,
                technologies=_split(meta.get("technologies")),
                participating_agents=_split(meta.get("participatingAgents")),
                models=_split(meta.get("models")),
                tools_used=_split(meta.get("toolsUsed")),
                total_tool_calls=_int_or(meta.get("totalToolCalls"), 0) or 0,
                memory_count=_int_or(meta.get("memoryCount"), 0) or 0,
                first_memory_at_ms=_int_or(meta.get("firstMemoryAt"), None),
                last_memory_at_ms=_int_or(meta.get("timestamp"), None),
                watermark=watermark,
                user_id=meta.get("userId") if isinstance(meta.get("userId"), str) else None,
            )
        except (ValueError, TypeError, ValidationError):
            pass  # unreadable structured row: fall back to its text, losing nothing
    if not document or not document.strip():
        return None
    return LegacySummary(
        session_id=session_id,
        text=document.strip(),
        memory_count=_int_or(meta.get("memoryCount"), None),
        timestamp_ms=_int_or(meta.get("timestamp"), None),
        title=meta.get("title") if isinstance(meta.get("title"), str) else None,
    )


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def missing_history_items(
    summary: StructuredSummary, prior: StructuredSummary
) -> list[tuple[str, str]]:
    """(section, text) of every prior history item the new summary does not carry."""
    missing = []
    for title in HISTORY_SECTIONS:
        present = {_norm(item.text) for item in summary.sections.get(title, [])}
        for item in prior.sections.get(title, []):
            if _norm(item.text) not in present:
                missing.append((title, item.text))
    return missing


def validate_summary(summary: StructuredSummary, prior: PriorSummary | None) -> None:
    """Raises SummaryValidationError unless the summary may replace the prior one."""
    if summary.item_count() == 0:
        raise SummaryValidationError("the summary has no items in any section")
    if _ERROR_TITLE.search(summary.title):
        raise SummaryValidationError(f"the title looks like error text: {summary.title[:80]!r}")
    if isinstance(prior, StructuredSummary):
        missing = missing_history_items(summary, prior)
        if missing:
            section, text = missing[0]
            raise SummaryValidationError(
                f"{len(missing)} item(s) of the prior summary would be lost, e.g. "
                f"{section}: {text[:80]!r}"
            )
