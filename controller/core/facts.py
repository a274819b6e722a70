"""The facts a sentence carries: what the next agent asks about (names, numbers, dates,
places, paths, identifiers, versions, amounts). Pure; a cheap scan, not a parser."""

from __future__ import annotations

import re
from collections.abc import Iterator

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
    """_FACT.finditer(text) as if a path could start anywhere in a run: a fact that ends
    inside one (`10am` in `10am-noon/x`) is followed by the path from there (`-noon/x`). The
    rest of a run is read once: without a slash after it, it is no path from anywhere in it."""
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
    """The facts in a text, lower-cased, in order, quoted titles last. A sentence's first
    word is capitalised anyway, so it counts as no name, nor does 'I'."""
    found = [m.group().lower() for m in _facts(text) if m.group() != "I"]
    return found + [q.lower() for q in _QUOTED.findall(text)]
