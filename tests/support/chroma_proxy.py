"""A plain-HTTP proxy in front of a real Chroma server that fails one write on the wire, as
a crash or a lost connection does: the write is either never forwarded (`lost`: the
process died before it was sent) or forwarded and applied, then the client's connection is
closed without a byte of the answer (`unanswered`: it died, or the connection broke, while
the answer was on its way). Every other request is forwarded as it is. A write is a POST
that changes a collection (add, upsert, update, delete); the proxy counts them from
`arm()`, names each (verb, collection id) in `writes`, and counts the bytes answered."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import Literal

import urllib3

from devenv.serving import serving
from tests.support.dropping_proxy import Relaying, relay

WRITE = re.compile(r"/collections/([0-9a-f-]{36})/(add|upsert|update|delete)$")
Failure = Literal["lost", "unanswered"]


@dataclass
class _Plan:
    fail_at: int | None = None  # the index (from arm) of the write to fail
    how: Failure = "lost"
    verb: str | None = None  # count only writes of this verb (add, upsert, update, delete)
    writes: list[tuple[str, str]] = field(default_factory=list)  # (verb, collection id)
    failed: list[tuple[str, str]] = field(default_factory=list)
    answered: int = 0  # bytes of the answers sent


class ChromaProxy(ThreadingHTTPServer):
    daemon_threads = True
    upstream: str = ""
    plan: _Plan
    lock: threading.Lock
    pool: urllib3.PoolManager

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def arm(self, fail_at: int | None, how: Failure = "lost", verb: str | None = None) -> None:
        """Counts writes (of `verb` only, if given) from now; fails the one at index
        fail_at (None: none)."""
        with self.lock:
            self.plan = _Plan(fail_at, how, verb)

    @property
    def writes(self) -> list[tuple[str, str]]:
        with self.lock:
            return list(self.plan.writes)

    @property
    def failed(self) -> list[tuple[str, str]]:
        with self.lock:
            return list(self.plan.failed)

    @property
    def answered(self) -> int:
        with self.lock:
            return self.plan.answered

    def _decide(self, method: str, path: str) -> Failure | None:
        found = WRITE.search(path.split("?")[0]) if method == "POST" else None
        if found is None:
            return None
        with self.lock:
            verb = self.plan.verb
            index = sum(verb in (None, w) for w, _ in self.plan.writes)
            self.plan.writes.append((found.group(2), found.group(1)))
            if index != self.plan.fail_at or verb not in (None, found.group(2)):
                return None
            self.plan.failed.append((found.group(2), found.group(1)))
            return self.plan.how


class _Forward(Relaying):
    server: ChromaProxy
    protocol_version = "HTTP/1.1"  # keep-alive, as the client expects

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        failure = self.server._decide(self.command, self.path)
        if failure == "lost":
            self.close_connection = True
            return  # never sent: nothing applied, no answer
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
        answer = self.server.pool.request(
            self.command,
            self.server.upstream + self.path,
            body=body,
            headers=headers,
            preload_content=True,
            redirect=False,
            retries=False,
        )
        if failure == "unanswered":
            self.close_connection = True
            return  # applied upstream; the answer is lost
        with self.server.lock:
            self.server.plan.answered += len(answer.data)
        relay(self, answer)


@contextmanager
def chroma_proxy(upstream: str) -> Iterator[ChromaProxy]:
    """A proxy to the Chroma server at `upstream` (its URL), failing nothing until armed."""
    proxy = ChromaProxy(("127.0.0.1", 0), _Forward)
    proxy.upstream = upstream.rstrip("/")
    proxy.plan = _Plan()
    proxy.lock = threading.Lock()
    proxy.pool = urllib3.PoolManager(maxsize=8)
    with serving(proxy):
        yield proxy
    proxy.pool.clear()
