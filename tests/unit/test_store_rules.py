"""The store's rules without a server: which collection names and URLs are valid (the same
rule in StoreSpec, both CRD copies and the chart's values schema, and Chroma's own), and
that every store failure reads as one useful line."""

from __future__ import annotations

import functools
import json
import re
import string
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import chromadb
import httpx
import pytest
import re2
import yaml
from chromadb.config import Settings
from chromadb.errors import InvalidArgumentError, NotFoundError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from controller.api import StoreSpec
from controller.core.destinations import HOST_LENGTH_MESSAGE, HOST_LENGTH_PATTERN
from controller.store.connection import StoreLocation, connect
from controller.store.errors import (
    MESSAGE_LIMIT,
    CollectionNotFound,
    InvalidStoreConfig,
    StoreUnavailable,
    describe_error,
)

ROOT = Path(__file__).resolve().parents[2]
CRD_COPIES = [
    ROOT / "crds" / "sessionsummarizers.memorycore.io.yaml",
    ROOT / "charts" / "session-summary-operator" / "crds" / "sessionsummarizers.memorycore.io.yaml",
]
VALUES_SCHEMA = ROOT / "charts" / "session-summary-operator" / "values.schema.json"

# -- names ----------------------------------------------------------------------------------

octet = st.one_of(st.integers(0, 300).map(str), st.sampled_from(["00", "01", "010", "255"]))
ipv4_like = st.lists(octet, min_size=3, max_size=5).map(".".join)
plain = st.text(
    alphabet=st.sampled_from("abcXYZ019._-"), min_size=0, max_size=12
)  # mostly the legal alphabet, so the edge rules get exercised
odd = st.text(alphabet=st.sampled_from("ab1.-_+ é:/\n"), min_size=0, max_size=8)
names = st.one_of(
    plain,
    odd,
    ipv4_like,
    st.tuples(plain, plain).map("+".join),
    st.tuples(plain, ipv4_like).map("+".join),
    st.tuples(ipv4_like, plain).map("+".join),
    st.integers(505, 520).map(lambda n: "a" * n),
    st.integers(250, 260).map(lambda n: "a" * n + "+" + "b" * n),
)


@pytest.fixture(scope="module")
def chroma_local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """chromadb's own validation (its Rust bindings), on a scratch path of its own."""
    path = tmp_path_factory.mktemp("chroma-names")
    yield chromadb.PersistentClient(path=str(path), settings=Settings(anonymized_telemetry=False))


