"""The structured summary. Pure. History sections are append-only (an item may be marked
superseded, never dropped); Current State is replaced each pass; another system's summary
(LegacySummary) is carried verbatim as `legacy_text`; `validate_summary` keeps a failed or
lossy pass from replacing a good summary, whichever backend produced it.
"""

from __future__ import annotations

import re
from types import MappingProxyType
from typing import Literal, get_args

from pydantic import BaseModel, Field, ValidationInfo, field_validator

from controller.core.coverage import Coverage
from controller.core.memories import Watermark
from controller.core.references import ReferenceOverflow
from controller.core.text import cut, listed_names, one_line

# The sections, by the JSON key a summarizer uses for each (a model is asked for these).
SECTION_KEYS: MappingProxyType[str, str] = MappingProxyType(
    {
        "user_requests": "User Requests",
        "questions_and_decisions": "Questions & Decisions",
        "design_choices": "Design Choices",
        "corrections_and_feedback": "Corrections & Feedback",
        "current_state": "Current State",
    }
)
SECTION_TITLES = tuple(SECTION_KEYS.values())
HISTORY_SECTIONS = SECTION_TITLES[:4]
SUMMARY_FORMAT = "structured-v1"

Category = Literal[
    "bugfix", "feature", "refactoring", "documentation", "new-app", "analysis", "other"
]
CATEGORIES: tuple[str, ...] = get_args(Category)
SCORES = ("quality", "productivity", "impact", "complexity")  # 0-100, neo's keys too

ITEM_MAX = 500
TITLE_MAX = 120
LEGACY_HEADING = "## Earlier summary text (not written by this operator, kept verbatim)"

# Error text a model or a failing pipeline returns instead of a summary. Narrow on purpose:
# "Error handling cleanup" is a fine title, "Error: upstream returned 500" is not. Apostrophes
# may be typographic (’); an exception name ("ValueError: ...") is matched case-sensitively.
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
    """A row of ours neither readable nor carried (no document): nothing is written over it."""


class SummaryItem(BaseModel, frozen=True):
    text: str = Field(min_length=1, max_length=ITEM_MAX)
    superseded_by: str | None = None

    @field_validator("text", "superseded_by", mode="before")
    @classmethod
    def _strip(cls, value: object, info: ValidationInfo) -> object:
        if not isinstance(value, str):
            return value
        # an empty reason is none; an empty text fails min_length
        return value.strip() or (None if info.field_name == "superseded_by" else "")


class OtherWriter(BaseModel, frozen=True):
    """Who rewrote a row of ours (as far as it tells), and how long its carried text is."""

    who: str
    characters: int = 0


