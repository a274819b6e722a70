"""The model-backed summarizer: any OpenAI-compatible ``/v1/chat/completions`` endpoint
(docs/models.md). The model only *proposes* a PassUpdate, which controller.core.merge applies.
The SDK's own retries and redirects are off: the retry loop here changes the request (next
response_format mode, a correction after a bad reply), counts every attempt's tokens and caps
Retry-After. The API key appears in no repr, log line or error message."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from openai import APIConnectionError, APIStatusError, APITimeoutError, omit

from controller.core.destinations import redirect_refusal
from controller.core.memories import Memory, memory_sort_key
from controller.core.merge import SECTION_KEYS, PassUpdate
from controller.core.summary import HISTORY_SECTIONS, PriorSummary, StructuredSummary
from controller.core.text import cut, one_line
from controller.embeddings.remote import openai_client
from controller.http_deadline import AnswerTooLarge
from controller.summarizers import chat_prompt as prompt
from controller.summarizers import chat_reply as reply
from controller.summarizers.chat_prompt import ChatModelConfig, InvalidModelOutput, ModelUnavailable
from controller.summarizers.chat_reply import BadReply, Transient
from controller.summarizers.contract import Proposal

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam

log = logging.getLogger(__name__)


class ChatModelSummarizer:
    """A Summarizer backed by a chat-completions endpoint. Thread-safe: the runtime keeps one
    per SessionSummarizer and closes it when that changes or is deleted."""

    max_memories_per_pass = prompt.MAX_MEMORIES_PER_PASS
    one_memory_per_item = False  # an item may blend several memories

    def __init__(self, config: ChatModelConfig) -> None:
        self.config = config
        # max_retries 0: the loop in propose retries, see the module docstring.
        self._client, self._headers = openai_client(
            config.base_url, config.api_key, config.timeout_seconds, 0
        )
        # spec.model.maxConcurrency: requests in flight at once from this summarizer.
        self._semaphore = threading.BoundedSemaphore(max(1, config.max_concurrency))
        self._lock = threading.Lock()
        self._format = 0  # index into RESPONSE_FORMATS: the mode requests use now
        self._format_confirmed = False  # the endpoint has answered 200 to that mode
        self._max_tokens_key = "max_tokens"

    def close(self) -> None:
        self._client.close()

    @property
    def response_format(self) -> prompt.ResponseFormat:
        return prompt.RESPONSE_FORMATS[self._format]

    @property
    def memory_budget_tokens(self) -> int:
        return self.config.memory_budget_tokens

    def propose(
        self, session_id: str, memories: Sequence[Memory], prior: PriorSummary | None
    ) -> Proposal:
        """One pass over a chunk the pipeline bounded by memory_budget_tokens."""
        memories = sorted(memories, key=memory_sort_key)
        if not memories:
            return Proposal(PassUpdate.model_validate(dict.fromkeys(SECTION_KEYS)))  # all empty
        config = self.config
        request = messages = prompt.build_messages(prior, memories, config)
        tokens = 0
        prior_items = 0  # the prior's history items, which the reply may mark superseded
        if isinstance(prior, StructuredSummary):
            prior_items = sum(len(prior.sections.get(title, [])) for title in HISTORY_SECTIONS)
        failure: BadReply | Transient | None = None
        attempts = config.max_retries + 1
        for attempt in range(attempts):
            if attempt:
                wait = config.backoff_seconds * 2 ** (attempt - 1)
                if isinstance(failure, Transient) and failure.retry_after is not None:
                    wait = max(wait, failure.retry_after)
                time.sleep(min(wait, config.max_backoff_seconds))
            content = ""
            try:
                payload = self._complete(messages, len(memories), prior_items)
                tokens += reply.reply_tokens(payload)
                content, finish = reply.reply_content(payload)
                return Proposal(self._update(content, finish, memories, prior), tokens)
            except Transient as exc:
                failure = exc
            except BadReply as exc:
                failure = exc
                if exc.corrective:
                    echo = content[: prompt.BAD_REPLY_ECHO_CHARS]
                    messages = [
                        *request,
                        {"role": "assistant", "content": echo},
                        {"role": "user", "content": reply.correction(exc.reason)},
                    ]
            log.warning(
                "session %s: model pass attempt %d/%d failed: %s",
                session_id,
                attempt + 1,
                attempts,
                config.redaction.text(failure.reason),
            )
        assert failure is not None
        plural = "s" if attempts != 1 else ""
        message = f"{config.url}: {failure.reason} (after {attempts} attempt{plural})"
        if isinstance(failure, BadReply):
            raise InvalidModelOutput(f"model output invalid: {message}", tokens_used=tokens)
        raise ModelUnavailable(f"model unavailable: {message}", tokens_used=tokens)

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
            raise BadReply("the endpoint withheld the reply (content_filter)", corrective=False)
        update = reply.parse_update(content)
        if not update.current_state:  # no state is not news: the last known one stays
            update = update.model_copy(update={"current_state": None})
        problem = reply.degenerate_reason(update, memories, prior)
        if problem is not None:
            raise BadReply(problem, corrective=True)
        update = reply.contain_injections(update, memories, prior)
        nothing_before = prior is None or (
            isinstance(prior, StructuredSummary) and prior.is_empty()
        )
        if update.is_empty() and nothing_before:  # the merge would have nothing to store
            raise BadReply("the reply has no items in any section", corrective=True)
        return update

    def _complete(self, messages: list[dict[str, str]], memory_count: int, prior_items: int) -> Any:
        """One completion, decoded; Transient, BadReply or ModelUnavailable (no retry helps).
        A request option the endpoint refuses by name (a response_format mode, max_tokens) is
        replaced and sent again at once; a 500/501 to a response_format mode the endpoint never
        accepted moves to the next mode for the retry."""
        config = self.config
        for _ in range(len(prompt.RESPONSE_FORMATS) + 2):  # each pass of the loop changes an option
            mode = self.response_format
            requested = prompt.response_format(mode, memory_count, prior_items)
            with self._semaphore:
                try:
                    completion = self._client.chat.completions.create(
                        model=config.model,
                        messages=cast("list[ChatCompletionMessageParam]", messages),
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
                    raise BadReply(
                        "the response body is not complete JSON", corrective=False
                    ) from None
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
                    retry_after: float | None = min(
                        float(error.response.headers["retry-after"]),
                        prompt.RETRY_AFTER_MAX_SECONDS,
                    )
                except (KeyError, ValueError):
                    retry_after = None
                raise Transient(f"HTTP {status}", retry_after)
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
            self._format += 1
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
