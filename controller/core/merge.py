"""One pass: prior summary + what a summarizer proposes -> the next summary. Pure. "Never
lose a fact" holds here whatever a summarizer (maybe a model obeying an instruction injected
into a memory) proposes: history sections are append-only, new items that read as error text
or an instruction are quoted (core/quoting.py), and counts, agents, times, the watermark and
References come from the memories (docs/summaries.md).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Sequence
from types import MappingProxyType
from typing import Any

from pydantic import (
    AliasChoices,
    AliasGenerator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
)

from controller.core.chunking import valid_utf8
from controller.core.item_sources import REFERENCES, TITLE, identity, record
from controller.core.memories import Memory, Watermark, memory_sort_key
from controller.core.quoting import ERROR_LABEL, INSTRUCTION_LABEL, as_item, quote_if_needed
from controller.core.references import memory_references, merge_references
from controller.core.summary import (
    CATEGORIES,
    HISTORY_SECTIONS,
    ITEM_MAX,
    SCORES,
    SECTION_KEYS,
    TITLE_MAX,
    Category,
    LegacySummary,
    StructuredSummary,
    SummaryItem,
    carried_legacy_text,
    fallback_title,
    title_problem,
)
from controller.core.text import cut, listed_names
from controller.core.visibility import union_agents

HISTORY_KEYS = MappingProxyType(
    {title: key for key, title in SECTION_KEYS.items() if title in HISTORY_SECTIONS}
)
DERIVED_TITLE_MAX = 80
TECHNOLOGY_MAX = 40
TECHNOLOGIES_MAX = 30
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200d\ufeff]")


def _one_line(text: str, limit: int) -> str | None:
    """None unless it says something; never cut in a word: masking comes after this."""
    text = cut(" ".join(text.split()), limit, parts=False)
    return text if any(map(str.isalnum, text)) else None


def _item_text(value: Any) -> str | None:
    value = value.get("text") if isinstance(value, dict) else value  # a model may say {"text":}
    return _one_line(valid_utf8(value), ITEM_MAX) if isinstance(value, str) else None


class SupersedeMark(BaseModel):
    """A prior item that this pass makes obsolete, and what replaced it."""

    section: str
    item: str
    superseded_by: str


class PassUpdate(BaseModel):
    """What one pass proposes: [] is nothing new; current_state None keeps the prior one."""

    model_config = ConfigDict(
        populate_by_name=True,
        # a section may be given by its key or its title ("Design Choices")
        alias_generator=AliasGenerator(
            validation_alias=lambda name: AliasChoices(name, SECTION_KEYS.get(name, name))
        ),
    )

    user_requests: list[str]
    questions_and_decisions: list[str]
    design_choices: list[str]
    corrections_and_feedback: list[str]
    current_state: list[str] | None
    supersede: list[SupersedeMark] = Field(default_factory=list)
    title: str | None = None
    category: Category | None = None
    quality: int | None = None
    productivity: int | None = None
    impact: int | None = None
    complexity: int | None = None
    technologies: list[str] = Field(default_factory=list)

    @field_validator(*SECTION_KEYS, mode="before")
    @classmethod
    def _section(cls, value: Any, info: ValidationInfo) -> list[str] | None:
        if value is None:
            return None if info.field_name == "current_state" else []
        if isinstance(value, str | dict):
            value = [value]
        if not isinstance(value, list):
            raise ValueError("must be a list of strings")
        return [t for t in map(_item_text, value) if t]

    @field_validator("supersede", mode="before")
    @classmethod
    def _marks(cls, value: Any) -> list[Any]:
        # A malformed mark is dropped, not fatal: marks can only annotate, never remove.
        if not isinstance(value, list):
            return []
        return [
            SupersedeMark(section=v["section"], item=v["item"], superseded_by=text)
            for v in value
            if isinstance(v, dict)
            and all(isinstance(v.get(k), str) for k in ("section", "item", "superseded_by"))
            and (text := _item_text(v["superseded_by"]))
        ]

    @field_validator("title", mode="before")
    @classmethod
    def _title(cls, value: Any) -> str | None:
        return _one_line_title(valid_utf8(value)) if isinstance(value, str) else None

    @field_validator("category", mode="before")
    @classmethod
    def _category(cls, value: Any) -> str | None:
        text = value.strip().lower() if isinstance(value, str) else None
        return text if text in CATEGORIES else None

    @field_validator(*SCORES, mode="before")
    @classmethod
    def _scores(cls, value: Any) -> int | None:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            return None
        try:
            return max(0, min(100, round(float(value))))
        except (ValueError, OverflowError):  # NaN, inf, or too large for a float
            return None

    @field_validator("technologies", mode="before")
    @classmethod
    def _technologies(cls, value: Any) -> list[str]:
        if not isinstance(value, list):
            return []
        # the row stores them comma-separated: "C, C++" is two names, as it reads back
        texts = (valid_utf8(v) for v in value if isinstance(v, str))
        names = [" ".join(n.split()) for v in texts for n in v.split(",")]
        return [n for n in names if len(n) <= TECHNOLOGY_MAX and any(map(str.isalnum, n))]

    def new_items(self) -> dict[str, list[str]]:
        return {title: list(getattr(self, key)) for title, key in HISTORY_KEYS.items()}


def _append_new(items: list[SummaryItem], new_texts: Iterable[str]) -> list[SummaryItem]:
    """Existing items verbatim and in order, then new ones (as_item form) not yet present."""
    seen = {identity(i.text) for i in items}
    new: dict[str, str] = {}
    for text in new_texts:
        new.setdefault(identity(text), text)
    return [*items, *(SummaryItem(text=t) for key, t in new.items() if key and key not in seen)]


def _apply_marks(
    sections: dict[str, list[SummaryItem]],
    marks: Sequence[SupersedeMark],
    stored: dict[str, list[str]],
) -> None:
    """Marks named items superseded (each reason in `stored` too); an unknown section or item
    changes nothing, and an item keeps its first mark. A section is named by key or title."""
    for mark in marks:
        title = SECTION_KEYS.get(mark.section.strip().lower().replace(" ", "_").replace("&", "and"))
        if title not in HISTORY_SECTIONS:
            continue
        stored[title].append(reason := as_item(mark.superseded_by))
        key = identity(mark.item)
        for index, item in enumerate(sections[title]):
            if identity(item.text) == key and item.superseded_by is None:
                if identity(mark.superseded_by) != key:
                    sections[title][index] = item.model_copy(update={"superseded_by": reason})
                break


def _acceptable_title(title: str | None) -> str | None:
    """A proposed title, unless validation would refuse it or it is (or needs) quoting."""
    if not title or title_problem(title) is not None:
        return None
    marked = title.startswith((ERROR_LABEL, INSTRUCTION_LABEL))
    return None if marked or quote_if_needed(title) != title else title


def derived_title(first_request: str | None, session_id: str) -> str:
    title = cut((first_request or "").rstrip(" .!?…:;"), DERIVED_TITLE_MAX, word_from=0)
    return _acceptable_title(title) or fallback_title(session_id)


def _technologies(prior: Iterable[str], new: Iterable[str]) -> list[str]:
    """Case-insensitive union, sorted: every prior name, new ones while under the maximum."""
    found = {name.lower(): name for name in reversed(list(prior))}
    for name in itertools.takewhile(lambda _: len(found) < TECHNOLOGIES_MAX, new):
        found.setdefault(name.lower(), name)
    return [found[k] for k in sorted(found)]


def _one_line_title(title: str) -> str | None:
    return _one_line(_CONTROL.sub(" ", title), TITLE_MAX)


def merge_pass(
    prior: StructuredSummary | LegacySummary | None,
    update: PassUpdate,
    new_memories: Sequence[Memory],
    *,
    session_id: str | None = None,
) -> StructuredSummary:
    """The next summary: a superset of the prior's history whatever the update says."""
    given = sorted(new_memories, key=memory_sort_key)
    unknown = given[0].session_id if given else "unknown"
    sid = session_id or (prior.session_id if prior is not None else unknown)
    structured = prior if isinstance(prior, StructuredSummary) else None
    base = structured or StructuredSummary(session_id=sid, title=fallback_title(sid))
    covered = base.watermark
    new = [m for m in given if covered is None or covered.after(m)]

    # What is stored, and what its items are keyed by (item_sources), is the as_item form.
    # A legacy prior has no items: its text is carried whole.
    stored = {title: list(map(as_item, texts)) for title, texts in update.new_items().items()}
    sections = {title: _append_new(base.sections[title], texts) for title, texts in stored.items()}
    _apply_marks(sections, update.supersede, stored)
    stored["Current State"] = [as_item(t) for t in update.current_state or []]
    state = [SummaryItem(text=t) for t in stored["Current State"]]
    if update.current_state is None:
        state = list(base.sections["Current State"])

    if base.title != fallback_title(sid):
        title = base.title  # a placeholder title is replaced once a pass can derive one
    else:
        legacy_title = prior.title if isinstance(prior, LegacySummary) else None
        requests = sections["User Requests"]
        title = (
            _acceptable_title(update.title)
            or _acceptable_title(_one_line_title(legacy_title or ""))
            or derived_title(requests[0].text if requests else None, sid)
        )

    agents = [name for m in new if (name := m.agent or m.agent_identity)]
    models = {*listed_names(m.model for m in new if m.model), *base.models}
    tools = {*listed_names(t for m in new for t in m.tools_used), *base.tools_used}
    first = [base.first_memory_at_ms, *(m.timestamp_ms for m in new[:1])]
    last = [base.last_memory_at_ms, *(m.timestamp_ms for m in new[-1:])]
    # References come from the memories, by code, whatever the summarizer proposed.
    found_refs = memory_references(given)
    references, overflow = merge_references(base.references, base.references_overflow, found_refs)
    stored[TITLE] = [title] if structured is None else []
    stored[REFERENCES] = [r for r, _ in found_refs]
    return StructuredSummary(
        session_id=sid,
        title=title,
        category=update.category or base.category,
        **{s: getattr(base, s) if (v := getattr(update, s)) is None else v for s in SCORES},
        sections={**sections, "Current State": state},
        technologies=_technologies(base.technologies, update.technologies),
        participating_agents=union_agents(base.participating_agents, agents),
        models=sorted(models),
        tools_used=sorted(tools),
        total_tool_calls=base.total_tool_calls + sum(m.tool_calls for m in new),
        memory_count=base.memory_count + len(new),
        first_memory_at_ms=min((t for t in first if t is not None), default=None),
        last_memory_at_ms=max((t for t in last if t is not None), default=None),
        watermark=Watermark.of(new[-1]) if new else covered,
        legacy_text=carried_legacy_text(prior),
        references=references,
        references_overflow=overflow,
        item_sources=record(structured, stored, given),
    )
