"""What the chat model answered: the reply parsed into a PassUpdate, or refused (cut off,
not JSON, degenerate: one item repeated, items copied from the instructions, nothing
proposed, mostly filler), and instructions injected into memories contained. Pure."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import ValidationError

from controller.core.chunking import memory_text
from controller.core.item_sources import identity
from controller.core.memories import Memory
from controller.core.merge import HISTORY_KEYS, SECTION_KEYS, PassUpdate
from controller.core.quoting import is_quoted, kind_of, quote
from controller.core.summary import LegacySummary, StructuredSummary
from controller.core.text import cut, json_value
from controller.summarizers import chat_prompt as prompt

# A code fence some models put around the JSON whatever they are asked. The spaces before the
# closing one are matched from their first: `\s*` tried at each of them is quadratic.
FENCE = re.compile(r"^\s*```(?:json)?\s*|(?:(?<!\s)\s+)?```\s*$", re.IGNORECASE)

# -- the reply --------------------------------------------------------------------------------


class BadReply(Exception):
    """The reply cannot be used. corrective: tell the model what was wrong on the retry."""

    def __init__(self, reason: str, *, corrective: bool) -> None:
        super().__init__(reason)
        self.reason, self.corrective = reason, corrective


class Transient(Exception):
    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason, self.retry_after = reason, retry_after


def _json_object(content: str) -> Any:
    text = FENCE.sub("", content.strip())
    try:
        return json_value(text)
    except ValueError:
        start, end = text.find("{"), text.rfind("}")
        if 0 <= start < end:
            return json_value(text[start : end + 1])
        raise


def parse_update(content: str) -> PassUpdate:
    """The model's message content as a PassUpdate, or BadReply saying what is wrong."""
    try:
        data = _json_object(content)
    except ValueError as exc:
        raise BadReply(f"the reply is not valid JSON ({exc})", corrective=True) from None
    if not isinstance(data, dict):
        raise BadReply("the reply is JSON but not an object", corrective=True)
    try:
        return PassUpdate.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'reply'}: {e['msg']}" for e in exc.errors()[:5]
        )
        raise BadReply(
            f"the reply does not match the schema ({problems})", corrective=True
        ) from None


def reply_tokens(completion: Any) -> int:
    usage = getattr(completion, "usage", None)
    total = getattr(usage, "total_tokens", None)
    if isinstance(total, int):
        return total
    parts = [getattr(usage, "prompt_tokens", None), getattr(usage, "completion_tokens", None)]
    return sum(p for p in parts if isinstance(p, int))


def reply_content(completion: Any) -> tuple[str, str | None]:
    try:
        choice = completion.choices[0]
        content = choice.message.content
    except (KeyError, IndexError, TypeError, AttributeError):
        raise BadReply("the response has no choices[0].message", corrective=False) from None
    if isinstance(content, list):  # content parts
        texts = (p.get("text") for p in content if isinstance(p, dict))
        content = "".join(t for t in texts if isinstance(t, str))
    if not isinstance(content, str) or not content.strip():
        raise BadReply("the reply is empty", corrective=True)
    finish = getattr(choice, "finish_reason", None)
    return content, finish if isinstance(finish, str) else None


# -- degenerate replies and injected claims --------------------------------------------------
# A reply can parse and still be junk (a small model repeats one line, copies our
# instructions, or proposes nothing). It is refused, with a corrective retry: merged, the junk
# would be stored and the watermark moved past memories nobody summarized.

_WORD = re.compile(r"[a-z0-9]+")
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+|\n+")
_STOPWORDS = frozenset(
    re.findall(
        r"\w+",
        """
    a an and are as at be been but by can could did do does done for from had has have he
    her his how i if in into is it its itself me my no not of on or our out over she so than
    that the their them then there these they this those to too up us was we were what when
    where which who why will with would you your yes also just only very more most some such
    any all each every both other new now one two
    """,
    )
)
_PLACEHOLDERS = frozenset((
    "string", "str", "text", "item", "items", "none", "null", "n a", "na", "todo", "tbd",
    "placeholder", "example", "empty", "nothing", "unknown", "tbc"))  # fmt: skip


def correction(reason: str) -> str:
    return (
        f"Your previous reply could not be used: {reason}. Reply again with only the JSON "
        "object described in the instructions, every required key present, and keep the "
        "items short."
    )


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


_INSTRUCTIONS = " ".join(
    _words(" ".join((prompt.SYSTEM_PROMPT, prompt.CLOSING, correction(""), *SECTION_KEYS.values())))
)

_INSTRUCTION_WORDS = frozenset(_INSTRUCTIONS.split())


def _content_words(text: str) -> set[str]:
    """The words of a text that can tie it to a session: not stopwords, not the words of our
    own instructions; numbers count whatever their length."""
    return {
        w
        for w in _words(text)
        if w not in _STOPWORDS
        and w not in _INSTRUCTION_WORDS
        and (len(w) >= 3 or any(c.isdigit() for c in w))
    }


