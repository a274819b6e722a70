"""A plain-HTTP proxy in front of the real apiserver that can apply a request and drop its
answer: the request is forwarded (with the test's own credentials) and applied, then the
client's connection is closed without a byte of the response, as a timeout or a broken
connection does it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import urllib3
from kubernetes import client

from controller.kube import client as kube
from devenv.serving import serving


class DroppingProxy(ThreadingHTTPServer):
    drop: int = 0  # how many of the next PUTs and DELETEs under `path_part` lose their answer
    dropped: int = 0
    path_part: str = "sessionclaims"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def api(self) -> client.CustomObjectsApi:
        """A client that goes through the proxy, retrying as the operator's does."""
        cfg = client.Configuration()
        cfg.host = self.url
        cfg.retries = urllib3.Retry(total=3, read=0)
        return client.CustomObjectsApi(kube.BoundedApiClient(cfg))


class Relaying(BaseHTTPRequestHandler):
    """A handler that forwards every request (_forward) and logs nothing."""

    def _forward(self) -> None:
        raise NotImplementedError

    def do_GET(self) -> None:
        self._forward()

    do_PUT = do_POST = do_DELETE = do_PATCH = do_GET

    def log_message(self, *_: object) -> None:
        pass


class _Forward(Relaying):
    server: DroppingProxy

    def _forward(self) -> None:
        upstream = kube.api_client()
        cfg = upstream.configuration
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host",)}
        if token := cfg.get_api_key_with_prefix("authorization"):
            headers["Authorization"] = token
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        answer = upstream.rest_client.pool_manager.request(
            self.command, cfg.host + self.path, body=body, headers=headers, preload_content=True
        )
        proxy = self.server
        if proxy.drop and self.command in ("PUT", "DELETE") and proxy.path_part in self.path:
            proxy.drop -= 1
            proxy.dropped += 1
            self.close_connection = True
            return  # applied upstream; the answer is lost
        relay(self, answer)


def relay(handler: BaseHTTPRequestHandler, answer: urllib3.BaseHTTPResponse) -> None:
    """Sends the upstream's answer (read whole) to the handler's client."""
    handler.send_response(answer.status)
    for key, value in answer.headers.items():
        if key.lower() not in ("transfer-encoding", "connection", "content-length"):
            handler.send_header(key, value)
    handler.send_header("Content-Length", str(len(answer.data)))
    handler.end_headers()
    handler.wfile.write(answer.data)


@contextmanager
def dropping_proxy() -> Iterator[DroppingProxy]:
    proxy = DroppingProxy(("127.0.0.1", 0), _Forward)
    with serving(proxy):
        yield proxy
