"""The References section: the exact names a session used (paths, URLs, issues, commits,
error names, identifiers), extracted by code, never by a model, which paraphrases some away.
Pure. Append-only; past REFERENCES_MAX new ones are counted, not listed (ReferenceOverflow).
"""

from __future__ import annotations

import builtins
import hashlib
import re
from collections.abc import Iterable, Sequence
from types import MappingProxyType

from pydantic import BaseModel, Field

from controller.core.chunking import memory_text
from controller.core.memories import Memory
from controller.core.text import PLACEHOLDER, Linear

REFERENCES_MAX = 400
REFERENCE_MAX_CHARS = 500
OVERFLOW_DIGESTS_MAX = 4000
_DIGEST_CHARS = 12

_TRAILING = ".,;:!?'\"`>"
_CLOSING = MappingProxyType({")": "(", "]": "[", "}": "{"})
# A bare name counts as a file only with a known extension (proposal.update is code).
_EXTENSION = (
    r"(?i:py|pyi|ipynb|js|mjs|cjs|jsx|ts|tsx|go|rs|java|kt|kts|scala|c|h|cc|cpp|hpp|cs|rb"
    r"|php|swift|m|mm|dart|lua|r|jl|ex|exs|erl|hs|ml|nix|bzl|vue|svelte|sh|bash|zsh|ps1"
    r"|md|rst|txt|adoc|json|jsonl|yaml|yml|toml|ini|cfg|conf|env|lock|mod|sum|xml|html?"
    r"|css|scss|sql|proto|graphql|gradle|tf|tfvars|mk|cmake|csv|tsv|log|pem|crt|patch|diff"
    r"|svg|png|jpe?g|gif|pdf|gz|tgz|zip|whl|so|dll|wasm)"
)
_AT_LINE = r"(?::\d+(?::\d+)?)?"  # a trailing :line[:col] is kept (traces use it)
# Paths: /abs, ./rel, ../rel, ~/home, a/b; bare file names with a known extension.
_PATH = r"(?<![\w/.~-])(?:(?:~|\.{1,2})?/)?(?:[\w@+-][\w.@+-]*/)*[\w@+-][\w.@+-]*" + _AT_LINE
_FILE = rf"(?<![\w/.-])[\w-]{{2,}}(?:\.[\w-]+)*\.{_EXTENSION}{_AT_LINE}(?![\w/])"

# One kind of reference each; where two overlap, the longest wins. "place" (in fenced code
# too), "name", "error", "path" (a place that must look like one: a/b). Two run on RE2, where
# Python's re takes quadratic time (`a.a.a...`): `(?<!...)X\b` written as `(?:^|[^...])(X)`.
_END = (1, r"(?!\w)")  # group 1's last character ends a word: RE2 has no \b there
_PATTERNS: tuple[tuple[str, re.Pattern[str] | Linear], ...] = (
    # URLs, and git remotes in scp form
    ("place", re.compile(r"\b(?:https?|ftp|ssh|git|file)://[^\s<>\"'`]+")),
    ("place", re.compile(r"\bgit@[\w.-]+:[\w./-]+")),
    # code spans: `anything without whitespace or backticks`
    ("name", re.compile(r"(?<=`)[^`\s]{2,200}(?=`)")),
    ("path", re.compile(_PATH)),
    ("place", re.compile(_FILE)),
    # issues and PRs: #123, owner/repo#123, GH-123, PR #12, JIRA-style keys ABC-1234
    ("place", Linear(r"(?:^|[^\w#&])((?:[\w.-]+/[\w.-]+)?#\d+)", (1,), _END)),
    ("place", re.compile(r"\b(?:PR|pr|GH|gh)[- ]?#?\d+\b|\b[A-Z][A-Z0-9]{1,9}-\d+\b")),
    # commit hashes: 7-40 hex digits with at least one digit and one letter
    ("place", re.compile(r"\b(?=[0-9a-f]{0,39}[a-f])(?=[0-9a-f]{0,39}[0-9])[0-9a-f]{7,40}\b")),
    # exception and error names; errno-style codes and CONSTANT_NAMES
    ("error", Linear(r"(?:^|\W)((?:[a-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Warning))", (1,), _END)),
    ("name", re.compile(r"\bE[A-Z]{3,}\b|\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b")),
    # dotted names: controller.core.merge, docs.example.org (at least two dots)
    ("name", re.compile(r"(?<![\w.])[A-Za-z_]\w*(?:\.[A-Za-z_]\w*){2,}(?![\w(])")),
)
# In fenced code only places are taken: the rest is code, left out (an injected statement).
_IN_CODE = frozenset({"place", "path"})
# A built-in exception (KeyError, ValueError) names no place in the project: not a reference.
_BUILTIN_EXCEPTIONS = frozenset(
    name for name in dir(builtins) if name.endswith(("Error", "Exception", "Warning"))
)
CODE_BLOCK = re.compile(r"```.*?(?:```|\Z)|~~~.*?(?:~~~|\Z)", re.DOTALL)
_PLAIN_WORDS = re.compile(r"^(?:[A-Za-z]+/[A-Za-z]+|[\d/]+)$")  # and/or, TCP/IP, 1/2


