"""Where the store is and how to reach it: StoreLocation and connect().

Server mode (HttpClient) is what the operator uses; embedded PersistentClient is for
single-process local use only (`summaryctl summarize --local --path`): two processes on
one embedded path silently lose vectors."""

from __future__ import annotations

import contextvars
from dataclasses import dataclass
from urllib.parse import urlparse

import chromadb
import httpx
from chromadb.api import ClientAPI
from chromadb.api.fastapi import FastAPI
from chromadb.config import Settings, System
from chromadb.errors import NotFoundError

from controller.api import StoreSpec
from controller.store.errors import InvalidStoreConfig, StoreUnavailable, describe_error


@dataclass(frozen=True)
class StoreLocation:
    url: str | None
    tenant: str = "default_tenant"
    database: str = "default_database"
    memory_collection: str = "neo-agent-memory"
    summary_collection: str = "neo-agent-sessions"
    timeout_seconds: float = 10.0
    path: str | None = None  # embedded PersistentClient (summaryctl summarize --local only)
    token: str | None = None
    # The embedding model (spec.embedding): checked against the embedding function the
    # collections record, and, when the memory collection records none, what a new summary
    # collection records (store/collections.py).
    embedding_provider: str = "local-minilm"
    embedding_model: str = "all-MiniLM-L6-v2"

    def describe(self) -> str:
        where = self.url or f"embedded:{self.path}"
        return f"{where} ({self.tenant}/{self.database})"


def _settings() -> Settings:
    return Settings(anonymized_telemetry=False)


def connect(location: StoreLocation) -> ClientAPI:
    """A Chroma client for the location; raises StoreUnavailable when it cannot connect,
    InvalidStoreConfig when the URL, tenant or database can never work."""
    if location.url is None and not location.path:
        raise ValueError("either a Chroma server URL or an embedded path is required")
    if location.url is not None:
        problem = StoreSpec.url_problem(location.url)
        if problem:
            raise InvalidStoreConfig(f"Chroma URL {location.url!r} {problem}")
    try:
        if location.url is None:
            return chromadb.PersistentClient(
                path=str(location.path),
                settings=_settings(),
                tenant=location.tenant,
                database=location.database,
            )
        parsed = urlparse(location.url)
        headers = {"Authorization": f"Bearer {location.token}"} if location.token else None
        bound = _TIMEOUT.set(location.timeout_seconds)  # every request, see below
        try:
            return chromadb.HttpClient(
                host=parsed.hostname or "localhost",
                port=parsed.port or (443 if parsed.scheme == "https" else 8000),
                ssl=parsed.scheme == "https",
                headers=headers,
                tenant=location.tenant,
                database=location.database,
                settings=_settings(),
            )
        finally:
            _TIMEOUT.reset(bound)
    except NotFoundError as exc:  # chromadb checks the tenant and database on connect
        raise InvalidStoreConfig(
            f"Chroma at {location.describe()}: {describe_error(exc)}; check spec.store.tenant "
            "and spec.store.database"
        ) from exc
    except Exception as exc:  # chromadb raises ValueError/Exception for connection failures
        why = describe_error(exc)
        if _timed_out(exc):
            why = f"no answer within {location.timeout_seconds:g}s (spec.store.timeoutSeconds)"
        raise StoreUnavailable(f"cannot connect to Chroma at {location.describe()}: {why}") from exc


def _timed_out(exc: BaseException | None) -> bool:
    """The failure is one of our timeouts, however chromadb wrapped it."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, httpx.TimeoutException):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


# chromadb's HTTP client sends every request with no timeout (httpx timeout=None), and its
# constructor already talks to the server: the identity, then the tenant and the database
# through an admin client with an HTTP session of its own. A Chroma that accepts
# connections but never answers (a stopped process, a black-holed proxy) would hold the
# worker, and the claim it took, for good. chromadb accepts no other API class for HTTP
# and takes no timeout, so its FastAPI's constructor is wrapped: a session made while
# connect() runs gets connect()'s spec.store.timeoutSeconds (connect, read, write and pool
# each). Sessions made elsewhere, with no timeout set, stay as chromadb makes them.
# tests/integration/test_request_timeouts.py fails if a chromadb release changes this.
_TIMEOUT: contextvars.ContextVar[float] = contextvars.ContextVar("chroma_timeout")
_FASTAPI_INIT = FastAPI.__init__


def _bounded_fastapi_init(self: FastAPI, system: System) -> None:
    _FASTAPI_INIT(self, system)
    timeout = _TIMEOUT.get(None)
    if timeout is not None:
        self._session.timeout = httpx.Timeout(timeout)


FastAPI.__init__ = _bounded_fastapi_init  # type: ignore[method-assign]
