"""timeoutSeconds bounds a store, model or embeddings request as a whole: a server that
answers a byte at a time (each read well within the timeout) fails the call as a timeout
once the time is up, instead of holding the pass and its session claim for hours. And a
model or embeddings answer is read up to a size: a server that floods its answer fails
the call at that size, instead of filling the operator's memory until the timeout. The
model's health probe is bound alike: it ends as ModelReady False, never holds the timer."""

from __future__ import annotations

import json
import socket
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.api import Condition, SessionSummarizerSpec
from controller.config import CONFIG
from controller.core.destinations import parse_prefixes
from controller.embeddings import remote
from controller.embeddings.minilm import EmbeddingError
from controller.embeddings.remote import OpenAICompatibleEmbedding
from controller.handlers.session_summarizer import check_model
from controller.store.connection import StoreLocation, connect
from controller.store.errors import StoreUnavailable
from controller.summarizers.chat_model import ChatModelSummarizer
from controller.summarizers.chat_prompt import ChatModelConfig, ModelUnavailable
from tests.support.openai_server import Flood, OpenAIServer, Status, running_openai_server
from tests.support.passes import Passes, PassResult
from tests.unit.test_model_backend import SID, memories, valid_reply

TIMEOUT = 1.0


@pytest.fixture
def dripping_url() -> Iterator[str]:
    """An endpoint that sends its headers at once, then its body a byte every 0.1 s."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def drip(conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)
            head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            conn.sendall(head + b"Content-Length: 100000\r\n\r\n")
            while not stop.wait(0.1):
                try:
                    conn.sendall(b" ")
                except OSError:
                    return

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=drip, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    stop.set()
    listener.close()


def chat(url: str) -> None:
    config = ChatModelConfig(base_url=url, model="m", timeout_seconds=TIMEOUT, max_retries=0)
    Passes(ChatModelSummarizer(config))(SID, memories("Add retries."), None)


def embed(url: str) -> None:
    OpenAICompatibleEmbedding(url, "m", timeout_seconds=TIMEOUT, retries=0)(["a"])


def store(url: str) -> None:
    connect(StoreLocation(url=url.removesuffix("/v1"), timeout_seconds=TIMEOUT))


@pytest.mark.parametrize(
    ("call", "error", "says"),
    [
        (chat, ModelUnavailable, "timed out"),
        (embed, EmbeddingError, "Timeout"),
        (store, StoreUnavailable, "no answer within"),
    ],
)
def test_an_answer_sent_a_byte_at_a_time_times_out_as_a_whole(
    dripping_url: str, call: Callable[[str], None], error: type[Exception], says: str
) -> None:
    raised: list[BaseException] = []

    def run() -> None:
        try:
            call(dripping_url)
        except BaseException as exc:
            raised.append(exc)

    started = time.monotonic()
    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(TIMEOUT * 8)
    assert not worker.is_alive(), f"still reading after {time.monotonic() - started:.0f}s"
    assert len(raised) == 1 and isinstance(raised[0], error), raised
    assert says in str(raised[0])


@pytest.fixture(scope="module")
def openai_server() -> Iterator[OpenAIServer]:
    with running_openai_server() as server:
        yield server


def chat_flooded(server: OpenAIServer, padding: int | None, timeout: float = TIMEOUT) -> None:
    server.script_chat(Flood(valid_reply(), padding))
    config = ChatModelConfig(base_url=server.base_url, model="m", timeout_seconds=timeout)
    Passes(ChatModelSummarizer(config))(SID, memories("Add retries."), None)


def embed_flooded(server: OpenAIServer, padding: int | None, timeout: float = TIMEOUT) -> None:
    server.script_embeddings(Flood(padding=padding))
    OpenAICompatibleEmbedding(server.base_url, "m", timeout_seconds=timeout)(["a"])


FLOODED = [(chat_flooded, ModelUnavailable), (embed_flooded, EmbeddingError)]


@dataclass
class GzipServer:
    """A model endpoint answering every request with `answer` labelled `Content-Encoding:
    coding`, whatever it was asked (the model client asks Accept-Encoding: identity);
    `heads`: each request's head."""

    url: str
    answer: bytes = b""
    coding: str = "gzip"
    heads: list[bytes] = field(default_factory=list)


