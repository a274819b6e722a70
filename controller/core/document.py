"""The document agents read: a structured summary rendered as markdown, bounded. Pure.

Sections in their fixed order, then References verbatim, then a carried earlier text
fenced whole at the end. At most DOCUMENT_MAX_CHARS characters: long parts are folded,
oldest items first, into a line that says how many are not shown and which metadata key
of the row keeps them (controller.core.summary_row writes those keys).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from controller.core.references import REFERENCES_MAX
from controller.core.summary import LEGACY_HEADING, SECTION_TITLES, StructuredSummary, SummaryItem
from controller.core.text import ms_to_rfc3339, one_line

REFERENCES_HEADING = "## References"


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


# The rendered document's bound. neo's agents read the 5 newest documents whole at boot
# (get_all_summaries({limit: 5})), so a summary must never grow without bound: past this
# many characters the oldest items of long history sections, references past the first
# ones and the tail of a carried earlier text are folded into a line that says how many
# and where they are (the row's metadata keeps everything; `summaryctl summaries --full`
# prints it whole). 8,000 characters is also what is embedded (upsert.EMBED_CHARS).
DOCUMENT_MAX_CHARS = 8000
FOLDED_MARK = "not shown here"


@dataclass(frozen=True)
class _Fold:
    """How much of each long part a rendering shows (None: all of it)."""

    items: int | None = None  # newest items per section
    references: int | None = None
    legacy_chars: int | None = None


# Tried in order; the first rendering within the bound is the document.
_FOLDS = (
    _Fold(),
    _Fold(legacy_chars=2000),
    _Fold(references=50, legacy_chars=2000),
    _Fold(items=20, references=50, legacy_chars=2000),
    _Fold(items=10, references=20, legacy_chars=1000),
    _Fold(items=5, references=10, legacy_chars=500),
    _Fold(items=3, references=5, legacy_chars=200),
    _Fold(items=1, references=0, legacy_chars=0),
)


def _section_lines(title: str, items: list[SummaryItem], keep: int | None) -> list[str]:
    shown = items if keep is None or len(items) <= keep else items[len(items) - keep :]
    lines = ["", f"## {title}"]
    if len(shown) < len(items):
        lines.append(
            f"- ({len(items) - len(shown)} earlier items of this section are {FOLDED_MARK}; "
            "all are in the operator's ledger, key `sectionsJson`: summaryctl ledger)"
        )
    for item in shown:
        text = one_line(item.text)
        if item.superseded_by:
            lines.append(f"- ~~{text}~~ (superseded: {one_line(item.superseded_by)})")
        else:
            lines.append(f"- {text}")
    return lines


def _render(summary: StructuredSummary, memory_collection: str | None, fold: _Fold) -> str:
    lines = [f"# {one_line(summary.title)}"]
    for title in SECTION_TITLES:
        items = summary.sections.get(title) or []
        if items:
            lines += _section_lines(title, items, fold.items)
    note = overflow_note(summary, memory_collection)
    refs = summary.references
    if refs or note:
        shown = refs if fold.references is None else refs[: fold.references]
        lines += ["", REFERENCES_HEADING, *map(_reference_line, shown)]
        if len(shown) < len(refs):
            lines.append(
                f"- ({len(refs) - len(shown)} more references are {FOLDED_MARK}; all are in "
                "the operator's ledger, key `referencesJson`: summaryctl ledger)"
            )
        lines += [note] if note else []
    legacy = summary.legacy_text
    if legacy is not None:
        shown_text = legacy if fold.legacy_chars is None else legacy[: fold.legacy_chars]
        lines += ["", LEGACY_HEADING, ""]
        if shown_text:
            fence = _fence(shown_text)
            lines += [fence, shown_text, fence]
        if len(shown_text) < len(legacy):
            lines.append(
                f"({len(legacy) - len(shown_text)} more characters of this text are "
                f"{FOLDED_MARK}; the whole text is in the operator's ledger, key "
                "`legacySummary`: summaryctl ledger)"
            )
    return "\n".join(lines) + "\n"


def render_document(
    summary: StructuredSummary,
    memory_collection: str | None = None,
    *,
    max_chars: int | None = DOCUMENT_MAX_CHARS,
) -> str:
    """The document text: readable by a person and by the next agent. Deterministic.

    References come after the sections, each verbatim. A carried legacy text comes last,
    byte for byte, in a fenced block under LEGACY_HEADING. At most max_chars characters
    (None: unbounded, as `summaryctl summaries --full` shows it): long parts are folded,
    oldest items first, into a line naming the metadata key that keeps them.
    """
    document = ""
    for fold in _FOLDS if max_chars is not None else _FOLDS[:1]:
        document = _render(summary, memory_collection, fold)
        if max_chars is None or len(document) <= max_chars:
            return document
    assert max_chars is not None
    # Still too long (a very long Current State or title-level content): cut at a line.
    tail = (
        f"\n(the rest of this summary is {FOLDED_MARK}; it is in the operator's ledger, keys "
        "`sectionsJson`, `referencesJson` and `legacySummary`)\n"
    )
    head = document[: max(0, max_chars - len(tail))]
    return (head.rsplit("\n", 1)[0] if "\n" in head else head) + tail
