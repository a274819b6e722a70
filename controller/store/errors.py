"""Chroma failures as one actionable line and an exception: StoreUnavailable (retry),
InvalidStoreConfig (fix the spec), CollectionNotFound, EmbeddingMismatch."""

from __future__ import annotations

import contextlib
import difflib
import json
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Literal, TypeVar

import httpx
from chromadb.errors import ChromaError, InvalidArgumentError, NotFoundError

from controller.core.destinations import redirect_refusal
from controller.core.text import cut, json_value

T = TypeVar("T")
E = TypeVar("E", bound=BaseException)
CollectionRole = Literal["memory", "summary", "ledger"]


class StoreUnavailable(RuntimeError):
    """Chroma could not be reached or answered with a server error. Nothing was written."""


class EmbeddingMismatch(RuntimeError):
    """Our embeddings would not match the ones the summary collection already holds."""


class InvalidStoreConfig(ValueError):
    """A store configuration that can never work (a refused name, a bad URL, no database)."""


class CollectionNotFound(RuntimeError):
    """A configured collection does not exist: reads never create it (a typo stays a typo)."""

    SHOWN = 10  # existing collection names listed in the message

    def __init__(
        self, name: str, role: CollectionRole, where: str, existing: Sequence[str] | None = None
    ) -> None:
        self.collection, self.role = name, role
        text = f"{role} collection {name!r} does not exist in Chroma at {where}"
        if existing is not None:
            if close := difflib.get_close_matches(name, existing, n=1, cutoff=0.75):
                text += f"; did you mean {close[0]!r}?"
            if existing:
                more = len(existing) - self.SHOWN
                text += f"; existing collections: {', '.join(sorted(existing)[: self.SHOWN])}"
                text += f" (and {more} more)" if more > 0 else ""
            else:
                text += "; the database has no collections"
        super().__init__(text)


DIMENSION_ERROR = re.compile(r"expecting embedding with dimension of (\d+), got (\d+)")
_NAME_ERROR = re.compile(r"Validation error: name|Expected a name")
UNREACHABLE = (httpx.TransportError, ConnectionError, TimeoutError)  # no answer at all


def mismatch(collection: str, existing: int, produced: int) -> EmbeddingMismatch:
    return EmbeddingMismatch(
        f"summary collection {collection!r} holds {existing}-d embeddings but the "
        f"configured embedding model produces {produced}-d; configure spec.embedding to "
        "the model the collection uses"
    )


MESSAGE_LIMIT = 240
_HTML = re.compile(r"<!doctype\s+html|<html[\s>]|<head[\s>]|<body[\s>]|<title[\s>]", re.I)
_NOT_CHROMA = "not Chroma's API: is the URL a Chroma server?"


