"""The document agents read: a structured summary rendered as markdown, bounded. Pure.

Sections in their fixed order, then References verbatim, then a carried earlier text
fenced whole at the end. At most max_chars characters (DOCUMENT_MAX_CHARS unless the
SessionSummarizer's spec.document.maxChars says otherwise): long parts are folded into a
line that says how many are not shown and where they are kept (the operator's ledger).
What the history sections show is chosen to fill the space: the newest item of each, then
the items that carry most facts per character (choose_items).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from controller.core.facts import fact_count
from controller.core.references import REFERENCES_MAX
from controller.core.summary import (
    HISTORY_SECTIONS,
    LEGACY_HEADING,
    SECTION_TITLES,
    StructuredSummary,
    SummaryItem,
)
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
# many characters the tail of a carried earlier text, references past the first ones and
# the history items choose_items leaves out are folded into a line that says how many
# and where they are (the row's metadata keeps everything; `summaryctl summaries --full`
# prints it whole). 8,000 characters is also what is embedded (upsert.EMBED_CHARS).
DOCUMENT_MAX_CHARS = 8000
FOLDED_MARK = "not shown here"


@dataclass(frozen=True)
class _Fold:
    """How much of the references and of a carried earlier text a rendering shows (None:
    all of it)."""

    references: int | None = None
    legacy_chars: int | None = None


# Tried in order; from the _CHOOSE_FROM-th on, the history items are chosen to fill what
# is left (choose_items).
_FOLDS = (
    _Fold(),
    _Fold(legacy_chars=2000),
    _Fold(references=50, legacy_chars=2000),
    _Fold(references=20, legacy_chars=1000),
    _Fold(references=10, legacy_chars=500),
    _Fold(references=5, legacy_chars=200),
    _Fold(references=0, legacy_chars=0),
)
_CHOOSE_FROM = 2
Shown = dict[str, set[int]]  # per history section, the indexes of the items shown


def _item_line(item: SummaryItem) -> str:
    text = one_line(item.text)
    if item.superseded_by:
        return f"- ~~{text}~~ (superseded: {one_line(item.superseded_by)})"
    return f"- {text}"


def _section_lines(title: str, items: list[SummaryItem], shown: set[int] | None) -> list[str]:
    lines = ["", f"## {title}"]
    if shown is not None and len(shown) < len(items):
        lines.append(
            f"- ({len(items) - len(shown)} other items of this section are {FOLDED_MARK}; "
            "all are in the operator's ledger, key `sectionsJson`: summaryctl ledger)"
        )
    return lines + [_item_line(i) for n, i in enumerate(items) if shown is None or n in shown]


def _words(text: str) -> frozenset[str]:
    return frozenset(re.findall(r"\w+", text.lower()))


CANDIDATES = 200  # per section: more than fit in any document (DOCUMENT_MAX_CHARS)


def choose_items(summary: StructuredSummary, room: int) -> Shown:
    """Which history items fill `room` characters: the newest item of each section, then
    the items with the most facts per character (controller.core.facts), newer first among
    equals, while they fit; of each section's newest CANDIDATES items. An item whose words
    all appear in an item already chosen adds nothing and is skipped. A fact-free item is
    taken only once no fact-bearing one that fits is left, so it never takes the place of a
    fact of its length. Only the document
    chooses: the ledger keeps every item."""
    candidates = []
    shown: Shown = {}
    for title in HISTORY_SECTIONS:
        items = summary.sections.get(title) or []
        shown[title] = set()
        # The newest CANDIDATES items only: more never fit, and a pass then costs the same
        # however long the session's history is.
        for n in range(max(0, len(items) - CANDIDATES), len(items)):
            line = _item_line(items[n])
            facts = fact_count(line)
            pinned = n == len(items) - 1
            rank = (not pinned, facts == 0, -round(100 * facts / max(1, len(line))), -n)
            candidates.append((rank, title, n, line))
    chosen: list[frozenset[str]] = []
    for _, title, n, line in sorted(candidates, key=lambda c: c[0]):
        words = _words(line)
        if len(line) + 1 > room or any(words <= other for other in chosen):
            continue
        shown[title].add(n)
        chosen.append(words)
        room -= len(line) + 1
    return shown


def _render(
    summary: StructuredSummary, memory_collection: str | None, fold: _Fold, shown: Shown | None
) -> str:
    lines = [f"# {one_line(summary.title)}"]
    for title in SECTION_TITLES:
        items = summary.sections.get(title) or []
        if items:
            lines += _section_lines(title, items, None if shown is None else shown.get(title))
    note = overflow_note(summary, memory_collection)
    refs = summary.references
    if refs or note:
        shown_refs = refs if fold.references is None else refs[: fold.references]
        lines += ["", REFERENCES_HEADING, *map(_reference_line, shown_refs)]
        if len(shown_refs) < len(refs):
            lines.append(
                f"- ({len(refs) - len(shown_refs)} more references are {FOLDED_MARK}; all are "
                "in the operator's ledger, key `referencesJson`: summaryctl ledger)"
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


def _history_fits(summary: StructuredSummary, max_chars: int) -> bool:
    total = 0
    for title in HISTORY_SECTIONS:
        for item in summary.sections.get(title) or []:
            total += len(_item_line(item)) + 1
            if total > max_chars:
                return False
    return True


def render_document(
    summary: StructuredSummary,
    memory_collection: str | None = None,
    *,
    max_chars: int | None = DOCUMENT_MAX_CHARS,
) -> str:
    """The document text: readable by a person and by the next agent. Deterministic.

    References come after the sections, each verbatim. A carried legacy text comes last,
    byte for byte, in a fenced block under LEGACY_HEADING. At most max_chars characters
    (None: unbounded, as `summaryctl summaries --full` shows it): long parts are folded
    into a line naming the ledger key that keeps them; the history items shown are chosen
    to fill what is left (choose_items).
    """
    # Every history item shown can fit only if their lines alone do: counted until they do
    # not, so a long history costs what fits, not what it holds.
    whole = max_chars is None or _history_fits(summary, max_chars)
    document = _render(summary, memory_collection, _FOLDS[0], None) if whole else ""
    if max_chars is None or (whole and len(document) <= max_chars):
        return document
    for step, fold in enumerate(_FOLDS):
        if whole:
            document = _render(summary, memory_collection, fold, None)
            if len(document) <= max_chars:
                return document
        if step < _CHOOSE_FROM:  # an earlier text and references fold first, as before
            continue
        none_shown: Shown = {title: set() for title in HISTORY_SECTIONS}
        room = max_chars - len(_render(summary, memory_collection, fold, none_shown))
        if room < 0:
            continue
        document = _render(summary, memory_collection, fold, choose_items(summary, room))
        if len(document) <= max_chars:
            return document
    # Still too long (a small budget, a long Current State): the lines with the most facts.
    return _fit_lines(summary, max_chars)


LAST_RESORT_NOTE = f"(the rest is {FOLDED_MARK}: summaryctl ledger)"


def _fit_lines(summary: StructuredSummary, max_chars: int) -> str:
    """The last resort, when the sections do not fit even with the history chosen: the
    title, then of every section's lines (the history's newest CANDIDATES each, Current
    State, References) those with the most facts per character, fact-free ones last, newer
    first among equals, while they fit; shown in the document's order under their headings,
    and a line saying where the rest is. A line whose words a chosen one already holds is
    skipped. Whatever the budget, the space goes to facts, not to the first lines."""
    title = f"# {one_line(summary.title)}"
    if max_chars < len(LAST_RESORT_NOTE) + 4:  # not even a line of the title and the note
        return title[: max(0, max_chars - 1)] + "\n"
    blocks = [
        (name, [_item_line(i) for i in (summary.sections.get(name) or [])[-CANDIDATES:]])
        for name in SECTION_TITLES
    ]
    blocks.append((REFERENCES_HEADING[3:], [_reference_line(r) for r in summary.references]))
    candidates = []
    for order, (name, lines_of_block) in enumerate(blocks):
        for n, line in enumerate(lines_of_block):
            facts = fact_count(line)
            rank = (facts == 0, -round(100 * facts / max(1, len(line))), -n)
            candidates.append((rank, order, n, name, line))
    room = max_chars - len(title) - len(LAST_RESORT_NOTE) - 3  # three newlines
    opened: set[str] = set()
    chosen: list[tuple[int, int, str, str]] = []
    held: list[frozenset[str]] = []
    for _, order, n, name, line in sorted(candidates, key=lambda c: c[0]):
        cost = len(line) + 1 + (0 if name in opened else len(name) + 5)  # "\n## name\n"
        words = _words(line)
        if cost > room or any(words <= other for other in held):
            continue
        room -= cost
        opened.add(name)
        held.append(words)
        chosen.append((order, n, name, line))
    lines = [title[: max(0, max_chars - len(LAST_RESORT_NOTE) - 2)]]
    heading = None
    for _, _, name, line in sorted(chosen):
        if name != heading:
            lines += ["", f"## {name}"]
            heading = name
        lines.append(line)
    return "\n".join([*lines, LAST_RESORT_NOTE]) + "\n"
