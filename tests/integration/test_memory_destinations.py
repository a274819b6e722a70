"""Where the memories may go (docs/security.md), over real HTTP on the real control plane:
the owner of a store credential names the model endpoints that may receive what it unlocks,
and a SessionSummarizer naming another is refused before any memory is read, however its
URL is spelled; a redirect from an allowed endpoint carries nothing further."""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import chromadb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.api import SessionSummarizerSpec
from controller.core.destinations import (
    ALLOWED_MODEL_URLS_ANNOTATION,
    ALLOWED_URLS_ANNOTATION,
    MemoryDestinationNotAllowed,
)
from controller.core.naming import summary_object_name
from controller.embeddings.minilm import EmbeddingError, LocalMiniLMEmbedding
from controller.embeddings.remote import OpenAICompatibleEmbedding
from controller.handlers.session_summarizer import check_model
from controller.runtime import SummarizerParts
from controller.scheduling import PassScheduler, SchedulerLimits
from controller.store.connection import StoreLocation, connect
from controller.store.errors import StoreUnavailable
from devenv.processes import wait_for
from tests.integration.harness import NS, Harness, interaction, load
from tests.support.url_spellings import spellings

T0 = 1_760_000_000_000


@dataclass
class Recorder:
    """An HTTP server (IPv4 or IPv6 loopback) that records each request; it answers 200
    with an empty model list, or a redirect to `redirect_to`, or forwards to `upstream`."""

    host: str
    redirect_to: str = ""
    upstream: str = ""
    seen: list[tuple[str, str]] = field(default_factory=list)
    port: int = 0

    def url(self, path: str = "") -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{path}"


class _Family(ThreadingHTTPServer):
    daemon_threads = True


@pytest.fixture
def recorders() -> Iterator[Callable[..., Recorder]]:
    servers: list[ThreadingHTTPServer] = []

    def start(host: str = "127.0.0.1", **options: str) -> Recorder:
        rec = Recorder(host, **options)

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                rec.seen.append((self.command, self.path))
                if rec.redirect_to:
                    self.send_response(307)
                    self.send_header("Location", rec.redirect_to + self.path)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                status, data, kind = 200, b'{"object": "list", "data": []}', "application/json"
                if rec.upstream:
                    headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                    req = urllib.request.Request(
                        rec.upstream + self.path, body or None, headers, method=self.command
                    )
                    try:
                        with urllib.request.urlopen(req, timeout=10) as resp:
                            status, data = resp.status, resp.read()
                            kind = resp.headers.get("Content-Type", kind)
                    except urllib.error.HTTPError as exc:
                        status, data = exc.code, exc.read()
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = _any

            def log_message(self, *args: Any) -> None:
                pass

        family = _Family
        if ":" in host:
            family = type("V6", (_Family,), {"address_family": __import__("socket").AF_INET6})
        server = family((host, 0), Handler)
        rec.port = server.server_address[1]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return rec

    try:
        yield start
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


def apply(harness: Harness, obj: dict[str, Any]) -> None:
    harness.kubectl("apply", "-f", "-", input=json.dumps(obj))


def store_secret(name: str, store_url: str, model_urls: str | None) -> dict[str, Any]:
    annotations = {ALLOWED_URLS_ANNOTATION: store_url}
    if model_urls is not None:
        annotations[ALLOWED_MODEL_URLS_ANNOTATION] = model_urls
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": NS, "annotations": annotations},
        "data": {"token": base64.b64encode(b"team-token").decode()},
    }


def spec(store_url: str, secret: str | None, model_url: str, **store: Any) -> dict[str, Any]:
    ref = {"authSecretRef": {"name": secret}} if secret else {}
    return {
        # Nothing in the background reads the memories: only a pass would (and is refused).
        "sweep": {"enabled": False},
        "reconcile": {"enabled": False},
        "store": {"url": store_url, **ref, **store},
        "model": {"backend": "openai", "baseUrl": model_url, "model": "m", "timeoutSeconds": 2},
    }


# --- the owner's list, whatever the spelling ------------------------------------------------


