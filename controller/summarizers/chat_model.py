"""The summarizer of any OpenAI-compatible ``/v1/chat/completions`` endpoint (docs/models.md).
The SDK's retries and redirects are off: the loop in propose changes the request (next
response_format mode, a correction after a bad reply), counts every attempt's tokens and caps
Retry-After. The API key appears in no repr, log line or error message."""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, cast

from openai import APIConnectionError, APIStatusError, APITimeoutError, omit
from pydantic import ValidationError

from controller import metrics
from controller.core.chunking import memory_text
from controller.core.destinations import redirect_refusal
from controller.core.item_sources import identity
from controller.core.memories import Memory, memory_sort_key
from controller.core.merge import HISTORY_KEYS, SECTION_KEYS, PassUpdate
from controller.core.quoting import is_quoted, kind_of, quote
from controller.core.summary import HISTORY_SECTIONS, SCORES, PriorSummary, StructuredSummary
from controller.core.text import cut, json_value, one_line
from controller.embeddings.remote import openai_client
from controller.http_deadline import AnswerTooLarge
from controller.summarizers import chat_prompt as prompt
from controller.summarizers.chat_prompt import ChatModelConfig, InvalidModelOutput, ModelUnavailable
from controller.summarizers.contract import Proposal

log = logging.getLogger(__name__)

# A code fence some models put around the JSON whatever they are asked. The spaces before the
# closing one are matched from their first: `\s*` tried at each of them is quadratic.
FENCE = re.compile(r"^\s*```(?:json)?\s*|(?:(?<!\s)\s+)?```\s*$", re.IGNORECASE)


class Transient(Exception):
    """An attempt failed; a retry may succeed. retry_after: the wait the endpoint asked for.
    corrective: tell the model what was wrong on the retry."""

    def __init__(self, reason: str, retry_after: float = 0, *, corrective: bool = False) -> None:
        super().__init__(reason)
        self.reason, self.retry_after, self.corrective = reason, retry_after, corrective


class BadReply(Transient):
    """The reply cannot be used: the model's output is invalid, not the endpoint unavailable."""


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
    if not isinstance(total, int):
        parts = [getattr(usage, "prompt_tokens", None), getattr(usage, "completion_tokens", None)]
        total = sum(p for p in parts if isinstance(p, int))
    return max(total, 0)


def reply_content(completion: Any) -> tuple[str, str | None]:
    try:
        choice = completion.choices[0]
        content = choice.message.content
    except (KeyError, IndexError, TypeError, AttributeError):
        raise BadReply("the response has no choices[0].message") from None
    if isinstance(content, list):  # content parts
        texts = (p.get("text") for p in content if isinstance(p, dict))
        content = "".join(t for t in texts if isinstance(t, str))
    if not isinstance(content, str) or not content.strip():
        raise BadReply("the reply is empty", corrective=True)
    finish = getattr(choice, "finish_reason", None)
    return content, finish if isinstance(finish, str) else None


# A reply can parse and still be junk (a small model repeats one line, copies our
# instructions, or proposes nothing). It is refused, with a corrective retry: merged, the junk
# would be stored and the watermark moved past memories nobody summarized.

