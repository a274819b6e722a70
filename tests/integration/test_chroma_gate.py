"""The bundled Chroma's token gate (`python -m controller gate`) in front of a real Chroma
server: without the token nothing reaches Chroma; with it, Chroma's own client and the
operator's store work through it as if it were Chroma."""

from __future__ import annotations

import contextlib
import http.client
import json
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import chromadb
import pytest
from chromadb.config import Settings
from chromadb.errors import ChromaAuthError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.chroma_gate import MAX_BODY_BYTES
from controller.store.connection import StoreLocation, connect
from controller.store.errors import StoreUnavailable
from controller.store.memory_store import MemoryStore
from devenv.chroma import ChromaServer
from devenv.controlplane import REPO_ROOT, free_port
from devenv.processes import spawn, stop, wait_for

TOKEN = "gate-token-Zq81"


@dataclass
class Gate:
    url: str
    log: Path


@pytest.fixture(scope="module")
def gate(chroma_server: ChromaServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gate]:
    workdir = tmp_path_factory.mktemp("gate")
    token_file = workdir / "token"
    token_file.write_text(TOKEN + "\n")
    port = free_port()
    log = workdir / "gate.log"
    proc = spawn(
        [
            sys.executable, "-m", "controller", "gate", "--listen", f"127.0.0.1:{port}",
            "--upstream", chroma_server.url, "--token-file", str(token_file),
        ],
        log,
        cwd=REPO_ROOT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: status(url + "/readyz") == 200, 30, 0.2, log=log)
        yield Gate(url, log)
    finally:
        stop(proc)


def status(url: str, headers: dict[str, str] | None = None) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=10):
            return 200
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


COLLECTIONS = "/api/v2/tenants/default_tenant/databases/default_database/collections"


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Basic {TOKEN}"},
        {"X-Chroma-Token": TOKEN[:-1]},
        {"Authorization": "Bearer "},
    ],
    ids=["none", "wrong", "basic", "truncated", "empty"],
)
def test_a_request_without_the_token_is_refused_with_401(
    gate: Gate, headers: dict[str, str]
) -> None:
    for path in (COLLECTIONS, "/api/v2/heartbeat", "/api/v2/version", "/"):
        assert status(gate.url + path, headers) == 401, path


def refusal(url: str, method: str, headers: dict[str, str], body: bytes | None) -> tuple[int, Any]:
    request = urllib.request.Request(url, data=body, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


_HEADER_VALUE = st.text(
    st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=0, max_size=40
)
_NOT_THE_TOKEN = _HEADER_VALUE.filter(lambda v: v.strip() != TOKEN)


@st.composite
def tokenless_headers(draw: st.DrawFn) -> dict[str, str]:
    """Any headers a caller without the token could send: none, a wrong or mangled bearer
    or X-Chroma-Token, another scheme carrying the right token, or unrelated headers."""
    headers: dict[str, str] = {}
    for _ in range(draw(st.integers(0, 3))):
        name, value = draw(
            st.one_of(
                st.tuples(st.just("Authorization"), _NOT_THE_TOKEN.map("Bearer {}".format)),
                st.tuples(st.just("X-Chroma-Token"), _NOT_THE_TOKEN),
                st.tuples(
                    st.just("Authorization"),
                    st.sampled_from(["Basic ", "Token ", "Bearer", "bearer:", ""]).map(
                        lambda scheme: scheme + TOKEN
                    ),
                ),
                st.tuples(st.sampled_from(["X-Api-Key", "Cookie", "X-Token"]), _HEADER_VALUE),
            )
        )
        headers.setdefault(name, value)
    return headers


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH"]),
    path=st.sampled_from([COLLECTIONS, "/api/v2/heartbeat", "/api/v2/version", "/", "/x/../y"]),
    headers=tokenless_headers(),
)
def test_every_request_without_the_token_gets_a_json_401_and_reaches_nothing(
    gate: Gate, method: str, path: str, headers: dict[str, str]
) -> None:
    """The class behind the fixed cases above: whatever the method, path and headers, a
    request that does not carry the token gets 401 with Chroma's error shape, and a
    create sent that way leaves no collection behind."""
    body = json.dumps({"name": "gate-probe"}).encode() if method in ("POST", "PUT") else None
    code, answer = refusal(gate.url + path, method, headers, body)
    assert code == 401, (method, path, headers)
    assert answer["error"] == "AuthError" and "needs a token" in answer["message"]
    listed = refusal(gate.url + COLLECTIONS, "GET", {"X-Chroma-Token": TOKEN}, None)
    assert listed[0] == 200 and "gate-probe" not in listed[1].decode()


def test_the_token_either_way_chroma_clients_send_it_reaches_chroma(gate: Gate) -> None:
    for headers in ({"Authorization": f"Bearer {TOKEN}"}, {"X-Chroma-Token": TOKEN}):
        assert status(gate.url + COLLECTIONS, headers) == 200
    assert status(gate.url + "/healthz") == 200  # the kubelet's probes carry no token


