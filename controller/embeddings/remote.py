"""Embeddings from any OpenAI-compatible ``POST {base_url}/embeddings`` endpoint."""

from __future__ import annotations

from typing import Any

import httpx2
import numpy as np
from openai import APIConnectionError, APIStatusError, DefaultHttpxClient, OpenAI, omit

from controller.core.destinations import redirect_refusal
from controller.core.text import json_value, one_line
from controller.embeddings.minilm import EmbeddingError, Embeddings
from controller.http_deadline import AnswerTooLarge, deadline_hooks

# Far more than any answer the model clients ask for (2048 output tokens; one vector).
MAX_ANSWER_BYTES = 16 * 2**20


class OpenAICompatibleEmbedding:
    """``POST {base_url}/embeddings`` through the ``openai`` SDK (its pooling, and retries of
    timeouts, 408, 409, 429 and 5xx); redirects are errors. The API key is kept out of repr
    and error messages (they reach logs and the CR)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout_seconds: float = 30.0,
        retries: int = 2,
    ) -> None:
        base_url = base_url.rstrip("/")
        self.url = f"{base_url}/embeddings"
        self.model = model
        self._client, self._headers = openai_client(base_url, api_key, timeout_seconds, retries)

    def close(self) -> None:
        self._client.close()

    def __call__(self, input: list[str]) -> Embeddings:
        if not input:
            return []
        try:
            # Raw answer: the SDK's model object per float cost most of the CPU at 4096-d.
            response = self._client.embeddings.with_raw_response.create(
                model=self.model,
                input=list(input),
                encoding_format="float",  # what every compatible server speaks
                extra_headers=self._headers,
            )
        except (APIStatusError, APIConnectionError) as exc:  # timeouts included
            # The SDK numbers each attempt's request; a client without the header made one.
            retries = int(exc.request.headers.get("x-stainless-retry-count", "0"))
            tried = f" (after {retries + 1} attempts)" if retries else ""
            if isinstance(exc, APIConnectionError):
                cause = type(exc.__cause__).__name__ if exc.__cause__ else "connection error"
                raise EmbeddingError(f"{cause} calling {self.url}{tried}") from None
            if exc.response.is_redirect:
                where = exc.response.headers.get("location")
                raise EmbeddingError(redirect_refusal(self.url, exc.status_code, where)) from None
            hint = " (check embedding.apiKeySecretRef)" if exc.status_code in (401, 403) else ""
            raise EmbeddingError(f"HTTP {exc.status_code} from {self.url}{hint}{tried}") from None
        except AnswerTooLarge as exc:
            raise EmbeddingError(f"{exc} from {self.url}") from None
        except ValueError as exc:  # e.g. a host name IDNA refuses
            raise EmbeddingError(f"invalid URL {self.url}: {one_line(exc, 200)}") from None
        try:
            body = json_value(response.content)
        except ValueError:  # a 200 whose body does not decode
            raise EmbeddingError(f"invalid JSON from {self.url}") from None
        try:  # check what the vectors are (past float32's range is infinity, refused below)
            items = sorted(body["data"], key=lambda item: int(item.get("index", 0)))
            with np.errstate(over="ignore"):
                vectors: Embeddings = [np.asarray(i["embedding"], dtype=np.float32) for i in items]
            if any(v.ndim != 1 or not v.size for v in vectors):
                raise ValueError("not a vector")
        except (AttributeError, KeyError, TypeError, ValueError):
            raise EmbeddingError(f"unexpected response shape from {self.url}") from None
        if not all(np.isfinite(v).all() for v in vectors):  # a store cannot hold them
            raise EmbeddingError(f"{self.url} returned a vector holding NaN or infinity")
        if len(vectors) != len(input):
            raise EmbeddingError(
                f"{self.url} returned {len(vectors)} embeddings for {len(input)} inputs"
            )
        return vectors


def openai_client(
    base_url: str,
    api_key: str | None,
    timeout_seconds: float,
    retries: int,
) -> tuple[OpenAI, dict[str, Any]]:
    """The SDK's client of both model clients, and the headers each request sends (without a
    key: the SDK's required placeholder, never sent). It follows no redirect and reads each
    answer, asked uncompressed, within timeout_seconds and MAX_ANSWER_BYTES (http_deadline)."""
    hooks = deadline_hooks(timeout_seconds, httpx2, MAX_ANSWER_BYTES)
    http_client = DefaultHttpxClient(follow_redirects=False, event_hooks=hooks)
    http_client.headers["Accept-Encoding"] = "identity"
    client = OpenAI(
        base_url=base_url,
        api_key=api_key or "no-api-key",
        timeout=timeout_seconds,
        max_retries=retries,
        http_client=http_client,
    )
    return client, {} if api_key else {"Authorization": omit}
