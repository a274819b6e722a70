"""Every request the operator makes is bounded. spec.store.timeoutSeconds bounds every
Chroma request, and kube.REQUEST_TIMEOUT every Kubernetes API call: a server that accepts
connections and never answers fails the call instead of holding the worker (and its
session claim) for good. Neither chromadb's HTTP client nor the Kubernetes client has a
timeout of its own.

Real parts: a real Chroma server frozen with SIGSTOP (the kernel still accepts its
connections; the process never answers) and resumed by PID even when a test fails, a plain
TCP listener that never answers, and the real Kubernetes client pointed at it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import chromadb
import numpy as np
import pytest

from controller.api import GROUP, SUMMARIZER_PLURAL, VERSION
from controller.core.coverage import PriorCoverage
from controller.kube import client as kube
from controller.store.connection import StoreLocation, connect
from controller.store.errors import CollectionNotFound, StoreUnavailable
from controller.store.memory_store import MemoryStore, RowWrite, write_alone
from devenv.chroma import ChromaServer, running_chroma
from devenv.processes import wait_for
from tests.integration.harness import NS, Harness, conditions_of, own_operator, summarizer_yaml

TIMEOUT_S = 1.0
# Without a bound the calls below never return; with it they return after about TIMEOUT_S.
# A generous ceiling keeps a loaded machine from failing the test.
GIVE_UP_S = 30.0


def outcome_within(call: Callable[[], Any], seconds: float = GIVE_UP_S) -> BaseException | None:
    """Runs call in a daemon thread: the exception it raised, None if it returned. Fails
    the test if it is still blocked after `seconds`."""
    result: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            result.append(None)
        except BaseException as exc:
            result.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"still blocked after {seconds:g}s: the request has no bound"
    return result[0]


@contextmanager
def frozen(server: ChromaServer) -> Iterator[None]:
    assert server.proc is not None
    os.kill(server.proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)


@contextmanager
def silent_listener(held: list[socket.socket] | None = None) -> Iterator[str]:
    """A TCP port that accepts connections (into `held`) and never sends a byte."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    held = [] if held is None else held
    stop = threading.Event()

    def accept() -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(sock.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        sock.close()


@pytest.fixture(scope="module")
def chroma() -> Iterator[ChromaServer]:
    with running_chroma() as server:
        yield server


@pytest.fixture
def store(chroma: ChromaServer) -> MemoryStore:
    location = StoreLocation(
        url=chroma.url,
        memory_collection="timeouts-memory",
        summary_collection="timeouts-sessions",
        timeout_seconds=TIMEOUT_S,
    )
    client = connect(location)
    client.get_or_create_collection(location.memory_collection).upsert(
        ids=["m1"],
        documents=["User Prompt: bound every request"],
        metadatas=[{"sessionId": "s1", "timestamp": 1_770_000_000_000, "prompt": "bound"}],
        embeddings=np.full((1, 384), 0.05, dtype=np.float32),
    )
    return MemoryStore(client, location)


@contextmanager
def chroma_stuck_after_identity(held: list[str] | None = None) -> Iterator[str]:
    """Answers the constructor's first request (who am I) and then nothing: the tenant and
    database checks go through chromadb's admin client, with an HTTP session of its own.
    The paths of the requests left unanswered go into `held`."""
    release = threading.Event()
    held = [] if held is None else held

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.startswith("/api/v2/auth/identity"):
                body = b'{"user_id": "", "tenant": "default_tenant", "databases": ["*"]}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            held.append(self.path)
            release.wait(GIVE_UP_S)  # never answers while the test runs

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        release.set()
        server.shutdown()
        server.server_close()


# Servers the constructor's requests meet: silent from the first byte, or silent after
# the first answer (the tenant and database checks, through chromadb's admin client). Each
# puts what it left unanswered (a connection, a request) into the list it is given.
SILENT_SERVERS: dict[str, Callable[[list[Any]], AbstractContextManager[str]]] = {
    "silent": silent_listener,
    "stuck after identity": chroma_stuck_after_identity,
}


@pytest.mark.parametrize("server", sorted(SILENT_SERVERS))
def test_connect_to_a_server_that_stops_answering_fails_within_the_timeout(server: str) -> None:
    unanswered: list[Any] = []
    with SILENT_SERVERS[server](unanswered) as url:
        started = time.monotonic()
        error = outcome_within(lambda: connect(StoreLocation(url=url, timeout_seconds=TIMEOUT_S)))
        elapsed = time.monotonic() - started
        left = len(unanswered)
    assert isinstance(error, StoreUnavailable), error
    assert "no answer within 1s" in str(error) and "timeoutSeconds" in str(error), str(error)
    assert elapsed >= TIMEOUT_S * 0.9, elapsed
    # One bounded request, not one sent again: counted, not timed (a loaded machine is slow).
    assert left == 1, unanswered


# Every kind of call the operator makes on a connected client: reads of memories and
# summaries, the listing, the summary write. All go through the one bounded HTTP session.
CALLS: dict[str, Callable[[MemoryStore], Any]] = {
    "read_summary": lambda s: s.read_summary("s1"),
    "session_rows": lambda s: s.session_rows("s1"),
    "session_ids": lambda s: s.session_ids("s1"),
    "summaries (create)": lambda s: s.summaries(create=True),
    "session_rows after a watermark": lambda s: s.session_rows("s1", PriorCoverage((0, ""))),
    "write_rows (upsert)": lambda s: write_alone(
        s, RowWrite("s1", "Summary: bound every request", {"sessionId": "s1"}, [0.05] * 384)
    ),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_frozen_chroma_fails_each_call_within_the_timeout(
    chroma: ChromaServer, store: MemoryStore, name: str
) -> None:
    with frozen(chroma):
        started = time.monotonic()
        error = outcome_within(lambda: CALLS[name](store))
        elapsed = time.monotonic() - started
    assert isinstance(error, StoreUnavailable), error
    assert elapsed < 9, elapsed  # this location's 1 s, not the default 10 s
    assert "Timeout" in str(error) or "timed out" in str(error), str(error)
    # The same client works again once Chroma answers: nothing was left half-done.
    CALLS[name](store)


def test_the_timeout_comes_from_the_location(chroma: ChromaServer) -> None:
    """spec.store.timeoutSeconds reaches the client: a longer bound waits longer."""
    location = StoreLocation(url=chroma.url, timeout_seconds=3.0)
    store = MemoryStore(connect(location), location)
    with frozen(chroma):
        started = time.monotonic()
        error = outcome_within(lambda: store.read_summary("s1"))
        elapsed = time.monotonic() - started
    assert isinstance(error, StoreUnavailable)
    assert 3.0 * 0.9 <= elapsed < 3.0 * 3  # this location's bound, not the default 10 s


def test_a_client_made_elsewhere_keeps_chromadbs_own_sessions(chroma: ChromaServer) -> None:
    """Only connect()'s clients are bounded: a chromadb client made beside them, after
    them, still waits for a frozen Chroma as chromadb makes it wait."""
    connect(StoreLocation(url=chroma.url, timeout_seconds=TIMEOUT_S))
    where = urlparse(chroma.url)
    other = chromadb.HttpClient(host=str(where.hostname), port=int(where.port or 8000))
    ended: list[object] = []  # what the heartbeat returned or raised, if it ended

    def beat() -> None:
        try:
            ended.append(other.heartbeat())
        except Exception as exc:  # shown in the assertion
            ended.append(exc)

    with frozen(chroma):
        waiting = threading.Thread(target=beat, daemon=True)
        waiting.start()
        waiting.join(TIMEOUT_S * 3)
        assert waiting.is_alive(), f"a client connect() did not make ended: {ended!r}"
    waiting.join(GIVE_UP_S)  # answered once Chroma runs again
    assert not waiting.is_alive()


def test_a_silent_apiserver_fails_a_kubernetes_call(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim, Secret, Event and status calls of a summarize thread all go through
    kube.api_client(); pointed at a server that never answers, a call raises."""
    held: list[socket.socket] = []
    with silent_listener(held) as url:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: silent\n"
            f"clusters: [{{name: silent, cluster: {{server: '{url}'}}}}]\n"
            "users: [{name: silent, user: {token: t}}]\n"
            "contexts: [{name: silent, context: {cluster: silent, user: silent}}]\n"
        )
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
        read_s = 2.0  # one attempt is told from two by the connections made, not by time
        monkeypatch.setattr(kube, "REQUEST_TIMEOUT", (TIMEOUT_S, read_s))
        kube.api_client.cache_clear()
        try:
            for call in (
                lambda: kube.get_summarizer("default", "default"),
                lambda: kube.read_secret("default", "model-key"),
            ):
                started, before = time.monotonic(), len(held)
                error = outcome_within(call)
                elapsed = time.monotonic() - started
                assert error is not None and "timed out" in str(error).lower(), error
                assert elapsed >= read_s * 0.9, elapsed
                # One attempt: a request whose answer timed out is not sent again on a new
                # connection (urllib3's default would resend a GET 3 times). Counted, not timed.
                assert len(held) - before == 1, len(held) - before
        finally:
            kube.api_client.cache_clear()


# The renewal the deletion meets is still in its call when the delete is sent (right after
# the renewal's connection was seen), and the first probe fails this soon.
STORE_TIMEOUT_S = 4


def test_deleting_a_summarizer_whose_timer_waits_on_a_silent_store_ends_when_it_returns(
    harness: Harness, tmp_path: Path
) -> None:
    """kopf removes a deleted SessionSummarizer's finalizer once its timers have returned:
    it looks again when the object changes, or after settings.background.cancellation_polling
    (kopf's default: 60 s). A timer whose store call ends without a status write (the
    authority record's renewal) on a store that never answers is in that call for
    spec.store.timeoutSeconds (4 s here; a thread is not cancelled): the deletion ends soon
    after the call returns, not a minute later."""
    ns, name = f"deleting-{uuid.uuid4().hex[:6]}", "silent"
    held: list[socket.socket] = []
    log = tmp_path / "operator.log"
    # Renewal every second; no probe after the first, which writes a status when it ends.
    with (
        silent_listener(held) as url,
        own_operator(
            harness.cp, ns, log, claim_renew_seconds="1", embedding_reprobe_seconds="3600"
        ),
    ):
        spec = summarizer_yaml(name, url).replace(f"namespace: {NS}}}", f"namespace: {ns}}}")
        spec = spec.replace(
            "summaryCollection: neo-agent-sessions}",
            f"summaryCollection: neo-agent-sessions, timeoutSeconds: {STORE_TIMEOUT_S}}}",
        )
        assert f"timeoutSeconds: {STORE_TIMEOUT_S}" in spec and ns in spec
        harness.cp.kubectl_run("apply", "-f", "-", input=spec)

        def reachable() -> str | None:
            got = json.loads(
                harness.cp.kubectl_run("-n", ns, "get", "ssumr", name, "-o", "json").stdout
            )
            return conditions_of(got).get("StoreReachable", {}).get("status")

        wait_for(lambda: reachable() == "False", 90, interval=0.5, message="a probe", log=log)
        # A new connection now is a renewal's, which waits out its timeout from here.
        calls = len(held)
        wait_for(lambda: len(held) > calls, 60, message="a renewal", log=log)
        # In process, at once (a kubectl process took seconds to start on a loaded machine).
        kube.custom().delete_namespaced_custom_object(GROUP, VERSION, ns, SUMMARIZER_PLURAL, name)

        def gone() -> bool:
            got = harness.cp.kubectl_run("-n", ns, "get", "ssumr", name, check=False)
            return got.returncode != 0 and "NotFound" in got.stderr

        # The call's 4 s and a margin for a loaded machine; kopf's default alone is 60 s.
        wait_for(gone, 40, interval=0.5, message=f"{name} gone", log=log)


def test_a_collection_being_opened_holds_up_no_use_of_the_collections_already_open(
    chroma: ChromaServer,
) -> None:
    """A sweep opening a summary collection that is not there yet (get_collection, then a
    listing of the names for the message) on a slow store held the store's lock through
    those calls, so the marker scan's reads of the open memory collection waited behind
    each of them. Here the open hangs on a frozen Chroma for its 30 s timeout, and a read
    of the already open memory collection is not held up by it."""
    location = StoreLocation(
        url=chroma.url,
        memory_collection="timeouts-open-memory",
        summary_collection="timeouts-never-made",
        timeout_seconds=30,
    )
    store = MemoryStore(connect(location), location)
    store.create_memory_collection()
    opened = store.memories()
    outcomes: list[BaseException | None] = []
    with frozen(chroma):
        opening = threading.Thread(
            target=lambda: outcomes.append(outcome_within(store.summaries, 60)), daemon=True
        )
        opening.start()
        time.sleep(1)  # inside get_collection, on the frozen server
        assert opening.is_alive()
        assert outcome_within(store.memories, 10) is None  # not 30 s behind the open
        assert store.memories() is opened
    opening.join(60)
    assert not opening.is_alive()
    assert isinstance(outcomes[0], StoreUnavailable | CollectionNotFound), outcomes
