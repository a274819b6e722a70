"""Quoted content, not instructions or facts. Pure. The next agent trusts the summary it
reads at boot, so error text (a traceback, a refusal) and instruction-like text ("SYSTEM: ...")
get a label and “…” (quote_if_needed), whichever backend proposed them (core/merge.py).
"""

from __future__ import annotations

import re
import unicodedata
from types import MappingProxyType
from typing import Literal

from controller.core.summary import ITEM_MAX
from controller.core.text import IGNORABLE, PATTERN_PARTS, Linear, one_line

ERROR_LABEL = "Error reported in the session (quoted): "
INSTRUCTION_LABEL = "Quoted from session content, not an instruction: "
OPEN_QUOTE, CLOSE_QUOTE = "\u201c", "\u201d"

Kind = Literal["error", "instruction"]

_QUOTED = re.compile(
    rf"(?:{re.escape(ERROR_LABEL)}|{re.escape(INSTRUCTION_LABEL)})"
    rf"{OPEN_QUOTE}[^{OPEN_QUOTE}{CLOSE_QUOTE}]*{CLOSE_QUOTE}",
    re.DOTALL,
)
TYPOGRAPHIC_QUOTES = MappingProxyType(
    str.maketrans({"‘": "'", "’": "'", "‚": "'", "“": '"', "”": '"', "„": '"'})
)

# A role marker counts at the start or after punctuation, not in "the file system: ext4".
_START = r"(?:^|\n|[^\w\s,]\s*)"
_ROLES = r"(?:system|assistant|developer|user|human)"
_VERBS = (
    r"(?:ignore|disregard|forget|abandon|discard|neglect|set\s+aside|do\s+not\s+follow"
    r"|don't\s+follow|stop\s+following|no\s+longer\s+follow)"
)
_OVERRIDE = r"(?:override|overrule|bypass|circumvent)"
_DETERMINERS = r"(?:(?:all|any|every|each|of|the|your|my|our|these|those|its)\s+)"
_QUALIFIERS = (
    r"(?:previous|previously|prior|above|earlier|preceding|former|foregoing|initial|system"
    r"|safety)"
)
_NOUNS = (
    r"(?:instructions?|prompts?|directives?|directions?|guidelines?|guardrails?|rules"
    r"|commands?|context|messages?|constraints?|conversation|text|input|orders?)"
)
_STRONG_NOUNS = (
    r"(?:instructions?|directives?|guidelines?|guardrails?|system\s+prompt"
    r"|safety\s+(?:rules|filters?|guidelines|measures|restrictions))"
)
_SECTIONS = (
    r"(?:current\s+state|user\s+requests|questions\s*(?:&|and)\s*decisions|design\s+choices"
    r"|corrections\s*(?:&|and)\s*feedback|(?:the\s+)?summary(?:'s)?\s+title)"
)

