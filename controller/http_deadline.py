"""Each HTTP answer read within its request's timeout in all (httpx bounds each read alone: a
server sending a byte at a time would hold a pass) and up to a size, counted as inflated (an
answer compressed though asked plain is inflated here, a piece at a time)."""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from types import MappingProxyType, ModuleType
from typing import Any


class AnswerTooLarge(Exception):
    """An answer longer than its client reads (deadline_hooks' max_bytes), or whose length
    it cannot bound: compressed in a coding not inflated here."""


# The codings inflated here, as zlib reads them, and how many layers of them (as httpx).
_WBITS = MappingProxyType({"gzip": zlib.MAX_WBITS | 16, "deflate": zlib.MAX_WBITS})
_MAX_CODINGS = 5


def _inflated(chunks: Iterable[bytes], wbits: int) -> Iterator[bytes]:
    inflate = zlib.decompressobj(wbits)
    for n, chunk in enumerate(chunks):
        try:
            piece = inflate.decompress(chunk, 2**16)
        except zlib.error:
            if n or wbits != _WBITS["deflate"]:
                raise
            # "deflate" sent raw, without its zlib header: read as httpx reads it.
            inflate = zlib.decompressobj(-zlib.MAX_WBITS)
            piece = inflate.decompress(chunk, 2**16)
        while piece:
            yield piece
            piece = inflate.decompress(inflate.unconsumed_tail, 2**16)
    yield inflate.flush()


def deadline_hooks(
    timeout_seconds: float, http: ModuleType, max_bytes: float = math.inf
) -> dict[str, list[Callable[..., Any]]]:
    """The event hooks of an `http` (httpx or httpx2) client: its ReadTimeout once an answer
    is not whole timeout_seconds after sending, AnswerTooLarge past max_bytes of it."""

    class Deadline(http.SyncByteStream):  # type: ignore[name-defined]
        def __init__(self, response: Any) -> None:
            self._stream, self._request = response.stream, response.request
            self._deadline = self._request.extensions["deadline"]
            # Every coding listed inflated here or refused (the header gone, httpx inflates
            # none, whole): one left to httpx, or dropped unread, is unbounded or garbage.
            codings = response.headers.get_list("content-encoding", split_commas=True)
            self._codings = [c.strip().lower() for c in codings if max_bytes < math.inf]
            self._codings = [c for c in self._codings if c not in ("", "identity")]
            if self._codings:
                del response.headers["content-encoding"]

        def __iter__(self) -> Iterator[bytes]:
            if len(self._codings) > _MAX_CODINGS or not set(self._codings) <= set(_WBITS):
                raise AnswerTooLarge(
                    f"answer compressed as {', '.join(self._codings)!r} though asked"
                    f" uncompressed: only up to {_MAX_CODINGS} of gzip, deflate are read"
                )
            chunks: Iterable[bytes] = self._stream
            for coding in reversed(self._codings):  # in the order they were applied
                chunks = _inflated(chunks, _WBITS[coding])
            read = 0
            try:
                for chunk in chunks:
                    if time.monotonic() > self._deadline:
                        raise http.ReadTimeout("answer not whole in time", request=self._request)
                    read += len(chunk)
                    if read > max_bytes:
                        raise AnswerTooLarge(f"answer larger than {max_bytes / 2**20:g} MiB")
                    yield chunk
            except zlib.error as exc:
                raise http.DecodingError(str(exc), request=self._request) from None

        def close(self) -> None:
            self._stream.close()

    def start(request: Any) -> None:
        request.extensions["deadline"] = time.monotonic() + timeout_seconds

    def bound(response: Any) -> None:  # after start: a client runs both on every request
        response.stream = Deadline(response)

    return {"request": [start], "response": [bound]}
