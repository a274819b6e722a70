"""Embeddings from any OpenAI-compatible ``POST {base_url}/embeddings`` endpoint."""

from __future__ import annotations

import time
from typing import Any

import httpx
import numpy as np

from controller.embeddings.minilm import Documents, EmbeddingError, Embeddings


class OpenAICompatibleEmbedding:
    """``POST {base_url}/embeddings`` with retries on 5xx, 429 and transport errors.

    The API key is sent as a bearer token and kept out of repr and error messages: those
    end up in logs and on the CR.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout_seconds: float = 30.0,
        retries: int = 2,
        backoff_seconds: float = 0.5,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._api_key = api_key
        self.timeout_seconds = timeout_seconds
        self.retries = retries
        self.backoff_seconds = backoff_seconds

    @property
    def url(self) -> str:
        return f"{self.base_url}/embeddings"

    def __call__(self, input: Documents) -> Embeddings:
        if not input:
            return []
        payload = self._post({"model": self.model, "input": list(input)})
        return self._parse(payload, expected=len(input))

    def _post(self, body: dict[str, Any]) -> Any:
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        failure = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff_seconds * 2 ** (attempt - 1))
            try:
                response = httpx.post(
                    self.url, json=body, headers=headers, timeout=self.timeout_seconds
                )
            except httpx.TransportError as exc:
                failure = f"{type(exc).__name__} calling {self.url}"
                continue
            if response.status_code >= 500 or response.status_code == 429:
                failure = f"HTTP {response.status_code} from {self.url}"
                continue
            if response.status_code >= 400:
                raise EmbeddingError(f"HTTP {response.status_code} from {self.url}")
            try:
                return response.json()
            except ValueError:
                raise EmbeddingError(f"invalid JSON from {self.url}") from None
        raise EmbeddingError(f"{failure} (after {self.retries + 1} attempts)")

    def _parse(self, payload: Any, expected: int) -> Embeddings:
        try:
            items = sorted(payload["data"], key=lambda item: item["index"])
            vectors: Embeddings = [
                np.asarray(item["embedding"], dtype=np.float32) for item in items
            ]
        except (KeyError, TypeError, ValueError):
            raise EmbeddingError(f"unexpected response shape from {self.url}") from None
        if len(vectors) != expected:
            raise EmbeddingError(
                f"{self.url} returned {len(vectors)} embeddings for {expected} inputs"
            )
        return vectors

    def __repr__(self) -> str:
        return f"OpenAICompatibleEmbedding(url={self.url!r}, model={self.model!r})"