_WORD = re.compile(r"[a-z0-9]+")
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+|\n+")
_STOPWORDS = frozenset(
    _WORD.findall("""
    a an and are as at be been but by can could did do does done for from had has have he
    her his how i if in into is it its itself me my no not of on or our out over she so than
    that the their them then there these they this those to too up us was we were what when
    where which who why will with would you your yes also just only very more most some such
    any all each every both other new now one two
    """)
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


def _prior_text(prior: PriorSummary | None) -> str:
    if not isinstance(prior, StructuredSummary):
        return "" if prior is None else prior.text
    items = [i.text for items in prior.sections.values() for i in items]
    return "\n".join([prior.title, *items, prior.legacy_text or ""])


def _show(text: str) -> str:
    # never inside a word: the message is masked after this (pipeline.run_pass)
    return json.dumps(cut(text, 60, parts=False), ensure_ascii=False)


def degenerate_reason(
    update: PassUpdate, memories: Sequence[Memory], prior: PriorSummary | None
) -> str | None:
    """Why a parsed reply is junk, or None: nothing proposed, an item repeated or copied from
    our instructions, or most items sharing no word with the memories or the prior summary."""
    history = [t for texts in update.new_items().values() for t in texts]
    state = list(update.current_state or [])
    session = "\n".join([*(f for m in memories for f in _memory_fields(m)), _prior_text(prior)])
    if not history and not state:  # the merge would have nothing to store, or lose the text
        if any(memory_text(m).strip() for m in memories):
            return "the reply proposes no item although the memories have content"
        if prior is None or (isinstance(prior, StructuredSummary) and prior.is_empty()):
            return "the reply has no items in any section"
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
    return [
        " ".join(_words(sentence))
        for memory in memories
        for text in _memory_fields(memory)
        for sentence in _SENTENCE_BREAK.split(text)
        if sentence.strip() and kind_of(sentence) == "instruction"
    ]


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
    update: PassUpdate, memories: Sequence[Memory], prior: PriorSummary | None
) -> PassUpdate:
    """The update with what an injection in these memories could have put in it contained:
    items repeating an injected passage quoted, such a title or supersede mark dropped, and
    with a structured prior, category and scores left to the prior's."""
    passages = injected_passages(memories)
    if not passages:
        return update

    def contained(items: list[str]) -> list[str]:
        # As session content, in controller.core.quoting's own form (never quoted twice).
        return [
            t if is_quoted(t) or not _copies_passage(t, passages) else quote(t, "instruction")
            for t in items
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
        changes.update(dict.fromkeys(("category", *SCORES)))
    return update.model_copy(update=changes)


class ChatModelSummarizer:
    """A Summarizer backed by a chat-completions endpoint. Thread-safe: the runtime keeps one
    per SessionSummarizer and closes it when that changes or is deleted."""

    max_memories_per_pass = prompt.MAX_MEMORIES_PER_PASS
    one_memory_per_item = False  # an item may blend several memories

    def __init__(self, config: ChatModelConfig) -> None:
        self.config = config
        self.memory_budget_tokens = config.memory_budget_tokens
        self._client, self._headers = openai_client(
            config.base_url, config.api_key, config.timeout_seconds, 0
        )
        # spec.model.maxConcurrency: requests in flight at once from this summarizer.
        self._semaphore = threading.BoundedSemaphore(max(1, config.max_concurrency))
        self._lock = threading.Lock()
        self.response_format = prompt.RESPONSE_FORMATS[0]  # the mode requests use now
        self._format_confirmed = False  # the endpoint has answered 200 to that mode
        self._max_tokens_key = "max_tokens"

    def close(self) -> None:
        self._client.close()

    def propose(
        self, session_id: str, memories: Sequence[Memory], prior: PriorSummary | None
    ) -> Proposal:
        memories = sorted(memories, key=memory_sort_key)
        if not memories:
            return Proposal(PassUpdate.model_validate(dict.fromkeys(SECTION_KEYS)))  # all empty
        config = self.config
        request = messages = prompt.build_messages(prior, memories, config)
        tokens = 0
        prior_items = 0  # the prior's history items, which the reply may mark superseded
        if isinstance(prior, StructuredSummary):
            prior_items = sum(len(prior.sections.get(title, [])) for title in HISTORY_SECTIONS)
        failure = Transient("no attempt was made")
        attempts = config.max_retries + 1
        for attempt in range(attempts):
            if attempt:
                wait = max(config.backoff_seconds * 2 ** (attempt - 1), failure.retry_after)
                time.sleep(min(wait, config.max_backoff_seconds))
            content = ""
            try:
                payload = self._complete(messages, len(memories), prior_items)
                used = reply_tokens(payload)
                metrics.MODEL_TOKENS.inc(used)  # where spent, whatever the pass then does
                tokens += used
                content, finish = reply_content(payload)
                return Proposal(self._update(content, finish, memories, prior), tokens)
            except Transient as exc:  # a BadReply too
                failure = exc
                if exc.corrective:
                    echo = content[: prompt.BAD_REPLY_ECHO_CHARS]
                    messages = [
                        *request,
                        {"role": "assistant", "content": echo},
                        {"role": "user", "content": correction(exc.reason)},
                    ]
            log.warning(
                "session %s: model pass attempt %d/%d failed: %s",
                session_id,
                attempt + 1,
                attempts,
                config.redaction.text(failure.reason),
            )
        plural = "s" if attempts != 1 else ""
        message = f"{config.url}: {failure.reason} (after {attempts} attempt{plural})"
        if isinstance(failure, BadReply):
            raise InvalidModelOutput(f"model output invalid: {message}")
        raise ModelUnavailable(f"model unavailable: {message}")

    def _update(
        self,
        content: str,
        finish: str | None,
        memories: Sequence[Memory],
        prior: PriorSummary | None,
    ) -> PassUpdate:
        """The update one reply proposes, or BadReply saying why the reply is not used."""
        if finish == "length":  # whatever parses of a cut-off reply is not the whole answer
            raise BadReply(
                "the reply was cut off at the output token limit "
                f"(max_tokens {self.config.max_output_tokens}): propose fewer, shorter items",
                corrective=True,
            )
        if finish == "content_filter":
            raise BadReply("the endpoint withheld the reply (content_filter)")
        update = parse_update(content)
        if not update.current_state:  # no state is not news: the last known one stays
            update = update.model_copy(update={"current_state": None})
        problem = degenerate_reason(update, memories, prior)
        if problem is not None:
            raise BadReply(problem, corrective=True)
        return contain_injections(update, memories, prior)

    def _complete(self, messages: list[dict[str, str]], memory_count: int, prior_items: int) -> Any:
        """One completion; Transient, BadReply or ModelUnavailable (no retry helps). An option
        the endpoint refuses by name (a response_format mode, max_tokens) is replaced and sent
        again at once; a 500/501 to a mode never accepted moves to the next one for the retry."""
        config = self.config
        for _ in range(len(prompt.RESPONSE_FORMATS) + 2):  # each pass of the loop changes an option
            mode = self.response_format
            requested = prompt.response_format(mode, memory_count, prior_items)
            with self._semaphore:
                try:
                    completion = self._client.chat.completions.create(
                        model=config.model,
                        messages=cast(Any, messages),
                        temperature=0,
                        response_format=cast(Any, requested) if requested is not None else omit,
                        extra_headers=self._headers,
                        # max_tokens, or the name an endpoint asked for instead (below)
                        extra_body={self._max_tokens_key: config.max_output_tokens},
                    )
                except APITimeoutError:
                    raise Transient(f"timed out after {config.timeout_seconds:g}s") from None
                except APIConnectionError as exc:
                    cause = type(exc.__cause__).__name__ if exc.__cause__ else "error"
                    raise Transient(f"{cause} connecting") from None
                except APIStatusError as exc:
                    error = exc
                except ValueError:  # a 200 whose body does not decode
                    raise BadReply("the response body is not complete JSON") from None
                except AnswerTooLarge as exc:
                    raise ModelUnavailable(f"model unavailable: {config.url}: {exc}") from None
                else:
                    self._format_confirmed = True
                    # Built without validation: any field may be missing or hold anything.
                    return completion
            status = error.status_code
            if error.response.is_redirect:
                where = error.response.headers.get("location")
                raise ModelUnavailable(redirect_refusal(str(error.request.url), status, where))
            detail = self._error_detail(error.body)
            if status in prompt.FORMAT_REFUSAL_STATUS:
                if self._max_tokens_key == "max_tokens" and "max_completion_tokens" in detail:
                    self._max_tokens_key = "max_completion_tokens"  # OpenAI's newer models
                    continue
                if mode != "none" and prompt.FORMAT_REFUSAL.search(detail):
                    self._next_format(mode, f"HTTP {status}{detail}")
                    continue
            if status >= 500 or status in prompt.TRANSIENT_STATUS:
                if status in prompt.FORMAT_FAILURE_STATUS and mode != "none":
                    self._next_format(mode, f"HTTP {status}{detail}", unless_confirmed=True)
                try:
                    retry_after = float(error.response.headers["retry-after"])
                except (KeyError, ValueError):
                    retry_after = 0
                raise Transient(f"HTTP {status}", min(retry_after, prompt.RETRY_AFTER_MAX_SECONDS))
            hint = " (check model.apiKeySecretRef)" if status in (401, 403) else ""
            raise ModelUnavailable(f"model unavailable: {config.url}: HTTP {status}{hint}{detail}")
        raise ModelUnavailable(f"model unavailable: {config.url}: refuses every request format")

    def _next_format(
        self, mode: prompt.ResponseFormat, why: str, *, unless_confirmed: bool = False
    ) -> None:
        """From now on, ask for the next response_format mode (once per mode refused)."""
        with self._lock:
            if self.response_format != mode or (unless_confirmed and self._format_confirmed):
                return  # another thread moved on already, or the mode has worked here
            self.response_format = prompt.RESPONSE_FORMATS[prompt.RESPONSE_FORMATS.index(mode) + 1]
            self._format_confirmed = False
        log.warning(
            "%s refused response_format %s (%s); asking for %s from now on",
            self.config.url,
            mode,
            why,
            self.response_format,
        )

    def _error_detail(self, body: object) -> str:
        """The endpoint's error message from the SDK's error body, short, API key redacted
        and masked (it is shown in a condition, an Event and a log line)."""
        text = str((body.get("message") if isinstance(body, dict) else body) or "")
        if self.config.api_key:  # before the cut, which would keep a part of it
            text = text.replace(self.config.api_key, "***")
        text = cut(text, 2000, "", parts=False)  # masked in bounded time, no part of a word
        text = one_line(self.config.redaction.text(text), 200)
        return f": {text}" if text else ""