def chroma_accepts(client: Any, name: str) -> bool:
    try:
        client.create_collection(name)
    except InvalidArgumentError as exc:
        assert "name" in str(exc), exc  # refused for its name, nothing else
        return False
    client.delete_collection(name)
    return True


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=names)
def test_store_spec_accepts_exactly_the_collection_names_chroma_accepts(
    chroma_local: Any, name: str
) -> None:
    ours = StoreSpec.collection_name_problem(name) is None
    assert ours == chroma_accepts(chroma_local, name), name


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("ab", "3-512 characters"),
        ("neo agent memory", "3-512 characters"),
        ("-neo-agent-memory", "3-512 characters"),
        ("neo-agent-memory.", "3-512 characters"),
        ("a" * 513, "3-512 characters"),
        ("neo..memory", "two consecutive periods"),
        ("10.0.0.1", "IPv4"),
        ("sessions+10.0.0.1", "IPv4"),
        ("a+b+c", "3-512 characters"),
    ],
)
def test_an_invalid_collection_name_is_refused_by_the_spec_naming_the_rule(
    name: str, why: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        StoreSpec.model_validate({"memoryCollection": name})
    text = str(caught.value)
    assert "memoryCollection" in text and why in text
    with pytest.raises(ValidationError, match="summaryCollection"):
        StoreSpec.model_validate({"summaryCollection": name})


@pytest.mark.parametrize("name", ["neo-agent-memory", "01.2.3.4", "1.2.3", "abc+def", "a" * 512])
def test_a_valid_collection_name_is_accepted_by_the_spec(name: str) -> None:
    assert StoreSpec.model_validate({"memoryCollection": name}).memory_collection == name


@settings(max_examples=200, deadline=None)
@given(
    summary=st.sampled_from(["neo-agent-sessions", "abc+def", "sessions-ledger", "abc"]),
    memory=st.sampled_from(["", "-ledger", "-ledger-ledger", "x", "-LEDGER"]),
)
def test_the_memory_collection_is_never_one_the_operator_writes(summary: str, memory: str) -> None:
    """The summary collection and its ledger are written; the agents' memories never are."""
    memory = summary + memory
    spec = {"memoryCollection": memory, "summaryCollection": summary}
    if memory in (summary, summary + "-ledger"):
        with pytest.raises(ValidationError, match="memoryCollection must differ"):
            StoreSpec.model_validate(spec)
    else:
        assert StoreSpec.model_validate(spec).memory_collection == memory


# -- the CRD and the chart state the same rules ---------------------------------------------


@functools.cache  # parsed once: a property test reads it for each of its examples
def crd_store_object(path: Path) -> dict[str, Any]:
    crd = yaml.safe_load(path.read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return dict(schema["properties"]["spec"]["properties"]["store"])


def crd_store(path: Path) -> dict[str, Any]:
    return dict(crd_store_object(path)["properties"])


def crd_accepts(field: dict[str, Any], value: str) -> bool:
    """The CRD field's checks as the apiserver runs them, in RE2 (Go's regexp): lengths,
    pattern (a search, anchored by the pattern itself), then the CEL rules this CRD uses."""
    if not field.get("minLength", 0) <= len(value) <= field.get("maxLength", 10**9):
        return False
    if "pattern" in field and not re2.search(field["pattern"], value):
        return False
    for rule in field.get("x-kubernetes-validations", []):
        contains = re.fullmatch(r"!self\.contains\('(.*)'\)", rule["rule"])
        refused = re.fullmatch(r"!self\.matches\('(.*)'\)", rule["rule"])
        required = re.fullmatch(r"self\.matches\(r'(.*)'\)", rule["rule"])
        assert contains or refused or required, f"a CEL rule this test does not model: {rule}"
        if contains and contains.group(1) in value:
            return False
        if refused and re2.search(refused.group(1), value):
            return False
        if required and not re2.search(required.group(1), value):
            return False
    return True


def longest(field: str) -> int:
    """The summary collection leaves room for its ledger's suffix."""
    if field == "database":
        return StoreSpec.NAME_MAX
    room = len(StoreSpec.LEDGER_SUFFIX) if field == "summaryCollection" else 0
    return StoreSpec.COLLECTION_NAME_MAX - room


def test_both_crd_copies_carry_the_spec_rules() -> None:
    first, second = (p.read_text() for p in CRD_COPIES)
    assert first == second
    store = crd_store(CRD_COPIES[0])
    assert store["url"]["x-kubernetes-validations"] == [
        {"rule": f"self.matches(r'{StoreSpec.URL_PATTERN}')", "message": StoreSpec.URL_MESSAGE},
        {"rule": f"self.matches(r'{HOST_LENGTH_PATTERN}')", "message": HOST_LENGTH_MESSAGE},
    ]
    for field in ("memoryCollection", "summaryCollection", "database"):
        schema = store[field]
        assert schema["pattern"] == StoreSpec.COLLECTION_NAME_PATTERN
        assert (schema["minLength"], schema["maxLength"]) == (3, longest(field))
        messages = [r["message"] for r in schema["x-kubernetes-validations"]]
        assert messages == [StoreSpec.DOUBLE_PERIOD_MESSAGE, StoreSpec.IPV4_MESSAGE]
        assert StoreSpec.collection_name_problem(schema["default"]) is None
    [apart] = crd_store_object(CRD_COPIES[0])["x-kubernetes-validations"]
    assert apart["message"] == StoreSpec.SAME_COLLECTION_MESSAGE
    assert f"self.summaryCollection + '{StoreSpec.LEDGER_SUFFIX}'" in apart["rule"]


@settings(max_examples=400, deadline=None)
@given(name=names)
def test_the_crd_and_the_spec_agree_on_every_collection_name(name: str) -> None:
    """... and a summary collection they admit has a ledger Chroma admits too."""
    store = crd_store(CRD_COPIES[0])
    for field in ("memoryCollection", "summaryCollection"):
        try:
            StoreSpec.model_validate({field: name})
            ours = True
        except ValidationError:
            ours = False
        assert crd_accepts(store[field], name) == ours, (field, name)
    if crd_accepts(store["summaryCollection"], name):
        assert StoreSpec.collection_name_problem(name + StoreSpec.LEDGER_SUFFIX) is None, name


tenants = st.one_of(
    names,
    st.text(alphabet=st.sampled_from("ab_/. ?%#é"), min_size=0, max_size=8),
    st.sampled_from(["x/../default_tenant", "default_tenant/.", "t" * 256, "t" * 257]),
)


@settings(max_examples=400, deadline=None)
@given(name=tenants)
def test_the_crd_and_the_spec_agree_on_every_tenant_and_database_name(name: str) -> None:
    """A database follows Chroma's collection-name rule; a tenant has 3 characters or more
    and no '/' (one would leave its segment of Chroma's URL, "x/../t" reading tenant t)."""
    store = crd_store(CRD_COPIES[0])
    for field, chroma in (
        ("database", StoreSpec.collection_name_problem(name) is None),
        ("tenant", len(name) >= 3 and "/" not in name),
    ):
        try:
            StoreSpec.model_validate({field: name})
            ours = True
        except ValidationError as refused:
            assert field in str(refused)
            ours = False
        assert ours == (chroma and len(name) <= StoreSpec.NAME_MAX), (field, name)
        assert crd_accepts(store[field], name) == ours, (field, name)


def test_the_chart_values_schema_carries_the_same_rules() -> None:
    schema = json.loads(VALUES_SCHEMA.read_text())["properties"]
    url = schema["chroma"]["properties"]["url"]
    assert (url["pattern"], url["allOf"]) == (
        StoreSpec.URL_PATTERN,
        [{"pattern": HOST_LENGTH_PATTERN}],
    )
    store = schema["summarizer"]["properties"]["store"]["properties"]
    for field in ("memoryCollection", "summaryCollection", "database"):
        assert store[field]["pattern"] == StoreSpec.COLLECTION_NAME_PATTERN
        assert store[field]["maxLength"] == longest(field)
        refused = [p["pattern"] for p in store[field]["not"]["anyOf"]]
        assert refused == ["[.][.]", StoreSpec.IPV4_PART_PATTERN]
    assert (store["tenant"]["minLength"], store["tenant"]["pattern"]) == (3, "^[^/]*$")


# -- URLs -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://chroma:8000",
        "https://chroma.memory.svc.cluster.local",
        "http://127.0.0.1:8000/",
        "http://[::1]:8000",
        "https://chroma:65535",
    ],
)
def test_a_server_address_is_a_valid_store_url(url: str) -> None:
    assert StoreSpec.model_validate({"url": url}).url == url