@pytest.fixture
def owned_store(harness: Harness, recorders: Callable[..., Recorder]) -> dict[str, Recorder]:
    """Secret team-chroma: its owner allows model endpoint X (127.0.0.1:PX/v1) and X6
    ([::1]:P6/v1); Y (127.0.0.1:PY) and Y6 ([::1]:PY6) are nobody's choice."""
    found = {
        "x": recorders(),
        "x6": recorders("::1"),
        "y": recorders(),
        "y6": recorders("::1"),
    }
    allowed = f"{found['x'].url('/v1')}, {found['x6'].url('/v1')}"
    apply(harness, store_secret("team-chroma", harness.chroma.url, allowed))
    return found


def _model_spec(harness: Harness, url: str) -> SessionSummarizerSpec:
    return SessionSummarizerSpec.model_validate(spec(harness.chroma.url, "team-chroma", url))


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_a_model_endpoint_the_store_owner_did_not_allow_is_refused_in_every_spelling(
    harness: Harness, owned_store: dict[str, Recorder], data: st.DataObject
) -> None:
    which = data.draw(st.sampled_from(sorted(owned_store)), label="server")
    server = owned_store[which]
    url = data.draw(spellings("http", server.host, server.port), label="url")
    before = len(server.seen)
    condition = check_model(_model_spec(harness, url), NS)
    if which.startswith("x"):  # allowed: the probe reaches X itself (real HTTP)
        assert condition.reason != "MemoryDestinationNotAllowed", (url, condition.message)
        if not (urlsplit(url).hostname or "").endswith("."):  # resolvable as written
            assert len(server.seen) > before, (url, condition.message)
        return
    assert condition.reason == "MemoryDestinationNotAllowed", (url, condition)
    assert condition.status == "False"
    assert f"Secret {NS}/team-chroma" in condition.message
    assert ALLOWED_MODEL_URLS_ANNOTATION in condition.message
    assert owned_store["x"].url("/v1") in condition.message  # what the owner allows
    assert len(server.seen) == before  # nothing was sent, no connection opened


def test_the_refusal_comes_before_the_store_is_read(
    harness: Harness, recorders: Callable[..., Recorder]
) -> None:
    """A pass builds its backends before reading anything: refused, it never asks the store
    (a recording proxy in front of the real Chroma sees no request at all)."""
    y = recorders()
    store = recorders(upstream=harness.chroma.url)
    apply(harness, store_secret("proxied-chroma", store.url(), "https://api.example.com/v1"))
    limits = SchedulerLimits(workers=1, background_workers=1, cores=1, store_writes=1)
    parts = SummarizerParts(PassScheduler(limits), LocalMiniLMEmbedding())  # the operator's own
    try:
        parsed = SessionSummarizerSpec.model_validate(spec(store.url(), "proxied-chroma", y.url()))
        with (
            pytest.raises(MemoryDestinationNotAllowed) as refused,
            parts.backends(NS, "refused-before-read", parsed),
        ):
            pass
    finally:
        parts.close()
    assert "https://api.example.com/v1" in str(refused.value)
    assert store.seen == [] and y.seen == []


def test_a_summarizer_naming_another_endpoint_shows_the_refusal_and_its_summaries_fail(
    harness: Harness, recorders: Callable[..., Recorder]
) -> None:
    """The operator process: the store is the real Chroma behind a recording proxy, with
    the session's memories in it; the SessionSummarizer names endpoint Y, its owner allows
    X. Y receives nothing, the memory collection is never read, the condition and the
    Event name Y, the Secret and who may allow it."""
    x, y = recorders(), recorders()
    proxy = recorders(upstream=harness.chroma.url)
    name, sid = "elsewhere-model", "it-elsewhere-model"
    memory, sessions = f"{name}-memory", f"{name}-sessions"
    load(harness.store(memory, sessions), [interaction(sid, 0, T0, "Ship the exporter.")])
    apply(harness, store_secret("owned-chroma", proxy.url(), x.url("/v1")))
    body = spec(
        proxy.url(), "owned-chroma", y.url("/v1"), memoryCollection=memory,
        summaryCollection=sessions,
    )  # fmt: skip
    apply(harness, summarizer_object(name, body))

    ready = wait_reason(harness, "ssumr", name, "ModelReady", "MemoryDestinationNotAllowed")
    assert y.url("/v1") in ready["message"] and "owned-chroma" in ready["message"]
    apply(harness, sunset_object(sid, name))
    summarized = wait_reason(
        harness, "ssum", summary_object_name(sid), "Summarized", "MemoryDestinationNotAllowed"
    )
    assert ALLOWED_MODEL_URLS_ANNOTATION in summarized["message"]
    assert y.url("/v1") in summarized["message"]
    events = json.loads(harness.kubectl("get", "events", "-o", "json"))["items"]
    assert {
        e["involvedObject"]["name"] for e in events if e["reason"] == "MemoryDestinationNotAllowed"
    } >= {summary_object_name(sid)}
    time.sleep(2)  # the retried pass, the probes: still nothing may read the memories
    host, port = urlsplit(harness.chroma.url).hostname, urlsplit(harness.chroma.url).port
    memory_id = chromadb.HttpClient(host=host, port=port).get_collection(memory).id
    reads = [p for _, p in proxy.seen if str(memory_id) in p]
    assert reads == [] and y.seen == [] and x.seen == []
    harness.kubectl("delete", "ssum", summary_object_name(sid), "--wait=false")


