"""Small text and time helpers every layer shares. Pure."""

from __future__ import annotations

import datetime as dt
import functools
import itertools
import json
import re
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import re2

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


# What stands for a masked secret (controller/redaction.py).
PLACEHOLDER = re.compile(r"\[redacted: [a-z0-9-]+\]")
# What no reader sees: Unicode's Default_Ignorable_Code_Point, format characters (Cf) and
# the rest of it by PropList.txt's ranges (unicodedata lacks the property). Cf is only in the
# first two planes and plane 14: scanning those is a tenth of every code point's start-up cost.
_FORMAT = "".join(
    c
    for c in map(chr, itertools.chain(range(0x20000), range(0xE0000, 0xE1000)))
    if unicodedata.category(c) == "Cf"
)
IGNORABLE = re.compile(
    f"[{_FORMAT}\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u2065\u3164\ufe00-\ufe0f"
    "\uffa0\ufff0-\ufff8\U000e0000-\U000e0fff]"
)


def listed_names(names: Iterable[str]) -> list[str]:
    """The names as neo reads back their comma-joined list: split, stripped, each once."""
    return list(dict.fromkeys(n for name in names for p in name.split(",") if (n := p.strip())))


def cut(
    text: str, limit: int, mark: str = "…", *, word_from: int | None = None, parts: bool = True
) -> str:
    """At most `limit` characters: a longer text cut and marked by `mark`; at its last space
    when one is at or past `word_from`; never inside a word when not `parts` (unmasked text:
    part of a secret is no longer one masking knows). A placeholder is kept or dropped whole."""
    if len(text) <= limit:
        return text
    end = max(0, limit - len(mark))
    if not parts and text[end] != " ":
        end = max(0, text.rfind(" ", 0, end))
    elif word_from is not None and (space := text.rfind(" ", 0, end)) >= word_from:
        end = space
    before = itertools.takewhile(lambda m: m.start() < end, PLACEHOLDER.finditer(text))
    end = next((masked.start() for masked in before if end < masked.end()), end)
    return text[:end].rstrip() + mark if mark else text[:end]


def one_line(text: object, limit: int | None = None, mark: str = "") -> str:
    """str(text) on one line, whitespace collapsed, at most limit characters (cut: `mark`)."""
    flat = " ".join(str(text).split())
    return flat if limit is None else cut(flat, limit, mark)


def printable(text: object) -> str:
    """text for one terminal or log line, control characters shown escaped."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def ms_to_rfc3339(ms: int) -> str:
    """Epoch milliseconds as RFC 3339 seconds in UTC; out of range: the number, no error."""
    try:
        when = EPOCH + dt.timedelta(milliseconds=ms)
    except OverflowError:
        return f"{ms} ms after the epoch"
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def json_value(text: str | bytes, **options: Any) -> Any:
    """json.loads for what others wrote: JSON nested past Python's stack is a ValueError too."""
    try:
        return json.loads(text, **options)
    except RecursionError:
        raise ValueError("JSON nested too deep to read") from None


def _python_classes() -> dict[str, str]:
    """What Python's re takes \\w, \\d, \\s and their negations to mean, each as the inside of
    an RE2 character class (RE2's are ASCII). None is past U+323AF (test_redaction_linear)."""
    chars = "".join(map(chr, range(0xD800))) + "".join(map(chr, range(0xE000, 0x323B0)))
    classes = {}
    for escape in (r"\w", r"\d", r"\s"):
        runs = [(ord(r.group()[0]), ord(r.group()[-1])) for r in re.finditer(escape + "+", chars)]
        gaps = itertools.pairwise([(0, -1), *runs, (0x110000, 0)])  # the others
        others = [(after + 1, before - 1) for (_, after), (before, _) in gaps if before - after > 1]
        for name, ranges in ((escape, runs), (escape.upper(), others)):
            classes[name] = "".join(rf"\x{{{first:x}}}-\x{{{last:x}}}" for first, last in ranges)
    return classes


_PYTHON_CLASSES = MappingProxyType(_python_classes())
# A pattern's parts: an escape, a character class (Python's: a `]` first in it is one of its
# characters), or any other character.
PATTERN_PARTS = re.compile(r"\\.|\[\^?\]?(?:\\.|[^\]\\])*\]|.", re.DOTALL)


def python_meaning(source: str) -> str:
    """The pattern for RE2 with \\w, \\d, \\s and their negations as Python's re reads them, in
    and out of a character class. A class with \\w or \\W is read case-sensitively: RE2's (?i)
    folds a mark (U+0345) into it that Python's \\w lacks, and its letters are in \\w."""

    def python(piece: re.Match[str]) -> str:
        text = piece.group()
        if text[0] != "[" and text not in _PYTHON_CLASSES:
            return text
        text = text if text[0] == "[" else f"[{text}]"
        escapes = set(re.findall(r"\\.", text))
        text = re.sub(r"\\.", lambda e: _PYTHON_CLASSES.get(e.group(), e.group()), text)
        return f"(?-i:{text})" if escapes & {r"\w", r"\W"} else text

    return PATTERN_PARTS.sub(python, source)


def without_surrogates(text: str) -> str:
    """The text as RE2 can read it (UTF-8 has no lone surrogate): each one U+FFFD."""
    return re.sub("[\ud800-\udfff]", "\ufffd", text)


def re2_pattern(pattern: str) -> Any:
    """The pattern compiled by RE2 (linear time); ValueError for one RE2 refuses (lookaround)."""
    options = re2.Options()
    options.log_errors = False
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:  # its message is bytes
        why = b"".join(a for a in exc.args if isinstance(a, bytes)).decode(errors="replace")
        raise ValueError(f"not a pattern RE2 accepts: {why}") from exc


@dataclass(frozen=True)
class Linear:
    """A Python pattern run by RE2 (python_meaning), in time linear where Python's re takes
    quadratic time or worse. A match finds the first of `groups` that took part; `ahead`: a
    group, and what Python's lookahead wants after it, checked here (RE2 has none), not taken
    (the next match may begin with it)."""

    source: str
    groups: tuple[int, ...] = (0,)
    ahead: tuple[int, str] = (0, "")

    @functools.cached_property
    def pattern(self) -> Any:
        return re2_pattern(python_meaning(self.source))  # on first use, not at start-up

    def spans(self, text: str) -> Iterator[tuple[int, int]]:
        """(start, end) in text of what each match found."""
        for match in self.pattern.finditer(without_surrogates(text)):
            group = next(g for g in self.groups if match.start(g) >= 0)
            start, end = match.span(group)
            if group != self.ahead[0] or re.compile(self.ahead[1]).match(text, end):
                yield start, end

    def sub(self, replacement: str, text: str) -> str:
        """re.sub of the pattern: the text around the matches joined by replacement."""
        ends = [0, *itertools.chain.from_iterable(self.spans(text)), len(text)]
        return replacement.join(text[a:b] for a, b in zip(ends[::2], ends[1::2], strict=True))