@pytest.mark.parametrize(
    "url",
    [
        "chroma:8000",
        "ftp://chroma",
        "http://",
        "http://:8000",
        "http://chroma:0",
        "http://chroma:65536",
        "http://chroma:8000/api/v2",
        "http://chroma:8000?tenant=x",
        "http://user:pw@chroma",
        "http://chro ma",
        "http://chroma\n",
        "http://[::1::]:8000",
    ],
)
def test_an_invalid_store_url_is_refused_by_the_spec_and_by_connect(url: str) -> None:
    with pytest.raises(ValidationError, match="url"):
        StoreSpec.model_validate({"url": url})
    with pytest.raises(InvalidStoreConfig, match="http"):
        connect(StoreLocation(url=url))


dotted_hosts = st.lists(st.sampled_from(["0", "1", "01", "255", "999", "a", ""]), max_size=5).map(
    ".".join
)
bracketed_hosts = (
    st.lists(st.sampled_from(["0", "1", "ffff", "12345", ""]), max_size=10)
    .map(":".join)
    .map("[{}]".format)
)


@settings(max_examples=1000, deadline=None)
@given(
    url=st.one_of(
        st.text(max_size=30),
        st.tuples(
            st.sampled_from(["http://", "https://", "HTTP://", "http:/"]),
            st.text(alphabet=st.sampled_from("ab1.-_:[]/@? é\t\u00a0"), max_size=12),
        ).map("".join),
        st.tuples(
            st.sampled_from(["http://", "https://"]),
            st.one_of(dotted_hosts, bracketed_hosts),
            st.sampled_from(["", ":", ":0", ":8000", ":65536", "/", "/x"]),
        ).map("".join),
    )
)
def test_a_store_url_the_crd_admits_is_one_the_spec_and_the_client_read(url: str) -> None:
    """The apiserver (RE2) and the spec (Python's re) admit the same store URLs, and one
    they admit has the host and port Chroma's HTTP client (httpx) reads, and nothing else."""
    ours = StoreSpec.url_problem(url) is None
    for path in CRD_COPIES:
        assert crd_accepts(crd_store(path)["url"], url) == ours, url
    values = json.loads(VALUES_SCHEMA.read_text())["properties"]["chroma"]["properties"]["url"]
    patterns = [values["pattern"]] + [p["pattern"] for p in values["allOf"]]
    assert all(re2.search(p, url) for p in patterns) == ours
    if not ours:
        return
    parsed = urlsplit(url)  # what connect() reads: scheme, host and port, nothing else
    assert parsed.scheme in ("http", "https") and parsed.hostname
    assert parsed.port is None or 1 <= parsed.port <= 65535
    assert parsed.path in ("", "/") and not parsed.query and not parsed.fragment
    assert parsed.username is None and parsed.password is None
    sent = httpx.URL(url)
    assert (sent.host, sent.port) == (parsed.hostname.lower(), parsed.port), url


