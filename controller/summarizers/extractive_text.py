"""Plain text out of agent memories, for the extractive summarizer: control characters and
code blocks out, a traceback as one sentence, sentences cut at word boundaries, and the
de-duplication key. Pure."""

from __future__ import annotations

import re

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
_NOT_WORD = re.compile(r"[^\w\s]")


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


def _one_line_traceback(match: re.Match[str]) -> str:
    last = " ".join((match.group("last") or "").split())
    return f"\nTraceback (most recent call last): {last}\n"


def sentences(text: str, limit: int = SENTENCE_MAX) -> list[str]:
    """Sentences of a text: code blocks and list markup dropped, each at most `limit` chars.

    Lines are sentence boundaries; within a line a sentence ends at . ! or ? followed by
    space and a capital or digit, so URLs, file names and "e.g. this" stay whole. A Python
    traceback is one sentence: its first line and the exception. Python string slicing
    works on code points, so a cut never splits a character.
    """
    text = _UNWANTED.sub(" ", text or "")
    text = _CODE_BLOCK.sub("\n", text)
    text = _TRACEBACK.sub(_one_line_traceback, text)
    out = []
    for line in text.splitlines():
        line = _LINE_MARKUP.sub("", line)
        for raw in _SENTENCE_END.split(line):
            sentence = " ".join(raw.replace("\u2019", "'").split())
            if len(sentence) >= 3 and _WORDY.search(sentence):
                out.append(shorten(sentence, limit))
    return out


def dedup_key(text: str) -> str:
    """Dedup key: case, punctuation and spacing do not make two items different."""
    return " ".join(_NOT_WORD.sub(" ", text.lower()).split())
