"""StoreLocation and connect(). Embedded PersistentClient is for single-process use only
(`summaryctl summarize --bypass-claim --path`): two processes on one path lose vectors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast
from urllib.parse import urlparse

import chromadb
import httpx
from chromadb.api import ClientAPI, ServerAPI
from chromadb.api.client import AdminClient, Client
from chromadb.api.fastapi import FastAPI
from chromadb.api.shared_system_client import SharedSystemClient
from chromadb.auth import UserIdentity
from chromadb.config import Settings
from chromadb.errors import NotFoundError

from controller.api import StoreSpec
from controller.core.destinations import shown
from controller.core.document import DOCUMENT_MAX_CHARS
from controller.http_deadline import deadline_hooks
from controller.store.errors import (
    InvalidStoreConfig,
    StoreUnavailable,
    caused_by,
    describe_error,
)


@dataclass(frozen=True)
class StoreLocation:
    url: str | None
    tenant: str = "default_tenant"
    database: str = "default_database"
    memory_collection: str = "neo-agent-memory"
    summary_collection: str = "neo-agent-sessions"
    timeout_seconds: float = 10.0
    path: str | None = None  # embedded PersistentClient (summaryctl summarize --path only)
    token: str | None = None
    # spec.embedding: checked against (or recorded by) the collections (memory_store.py)
    embedding_provider: str = "local-minilm"
    embedding_model: str = "all-MiniLM-L6-v2"
    document_max_chars: int = DOCUMENT_MAX_CHARS  # spec.document.maxChars

    @property
    def ledger_collection(self) -> str:
        """The operator's ledger beside the summary collection (core/ledger.py)."""
        return f"{self.summary_collection}{StoreSpec.LEDGER_SUFFIX}"

    @property
    def row_scope(self) -> str:
        """Where summary rows live, whatever the address; claims and ledger entries key on it."""
        return f"{self.tenant}/{self.database}/{self.summary_collection}"

    def describe(self) -> str:
        return f"{self.url or f'embedded:{self.path}'} ({self.tenant}/{self.database})"


def connect(location: StoreLocation) -> ClientAPI:
    """A Chroma client; raises StoreUnavailable or InvalidStoreConfig."""
    if location.url is not None and (problem := StoreSpec.url_problem(location.url)):
        raise InvalidStoreConfig(f"Chroma URL {shown(location.url)!r} {problem}")
    if location.token and not (location.token.isascii() and location.token.isprintable()):
        # Never shown: the HTTP client's own error would print the header, token and all.
        raise InvalidStoreConfig(
            "the Chroma token has a character no HTTP header carries (a line break, a control "
            "or non-ASCII character): check CHROMA_TOKEN or the store's Secret"
        )
    try:
        if location.url is None:
            return chromadb.PersistentClient(
                path=str(location.path),
                settings=Settings(anonymized_telemetry=False),
                tenant=location.tenant,
                database=location.database,
            )
        return _BoundedHttpClient(location)
    except NotFoundError as exc:  # chromadb checks the tenant and database on connect
        raise InvalidStoreConfig(
            f"Chroma at {location.describe()}: {describe_error(exc)}; check spec.store.tenant "
            "and spec.store.database"
        ) from exc
    except Exception as exc:  # chromadb raises ValueError/Exception for connection failures
        why = describe_error(exc)
        if caused_by(exc, httpx.TimeoutException):
            why = f"no answer within {location.timeout_seconds:g}s (spec.store.timeoutSeconds)"
        raise StoreUnavailable(f"cannot connect to Chroma at {location.describe()}: {why}") from exc


class _BoundedHttpClient(Client):
    """chromadb.HttpClient with each request bounded by spec.store.timeoutSeconds (a silent
    Chroma would hold a worker and its claim) and no redirect (it would carry the token). Each
    private `_session` is bounded before its first request (test_request_timeouts.py)."""

    def __init__(self, location: StoreLocation) -> None:
        assert location.url is not None
        self._seconds = location.timeout_seconds
        parsed = urlparse(location.url)
        settings = Settings(anonymized_telemetry=False)
        settings.chroma_api_impl = "chromadb.api.fastapi.FastAPI"  # as chromadb.HttpClient does
        host = parsed.hostname or "localhost"  # chromadb puts it in a URL: [::1] keeps its brackets
        settings.chroma_server_host = f"[{host}]" if ":" in host else host
        settings.chroma_server_ssl_enabled = https = parsed.scheme == "https"
        settings.chroma_server_http_port = parsed.port or (443 if https else 8000)
        if location.token:
            settings.chroma_server_headers = {"Authorization": f"Bearer {location.token}"}
        self._own_system: object = None
        try:
            super().__init__(tenant=location.tenant, database=location.database, settings=settings)
        except BaseException:
            _forget_system(self._own_system)  # a tenant, database or timeout failure
            raise

    def get_user_identity(self) -> UserIdentity:
        self._own_system = self._system
        _bound(self._server, self._seconds)  # the constructor's first request
        return super().get_user_identity()

    def close(self) -> None:
        system = self._own_system
        super().close()
        _forget_system(system)

    def _validate_tenant_database(self, tenant: str, database: str) -> None:
        _bound(cast(AdminClient, self._admin_client)._server, self._seconds)  # a System of its own
        super()._validate_tenant_database(tenant=tenant, database=database)


def _forget_system(system: object) -> None:
    """Drops a closed client's System from chromadb's registry, where 1.5.9 leaves 0.8 MB."""
    registry = SharedSystemClient._identifier_to_system
    for identifier, held in list(registry.items()):
        if held is system:
            registry.pop(identifier, None)


def _bound(server: ServerAPI, seconds: float) -> None:
    session = cast(FastAPI, server)._session  # chroma_api_impl is chromadb's HTTP API
    session.timeout = httpx.Timeout(seconds)
    session.event_hooks = deadline_hooks(seconds, httpx)  # the whole answer too
    session.follow_redirects = False  # a redirect is an error (store/errors.py)