# -- one-line failure messages --------------------------------------------------------------

HTML_PAGE = (
    "<!DOCTYPE html>\n<html>\n<head><title>404 Not Found</title></head>\n"
    "<body>\n<h1>Not Found</h1>\n<p>The requested URL was not found on this server.</p>\n"
    "</body>\n</html>\n"
)
EXCEPTION_TYPES: list[type[BaseException]] = [
    Exception,
    ValueError,
    RuntimeError,
    TimeoutError,
    OSError,
    ConnectionRefusedError,
    KeyError,
    InvalidArgumentError,
    NotFoundError,
    StoreUnavailable,
]
messages = st.one_of(
    st.just(""),
    st.text(alphabet=" \t\n\r\x0b\x0c\x85\u2028", max_size=5),
    st.text(max_size=60),
    st.just(HTML_PAGE),
    st.text(min_size=300, max_size=3000),
    st.lists(st.text(max_size=40), min_size=2, max_size=60).map("\n".join),
)


def build(
    kinds: list[type[BaseException]], texts: list[str], implicit: list[bool]
) -> BaseException:
    """An exception chain: kinds[0] raised from kinds[1] (or during it), and so on."""
    inner: BaseException | None = None
    for kind, text, is_context in reversed(list(zip(kinds, texts, implicit, strict=True))):
        exc = kind(text)
        if inner is not None:
            if is_context:
                exc.__context__ = inner
            else:
                exc.__cause__ = inner
        inner = exc
    assert inner is not None
    return inner


