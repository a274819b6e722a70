"""timeoutSeconds bounds a store, model or embeddings request as a whole: a server that
answers a byte at a time (each read well within the timeout) fails the call as a timeout
once the time is up, instead of holding the pass and its session claim for hours."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from controller.embeddings.minilm import EmbeddingError
from controller.embeddings.remote import OpenAICompatibleEmbedding
from controller.store.connection import StoreLocation, connect
from controller.store.errors import StoreUnavailable
from controller.summarizers.chat_model import ChatModelSummarizer
from controller.summarizers.chat_prompt import ChatModelConfig, ModelUnavailable
from tests.support.passes import Passes
from tests.unit.test_model_backend import SID, memories

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