def wait_reason(harness: Harness, kind: str, name: str, ctype: str, reason: str) -> dict[str, Any]:
    def seen() -> dict[str, Any] | None:
        obj = json.loads(harness.kubectl("get", kind, name, "-o", "json"))
        found = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}
        cond = found.get(ctype)
        return cond if cond and cond["reason"] == reason else None

    return wait_for(seen, 90, 0.3, message=f"{kind}/{name} {ctype}={reason}", log=harness.log)


def summarizer_object(name: str, body: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "memorycore.io/v1alpha1",
        "kind": "SessionSummarizer",
        "metadata": {"name": name, "namespace": NS},
        "spec": body,
    }


def sunset_object(sid: str, summarizer: str) -> dict[str, Any]:
    return {
        "apiVersion": "memorycore.io/v1alpha1",
        "kind": "SessionSummary",
        "metadata": {"name": summary_object_name(sid), "namespace": NS},
        "spec": {"sessionId": sid, "summarizerRef": summarizer, "trigger": "sunset"},
    }


# --- redirects are not followed --------------------------------------------------------------


def test_a_model_endpoint_that_redirects_sends_nothing_to_where_it_points(
    harness: Harness, recorders: Callable[..., Recorder]
) -> None:
    """An allowed endpoint answers 307 to a second server: the pass fails naming the second
    server, which receives nothing (the SDK's own client would have re-posted there)."""
    second = recorders()
    first = recorders(redirect_to=second.url())
    name, sid = "redirecting-model", "it-redirecting-model"
    memory, sessions = f"{name}-memory", f"{name}-sessions"
    load(harness.store(memory, sessions), [interaction(sid, 0, T0, "Rotate the keys.")])
    body = spec(
        harness.chroma.url, None, first.url("/v1"), memoryCollection=memory,
        summaryCollection=sessions,
    )  # fmt: skip
    apply(harness, summarizer_object(name, body))
    apply(harness, sunset_object(sid, name))
    summarized = wait_reason(
        harness, "ssum", summary_object_name(sid), "Summarized", "ModelUnavailable"
    )
    assert "307" in summarized["message"] and second.url() in summarized["message"], summarized
    assert "redirects are not followed" in summarized["message"]
    assert any(method == "POST" for method, _ in first.seen)  # the memories went to `first`
    assert second.seen == []
    harness.kubectl("delete", "ssum", summary_object_name(sid), "--wait=false")


def test_the_embedding_and_store_clients_follow_no_redirect_either(
    recorders: Callable[..., Recorder],
) -> None:
    second = recorders()
    first = recorders(redirect_to=second.url())
    embed = OpenAICompatibleEmbedding(first.url("/v1"), "e", timeout_seconds=5, retries=0)
    try:
        with pytest.raises(EmbeddingError, match="redirects are not followed") as refused:
            embed(["a summary"])
    finally:
        embed.close()
    assert second.url("/v1/embeddings") in str(refused.value)
    with pytest.raises(StoreUnavailable, match="redirects are not followed") as store_refused:
        connect(StoreLocation(url=first.url(), timeout_seconds=5))
    assert second.url() in str(store_refused.value)
    assert first.seen and second.seen == []