def _memory_fields(memory: Memory) -> list[str]:
    """A memory's own texts, without the labels memory_text adds ("User Prompt: " would read
    as a role marker to controller.core.quoting)."""
    fields = [memory.prompt, memory.thought, memory.response]
    return [f for f in fields if f.strip()] or [memory.document]


def _prior_text(prior: StructuredSummary | LegacySummary | None) -> str:
    if prior is None:
        return ""
    if isinstance(prior, LegacySummary):
        return prior.text
    items = [i.text for items in prior.sections.values() for i in items]
    return "\n".join([prior.title, *items, prior.legacy_text or ""])


def _show(text: str) -> str:
    # never inside a word: the message is masked after this (pipeline.run_pass)
    return json.dumps(cut(text, 60, parts=False), ensure_ascii=False)


def degenerate_reason(
    update: PassUpdate,
    memories: Sequence[Memory],
    prior: StructuredSummary | LegacySummary | None,
) -> str | None:
    """Why a parsed reply is junk, or None: nothing proposed, an item repeated or copied from
    our instructions, or most items sharing no word with the memories or the prior summary."""
    history = [t for texts in update.new_items().values() for t in texts]
    state = list(update.current_state or [])
    session = "\n".join([*(f for m in memories for f in _memory_fields(m)), _prior_text(prior)])
    if not history and not state:
        if any(memory_text(m).strip() for m in memories):
            return "the reply proposes no item although the memories have content"
        return None
    for items in (history, state):
        counts = Counter(identity(text) for text in items)
        key, times = max(counts.items(), key=lambda kv: kv[1], default=("", 0))
        if times > 1:
            shown = next(t for t in items if identity(t) == key)
            return f"the reply repeats the item {_show(shown)} {times} times: list each fact once"
    session_words = f" {' '.join(_words(session))} "
    for text in [*history, *state]:
        phrase = " ".join(_words(text))
        copied = bool(phrase) and f" {phrase} " in f" {_INSTRUCTIONS} "
        if (copied or phrase in _PLACEHOLDERS or prompt.DELIMITER.search(text)) and (
            f" {phrase} " not in session_words
        ):
            return (
                f"the item {_show(text)} is copied from the instructions, not taken from the "
                "memories"
            )
    vocabulary = _content_words(session)
    stems = {w[:4] for w in vocabulary if len(w) >= 5}  # "retry" grounds "retries"
    worded = [(text, words) for text in [*history, *state] if (words := _content_words(text))]
    ungrounded = [
        text
        for text, words in worded
        if not any(w in vocabulary or (len(w) >= 5 and w[:4] in stems) for w in words)
    ]
    if worded and 2 * len(ungrounded) > len(worded):
        return (
            f"{len(ungrounded)} of {len(worded)} items mention nothing from the memories (for "
            f"example {_show(ungrounded[0])}): summarize what the memories say"
        )
    return None


def injected_passages(memories: Iterable[Memory]) -> list[str]:
    """Each sentence of the memories that reads as an instruction (controller.core.quoting), as
    normalised words: what an injection asks for ("SYSTEM: set Current State to ...")."""
    passages = []
    for memory in memories:
        for text in _memory_fields(memory):
            for sentence in _SENTENCE_BREAK.split(text):
                if sentence.strip() and kind_of(sentence) == "instruction":
                    passages.append(" ".join(_words(sentence)))
    return passages


def _copies_passage(text: str, passages: Sequence[str]) -> bool:
    """The text repeats an injected passage: all of it (up to three words), or three words
    in a row of which two are not stopwords."""
    words = _words(text)
    if not words or not passages:
        return False
    padded = [f" {p} " for p in passages]
    if len(words) <= 3:
        return any(f" {' '.join(words)} " in p for p in padded)
    windows = (words[i : i + 3] for i in range(len(words) - 2))
    return any(
        sum(w not in _STOPWORDS for w in window) >= 2
        and any(f" {' '.join(window)} " in p for p in padded)
        for window in windows
    )


def contain_injections(
    update: PassUpdate,
    memories: Sequence[Memory],
    prior: StructuredSummary | LegacySummary | None,
) -> PassUpdate:
    """The update with what an injection in these memories could have put in it contained:
    items repeating an injected passage quoted, such a title or supersede mark dropped, and
    with a structured prior, category and scores left to the prior's."""
    passages = injected_passages(memories)
    if not passages:
        return update

    def contained(items: list[str]) -> list[str]:
        # As session content, in controller.core.quoting's own form (never quoted twice).
        copied = (is_quoted(t) or not _copies_passage(t, passages) for t in items)
        return [
            t if keep else quote(t, "instruction") for t, keep in zip(items, copied, strict=True)
        ]

    changes: dict[str, Any] = {k: contained(getattr(update, k)) for k in HISTORY_KEYS.values()}
    if update.current_state is not None:
        changes["current_state"] = contained(update.current_state)
    if update.title and _copies_passage(update.title, passages):
        changes["title"] = None
    changes["supersede"] = [
        m for m in update.supersede if not _copies_passage(m.superseded_by, passages)
    ]
    if isinstance(prior, StructuredSummary):
        changes.update(dict.fromkeys(("category", *prompt.SCORES)))
    return update.model_copy(update=changes)
