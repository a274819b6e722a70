"""The document agents read: a summary as markdown, bounded. Pure. Our part is at most
max_chars (choose_lines picks the lines, the last points to the ledger: docs/summaries.md);
another writer's carried text is never cut: its readers cannot read the ledger.
"""

from __future__ import annotations

import heapq
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from itertools import accumulate, groupby

from controller.core.references import REFERENCES_MAX
from controller.core.summary import (
    HISTORY_SECTIONS,
    LEGACY_HEADING,
    SECTION_TITLES,
    StructuredSummary,
    SummaryItem,
)
from controller.core.text import cut, ms_to_rfc3339, one_line

REFERENCES_HEADING = "## References"

# The facts a sentence carries (what the next agent asks about): a cheap scan, not a parser.
_NUMBER_OR_COUNT = (
    r"(?P<number>[$€£]?\d[\d,.:/%-]*\w*)"  # 45, $400,000, 25:50, 3.11, 2023/05/20, 8080
    # a count in words ("four", "twice"); not "one", which is mostly a pronoun
    r"|(?P<count>\b(?i:two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty"
    r"|thirty|forty|fifty|sixty|seventy|eighty|ninety|hundred|thousand|million|dozen|twice"
    r"|thrice|half)\b)"
)
# A path's first part is a run of these; read from where the run starts, never from each of
# its characters, where Python's re took time quadratic in a long run without a slash.
_RUN = r"[\w.~-]"
_PATH_HERE = rf"{_RUN}*+[/\\][\w./\\-]+"
# Each pattern is one kind of fact; a token counts once, for the first kind it is.
_FACT = re.compile(
    _NUMBER_OR_COUNT + rf"|(?P<path>(?<!{_RUN}){_PATH_HERE}|[/\\][\w./\\-]+"
    r"|\b\w+\.(?:py|ts|js|go|rs|md|json|ya?ml|toml|sh)\b)"
    r"|(?P<ident>\b[A-Za-z]+_[\w]+\b|\b[a-z]+[A-Z]\w*\b|--[a-z][\w-]+|`[^`]+`)"
    r"|(?P<name>(?<=[\w,;:)] )[A-Z][\w'&.-]*(?: [A-Z][\w'&.-]*)*)"  # a name not opening it
)
_AFTER_A_FACT = re.compile(rf"(?<={_RUN})(?:{_NUMBER_OR_COUNT}|(?P<path>{_PATH_HERE})|{_RUN}*)")
_QUOTED = re.compile(r"\"[^\"]{2,80}\"|“[^”]{2,80}”")


def _facts(text: str) -> Iterator[re.Match[str]]:
    """_FACT.finditer(text) as if a path could start anywhere in a run (`-noon/x` after `10am`
    in `10am-noon/x`); a run's rest is read once: without a slash it is no path anywhere."""
    pos, read_to = 0, 0
    while found := _FACT.search(text, pos):
        while found:
            yield found
            pos, found = found.end(), None
            if pos >= read_to and (here := _AFTER_A_FACT.match(text, pos)):
                if here.lastgroup == "path":
                    found = here
                elif here.lastgroup is None:  # no number or count here either
                    read_to = here.end()


def fact_tokens(text: str) -> list[str]:
    """The facts in a text, lower-cased, in order, quoted titles last ('I' is no name)."""
    found = [m.group().lower() for m in _facts(text) if m.group() != "I"]
    return found + [q.lower() for q in _QUOTED.findall(text)]


def _reference_lines(summary: StructuredSummary, memory_collection: str | None) -> list[str]:
    """The References lines; when full, a last one says how many more and where they are."""
    lines = [f"- {ref}" if "`" in ref else f"- `{ref}`" for ref in summary.references]
    over = summary.references_overflow
    if over.count == 0:
        return lines
    how_many = f"{over.count}" if over.count == len(over.digests) else f"at least {over.count}"
    where = f"collection `{memory_collection}`" if memory_collection else "the memory collection"
    span = ""
    if over.first_ms is not None and over.last_ms is not None:
        span = f", memories from {ms_to_rfc3339(over.first_ms)} to {ms_to_rfc3339(over.last_ms)}"
    return [
        *lines,
        f"- ({how_many} more references are not listed: this section keeps {REFERENCES_MAX}. "
        f"They are in {where}, sessionId `{summary.session_id}`{span}.)",
    ]


# neo's agents read the 5 newest documents whole at boot, so a document must not grow
# without bound; the ledger keeps everything. Also what is embedded (memory_store.EMBED_CHARS).
DOCUMENT_MAX_CHARS = 8000
FOLDED_MARK = "not shown here"
CANDIDATES = 200  # per section: more than fit in any document (DOCUMENT_MAX_CHARS)


def _item_line(item: SummaryItem) -> str:
    text = one_line(item.text)
    if item.superseded_by:
        return f"- ~~{text}~~ (superseded: {one_line(item.superseded_by)})"
    return f"- {text}"