def _chain(exc: BaseException | None) -> Iterator[BaseException]:
    """exc and the exceptions it was raised from or during, outermost first, once each."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen and len(seen) < 32:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)


def caused_by(exc: BaseException, *kinds: type[E]) -> E | None:
    """The first exception of these kinds among exc and its causes, else None."""
    return next((e for e in _chain(exc) if isinstance(e, kinds)), None)


def _clip(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """On one line, cut between words: it is masked after (a token's start is none)."""
    return cut(" ".join(text.split()), limit, parts=False)


def _body_kind(body: str, content_type: str = "", *, quote: bool = True) -> str:
    """What a non-Chroma answer held, said in a few words instead of pasted."""
    if not body.strip():
        return "an empty body"
    if "html" in content_type.lower() or _HTML.search(body):
        return "an HTML page"
    lines = body.strip().splitlines()
    if len(lines) > 1 or len(body) > 120 or not quote:
        return f"a {len(body)}-character, {len(lines)}-line body"
    return f"the body {_clip(body, 120)!r}"


def _http_answer(exc: BaseException) -> str | None:
    """A non-Chroma HTTP answer (a proxy's page): chromadb raises Exception from httpx's."""
    status_error = caused_by(exc, httpx.HTTPStatusError)
    if status_error is None:
        return None
    try:
        response, request = status_error.response, status_error.request
        token = (request.headers.get("authorization", "").split() or [""])[-1]
        # A server may echo the token it was sent (or refuses): never shown.
        body = response.text.replace(token, "***") if token else response.text
        status = response.status_code
        origin = f"{request.url.scheme}://{request.url.netloc.decode(errors='replace')}"
        target = f"{request.method} {request.url.path}"
        content_type = response.headers.get("content-type", "")
    except Exception:  # a response without a request, an undecodable body
        return None
    answered = f"the server at {origin} answered HTTP {status} to {target}"
    if response.is_redirect:
        return redirect_refusal(str(request.url), status, response.headers.get("location"))
    detail = None
    with contextlib.suppress(ValueError):
        payload = json_value(body)
        if isinstance(payload, dict) and "error" in payload:  # Chroma's error shape
            parts = (payload.get("error"), payload.get("message"))
            detail = _own_text(Exception(" ".join(str(part) for part in parts if part)))
    if status in (401, 403):
        return f"{answered}{f' ({detail})' if detail else ''}: the token is missing or refused"
    if detail:
        return f"{answered}: {detail}"
    hint = _NOT_CHROMA if status < 500 else _NOT_CHROMA[:-1] + ", and is it up behind any proxy?"
    return f"{answered} with {_body_kind(body, content_type)}, {hint}"


def _own_text(exc: BaseException) -> str | None:
    """exc's own message on one line, or None if it has no letter or digit."""
    try:
        text = str(exc).strip().rstrip(":").strip()
    except Exception:  # a broken __str__ must not hide the failure it describes
        return None
    if not any(c.isalnum() for c in text):
        return None
    if _HTML.search(text):
        return f"{type(exc).__name__} carrying an HTML page, {_NOT_CHROMA}"
    lines = text.splitlines()
    if len(lines) > 3:  # a body or a traceback: its first line, and how much was left out
        return _clip(lines[0], MESSAGE_LIMIT - 40) + f" (+{len(lines) - 1} more lines)"
    return _clip(text)


def describe_error(exc: BaseException) -> str:
    """Why a store call failed, on one line: never empty, never a pasted HTML page or body."""
    if answer := _http_answer(exc):
        return _clip(answer)
    # A 200 answer that is not JSON (a web server's index page for every path).
    if isinstance(body := getattr(caused_by(exc, json.JSONDecodeError), "doc", None), str):
        said = _body_kind(body, quote=False)  # it may echo the token: not quoted
        return _clip(f"the server answered with {said} instead of JSON, {_NOT_CHROMA}")
    own = _own_text(exc)
    chain = list(_chain(exc))
    if own is None:
        inner = next((e for e in chain[1:] if _own_text(e)), None)
        name = type(exc).__name__
        return _clip(f"{name} ({describe_error(inner)})" if inner is not None else name)
    # The innermost cause names what really happened (refused, no such host, timed out).
    root = next((t for e in reversed(chain[1:]) if (t := _own_text(e))), None)
    if root and root not in own:
        own = f"{own} ({root})"
    return _clip(own)


def guard(what: str, fn: Callable[[], T]) -> T:
    """Runs a store call: transport and server failures become StoreUnavailable, a refused
    name InvalidStoreConfig; NotFoundError passes to the caller."""
    try:
        return fn()
    except NotFoundError:
        raise
    except Exception as exc:
        kind: type[Exception]
        # chromadb raises connection trouble as a ValueError while handling httpx's error,
        # and a non-Chroma answer (5xx, a proxy's page) as a plain Exception carrying the body.
        if caused_by(exc, *UNREACHABLE):
            kind, says = StoreUnavailable, "unreachable"
        elif isinstance(exc, InvalidArgumentError) and _NAME_ERROR.search(str(exc)):
            kind, says = InvalidStoreConfig, "refused a name"
        elif isinstance(exc, ChromaError) or caused_by(
            exc, httpx.HTTPStatusError, json.JSONDecodeError
        ):
            kind, says = StoreUnavailable, "error"
        else:
            raise
        raise kind(f"Chroma {says} while {what}: {describe_error(exc)}") from exc
