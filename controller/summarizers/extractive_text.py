"""Plain text out of agent memories, for the extractive summarizer: control characters and
code blocks out, a traceback as one sentence, sentences cut at word boundaries, and the
de-duplication key. Pure."""

from __future__ import annotations

import re
from bisect import bisect_left

from controller.core.facts import fact_tokens

SENTENCE_MAX = 200

# C0/C1 controls (tab and newline are kept as whitespace), lone surrogates (cannot be encoded
# as UTF-8, so Chroma and the embedder would refuse them), zero-width characters.
_UNWANTED = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\u200b-\u200d\ufeff]")
_CODE_BLOCK = re.compile(r"```.*?(?:```|\Z)|~~~.*?(?:~~~|\Z)", re.DOTALL)
# A Python traceback: its header, the indented frame and code lines, the exception line.
_TRACEBACK = re.compile(
    r"Traceback \(most recent call last\):[ \t]*(?:\r?\n[ \t]+[^\n]*|\r?\n[ \t]*(?=\r?\n))*"
    r"(?:\r?\n(?P<last>[^\n]*))?"
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[`*_]?[A-Z0-9])")
_LINE_MARKUP = re.compile(r"^(?:\s*(?:[-*+>]|#{1,6}|\d{1,3}[.)])\s+)+")
_WORDY = re.compile(r"\w")


def clean(text: str) -> str:
    """One line of plain text: no control characters, whitespace collapsed."""
    text = _UNWANTED.sub(" ", text).replace("\u2019", "'")
    return " ".join(text.split())


def shorten(text: str, limit: int) -> str:
    """At most `limit` characters, cut at a word boundary when one is near, marked by '…'."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space >= limit * 3 // 5:
        cut = cut[:space]
    return cut.rstrip() + "…"


# Where a long sentence may be cut into clauses: after a comma, semicolon or colon, and
# before a dash between spaces.
_CLAUSE_END = re.compile(r"(?<=[,;:])\s+|\s+(?=[-\u2013\u2014]\s)")
_GAP = " …"


def cut_keeping_facts(text: str, limit: int) -> str:
    """At most `limit` characters of a sentence. A sentence that does not fit keeps its
    clauses that carry the most facts (controller.core.facts: the names, numbers and paths
    the next agent asks about), in their order, a gap marked by '…'; the first clause when
    room is left. Not the head alone: the amount at the end of a long aside is what is asked
    about. A clause too long to keep whole offers only its pieces that carry a fact."""
    if len(text) <= limit:
        return text
    units: list[tuple[str, int | None]] = []  # a clause or piece, and its facts (None: never kept)
    for clause in filter(None, _CLAUSE_END.split(text)):
        short = len(clause) <= limit
        units += [(clause, len(fact_tokens(clause)))] if short else _pieces(clause, limit)
    clauses = [unit for unit, _ in units]
    ranked = sorted((-facts, n) for n, (_, facts) in enumerate(units) if facts is not None)
    chosen: set[int] = set()
    for _, n in ranked:
        trial = _joined(clauses, chosen | {n})
        if len(trial) <= limit:
            chosen.add(n)
    return _joined(clauses, chosen) if chosen else shorten(text, limit)


def _pieces(clause: str, limit: int) -> list[tuple[str, int | None]]:
    """A clause longer than the limit, cut at spaces (never inside a fact) into pieces that
    fit between two gap marks; a piece without a fact is never kept. Facts are found in the
    whole clause (a name needs the word before it), its words longer than the limit blanked:
    on such a word the count's regex is quadratic in its length."""
    blanked = re.sub(rf"\S{{{limit + 1},}}", lambda word: " " * len(word.group()), clause)
    lowered, spans, at = blanked.lower(), [], 0
    for token in fact_tokens(blanked) if len(lowered) == len(blanked) else []:
        start = lowered.find(token, at)
        start = start if start >= 0 else lowered.find(token)  # quoted titles come last
        if start >= 0:
            spans.append((start, start + len(token)))
            at = max(at, start + len(token))
    spans.sort()
    room, cuts, reach, n = limit - 2 * len(_GAP), [0], 0, 0  # reach: where begun facts end
    for word in re.finditer(r"\S+", clause):
        inside = word.start() < reach  # a fact's later word goes with its first
        while n < len(spans) and spans[n][0] < word.end():
            reach, n = max(reach, spans[n][1]), n + 1
        if not inside and max(word.end(), reach) - cuts[-1] > room and word.start() > cuts[-1]:
            cuts.append(word.start())
    facts_at = [start for start, _ in spans]
    return [
        (clause[a:b].strip(), bisect_left(facts_at, b) - bisect_left(facts_at, a) or None)
        for a, b in zip(cuts, [*cuts[1:], len(clause)], strict=True)
    ]


def _joined(clauses: list[str], chosen: set[int]) -> str:
    parts: list[str] = []
    for n in sorted(chosen):
        if parts and n - 1 not in chosen:
            parts.append(_GAP.strip())
        parts.append(clauses[n])
    text = " ".join(parts)
    return text if max(chosen) == len(clauses) - 1 else text.rstrip(" ,;:") + _GAP


def _one_line_traceback(match: re.Match[str]) -> str:
    last = " ".join((match.group("last") or "").split())
    return f"\nTraceback (most recent call last): {last}\n"


def sentences(text: str) -> list[str]:
    """Sentences of a text: code blocks and list markup dropped, each at most SENTENCE_MAX
    (cut_keeping_facts). A sentence ends at a line or at . ! or ? before a capital or digit,
    so URLs, file names and "e.g. this" stay whole; a traceback is one sentence."""
    text = _UNWANTED.sub(" ", text or "")
    text = _CODE_BLOCK.sub("\n", text)
    text = _TRACEBACK.sub(_one_line_traceback, text)
    out = []
    for line in text.splitlines():
        line = _LINE_MARKUP.sub("", line)
        for raw in _SENTENCE_END.split(line):
            sentence = " ".join(raw.replace("\u2019", "'").split())
            if len(sentence) >= 3 and _WORDY.search(sentence):
                out.append(cut_keeping_facts(sentence, SENTENCE_MAX))
    return out
