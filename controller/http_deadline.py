"""Each HTTP answer read within the timeout of its request, in all, and up to a size. httpx's
timeout (and httpx2's, the openai SDK's) bounds each read alone, so a server sending its
answer a byte at a time would hold a pass and its session claim for as long as it kept
sending; and it reads an answer whole, so a server flooding it would fill the memory."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any


class AnswerTooLarge(Exception):
    """An answer longer than its client reads (deadline_hooks' max_bytes)."""


def deadline_hooks(
    timeout_seconds: float, http: ModuleType, max_bytes: float = math.inf
) -> dict[str, list[Callable[..., Any]]]:
    """The event hooks of an `http` (httpx or httpx2) client that raise its ReadTimeout once
    an answer is not whole timeout_seconds after its request was sent, and AnswerTooLarge
    once more than max_bytes of it have come."""

    class Deadline(http.SyncByteStream):  # type: ignore[name-defined]
        def __init__(self, stream: Any, deadline: float, request: Any) -> None:
            self._stream, self._deadline, self._request = stream, deadline, request

        def __iter__(self) -> Iterator[bytes]:
            read = 0
            for chunk in self._stream:
                if time.monotonic() > self._deadline:
                    raise http.ReadTimeout("answer not whole in time", request=self._request)
                read += len(chunk)
                if read > max_bytes:
                    raise AnswerTooLarge(f"answer larger than {max_bytes / 2**20:g} MiB")
                yield chunk

        def close(self) -> None:
            self._stream.close()

    def start(request: Any) -> None:
        request.extensions["deadline"] = time.monotonic() + timeout_seconds

    def bound(response: Any) -> None:
        deadline = response.request.extensions.get("deadline")
        if deadline is not None and isinstance(response.stream, http.SyncByteStream):
            response.stream = Deadline(response.stream, deadline, response.request)

    return {"request": [start], "response": [bound]}