def _blocks(
    summary: StructuredSummary, memory_collection: str | None, last: int = 0
) -> list[tuple[str, list[str]]]:
    """(heading, lines) of each section, of its `last` items (0: all), then of References."""
    blocks = [(n, [_item_line(i) for i in summary.sections[n][-last:]]) for n in SECTION_TITLES]
    return [*blocks, (REFERENCES_HEADING[3:], _reference_lines(summary, memory_collection))]


def _markdown(title: str, blocks: Iterable[tuple[str, Iterable[str]]], *end: str) -> str:
    """The title, each block's lines under its heading (none when it has none), then `end`."""
    lines = [title]
    for name, block in blocks:
        if block := list(block):
            lines += ["", f"## {name}", *block]
    return "\n".join([*lines, *end]) + "\n"


def render_document(
    summary: StructuredSummary,
    memory_collection: str | None = None,
    *,
    max_chars: int | None = DOCUMENT_MAX_CHARS,
) -> str:
    """Sections, References, then a carried text byte for byte; the rest at most max_chars."""
    carried, tail = summary.legacy_text, ""
    if carried is not None:
        # Longer than any run of ` or ~ in the text: nothing in it can close the fence.
        fence = "`" * max(3, 1 + max(map(len, re.findall(r"`+|~+", carried)), default=0))
        tail = f"\n{LEGACY_HEADING}\n\n" + (f"{fence}\n{carried}\n{fence}\n" if carried else "")
    # The whole can fit only if the history's lines alone do: counted until they do not,
    # so a long history costs what fits, not what it holds.
    sections = (summary.sections[title] for title in HISTORY_SECTIONS)
    lengths = accumulate(len(_item_line(item)) + 1 for items in sections for item in items)
    if max_chars is None or all(total <= max_chars for total in lengths):
        document = _markdown(f"# {one_line(summary.title)}", _blocks(summary, memory_collection))
        if max_chars is None or len(document) <= max_chars:
            return document + tail
    assert max_chars is not None
    return choose_lines(summary, memory_collection, max_chars) + tail


def choose_lines(summary: StructuredSummary, memory_collection: str | None, max_chars: int) -> str:
    """The title and the lines that fill max_chars, greedily by the rarest facts not yet
    shown per character (docs/summaries.md), then how many are left to the ledger."""
    title = f"# {one_line(summary.title)}"
    blocks = _blocks(summary, memory_collection, CANDIDATES)
    total = sum(map(len, summary.sections.values())) + len(blocks[-1][1])
    room = max_chars - len(title) - len(_folded_note(total)) - 3  # three newlines
    newest = [(name, lines[-1]) for name, lines in blocks if lines and name in HISTORY_SECTIONS]
    # The newest item of each history section goes first while they take at most half the
    # space: a small budget goes to facts, not to the latest chatter.
    pinning = sum(len(line) + len(name) + 6 for name, line in newest) * 2 <= room
    lines_facts = [
        (order, n, name, line, frozenset(fact_tokens(line)))
        for order, (name, lines_of_block) in enumerate(blocks)
        for n, line in enumerate(lines_of_block)
    ]
    held_by = Counter(fact for *_, facts in lines_facts for fact in facts)
    shown: set[str] = set()

    def rank(index: int) -> tuple[bool, bool, bool, int, int]:
        order, n, name, line, facts = lines_facts[index]
        pinned = pinning and name in HISTORY_SECTIONS and n == len(blocks[order][1]) - 1
        gain = sum(1 / held_by[f] for f in facts - shown)
        # per mille: lines a few characters apart weigh the same, and the newer goes first
        return (not pinned, gain == 0, not facts, -round(1000 * gain / max(1, len(line))), -n)

    queue = [(rank(i), i) for i in range(len(lines_facts))]
    heapq.heapify(queue)
    opened: set[str] = set()
    chosen: list[tuple[int, int, str, str]] = []
    held: list[frozenset[str]] = []
    while queue:
        was, index = heapq.heappop(queue)
        now = rank(index)  # a line's gain only falls as facts are shown: re-queue it
        if now != was:
            heapq.heappush(queue, (now, index))
            continue
        order, n, name, line, facts = lines_facts[index]
        cost = len(line) + 1 + (0 if name in opened else len(name) + 5)  # "\n## name\n"
        words = frozenset(re.findall(r"\w+", line.lower()))
        if cost > room or any(words <= other for other in held):
            continue
        room -= cost
        opened.add(name)
        held.append(words)
        shown |= facts
        chosen.append((order, n, name, line))
    note_line = _folded_note(total - len(chosen))
    if max_chars < len(note_line) + 4:  # not even a line of the title and the note
        return cut(title, max(0, max_chars - 1), "") + "\n"
    shown_blocks = groupby(sorted(chosen), key=lambda c: c[2])
    title = cut(title, max(0, max_chars - len(note_line) - 3), "")
    return _markdown(title, ((n, (c[3] for c in cs)) for n, cs in shown_blocks), "", note_line)


def _folded_note(lines: int) -> str:
    return f"({lines} more lines {FOLDED_MARK}: summaryctl ledger)"
