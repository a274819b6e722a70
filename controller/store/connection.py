"""Where the store is and how to reach it: StoreLocation and connect().

Server mode (HttpClient) is what the operator uses; embedded PersistentClient is for
single-process local use only (`summaryctl summarize --local --path`): two processes on
one embedded path silently lose vectors."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlparse

import chromadb
import httpx
from chromadb.api import ClientAPI
from chromadb.config import Settings
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
    # The embedding provider (spec.embedding.provider): decides what embedding function
    # the summary collection records if the writer has to create it. See _creation_ef.
    embedding_provider: str = "local-minilm"

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
        host = parsed.hostname or "localhost"
        port = parsed.port or (443 if parsed.scheme == "https" else 8000)
        headers = {"Authorization": f"Bearer {location.token}"} if location.token else None
        netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"  # IPv6 in brackets
        _answers_in_time(f"{parsed.scheme}://{netloc}", headers, location.timeout_seconds)
        client = chromadb.HttpClient(
            host=host,
            port=port,
            ssl=parsed.scheme == "https",
            headers=headers,
            tenant=location.tenant,
            database=location.database,
            settings=_settings(),
        )
        _bound_requests(client, location.timeout_seconds)
        return client
    except NotFoundError as exc:  # chromadb checks the tenant and database on connect
        raise InvalidStoreConfig(
            f"Chroma at {location.describe()}: {describe_error(exc)}; check spec.store.tenant "
            "and spec.store.database"
        ) from exc
    except Exception as exc:  # chromadb raises ValueError/Exception for connection failures
        raise StoreUnavailable(
            f"cannot connect to Chroma at {location.describe()}: {describe_error(exc)}"
        ) from exc


# chromadb's HTTP client sends every request with no timeout (httpx timeout=None), and its
# constructor already talks to the server. A Chroma that accepts connections but never
# answers (a stopped process, a black-holed proxy) would hold the worker, and the claim it
# took, for good. spec.store.timeoutSeconds bounds both.


def _answers_in_time(base: str, headers: dict[str, str] | None, timeout: float) -> None:
    """One bounded request before the constructor's unbounded ones. Any answer will do
    (the constructor reports refusals); only silence is caught here."""
    try:
        httpx.get(f"{base}/api/v2/heartbeat", headers=headers, timeout=timeout)
    except httpx.TimeoutException as exc:
        raise TimeoutError(f"no answer within {timeout:g}s (spec.store.timeoutSeconds)") from exc
    except httpx.HTTPError:
        return  # refused, reset, bad TLS...: the constructor's attempt names it as before


def _bound_requests(client: ClientAPI, timeout: float) -> None:
    """Every later request of this client times out after `timeout` seconds (connect, read,
    write and pool each): a StoreUnavailable naming the call, like any network failure."""
    session = getattr(getattr(client, "_server", None), "_session", None)
    if not isinstance(session, httpx.Client):  # a chromadb that moved its session
        raise RuntimeError(f"chromadb {chromadb.__version__}: no HTTP session to bound")
    session.timeout = httpx.Timeout(timeout)
