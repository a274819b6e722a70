"""Reading never creates a collection, and a store failure says what happened in one line,
on the real Chroma server, the real apiserver and the operator (harness)."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast

import numpy as np
import pytest
from chromadb.api.types import DefaultEmbeddingFunction, Documents, EmbeddingFunction, Embeddings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.api import StoreSpec
from controller.core.naming import summary_object_name
from controller.store.connection import StoreLocation, connect
from controller.store.errors import (
    CollectionNotFound,
    EmbeddingMismatch,
    InvalidStoreConfig,
    StoreUnavailable,
)
from controller.store.memory_store import (
    MemoryStore,
    NeoDynamicTextEmbedding,
    RowWrite,
    write_alone,
)
from devenv.chroma import ChromaServer
from devenv.processes import wait_for
from devenv.serving import serving
from tests.integration.harness import NS, Harness, interaction, load, summarizer_yaml


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def store_at(url: str, **names: Any) -> MemoryStore:
    location = StoreLocation(url=url, **names)
    return MemoryStore(connect(location), location)


def collections(harness: Harness) -> set[str]:
    return {c.name for c in harness.store().client.list_collections()}


# -- reads of a missing collection ----------------------------------------------------------


def test_reading_a_missing_memory_collection_names_it_and_creates_nothing(
    harness: Harness,
) -> None:
    real = unique("reads-memory")
    load(harness.store(memory=real), [interaction("reads-1", 0, 1_770_000_000_000, "Hi.")])
    typo = real.replace("memory", "memroy")
    store = store_at(harness.chroma.url, memory_collection=typo)
    for read in (
        lambda: store.session_rows("reads-1"),
        lambda: len(store.session_ids("reads-1")),
        lambda: list(store.scan_since(0)),
    ):
        with pytest.raises(CollectionNotFound) as caught:
            read()
        assert (caught.value.role, caught.value.collection) == ("memory", typo)
        message = str(caught.value)
        assert message.startswith(f"memory collection {typo!r} does not exist in Chroma at ")
        assert f"did you mean {real!r}?" in message and "existing collections: " in message
    assert typo not in collections(harness)


def test_reading_a_missing_summary_collection_creates_nothing(harness: Harness) -> None:
    name = unique("reads-sessions")
    store = store_at(harness.chroma.url, summary_collection=name)
    assert store.read_summary("s1") is None  # no prior summary yet
    assert store.summary_states(["s1", "s2"]) == {}  # nothing summarized yet
    assert store.check_embedding(384) is None  # nothing stored yet
    with pytest.raises(CollectionNotFound) as caught:
        store.latest_summaries(5)  # a typo must not read as "no summaries yet"
    assert (caught.value.role, caught.value.collection) == ("summary", name)
    assert name not in collections(harness)


def test_every_summary_is_read_from_a_store_holding_more_than_sqlite_binds(
    harness: Harness,
) -> None:
    """`summaryctl summaries --limit` and `rebuild --all-with-secrets` read the newest rows by
    id: past SQLite's 32,766 bound variables one read of them all failed ("too many SQL
    variables", a StoreUnavailable no retry could cure)."""
    name, count = unique("reads-many"), 33_000
    coll = harness.store().client.create_collection(name, embedding_function=None)
    for start in range(0, count, 5000):
        numbers = range(start, min(count, start + 5000))
        coll.add(
            ids=[f"summary_s{n}" for n in numbers],
            embeddings=[[1.0, 0.0]] * len(numbers),
            documents=[f"Summary {n}." for n in numbers],
            metadatas=[{"sessionId": f"s{n}", "timestamp": 1_770_000_000_000 + n} for n in numbers],
        )
    try:
        rows = store_at(harness.chroma.url, summary_collection=name).latest_summaries(2**62)
        assert [row_id for row_id, _, _ in rows] == [
            f"summary_s{n}" for n in reversed(range(count))
        ]
        assert rows[0][1] == f"Summary {count - 1}."
    finally:
        harness.store().client.delete_collection(name)