@pytest.fixture(scope="module")
def gzip_server() -> Iterator[GzipServer]:
    listener = socket.create_server(("127.0.0.1", 0))
    server = GzipServer(f"http://127.0.0.1:{listener.getsockname()[1]}/v1")

    def serve(conn: socket.socket) -> None:
        with conn:
            server.heads.append(conn.recv(65536))
            head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            head += b"Content-Encoding: %s\r\nConnection: close\r\n" % server.coding.encode()
            head += b"Content-Length: %d\r\n\r\n" % len(server.answer)
            conn.sendall(head + server.answer)

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield server
    listener.close()


def chat_answer(padding: int = 0) -> bytes:
    """A chat completion with a valid reply and `padding` spaces after it."""
    choice = {"index": 0, "message": {"role": "assistant", "content": json.dumps(valid_reply())}}
    return json.dumps({"object": "chat.completion", "choices": [choice]}).encode() + b" " * padding


def gzipped_chat_answer(padding: int) -> bytes:
    """chat_answer() and `padding` spaces after it, gzipped: 64 MiB of it is 64 KiB on the
    wire."""
    packer = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    packed = [packer.compress(chat_answer())]
    packed += [packer.compress(b" " * 2**20) for _ in range(padding // 2**20)]
    return b"".join([*packed, packer.flush()])


def chat_with(server: GzipServer, answer: bytes, coding: str = "gzip") -> PassResult:
    server.answer, server.coding = answer, coding
    config = ChatModelConfig(base_url=server.url, model="m", max_retries=0)
    result = Passes(ChatModelSummarizer(config))(SID, memories("Add retries."), None)
    assert isinstance(result, PassResult), result
    return result


def test_a_gzip_bomb_fails_at_the_size_bound_of_what_it_inflates_to(
    gzip_server: GzipServer,
) -> None:
    """The model client bounded the bytes that came (16 MiB): a server compressing though
    asked not to sent 64 KiB that inflated to 64 MiB, read whole (and 16 MiB to 16 GiB)."""
    bomb = gzipped_chat_answer(64 * 2**20)
    assert len(bomb) < 2**20
    with pytest.raises(ModelUnavailable, match="answer larger than 16 MiB"):
        chat_with(gzip_server, bomb)
    assert b"accept-encoding: identity" in gzip_server.heads[-1].lower()


def test_a_compressed_answer_within_the_bound_is_read_as_before(gzip_server: GzipServer) -> None:
    result = chat_with(gzip_server, gzipped_chat_answer(2**20))
    assert result.summary.title == valid_reply()["title"]


# zlib's wbits of each coding the clients inflate (the others are sent unchanged here).
PACKED = {"gzip": zlib.MAX_WBITS | 16, "deflate": zlib.MAX_WBITS}


def packed(answer: bytes, codings: list[str]) -> bytes:
    for coding in codings:  # in the order they are listed, which is the order applied
        if coding in PACKED:
            packer = zlib.compressobj(9, zlib.DEFLATED, PACKED[coding])
            answer = packer.compress(answer) + packer.flush()
    return answer


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.sampled_from(["identity", "gzip", "deflate", "br", "zstd", "compress", "x-foo"]),
        min_size=1,
        max_size=7,
    )
)
def test_every_coding_listed_is_inflated_within_the_bound_or_the_answer_refused(
    gzip_server: GzipServer, codings: list[str]
) -> None:
    """An answer is read when each coding its Content-Encoding lists is one inflated here
    (up to 5 of them, as httpx reads); otherwise it is refused with the codings named. Only
    gzip was inflated, the header dropped: `br, gzip` was read as if `gzip` (any br inside
    unread, garbage), `br` alone was left to the HTTP client to inflate whole, unbounded,
    and 3,000 gzips raised RecursionError out of the pass."""
    listed = ", ".join(codings)
    inflated = [coding for coding in codings if coding != "identity"]
    if set(inflated) <= set(PACKED) and len(inflated) <= 5:
        result = chat_with(gzip_server, packed(chat_answer(), codings), listed)
        assert result.summary.title == valid_reply()["title"]
    else:
        named = ", ".join(inflated)
        with pytest.raises(ModelUnavailable, match=f"answer compressed as '{named}' though"):
            chat_with(gzip_server, packed(chat_answer(), codings), listed)


