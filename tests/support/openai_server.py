"""An OpenAI-compatible server over real HTTP, for tests and benchmarks.

Runs aiohttp on 127.0.0.1 (free port) in a background thread with its own event loop, so the
client under test goes through real sockets, timeouts and status codes. Chat replies follow
a FIFO script; embeddings are deterministic.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx2
import numpy as np
from aiohttp import web
from openai import DefaultHttpxClient

Embedder = Callable[[list[str]], Sequence[Sequence[float]]]
Answer = Callable[[httpx2.Request], httpx2.Response]


@contextmanager
def answered_by(answer: Answer) -> Iterator[None]:
    """The model clients' own HTTP client (controller.embeddings.remote.openai_client), its
    requests answered in process by `answer` (httpx2's MockTransport), not over a socket."""
    from unittest import mock

    from controller.embeddings import remote

    client = functools.partial(DefaultHttpxClient, transport=httpx2.MockTransport(answer))
    with mock.patch.object(remote, "DefaultHttpxClient", client):
        yield


@dataclass(frozen=True)
class Reply:
    """A 200 chat completion with this message content (a dict is sent as JSON text)."""

    content: str | dict[str, Any]


@dataclass(frozen=True)
class Status:
    """An HTTP error response, e.g. ``Status(500)``."""

    code: int
    body: str = '{"error": {"message": "scripted failure"}}'


@dataclass(frozen=True)
class Delay:
    """Wait before answering (longer than the client timeout to make it time out)."""

    seconds: float
    then: Reply | Status | None = None


@dataclass(frozen=True)
class Truncated:
    """A 200 whose JSON body is cut off halfway (Content-Length matches the cut body)."""

    content: str = "this reply never arrives whole"


@dataclass(frozen=True)
class Flood:
    """A 200 whose JSON is followed by `padding` bytes of whitespace, or by whitespace without
    end (None): a server answering with far more than it was asked for."""

    content: str | dict[str, Any] = "ok"
    padding: int | None = None


Step = str | Reply | Status | Delay | Truncated | Flood


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    received_at: float = 0.0  # time.monotonic() on arrival (benchmarks measure slot use)
    usage: dict[str, int] | None = None  # a chat reply's token counts (bench/model_tokens.py)


def hash_embedding(text: str, dimension: int = 384) -> list[float]:
    """A unit vector that depends only on the text: stable across runs, no model needed."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    vector = np.random.default_rng(seed).standard_normal(dimension)
    return [float(x) for x in vector / np.linalg.norm(vector)]


def _tokens(text: str) -> int:
    return len(text.split())


@dataclass
class OpenAIServer:
    """The handle tests hold: script replies, read recorded requests, tune behaviour."""

    base_url: str = ""
    default_reply: str | dict[str, Any] = "ok"
    latency_seconds: float = 0.0
    embedding_dimension: int = 384
    embedder: Embedder | None = None
    reverse_embedding_order: bool = False
    chat_model: str = "test-chat"
    embedding_model: str = "test-embedding"
    # Builds the reply from the request body when no scripted step is queued (instead of
    # default_reply): a model whose answer depends on what it was asked.
    responder: Callable[[Any], str | dict[str, Any]] | None = None
    requests: list[RecordedRequest] = field(default_factory=list)
    _chat_script: deque[Step] = field(default_factory=deque)
    _embedding_script: deque[Step] = field(default_factory=deque)
    _models_script: deque[Step] = field(default_factory=deque)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def script_chat(self, *steps: Step) -> None:
        """Queue chat replies, served one per request; then ``default_reply``."""
        with self._lock:
            self._chat_script.extend(steps)

    def script_embeddings(self, *steps: Status | Delay | Flood) -> None:
        """Queue failures or delays for ``/embeddings``; then normal answers."""
        with self._lock:
            self._embedding_script.extend(steps)

    def script_models(self, *steps: Status | Flood) -> None:
        """Queue answers for ``GET /models`` (the health probe's); then the model list."""
        with self._lock:
            self._models_script.extend(steps)

    def end_chat_script(self) -> None:
        """Drops the queued chat replies: ``default_reply`` from the next request on."""
        with self._lock:
            self._chat_script.clear()

    def end_embedding_script(self) -> None:
        """Drops the queued embedding steps: normal answers from the next request on."""
        with self._lock:
            self._embedding_script.clear()

    def requests_to(self, path_suffix: str) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.path.endswith(path_suffix)]

    async def _record(self, request: web.Request) -> RecordedRequest:
        raw = await request.read()
        body = json.loads(raw) if raw else None
        recorded = RecordedRequest(
            request.method, request.path, dict(request.headers), body, time.monotonic()
        )
        with self._lock:
            self.requests.append(recorded)
        if self.latency_seconds:
            await asyncio.sleep(self.latency_seconds)
        return recorded

    def _next(self, script: deque[Step]) -> Step | None:
        with self._lock:
            return script.popleft() if script else None

    async def chat(self, request: web.Request) -> web.StreamResponse:
        recorded = await self._record(request)
        body = recorded.body
        step = self._next(self._chat_script)
        if isinstance(step, Delay):
            await asyncio.sleep(step.seconds)
            step = step.then
        if isinstance(step, Status):
            return web.Response(status=step.code, text=step.body, content_type="application/json")
        if step is None:
            step = Reply(self.responder(body) if self.responder else self.default_reply)
        elif isinstance(step, str):
            step = Reply(step)
        content = step.content if isinstance(step.content, str) else json.dumps(step.content)
        prompt = " ".join(str(m.get("content", "")) for m in body.get("messages", []))
        usage = {
            "prompt_tokens": _tokens(prompt),
            "completion_tokens": _tokens(content),
            "total_tokens": _tokens(prompt) + _tokens(content),
        }
        with self._lock:
            recorded.usage = usage
        completion = {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", self.chat_model),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
            "usage": usage,
        }
        text = json.dumps(completion)
        if isinstance(step, Truncated):
            text = text[: len(text) // 2]
        if isinstance(step, Flood):
            return await _flood(request, text, step.padding)
        return web.Response(text=text, content_type="application/json")

    async def embeddings(self, request: web.Request) -> web.StreamResponse:
        body = (await self._record(request)).body
        step = self._next(self._embedding_script)
        if isinstance(step, Delay):
            await asyncio.sleep(step.seconds)
            step = step.then
        if isinstance(step, Status):
            return web.Response(status=step.code, text=step.body, content_type="application/json")
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        if self.embedder is not None:
            loop = asyncio.get_running_loop()
            vectors = await loop.run_in_executor(None, self.embedder, texts)
        else:
            vectors = [hash_embedding(t, self.embedding_dimension) for t in texts]
        data = [
            {"object": "embedding", "index": i, "embedding": [float(x) for x in v]}
            for i, v in enumerate(vectors)
        ]
        if self.reverse_embedding_order:
            data.reverse()
        tokens = sum(_tokens(t) for t in texts)
        answer = {
            "object": "list",
            "data": data,
            "model": body.get("model", self.embedding_model),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
        if isinstance(step, Flood):
            return await _flood(request, json.dumps(answer), step.padding)
        return web.json_response(answer)

    async def models(self, request: web.Request) -> web.StreamResponse:
        await self._record(request)
        step = self._next(self._models_script)
        if isinstance(step, Status):
            return web.Response(status=step.code, text=step.body, content_type="application/json")
        ids = [self.chat_model, self.embedding_model]
        answer = {
            "object": "list",
            "data": [{"id": i, "object": "model", "owned_by": "test"} for i in ids],
        }
        if isinstance(step, Flood):
            return await _flood(request, json.dumps(answer), step.padding)
        return web.json_response(answer)


async def _flood(request: web.Request, text: str, padding: int | None) -> web.StreamResponse:
    """text, then `padding` spaces (None: until the client goes), chunked, and compressed
    when the client accepts it (a few KiB on the wire may then be megabytes read)."""
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    response.enable_compression()
    await response.prepare(request)
    await response.write(text.encode())
    sent, chunk = 0, b" " * 65536
    try:
        while padding is None or sent < padding:
            part = chunk if padding is None else chunk[: padding - sent]
            await response.write(part)
            sent += len(part)
        await response.write_eof()
    except ConnectionError:  # the client stopped reading
        pass
    return response


@contextmanager
def running_openai_server(**options: Any) -> Iterator[OpenAIServer]:
    """Serve until the block exits; options are ``OpenAIServer`` fields (e.g. latency_seconds)."""
    server = OpenAIServer(**options)
    app = web.Application()
    app.router.add_post("/v1/chat/completions", server.chat)
    app.router.add_post("/v1/embeddings", server.embeddings)
    app.router.add_get("/v1/models", server.models)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    server.base_url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    loop = asyncio.new_event_loop()
    # Cancel a scripted Delay when its client gives up, and do not wait for it on shutdown.
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=0.5, access_log=None)
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.SockSite(runner, sock).start())
    thread = threading.Thread(target=loop.run_forever, name="openai-test-server", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