def test_the_summary_write_creates_the_collection_that_default_function_agents_can_open(
    harness: Harness,
) -> None:
    name = unique("reads-first-write")
    # No memory collection to take the recipe from: chromadb's default function, cosine.
    store = store_at(
        harness.chroma.url, summary_collection=name, memory_collection=unique("reads-none")
    )
    assert store.read_summary("s1") is None and name not in collections(harness)
    write_alone(store, RowWrite("s1", "first summary", {"sessionId": "s1"}, [0.1] * 384))
    assert name in collections(harness)
    client = harness.store().client
    config = client.get_collection(name).configuration_json
    assert config["hnsw"]["space"] == "cosine"
    # chromadb's own all-MiniLM-L6-v2 function is recorded: an agent that opens the
    # collection with the default function, or with none, can load its configuration.
    assert config["embedding_function"]["name"] == "default"
    for opened in (
        client.get_collection(name, embedding_function=DefaultEmbeddingFunction()),
        client.get_collection(name),
    ):
        assert opened.configuration.get("embedding_function") is not None
        assert opened.get(ids=["summary_s1"])["documents"] == ["first summary"]
    again = store_at(harness.chroma.url, summary_collection=name)
    assert again.read_summary("s1") is not None


def test_the_summary_collection_is_created_as_the_agents_created_their_memory_collection(
    harness: Harness,
) -> None:
    """neo memory-core creates its collections recording its own function and Chroma's
    default l2 distance: a summary collection the operator creates for it records the
    same, so neo's readers open it as one of their own."""
    memory, name = unique("reads-neo-memory"), unique("reads-neo-sessions")
    client = harness.store().client
    client.create_collection(memory, embedding_function=cast(Any, NeoDynamicTextEmbedding()))
    location = StoreLocation(
        url=harness.chroma.url,
        memory_collection=memory,
        summary_collection=name,
        embedding_provider="openai",
        embedding_model="text-embedding-qwen3-embedding-8b",
    )
    store = MemoryStore(connect(location), location)
    assert store.check_embedding(8) is None  # neo's function, an endpoint model: fits
    write_alone(store, RowWrite("s1", "first summary", {"sessionId": "s1"}, [0.1] * 8))
    config = client.get_collection(name).configuration_json
    assert config["embedding_function"] == {
        "type": "known",
        "name": "dynamic_text_embedding_service",
        "config": {},
    }
    assert config["hnsw"]["space"] == "l2"
    # The local model does not fit neo's function: refused before the collection exists.
    local = StoreLocation(
        url=harness.chroma.url, memory_collection=memory, summary_collection=unique("reads-x")
    )
    with pytest.raises(EmbeddingMismatch, match="dynamic_text_embedding_service"):
        MemoryStore(connect(local), local).check_embedding(384)


class AgentEmbedding(EmbeddingFunction[Documents]):
    """An agent's own embedding function (any name other than chromadb's default)."""

    def __init__(self) -> None:
        pass

    def __call__(self, input: Documents) -> Embeddings:
        return [np.full(8, 0.5, dtype=np.float32) for _ in input]

    @staticmethod
    def name() -> str:
        return "agents-own-embedding"


def test_with_an_openai_endpoint_the_summary_collection_records_no_function_to_conflict(
    harness: Harness,
) -> None:
    name = unique("reads-openai")
    location = StoreLocation(
        url=harness.chroma.url,
        summary_collection=name,
        embedding_provider="openai",
        embedding_model="text-embedding-3-small",
    )
    store = MemoryStore(connect(location), location)
    write_alone(store, RowWrite("s1", "x", {"sessionId": "s1"}, [1.0] * 8))
    client = harness.store().client
    assert client.get_collection(name).configuration_json["embedding_function"] is None
    opened = client.get_collection(name, embedding_function=AgentEmbedding())  # no conflict
    assert opened.query(query_texts=["x"], n_results=1)["ids"] == [["summary_s1"]]


def test_loading_memories_creates_the_memory_collection_only_when_asked(
    harness: Harness,
) -> None:
    name = unique("reads-load")
    store = store_at(harness.chroma.url, memory_collection=name)
    row = interaction("load-1", 0, 1_770_000_000_000, "Load me.")
    with pytest.raises(CollectionNotFound):
        store.add_memories([row[0]], [row[1]], [row[2]])
    assert name not in collections(harness)
    store.add_memories([row[0]], [row[1]], [row[2]], create=True)
    assert len(store.session_ids("load-1")) == 1


