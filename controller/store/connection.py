"""Where the store is and how to reach it: StoreLocation and connect().

Server mode (HttpClient) is what the operator uses; embedded PersistentClient is for
single-process local use only (`summaryctl summarize --local --path`): two processes on
one embedded path silently lose vectors."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlparse

import chromadb
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
        headers = {"Authorization": f"Bearer {location.token}"} if location.token else None
        return chromadb.HttpClient(
            host=parsed.hostname or "localhost",
            port=parsed.port or (443 if parsed.scheme == "https" else 8000),
            ssl=parsed.scheme == "https",
            headers=headers,
            tenant=location.tenant,
            database=location.database,
            settings=_settings(),
        )
    except NotFoundError as exc:  # chromadb checks the tenant and database on connect
        raise InvalidStoreConfig(
            f"Chroma at {location.describe()}: {describe_error(exc)}; check spec.store.tenant "
            "and spec.store.database"
        ) from exc
    except Exception as exc:  # chromadb raises ValueError/Exception for connection failures
        raise StoreUnavailable(
            f"cannot connect to Chroma at {location.describe()}: {describe_error(exc)}"
        ) from exc
