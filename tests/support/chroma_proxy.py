"""A plain-HTTP proxy in front of a real Chroma server that fails chosen requests on the
wire: the next `fail` requests whose method and path match are either not forwarded (the
write never happens: a crash before it) or forwarded and applied with their answer lost (a
timeout, a dropped connection); the client's connection is closed without a byte of an
answer either way. Every other request goes through unchanged. For crash points between
two writes of the operator (tests/support/dropping_proxy.py does the same for the
apiserver)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import urllib3

from devenv.serving import serving
from tests.support.dropping_proxy import relay


@dataclass
class Failing:
    """Which requests fail next, and how many did."""

    fail: int = 0  # how many of the next matching requests fail
    method: str = "POST"
    path_part: str = "/delete"  # a request matches when its path contains this
    applied: bool = False  # forwarded (and applied) before its answer is lost
    failed: list[str] = field(default_factory=list)  # "METHOD path" of each failed request

    def take(self, method: str, path: str) -> bool:
        if self.fail and method == self.method and self.path_part in path:
            self.fail -= 1
            self.failed.append(f"{method} {path}")
            return True
        return False


class ChromaProxy(ThreadingHTTPServer):
    upstream: str
    rules: Failing
    pool: urllib3.PoolManager

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Forward(BaseHTTPRequestHandler):
    server: ChromaProxy
    protocol_version = "HTTP/1.1"

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        failing = self.server.rules.take(self.command, self.path)
        if failing and not self.server.rules.applied:
            self.close_connection = True
            return  # never sent: the write did not happen
        headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
        answer = self.server.pool.request(
            self.command, self.server.upstream + self.path, body=body, headers=headers
        )
        if failing:
            self.close_connection = True
            return  # applied upstream; the answer is lost
        relay(self, answer)

    do_GET = do_PUT = do_POST = do_DELETE = do_PATCH = _forward

    def log_message(self, *_: object) -> None:
        pass


@contextmanager
def chroma_proxy(upstream: str) -> Iterator[ChromaProxy]:
    """A proxy to the Chroma server at `upstream` (its base URL), failing nothing until
    told (proxy.rules)."""
    proxy = ChromaProxy(("127.0.0.1", 0), _Forward)
    proxy.upstream, proxy.rules = upstream.rstrip("/"), Failing()
    proxy.pool = urllib3.PoolManager(retries=False)
    with serving(proxy):
        yield proxy