# -- names Chroma refuses -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "name", "why"),
    [
        ("summary_collection", "it..sessions", "two consecutive periods"),
        ("summary_collection", "sessions+10.1.2.3", "IPv4"),
        ("memory_collection", "10.1.2.3", "IPv4"),
        ("memory_collection", "ab", "3-512 characters"),
    ],
)
def test_a_name_chroma_refuses_is_invalid_config_not_an_outage(
    harness: Harness, field: str, name: str, why: str
) -> None:
    store = store_at(harness.chroma.url, **{field: name})
    if field == "summary_collection":
        calls = [
            lambda: write_alone(store, RowWrite("s1", "x", {"sessionId": "s1"}, [0.1] * 384)),
            lambda: store.read_summary("s1"),
            lambda: store.latest_summaries(5),
        ]
    else:
        calls = [lambda: store.session_rows("s1"), lambda: list(store.scan_since(0))]
    for call in calls:
        with pytest.raises(InvalidStoreConfig, match=why) as caught:
            call()
        assert not isinstance(caught.value, StoreUnavailable)
        assert name in str(caught.value)
    assert name not in collections(harness)


def test_a_database_that_does_not_exist_is_invalid_config(harness: Harness) -> None:
    with pytest.raises(InvalidStoreConfig, match="no-such-db"):
        connect(StoreLocation(url=harness.chroma.url, database="no-such-db"))