def _trimmed(text: str) -> str:
    """A match without the punctuation that ends the sentence around it; a closing bracket
    stays only when the reference opened it (a URL with a parenthesis)."""
    while text:
        last = text[-1]
        unopened = last in _CLOSING and text.count(last) > text.count(_CLOSING[last])
        if last not in _TRAILING and not unopened:
            break
        text = text[:-1]
    return text


def _acceptable(text: str, kind: str) -> bool:
    if len(text) < 2 or len(text) > REFERENCE_MAX_CHARS:
        return False
    if kind == "error" and text in _BUILTIN_EXCEPTIONS:
        return False
    # a path has a slash; a/b must look like one
    return kind != "path" or (
        "/" in text.rstrip("/") and len(text.strip("/.~")) >= 2 and not _PLAIN_WORDS.match(text)
    )


def extract_references(text: str) -> list[str]:
    """The references in one text, verbatim, in order of appearance, each once."""
    # A placeholder stays inside the reference it was part of (`postgres://u:[redacted: x]@db`):
    # read as one word of its length, each reference then cut from the text itself.
    read = PLACEHOLDER.sub(lambda m: f"Redacted{'0' * (len(m.group()) - 9)}X", text)
    found: list[tuple[int, int]] = []
    code = [m.span() for m in CODE_BLOCK.finditer(read)]
    for kind, p in _PATTERNS:
        spans = p.spans(read) if isinstance(p, Linear) else map(re.Match.span, p.finditer(read))
        for start, end in spans:
            ref = _trimmed(read[start:end])
            in_code = any(a <= start < b for a, b in code)
            if _acceptable(ref, kind) and (kind in _IN_CODE or not in_code):
                found.append((start, start + len(ref)))
    found.sort(key=lambda f: (f[0], -(f[1] - f[0])))
    refs: list[str] = []
    end = -1
    for start, stop in found:
        if start >= end:  # an overlapping match is part of a longer one already kept
            refs.append(text[start:stop])
            end = stop
    return list(dict.fromkeys(r for r in refs if not PLACEHOLDER.fullmatch(r)))


def memory_references(memories: Iterable[Memory]) -> list[tuple[str, int]]:
    """(reference, timestamp of the first memory naming it) in memory order, each once."""
    seen: dict[str, int] = {}
    for memory in memories:
        for ref in extract_references(memory_text(memory)):
            seen.setdefault(ref, memory.timestamp_ms)
    return list(seen.items())


class ReferenceOverflow(BaseModel):
    """References left out of a full section: how many, when, their digests (counted once)."""

    count: int = Field(default=0, ge=0)
    first_ms: int | None = None
    last_ms: int | None = None
    digests: list[str] = Field(default_factory=list)  # all of them, when as many as count


def merge_references(
    prior: Sequence[str], overflow: ReferenceOverflow, new: Sequence[tuple[str, int]]
) -> tuple[list[str], ReferenceOverflow]:
    """The prior references verbatim, then new ones up to REFERENCES_MAX; the rest counted."""
    listed = list(prior)
    present = set(listed)
    counted = set(overflow.digests)
    out = overflow.model_copy(deep=True)
    for ref, at_ms in new:
        if ref in present:
            continue
        if len(listed) < REFERENCES_MAX:
            listed.append(ref)
            present.add(ref)
            continue
        key = hashlib.sha256(ref.encode("utf-8", "replace")).hexdigest()[:_DIGEST_CHARS]
        if key in counted:
            continue
        if len(out.digests) < OVERFLOW_DIGESTS_MAX:
            out.digests.append(key)
            counted.add(key)
        out.count += 1
        out.first_ms = at_ms if out.first_ms is None else min(out.first_ms, at_ms)
        out.last_ms = at_ms if out.last_ms is None else max(out.last_ms, at_ms)
    return listed, out