class StructuredSummary(BaseModel):
    session_id: str
    title: str = Field(min_length=1, max_length=TITLE_MAX)
    category: Category = "other"
    quality: int = Field(default=50, ge=0, le=100)
    productivity: int = Field(default=50, ge=0, le=100)
    impact: int = Field(default=50, ge=0, le=100)
    complexity: int = Field(default=50, ge=0, le=100)
    sections: dict[str, list[SummaryItem]] = Field(default_factory=dict, validate_default=True)
    technologies: list[str] = Field(default_factory=list)
    participating_agents: list[str] = Field(default_factory=list)
    models: list[str] = Field(default_factory=list)
    tools_used: list[str] = Field(default_factory=list)
    total_tool_calls: int = Field(default=0, ge=0)
    memory_count: int = Field(default=0, ge=0)
    first_memory_at_ms: int | None = None
    last_memory_at_ms: int | None = None
    watermark: Watermark | None = None
    coverage: Coverage | None = None  # None: an earlier version's row (core/coverage.py)
    format_version: int = 1
    # The summary this session had before this operator, verbatim (never stripped, cut or
    # split): set by the first pass over a LegacySummary, carried by every later one.
    legacy_text: str | None = None
    references: list[str] = Field(default_factory=list)  # core/references.py
    references_overflow: ReferenceOverflow = Field(default_factory=ReferenceOverflow)
    # What the writing pass listed (every row id, who wrote them, the rows without a
    # readable time), so a later pass reads only rows added since; None: all.
    rows_digest: str | None = None
    sources_json: str | None = None
    untimed_ids: tuple[str, ...] = ()
    item_sources: list[str] = Field(default_factory=list)  # core/item_sources.py
    summarized_at_ms: int | None = None  # the read row's "summarizedAt"
    masked_with: str | None = None  # redaction.Redaction.fingerprint; None: unknown
    other_writer: OtherWriter | None = None  # not stored; its text is in legacy_text

    @field_validator("title", mode="before")
    @classmethod
    def _strip_title(cls, value: object) -> object:
        return " ".join(value.split()) if isinstance(value, str) else value

    @field_validator("technologies", "participating_agents", "models", "tools_used")
    @classmethod
    def _listed(cls, names: list[str]) -> list[str]:
        return listed_names(names)

    @field_validator("sections")
    @classmethod
    def _known_sections(cls, value: dict[str, list[SummaryItem]]) -> dict[str, list[SummaryItem]]:
        if unknown := set(value) - set(SECTION_TITLES):
            raise ValueError(f"unknown sections {sorted(unknown)}; allowed: {SECTION_TITLES}")
        return {title: list(value.get(title, [])) for title in SECTION_TITLES}

    def is_empty(self) -> bool:  # nothing worth storing
        return not any(self.sections.values()) and not self.legacy_text


class LegacySummary(BaseModel):
    """The old system's free-text summary; no watermark: the first pass reads the session."""

    session_id: str
    text: str
    title: str | None = None


PriorSummary = StructuredSummary | LegacySummary


def fallback_title(session_id: str) -> str:
    return f"Session {session_id[:12]}"


def title_problem(title: str) -> str | None:
    """Why a title must not be stored (error text or a placeholder); None: it is fine."""
    if _ERROR_TITLE.search(title):
        return f"the title looks like error text: {cut(title, 80, '')!r}"
    if one_line(title).lower().strip(" .:!") in _PLACEHOLDER_TITLES | {""}:
        return f"the title is a placeholder: {cut(title, 80, '')!r}"
    return None


def carried_legacy_text(prior: PriorSummary | None) -> str | None:
    """The text a summary built on this prior must carry verbatim, if any."""
    if isinstance(prior, LegacySummary):
        return prior.text
    return prior.legacy_text if prior is not None else None


def validate_summary(summary: StructuredSummary, prior: PriorSummary | None) -> None:
    """Raises SummaryValidationError unless the summary may replace the prior one: it has an
    item and a real title, and keeps every prior reference, history item and carried text."""
    if summary.is_empty():
        raise SummaryValidationError("the summary has no items in any section")
    if problem := title_problem(summary.title):
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
            f"({len(carried)} characters, starting {cut(carried, 60, '')!r})"
        )
    if isinstance(prior, StructuredSummary):
        kept = set(summary.references)
        if lost := [ref for ref in prior.references if ref not in kept]:
            raise SummaryValidationError(
                f"{len(lost)} reference(s) of the prior summary would be lost, "
                f"e.g. {cut(repr(lost[0]), 80, '')}"
            )
        missing = []  # (section, text) of each prior history item the summary lacks
        for title in HISTORY_SECTIONS:
            old, new = prior.sections.get(title, []), summary.sections.get(title, [])
            if len(new) >= len(old) and all(a is b for a, b in zip(old, new, strict=False)):
                continue  # the prior's own items lead the section: none can be missing
            present = {one_line(item.text).lower() for item in new}
            missing += [(title, i.text) for i in old if one_line(i.text).lower() not in present]
        if missing:
            section, text = missing[0]
            raise SummaryValidationError(
                f"{len(missing)} item(s) of the prior summary would be lost, "
                f"e.g. {section}: {cut(text, 80, '')!r}"
            )