def chroma_creates(url: str, path: str, name: str) -> bool:
    """Whether the Chroma server creates a tenant or database of this name (or has it)."""
    request = urllib.request.Request(
        f"{url}/api/v2/{path}",
        data=json.dumps({"name": name}).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        urllib.request.urlopen(request, timeout=10).close()
    except urllib.error.HTTPError as refused:
        return "already exists" in refused.read().decode()
    return True


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(name=st.text(alphabet=st.sampled_from("ab1._-+/ "), max_size=7) | st.just("10.0.0.1"))
def test_a_database_or_tenant_name_is_valid_exactly_when_the_chroma_server_serves_it(
    harness: Harness, name: str
) -> None:
    """Chroma's server names a database by its collection rule and a tenant by 3 characters
    or more; a tenant holding '/' is created, but no request reaches it (the '/' ends its
    segment of the URL). StoreSpec admits exactly the names the server serves."""
    url = harness.chroma.url
    for field in ("database", "tenant"):
        if field == "database":
            served = chroma_creates(url, "tenants/default_tenant/databases", name)
        else:
            served = chroma_creates(url, "tenants", name) and chroma_creates(
                url, f"tenants/{urllib.parse.quote(name, safe='')}/databases", "default_database"
            )
            try:
                connect(StoreLocation(url=url, tenant=name)).close()
            except (InvalidStoreConfig, StoreUnavailable):
                served = False
        try:
            StoreSpec.model_validate({field: name})
            valid = True
        except ValueError:
            valid = False
        assert valid == served, (field, name)


# -- what a store failure says --------------------------------------------------------------

HTML = (
    "<!DOCTYPE html>\n<html>\n<head><title>{status}</title></head>\n<body>\n"
    "<h1>{status}</h1>\n<p>nginx</p>\n</body>\n</html>\n"
)
IDENTITY = {"user_id": "", "tenant": "default_tenant", "databases": ["default_database"]}
HANDSHAKE = {
    "/api/v2/auth/identity": IDENTITY,
    "/api/v2/tenants/default_tenant": {"name": "default_tenant"},
    "/api/v2/tenants/default_tenant/databases/default_database": {
        "id": "00000000-0000-0000-0000-000000000001",
        "name": "default_database",
        "tenant": "default_tenant",
    },
}


class NotChroma(ThreadingHTTPServer):
    """A web server at the store's URL: an HTML error page (optionally after answering
    chromadb's connect handshake, like a proxy whose Chroma went away), or an empty 404."""

    status = 404
    body = "html"
    handshake = False


class NotChromaHandler(BaseHTTPRequestHandler):
    server: NotChroma

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def _answer(self) -> None:
        path = self.path.split("?")[0]
        if self.server.handshake and path in HANDSHAKE:
            self._send(200, json.dumps(HANDSHAKE[path]), "application/json")
        elif self.server.body == "html":
            self._send(self.server.status, HTML.format(status=self.server.status), "text/html")
        else:
            self._send(self.server.status, "", "text/plain")

    def _send(self, status: int, body: str, content_type: str) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def not_chroma() -> Iterator[NotChroma]:
    server = NotChroma(("127.0.0.1", 0), NotChromaHandler)
    with serving(server):
        yield server


def url_of(server: NotChroma) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def assert_one_line_without_the_page(message: str) -> None:
    assert "\n" not in message and "<" not in message and "nginx" not in message
    assert not message.rstrip().endswith(":")


def test_connecting_to_a_web_server_says_so_in_one_line(not_chroma: NotChroma) -> None:
    url = url_of(not_chroma)
    with pytest.raises(StoreUnavailable) as caught:
        connect(StoreLocation(url=url))
    message = str(caught.value)
    assert_one_line_without_the_page(message)
    assert message.startswith(f"cannot connect to Chroma at {url} ")
    assert f"the server at {url} answered HTTP 404" in message
    assert "with an HTML page, not Chroma's API: is the URL a Chroma server?" in message


def test_an_empty_error_answer_still_ends_in_a_cause(not_chroma: NotChroma) -> None:
    not_chroma.body = "empty"
    with pytest.raises(StoreUnavailable) as caught:
        connect(StoreLocation(url=url_of(not_chroma)))
    message = str(caught.value)
    assert_one_line_without_the_page(message)
    assert "answered HTTP 404 to GET /api/v2/auth/identity with an empty body" in message


def test_a_read_through_a_proxy_whose_chroma_is_gone_says_so_in_one_line(
    not_chroma: NotChroma,
) -> None:
    not_chroma.handshake, not_chroma.status = True, 502
    store = store_at(url_of(not_chroma))  # the handshake succeeds
    for read in (lambda: store.session_rows("s1"), lambda: store.latest_summaries(5)):
        with pytest.raises(StoreUnavailable) as caught:
            read()
        message = str(caught.value)
        assert_one_line_without_the_page(message)
        assert "answered HTTP 502 to GET /api/v2/tenants/default_tenant/" in message
        assert "with an HTML page, not Chroma's API" in message


def test_a_refused_connection_names_the_refusal() -> None:
    with pytest.raises(StoreUnavailable) as caught:
        connect(StoreLocation(url="http://127.0.0.1:9"))
    message = str(caught.value)
    assert message.startswith("cannot connect to Chroma at http://127.0.0.1:9 ")
    assert message.endswith("Connection refused)")


# -- through the operator, the CLI and the apiserver ----------------------------------------


def test_a_sunset_with_a_typo_in_the_memory_collection_creates_no_collection(
    harness: Harness,
) -> None:
    real = unique("reads-op-memory")
    typo = real.replace("memory", "memroy")
    load(harness.store(memory=real), [interaction("reads-op-1", 0, 1_770_000_000_000, "Hi.")])
    name = unique("reads-typo")
    manifest = summarizer_yaml(
        name, harness.chroma.url, memory=typo, summary=unique("reads-op-sessions")
    )
    harness.kubectl("apply", "-f", "-", input=manifest)
    try:
        res = harness.summaryctl("sunset", "reads-op-1", "-n", NS, "--summarizer", name)
        assert res.returncode == 0, res.stderr

        def failed() -> dict[str, Any] | None:
            status = harness.obj("reads-op-1").get("status") or {}
            conds = {c["type"]: c for c in status.get("conditions") or []}
            cond = conds.get("Summarized")
            return cond if cond and cond["status"] == "False" else None

        cond = wait_for(failed, 60, 0.3, message="Summarized False", log=harness.log)
        assert typo not in collections(harness)  # the pass read it; nothing created it
        assert cond["reason"] == "MemoryCollectionNotFound" and typo in cond["message"]
    finally:
        harness.kubectl(
            "delete", "ssum", summary_object_name("reads-op-1"), "--wait=false", check=False
        )
        harness.kubectl("delete", "ssumr", name, "--wait=false", check=False)


def test_summaryctl_summaries_with_a_typo_names_the_collection_and_creates_none(
    harness: Harness,
) -> None:
    typo = unique("reads-cli-sesions")
    res = harness.summaryctl(
        "summaries", "--chroma-url", harness.chroma.url, "--summary-collection", typo
    )
    assert res.returncode != 0
    assert f"summary collection {typo!r} does not exist" in res.stderr
    assert "Traceback" not in res.stderr
    assert typo not in collections(harness)


BAD = {
    "memoryCollection": ["ab", "neo..memory", "10.0.0.1", "neo memory", "-neo", "a" * 513],
    "summaryCollection": ["sessions+10.1.1.1", "a+b+c", "sessions_", "x", "a" * 506],
    "url": [
        "chroma:8000",
        "http://:8000",
        "http://chroma:8000/api/v2",
        "http://chroma:70000",
        "http://[::1::]:8000",
        "http://10.0.0.999:8000",
    ],
    "tenant": ["ab", "a/b", "x/../default_tenant", "default_tenant/."],
    "database": ["ab", "..x", "my db", "10.0.0.1", "default_database/.", "a" * 257],
}
GOOD = {
    "memoryCollection": ["neo-agent-memory", "01.2.3.4", "abc+def", "a" * 512],
    "summaryCollection": ["1.2.3", "team_a.sessions"],
    "url": ["http://chroma:8000", "https://[::1]:8443/", "http://10.0.0.1"],
    "tenant": ["a b", "team_a", "t?%#", "t" * 256],
    "database": ["abc+def", "team-a.db", "a" * 256],
}


def manifests(cases: dict[str, list[str]], prefix: str) -> tuple[str, dict[str, tuple[str, str]]]:
    docs, names = [], {}
    for field, values in cases.items():
        for i, value in enumerate(values):
            name = f"{prefix}-{field.lower()}-{i}"
            names[name] = (field, value)
            docs.append(
                json.dumps(
                    {
                        "apiVersion": "memorycore.io/v1alpha1",
                        "kind": "SessionSummarizer",
                        "metadata": {"name": name, "namespace": NS},
                        "spec": {
                            "store": {field: value},
                            "sweep": {"enabled": False},
                            "reconcile": {"enabled": False},
                        },
                    }
                )
            )
    return "\n---\n".join(docs), names


def test_the_apiserver_refuses_what_chroma_refuses_naming_the_field(harness: Harness) -> None:
    bad, bad_names = manifests(BAD, "reads-bad")
    res = harness.cp.kubectl_run("apply", "--dry-run=server", "-f", "-", input=bad, check=False)
    assert res.returncode != 0
    for name, (field, value) in bad_names.items():
        lines = [line for line in res.stderr.splitlines() if f'"{name}" is invalid' in line]
        assert lines, (name, value, res.stderr)
        assert f"spec.store.{field}" in lines[0], lines[0]
        with pytest.raises(ValueError, match=field):  # the spec refuses it too
            StoreSpec.model_validate({field: value})
    assert "must not contain two consecutive periods (..)" in res.stderr
    assert "must not be an IPv4 address" in res.stderr
    assert StoreSpec.TENANT_MESSAGE in res.stderr
    good, good_names = manifests(GOOD, "reads-good")
    res = harness.cp.kubectl_run("apply", "--dry-run=server", "-f", "-", input=good, check=False)
    assert res.returncode == 0, res.stderr
    for name, (field, value) in good_names.items():
        assert name in res.stdout
        StoreSpec.model_validate({field: value})


def test_the_apiserver_refuses_a_memory_collection_the_operator_would_write(
    harness: Harness,
) -> None:
    def summarizer(name: str, memory: str | None, summary: str) -> str:
        store = {"summaryCollection": summary}
        if memory is not None:  # else the default, neo-agent-memory
            store["memoryCollection"] = memory
        body = {"store": store, "sweep": {"enabled": False}, "reconcile": {"enabled": False}}
        return json.dumps(
            {
                "apiVersion": "memorycore.io/v1alpha1",
                "kind": "SessionSummarizer",
                "metadata": {"name": name, "namespace": NS},
                "spec": body,
            }
        )

    bad = [
        ("reads-same", "team-x", "team-x"),
        ("reads-ledger", "team-x-ledger", "team-x"),
        ("reads-default", None, "neo-agent-memory"),
    ]
    for name, memory, summary in bad:
        res = harness.cp.kubectl_run(
            "apply",
            "--dry-run=server",
            "-f",
            "-",
            input=summarizer(name, memory, summary),
            check=False,
        )
        assert res.returncode != 0 and "spec.store" in res.stderr, res.stderr
        assert StoreSpec.SAME_COLLECTION_MESSAGE in res.stderr, res.stderr
    good = summarizer("reads-apart", "team-x-ledger", "team-x-ledger-ledger")
    res = harness.cp.kubectl_run("apply", "--dry-run=server", "-f", "-", input=good, check=False)
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "[::ffff:7f00:1]", "[::FFFF:127.0.0.1]", "[0:0:0:0:0:ffff:7f00:1]"],
)
def test_a_store_url_reaches_chroma_however_its_address_is_written(
    chroma_server: ChromaServer, host: str
) -> None:
    """An IPv6 address in a store URL (here IPv4-mapped, so that the Chroma listening on
    127.0.0.1 answers it) reaches the server as the CRD and the spec take it: chromadb's
    client is handed the host in its brackets, not a bare "::ffff:7f00:1" it reads as a port."""
    assert StoreSpec.url_problem(f"http://{host}:{chroma_server.port}") is None
    with connect(StoreLocation(url=f"http://{host}:{chroma_server.port}")) as client:
        assert client.heartbeat() > 0