def assert_one_useful_line(message: str) -> None:
    assert message.strip() == message and message
    assert "\n" not in message and "\r" not in message and len(message) <= MESSAGE_LIMIT
    assert "<html" not in message.lower() and "<!doctype" not in message.lower()
    assert not message.endswith(":")


chains = st.integers(1, 4).flatmap(
    lambda n: st.tuples(
        st.lists(st.sampled_from(EXCEPTION_TYPES), min_size=n, max_size=n),
        st.lists(messages, min_size=n, max_size=n),
        st.lists(st.booleans(), min_size=n, max_size=n),
    )
)


@settings(max_examples=500, deadline=None)
@given(chain=chains)
def test_every_failure_reads_as_one_useful_line(
    chain: tuple[list[type[BaseException]], list[str], list[bool]],
) -> None:
    exc = build(*chain)
    message = describe_error(exc)
    assert_one_useful_line(message)
    if not any(c.isalnum() for c in str(exc)):
        assert message.startswith(type(exc).__name__)  # the type says what, when str() can't
    wrapped = f"cannot connect to Chroma at http://chroma:8000: {message}"
    assert not wrapped.endswith(": ")


def test_a_failure_with_no_text_names_its_type_and_its_cause() -> None:
    assert describe_error(TimeoutError()) == "TimeoutError"
    exc = ValueError("")
    exc.__cause__ = httpx.ConnectError("[Errno 111] Connection refused")
    assert describe_error(exc) == "ValueError ([Errno 111] Connection refused)"


def test_a_generic_message_gets_the_root_cause() -> None:
    exc = ValueError("Could not connect to a Chroma server. Are you sure it is running?")
    exc.__context__ = httpx.ConnectError("[Errno -2] Name or service not known")
    assert describe_error(exc).endswith("running? ([Errno -2] Name or service not known)")


def test_a_cycle_in_the_chain_still_ends() -> None:
    a, b = ValueError(""), RuntimeError("")
    a.__context__, b.__context__ = b, a
    assert describe_error(a) == "ValueError"


def http_failure(status: int, body: str, content_type: str = "text/html") -> Exception:
    """What chromadb raises for a non-Chroma answer: Exception(body) raised while handling
    httpx's HTTPStatusError."""
    request = httpx.Request("GET", "http://proxy:8000/api/v2/auth/identity")
    response = httpx.Response(
        status, text=body, headers={"content-type": content_type}, request=request
    )
    exc = Exception(body)
    exc.__context__ = httpx.HTTPStatusError("failed", request=request, response=response)
    return exc


@pytest.mark.parametrize(
    ("status", "body", "content_type", "says"),
    [
        (404, HTML_PAGE, "text/html", "with an HTML page"),
        (404, "", "text/plain", "with an empty body"),
        (502, HTML_PAGE, "text/plain", "with an HTML page"),
        (404, "x\n" * 40, "text/plain", "-line body"),
        (503, "Service Unavailable", "text/plain", "'Service Unavailable'"),
    ],
)
def test_a_non_chroma_answer_is_described_not_pasted(
    status: int, body: str, content_type: str, says: str
) -> None:
    message = describe_error(http_failure(status, body, content_type))
    assert_one_useful_line(message)
    assert f"the server at http://proxy:8000 answered HTTP {status}" in message
    assert "GET /api/v2/auth/identity" in message and says in message
    assert "is the URL a Chroma server" in message


def test_an_error_answer_in_chromas_shape_keeps_its_words() -> None:
    body = '{"error": "QuotaError", "message": "too many collections"}'
    message = describe_error(http_failure(500, body, "application/json"))
    assert message.endswith("GET /api/v2/auth/identity: QuotaError too many collections")


@pytest.mark.parametrize("status", [401, 403])
def test_a_refused_token_says_so(status: int) -> None:
    message = describe_error(http_failure(status, '{"error": "Unauthorized"}', "application/json"))
    assert_one_useful_line(message)
    assert f"HTTP {status}" in message and "(Unauthorized)" in message
    assert message.endswith("the token is missing or refused")