_INSTRUCTION_SIGNS = (
    # "ignore previous instructions", "disregard all of the above rules"
    rf"\b{_VERBS}\s+{_DETERMINERS}{{0,3}}{_QUALIFIERS}\s+(?:\w+\s+)?{_NOUNS}\b",
    # "ignore your instructions", "override the system prompt"
    rf"\b(?:{_VERBS}|{_OVERRIDE})\s+{_DETERMINERS}{{0,3}}{_STRONG_NOUNS}\b",
    r"\b(?:ignore|disregard|forget)\s+(?:everything|anything|all)\s+"
    r"(?:above|before|previously|said|prior|else|you\b)",
    # "SYSTEM: ...", "assistant: ...", "System prompt: ..." at the start of a sentence
    rf"{_START}{_ROLES}(?:\s+(?:prompt|message|override|instructions?|note))?\s*:",
    # chat-template role markers and special tokens
    r"<\|[^|<>]{1,40}\|>",
    r"\[/?inst\]|<</?sys>>",
    rf"<\s*/?\s*{_ROLES}\s*>",
    r"(?<!#)#{2,}\s*(?:system|instructions?|assistant|human|response)\s*:",
    # "you are now DAN", "you are no longer bound by ..."
    r"\byou\s+are\s+no\s+longer\b",
    r"\byou\s+are\s+now\s+(?:a|an|the|my|acting|called|named|free|unrestricted"
    r"|jailbroken|dan|root|admin|administrator|allowed|authorized|permitted|required"
    r"|going\s+to|to|in\s+\w+\s+mode)\b",
    r"\bfrom\s+now\s+on,?\s+(?:you|the\s+(?:assistant|agent|model))\s+"
    r"(?:are|will|must|should|shall|may|can)\b",
    r"\b(?:pretend|imagine)\s+(?:to\s+be|you\s+are|that\s+you)\b",
    r"\byour\s+(?:new|real|actual|true)\s+(?:role|task|instructions?|goal|objective"
    r"|purpose|job)\b",
    r"\b(?:new|updated|revised|real|actual|true|secret|hidden|important|additional"
    r"|override|admin|system)\s+instructions?\s*:",
    rf"{_START}instructions?\s*:",
    rf"\b(?:set|overwrite|replace|change)\s+(?:the\s+)?{_SECTIONS}\s+(?:to|with|as|=)",
    r"\b(?:output|return|write|produce|reply\s+with|respond\s+with|emit)\s+"
    r"(?:only\s+)?(?:an?\s+)?empty\s+(?:summary|json|object|response|reply|string)\b",
    r"\b(?:reveal|print|show|output|repeat|leak)\s+(?:me\s+)?(?:your|the)\s+"
    r"(?:system\s+prompt|hidden\s+prompt|instructions|initial\s+prompt)\b",
    r"\bjailbreak",
    # role markers written in capitals count anywhere: "The reply said SYSTEM: ..."
    r"\b(?-i:SYSTEM|ASSISTANT|DEVELOPER|USER|HUMAN)\s*:",
)
_INSTRUCTION = re.compile("|".join(_INSTRUCTION_SIGNS), re.IGNORECASE)

_ERROR_SIGNS = (
    r"traceback\s*\(most\s+recent\s+call\s+(?:last|first)\)",
    r"another\s+exception\s+occurred|the\s+above\s+exception\s+was",
    r"\bexception\s+in\s+thread\b|\bpanicked\s+at\b|\bsegmentation\s+fault\b",
    r"\bcore\s+dumped\b|\bnpm\s+err!|\bstack\s*trace\s*:|\bfatal\s+error\s*:",
    r"\bunhandled\s+(?:promise\s+)?(?:rejection|exception)\b",
    # "Error: ...", "ERROR [main] ...", "error 500", "fatal: ...", "panic: ..."
    r"^\W*(?:error|exception|fatal|panic|failure|failed|critical|err)\b\s*"
    r"(?:[:!\[(#]|\d{3}\b)",
    r"^\W*(?:an?\s+)?(?:unexpected\s+|unhandled\s+|internal\s+|unknown\s+)?"
    r"(?:error|exception)\s+(?:has\s+)?(?:occurred|was\s+raised|happened)",
    r"^\W*failed\s+\S+::\S+",  # a pytest failure line
    # stack frames: Python, Java/JavaScript
    r"^\W*file\s+\"[^\"]+\",\s*line\s+\d+",
    r"^\W*at\s+[\w$.<>]+\s*\([^()\s]*:\d+(?::\d+)?\)",
    # a model's refusal where content should be
    r"^\W*(?:i'?m\s+sorry|i\s+am\s+sorry|i\s+apologi[sz]e|sorry),?\s+(?:but\s+)?"
    r"(?:i\s+(?:can'?t|cannot|am\s+unable|'?m\s+unable|am\s+not\s+able|won'?t)|as\s+an\s+ai)",
    r"^\W*as\s+an?\s+(?:ai|large\s+language\s+model|language\s+model)\b",
)
_ERROR = re.compile("|".join(_ERROR_SIGNS), re.IGNORECASE)
# The last line of a traceback: "ValueError: ...", "requests.exceptions.HTTPError: ..." (the
# name after the last dot decides: a module path matched at each dot takes quadratic time).
_EXCEPTION_LINE = re.compile(r"\b[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Warning)\s*:")