@settings(max_examples=20, deadline=None)
@given(st.lists(st.sampled_from(["gzip", "deflate", "raw deflate"]), min_size=1, max_size=5))
def test_deflate_is_read_with_or_without_its_zlib_header(
    gzip_server: GzipServer, layers: list[str]
) -> None:
    """'deflate' sent raw, without its zlib header, as some servers do: httpx reads it (it
    retries raw), and so did the model clients, until they inflated answers themselves."""
    answer = chat_answer()
    for layer in layers:
        packer = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
        answer = packer.compress(answer) + packer.flush() if layer == "raw deflate" else (
            packed(answer, [layer]))  # fmt: skip
    listed = ", ".join(layer.removeprefix("raw ") for layer in layers)
    assert chat_with(gzip_server, answer, listed).summary.title == valid_reply()["title"]


def test_an_answer_of_many_codings_is_refused_before_it_is_inflated(
    gzip_server: GzipServer,
) -> None:
    many = ["gzip"] * 3000
    with pytest.raises(ModelUnavailable, match="answer compressed as 'gzip, gzip, "):
        chat_with(gzip_server, packed(chat_answer(), many), ", ".join(many))


@pytest.mark.parametrize("padding", [64 * 2**20, None], ids=["64MiB", "endless"])
@pytest.mark.parametrize(("call", "error"), FLOODED, ids=["model", "embeddings"])
def test_a_flooded_answer_fails_at_its_size_bound_not_at_the_timeout(
    openai_server: OpenAIServer,
    call: Callable[..., None],
    error: type[Exception],
    padding: int | None,
) -> None:
    started = time.monotonic()
    with pytest.raises(error, match="answer larger than 16 MiB"):
        call(openai_server, padding, timeout=30.0)
    assert time.monotonic() - started < 15


@settings(max_examples=20, deadline=None)
@given(
    st.sampled_from(FLOODED),
    st.one_of(st.integers(0, 2**15), st.integers(2**16 + 1, 2**18)),
)
def test_an_answer_is_used_exactly_when_it_is_within_the_bound(
    openai_server: OpenAIServer, flooded: tuple[Callable[..., None], type[Exception]], padding: int
) -> None:
    """The bound, made 64 KiB here: an answer padded to half of it is read and used; one
    padded past it is refused with the bound named, whichever client reads it."""
    call, error = flooded
    with mock.patch.object(remote, "MAX_ANSWER_BYTES", 2**16):
        if padding <= 2**15:
            call(openai_server, padding)
        else:
            with pytest.raises(error, match=r"answer larger than 0\.0625 MiB"):
                call(openai_server, padding)


def probe(url: str, timeout: float) -> Condition:
    model = {"backend": "openai", "baseUrl": url, "model": "m", "timeoutSeconds": timeout}
    return check_model(SessionSummarizerSpec.model_validate({"model": model}), "agents")


@pytest.mark.parametrize(
    ("answer", "timeout", "says"),
    [
        ("drip", 1, "answer not whole in time"),
        (Flood(padding=64 * 2**20), 10, "answer larger than 16 MiB"),
        (Flood(padding=None), 10, "answer larger than 16 MiB"),
        (Status(503), 1, "answered 503"),
        ("refused", 1, "Connection refused"),
    ],
    ids=["drip", "64MiB", "endless", "503", "refused"],
)
def test_the_model_probe_ends_within_its_timeout_and_says_why(
    monkeypatch: pytest.MonkeyPatch,
    openai_server: OpenAIServer,
    dripping_url: str,
    answer: str | Flood | Status,
    timeout: float,
    says: str,
) -> None:
    """GET {baseUrl}/models goes through the model clients' HTTP client: bound in time and
    size as a whole, so a server that drips or floods it ends the probe as ModelReady False
    with the cause, instead of holding the SessionSummarizer's timer or filling the memory."""
    allowed, _ = parse_prefixes("http://127.0.0.1:*")
    monkeypatch.setattr("controller.backends.CONFIG", CONFIG.model_copy(update={
        "allowed_model_urls": tuple(allowed)}))  # fmt: skip
    url = {"drip": dripping_url, "refused": "http://127.0.0.1:1/v1"}.get(str(answer))
    if url is None:
        openai_server.script_models(answer)  # type: ignore[arg-type]
    result: list[Condition] = []
    worker = threading.Thread(
        target=lambda: result.append(probe(url or openai_server.base_url, timeout)), daemon=True
    )
    started = time.monotonic()
    worker.start()
    worker.join(timeout + 5)
    assert not worker.is_alive(), f"still probing after {time.monotonic() - started:.0f}s"
    (condition,) = result
    assert (condition.status, condition.reason) == ("False", "ModelUnavailable"), condition
    assert f"{url or openai_server.base_url}/models" in condition.message
    assert says in condition.message
