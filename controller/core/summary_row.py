"""A structured summary as its row in the neo-agent-sessions collection: the document agents
read (markdown, legacy text fenced whole at the end) and the metadata (sections as JSON,
counts, watermark), and back. Rows we cannot read become the prior they truthfully are:
legacy text, or UnreadablePriorSummary. Pure."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from controller.core.memories import Watermark
from controller.core.provenance import Provenance
from controller.core.references import REFERENCES_MAX, ReferenceOverflow
from controller.core.summary import (
    CATEGORIES,
    ITEM_MAX,
    LEGACY_HEADING,
    SECTION_TITLES,
    SUMMARY_FORMAT,
    TITLE_MAX,
    LegacySummary,
    PriorSummary,
    StructuredSummary,
    SummaryItem,
    UnreadablePriorSummary,
    fallback_title,
)
from controller.core.text import ms_to_rfc3339, one_line

REFERENCES_HEADING = "## References"

# -- the document ---------------------------------------------------------------------------


def _fence(text: str) -> str:
    """A code fence longer than any run of backticks or tildes in the text: nothing inside
    can close it, so markdown in the text cannot change the document's structure."""
    longest = max((len(run) for run in re.findall(r"`+|~+", text)), default=0)
    return "`" * max(3, longest + 1)


def _reference_line(ref: str) -> str:
    return f"- {ref}" if "`" in ref else f"- `{ref}`"


def overflow_note(summary: StructuredSummary, memory_collection: str | None = None) -> str | None:
    """What the References section says when it is full: how many are left out and where
    they are (the memory collection, the session, the time range of their memories)."""
    over = summary.references_overflow
    if over.count == 0:
        return None
    how_many = f"{over.count}" if over.exact else f"at least {over.count}"
    where = f"collection `{memory_collection}`" if memory_collection else "the memory collection"
    span = ""
    if over.first_ms is not None and over.last_ms is not None:
        span = f", memories from {ms_to_rfc3339(over.first_ms)} to {ms_to_rfc3339(over.last_ms)}"
    return (
        f"- ({how_many} more references are not listed: this section keeps {REFERENCES_MAX}. "
        f"They are in {where}, sessionId `{summary.session_id}`{span}.)"
    )


def render_document(summary: StructuredSummary, memory_collection: str | None = None) -> str:
    """The document text: readable by a person and by the next agent. Deterministic.

    References come after the sections, each verbatim. A carried legacy text comes last,
    byte for byte, in a fenced block under LEGACY_HEADING.
    """
    lines = [f"# {one_line(summary.title)}"]
    for title in SECTION_TITLES:
        items = summary.sections.get(title) or []
        if not items:
            continue
        lines += ["", f"## {title}"]
        for item in items:
            text = one_line(item.text)
            if item.superseded_by:
                lines.append(f"- ~~{text}~~ (superseded: {one_line(item.superseded_by)})")
            else:
                lines.append(f"- {text}")
    note = overflow_note(summary, memory_collection)
    if summary.references or note:
        lines += ["", REFERENCES_HEADING, *map(_reference_line, summary.references)]
        lines += [note] if note else []
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
    summary: StructuredSummary,
    *,
    writer: str,
    trigger: str,
    summarized_at_ms: int,
    provenance: Provenance | None = None,
) -> dict[str, str | int | float | bool]:
    """The neo metadata readers use, plus our extras. A missing value is an omitted key."""
    watermark = summary.watermark
    over = summary.references_overflow
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
        "referencesJson": json.dumps(summary.references, ensure_ascii=False),
        "referencesOmitted": over.count or None,
        "referencesOmittedFrom": over.first_ms,
        "referencesOmittedTo": over.last_ms,
        "referencesOmittedDigests": ",".join(over.digests) or None,
        **(provenance.metadata() if provenance is not None else {}),
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


def _references(meta: Mapping[str, Any]) -> tuple[list[str], ReferenceOverflow]:
    """The References section as stored; a row without one (written before it) has none."""
    raw = meta.get("referencesJson")
    references = json.loads(raw) if isinstance(raw, str) else []
    if not isinstance(references, list) or not all(isinstance(r, str) for r in references):
        raise ValueError("referencesJson is not a list of strings")
    digests = meta.get("referencesOmittedDigests")
    overflow = ReferenceOverflow(
        count=max(0, _number(meta.get("referencesOmitted")) or 0),
        first_ms=_number(meta.get("referencesOmittedFrom")),
        last_ms=_number(meta.get("referencesOmittedTo")),
        digests=[d for d in digests.split(",") if d] if isinstance(digests, str) else [],
    )
    return references, overflow


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
    references, overflow = _references(meta)
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
        references=references,
        references_overflow=overflow,
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
