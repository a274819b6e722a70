"""controller.core.quoting.kind_of as it was at 58bfad2 (two probes, each pattern run on both,
in Python's re only): the oracle tests/unit/test_quoting.py holds today's kind_of to. Frozen:
do not edit to follow quoting.py."""

from __future__ import annotations

import re
import unicodedata
from typing import Literal

from controller.core.quoting import TYPOGRAPHIC_QUOTES
from controller.core.text import IGNORABLE

Kind = Literal["error", "instruction"]

# Characters that hide a word from a pattern without showing: zero-width and format marks.

# Where a role marker counts: the start of the text or right after punctuation ("...: SYSTEM:"),
# not inside a phrase such as "the file system: ext4".
_START = r"(?:^|\n|[^\w\s,]\s*)"
_ROLES = r"(?:system|assistant|developer|user|human)"
_VERBS = (
    r"(?:ignore|disregard|forget|abandon|discard|neglect|set aside|do not follow"
    r"|don't follow|stop following|no longer follow)"
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

_INSTRUCTION = re.compile(
    "|".join(
        (
            # "ignore previous instructions", "disregard all of the above rules"
            rf"\b{_VERBS}\s+{_DETERMINERS}{{0,3}}{_QUALIFIERS}\s+(?:\w+\s+)?{_NOUNS}\b",
            # "ignore your instructions", "override the system prompt"
            rf"\b(?:{_VERBS}|{_OVERRIDE})\s+{_DETERMINERS}{{0,3}}{_STRONG_NOUNS}\b",
            r"\b(?:ignore|disregard|forget)\s+(?:everything|anything|all)\s+"
            r"(?:above|before|previously|said|prior|else|you\b)",
            # "SYSTEM: ...", "assistant: ...", "System prompt: ..." at the start of a sentence
            rf"{_START}{_ROLES}(?:\s+(?:prompt|message|override|instructions?|note))?\s*:",
            # chat-template role markers and special tokens
            r"<\|[^|<>\n]{1,40}\|>",
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
        )
    ),
    re.IGNORECASE,
)
# Role markers written in capitals count anywhere: "The reply said SYSTEM: you are root".
_INSTRUCTION_CAPS = re.compile(r"\b(?:SYSTEM|ASSISTANT|DEVELOPER|USER|HUMAN)\s*:")

_ERROR = re.compile(
    "|".join(
        (
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
    ),
    re.IGNORECASE,
)
# The last line of a traceback: "ValueError: ...", "requests.exceptions.HTTPError: ..." (its
# module path is not matched: the name after the last dot decides, and a path matched at
# each of its dots took time quadratic in the text).
_EXCEPTION_LINE = re.compile(r"\b[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Warning)\s*:")


def _probe(text: str, *, keep_lines: bool = False) -> str:
    """The text as the patterns see it: compatibility forms folded (fullwidth letters, odd
    colons), invisible characters removed, typographic quotes straight, spaces collapsed
    (within each line with keep_lines, so a role marker that starts a line is seen)."""
    text = unicodedata.normalize("NFKC", IGNORABLE.sub("", text)).translate(TYPOGRAPHIC_QUOTES)
    if keep_lines:
        return "\n".join(" ".join(line.split()) for line in text.splitlines() if line.strip())
    return " ".join(text.split())


def kind_of(text: str) -> Kind | None:
    """What must be quoted: an instruction (checked first: worse to follow), error text, or None."""
    probe = _probe(text)
    lines = _probe(text, keep_lines=True)
    if any(p.search(t) for p in (_INSTRUCTION, _INSTRUCTION_CAPS) for t in (probe, lines)):
        return "instruction"
    if _ERROR.search(probe) or _EXCEPTION_LINE.search(probe):
        return "error"
    return None
