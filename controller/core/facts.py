"""The facts a sentence carries: what the next agent asks about (names, numbers, dates,
places, paths, identifiers, versions, amounts). Pure; a cheap scan, not a parser."""

from __future__ import annotations

import re

# Each pattern is one kind of fact; a token counts once, for the first kind it is.
_FACT = re.compile(
    r"(?P<number>[$€£]?\d[\d,.:/%-]*\w*)"  # 45, $400,000, 25:50, 3.11, 2023/05/20, 8080
    # a count in words ("four", "twice"); not "one", which is mostly a pronoun
    r"|(?P<count>\b(?i:two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty"
    r"|thirty|forty|fifty|sixty|seventy|eighty|ninety|hundred|thousand|million|dozen|twice"
    r"|thrice|half)\b)"
    r"|(?P<path>[\w.~-]*[/\\][\w./\\-]+|\b\w+\.(?:py|ts|js|go|rs|md|json|ya?ml|toml|sh)\b)"
    r"|(?P<ident>\b[A-Za-z]+_[\w]+\b|\b[a-z]+[A-Z]\w*\b|--[a-z][\w-]+|`[^`]+`)"
    r"|(?P<name>(?<=[\w,;:)] )[A-Z][\w'&.-]*(?: [A-Z][\w'&.-]*)*)"  # a name not opening it
)
_QUOTED = re.compile(r"\"[^\"]{2,80}\"|“[^”]{2,80}”")


def fact_tokens(text: str) -> list[str]:
    """The facts in a text, lower-cased, in order, quoted titles last. A sentence's first
    word is capitalised anyway, so it counts as no name, nor does 'I'."""
    found = [m.group().lower() for m in _FACT.finditer(text) if m.group() != "I"]
    return found + [q.lower() for q in _QUOTED.findall(text)]