def test_a_200_answer_that_is_not_json_is_described() -> None:
    try:
        json.loads(HTML_PAGE)
    except json.JSONDecodeError as decode:
        wrapped = ValueError(str(decode))
        wrapped.__context__ = decode
        message = describe_error(wrapped)
    assert_one_useful_line(message)
    assert "HTML page instead of JSON" in message


@dataclass
class EchoingServer:
    """An HTTP server that puts the Authorization header it was sent in its answer (a
    debugging proxy, an echo service, a server that quotes the token it refuses)."""

    url: str
    answer: tuple[int, str, str] = (401, "json", "{auth}")  # status, body kind, its text


@pytest.fixture(scope="module")
def echoing_server() -> Iterator[EchoingServer]:
    server = EchoingServer(url="")

    class Echo(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            status, kind, template = server.answer
            text = template.replace("{auth}", self.headers.get("Authorization", ""))
            if kind == "json":
                text = json.dumps({"error": "Refused", "message": text})
            body = text.encode()
            self.send_response(status)
            self.send_header("Content-Type", f"application/{kind}" if kind == "json" else kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_POST = do_GET

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    server.url = f"http://127.0.0.1:{httpd.server_port}"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield server
    httpd.shutdown()
    httpd.server_close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    token=st.text(alphabet=string.ascii_uppercase + string.digits + "-_.~+/", min_size=12),
    status=st.sampled_from([200, 400, 401, 403, 404, 500, 502]),
    kind=st.sampled_from(["json", "text/plain", "text/html"]),
    template=st.lists(
        st.one_of(st.just("{auth}"), st.sampled_from(["bad", "token", ":", "refused", "\n"])),
        min_size=1,
        max_size=6,
    ).map(" ".join),
)
def test_a_store_answer_that_echoes_the_token_never_shows_it(
    echoing_server: EchoingServer, token: str, status: int, kind: str, template: str
) -> None:
    echoing_server.answer = (status, kind, template)
    with pytest.raises((StoreUnavailable, InvalidStoreConfig)) as raised:
        connect(StoreLocation(url=echoing_server.url, token=token, timeout_seconds=5))
    message = str(raised.value)
    assert token[:8] not in message, message


# -- a missing collection -------------------------------------------------------------------


def test_a_missing_collection_names_itself_the_nearest_name_and_some_others() -> None:
    existing = [f"team-{i:02d}-memory" for i in range(25)] + ["neo-agent-memory"]
    exc = CollectionNotFound("neo-agnet-memory", "memory", "http://chroma:8000 (t/d)", existing)
    text = str(exc)
    assert text.startswith(
        "memory collection 'neo-agnet-memory' does not exist in Chroma at http://chroma:8000 (t/d)"
    )
    assert "did you mean 'neo-agent-memory'?" in text
    listed = text.split("existing collections: ")[1]
    assert len(listed.split(", ")) == CollectionNotFound.SHOWN and "(and 16 more)" in listed
    assert (exc.collection, exc.role) == ("neo-agnet-memory", "memory")
    assert not isinstance(exc, StoreUnavailable)  # retrying soon does not fix a typo


def test_a_missing_collection_in_an_empty_database_says_so() -> None:
    text = str(CollectionNotFound("sessions", "summary", "x", []))
    assert text.endswith("the database has no collections")


def test_asking_for_no_sessions_asks_the_store_nothing() -> None:
    """An idle sweep reads the states, ledger heads and digests of no session: no request, so
    no collection lookup (nor the listing a missing one costs) and no failure while the store
    is down."""
    from controller.store.connection import StoreLocation
    from controller.store.memory_store import MemoryStore

    class NoRequests:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"asked the store: {name}")

    store = MemoryStore(cast(Any, NoRequests()), StoreLocation(url="http://chroma:8000"))
    assert store.summary_states([]) == {}
    assert store.ledger_heads([]) == {}
    assert store.rows_digests([]) == {}