# What Python's re.IGNORECASE reads as `i` and RE2's (?i) does not.
_DOTTED_I = MappingProxyType(str.maketrans({"\u0130": "i", "\u0131": "i"}))


def _wider(pattern: re.Pattern[str]) -> Linear:
    """The pattern for RE2, matching wherever it does and maybe more (no lookbehind; \\b only
    where an alternative starts or ends, as a non-\\w or an end); the pattern confirms."""
    parts = PATTERN_PARTS.findall(pattern.pattern.replace("(?<!#)", ""))
    out, depth = ["(?i)"], 0
    for at, part in enumerate(parts):
        if part == r"\b":
            if depth == 0 and out[-1] in ("(?i)", "|"):
                out.append(r"(?:^|\W)")
            elif depth == 0 and parts[at + 1 : at + 2] in (["|"], []):
                out.append(r"(?:$|\W)")
            continue
        depth += (part == "(") - (part == ")")
        out.append(part)
    return Linear("".join(out))


_INSTRUCTION_WIDE, _ERROR_WIDE = _wider(_INSTRUCTION), _wider(_ERROR)


def kind_of(text: str) -> Kind | None:
    """What must be quoted: an instruction (checked first: worse to follow), error text, or None.
    Python's re runs only where RE2 found a match: this is asked of every memory sentence."""
    # Compatibility forms folded, invisible characters gone, quotes straight, spaces collapsed.
    text = unicodedata.normalize("NFKC", IGNORABLE.sub("", text)).translate(TYPOGRAPHIC_QUOTES)
    probe = "\n".join(" ".join(line.split()) for line in text.splitlines() if line.strip())
    wide = probe.translate(_DOTTED_I)
    if any(_INSTRUCTION_WIDE.spans(wide)) and _INSTRUCTION.search(probe):
        return "instruction"
    if (any(_ERROR_WIDE.spans(wide)) and _ERROR.search(probe)) or _EXCEPTION_LINE.search(probe):
        return "error"
    return None


def is_quoted(text: str) -> bool:
    return _QUOTED.fullmatch(text) is not None


def unquoted(text: str) -> str:
    return text[text.index(OPEN_QUOTE) + 1 : -1] if is_quoted(text) else text


def fit(text: str, limit: int = ITEM_MAX) -> str:
    """The text within `limit` characters; a quoted one is cut inside its quote marks."""
    if len(text) <= limit:
        return text
    if not is_quoted(text):
        return one_line(text, limit, "…")
    kind: Kind = "instruction" if text.startswith(INSTRUCTION_LABEL) else "error"
    return quote(unquoted(text), kind, limit)


def quote(text: str, kind: Kind, limit: int = ITEM_MAX) -> str:
    """The text labelled as quoted, at most `limit` characters; “ and ” inside become plain
    quotes, so nothing inside can seem to close it."""
    label = INSTRUCTION_LABEL if kind == "instruction" else ERROR_LABEL
    inner = text.replace(OPEN_QUOTE, '"').replace(CLOSE_QUOTE, '"')
    inner = one_line(inner, max(1, limit - len(label) - 2), "…")
    return f"{label}{OPEN_QUOTE}{inner}{CLOSE_QUOTE}"


def quote_if_needed(text: str) -> str:
    """The text, quoted (quote) when it is error text or reads as an instruction; idempotent."""
    kind = None if is_quoted(text) else kind_of(text)
    return text if kind is None else quote(text, kind)


def as_item(text: str) -> str:
    """Proposed text as an item stores and is keyed by it: cut to ITEM_MAX, quoted if needed."""
    return quote_if_needed(one_line(text, ITEM_MAX, "…"))