def test_chromas_client_reads_and_writes_through_the_gate_with_large_bodies(gate: Gate) -> None:
    host, port = gate.url.removeprefix("http://").split(":")
    client = chromadb.HttpClient(
        host=host,
        port=int(port),
        headers={"Authorization": f"Bearer {TOKEN}"},
        settings=Settings(anonymized_telemetry=False),
    )
    coll = client.get_or_create_collection("gate-check", embedding_function=None)
    n = 300  # 300 x 1024 floats: a body of several MB
    coll.upsert(
        ids=[f"id-{i}" for i in range(n)],
        embeddings=[[float(i % 7)] * 1024 for i in range(n)],
        documents=[f"document {i} " + "x" * 200 for i in range(n)],
    )
    got = coll.get(ids=["id-0", f"id-{n - 1}"], include=["documents"])
    assert sorted(got["ids"]) == ["id-0", f"id-{n - 1}"]
    assert coll.count() == n
    client.delete_collection("gate-check")

    with pytest.raises(ChromaAuthError, match="needs a token"):
        chromadb.HttpClient(
            host=host, port=int(port), settings=Settings(anonymized_telemetry=False)
        ).list_collections()


def test_the_operators_store_works_through_the_gate_only_with_the_token(gate: Gate) -> None:
    location = StoreLocation(url=gate.url, token=TOKEN, summary_collection="gate-sessions")
    store = MemoryStore(connect(location), location)
    store.heartbeat()
    with pytest.raises(StoreUnavailable, match=r"(?i)token|401|unauthori"):
        bad = StoreLocation(url=gate.url, token="nope", summary_collection="gate-sessions")
        MemoryStore(connect(bad), bad).heartbeat()
    assert TOKEN not in gate.log.read_text()


def test_readiness_follows_chroma(chroma_server: ChromaServer, tmp_path: Path) -> None:
    """A gate whose Chroma does not answer is alive but not ready."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    port, dead = free_port(), free_port()
    log = tmp_path / "gate.log"
    proc = spawn(
        [
            sys.executable, "-m", "controller", "gate", "--listen", f"127.0.0.1:{port}",
            "--upstream", f"http://127.0.0.1:{dead}", "--token-file", str(token_file),
        ],
        log,
        cwd=REPO_ROOT,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: status(url + "/healthz") == 200, 30, 0.2, log=log)
        assert status(url + "/readyz") == 503
        body = json.dumps({"name": "x"}).encode()
        req = urllib.request.Request(
            url + COLLECTIONS, data=body, headers={"Authorization": f"Bearer {TOKEN}"}
        )
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=10)
        assert err.value.code in (500, 502)
    finally:
        stop(proc)


def test_forwarding_is_bounded_and_the_store_client_hears_the_gates_answer(
    tmp_path: Path,
) -> None:
    """Chroma (here a server that answers after 4 s) is given up on after the gate's
    --timeout-seconds: the client gets a 504 naming the gate's bound before its own, longer
    timeout, so the operator never abandons a write that the gate still carries."""
    slow_seen: list[float] = []

    class Slow(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            slow_seen.append(time.monotonic())
            time.sleep(4)
            with contextlib.suppress(OSError):  # the gate has hung up by now
                self.send_response(200)
                self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    upstream = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    upstream.daemon_threads = True
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    port = free_port()
    log = tmp_path / "gate.log"
    proc = spawn(
        [
            sys.executable, "-m", "controller", "gate", "--listen", f"127.0.0.1:{port}",
            "--upstream", f"http://127.0.0.1:{upstream.server_address[1]}",
            "--token-file", str(token_file), "--timeout-seconds", "1",
        ],
        log,
        cwd=REPO_ROOT,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: status(url + "/healthz") == 200, 30, 0.2, log=log)
        with pytest.raises(StoreUnavailable) as refused:
            connect(StoreLocation(url=url, token=TOKEN, timeout_seconds=3))
        # The gate's answer, not the client's own 3 s timeout (which says "timed out"): told
        # by what the client heard, not by a time a loaded machine may stretch.
        assert "HTTP 504" in str(refused.value) and "the gate's 1s" in str(refused.value)
        assert slow_seen  # it was forwarded, then given up on
    finally:
        stop(proc)
        upstream.shutdown()
        upstream.server_close()


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_body_over_chromas_own_limit_gets_a_json_413_and_reaches_nothing(
    gate: Gate, chunked: bool
) -> None:
    """The gate holds at most MAX_BODY_BYTES of a request (Chroma's own limit), whether the
    client says the size up front or streams it; one byte under still reaches Chroma."""
    host, port = gate.url.removeprefix("http://").split(":")
    name = f"gate-large-{int(chunked)}"
    headers = {"X-Chroma-Token": TOKEN, "Content-Type": "application/json"}
    envelope = json.dumps({"name": name, "metadata": {"pad": ""}}).encode()
    for size, expected in ((MAX_BODY_BYTES + 1, 413), (MAX_BODY_BYTES, 200)):
        body = envelope.replace(b'""', b'"' + b"x" * (size - len(envelope)) + b'"')
        assert len(body) == size
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        pieces = (body[i : i + 2**20] for i in range(0, size, 2**20))
        conn.request(
            "POST", COLLECTIONS, pieces if chunked else body, headers, encode_chunked=chunked
        )
        resp = conn.getresponse()
        answer = json.loads(resp.read() or b"null")
        conn.close()
        if expected == 413:
            assert resp.status == 413, answer
            assert answer["error"] == "PayloadTooLarge" and str(MAX_BODY_BYTES) in answer["message"]
            listed = refusal(gate.url + COLLECTIONS, "GET", {"X-Chroma-Token": TOKEN}, None)
            assert listed[0] == 200 and name not in listed[1].decode()
        else:
            assert resp.status != 413, answer  # Chroma's own answer, whatever it is
