"""The bundled Chroma's token gate: `python -m controller gate`. Chroma's own server
authenticates nobody, so the chart runs it on the Pod's loopback behind this gate: a request
without the token (Bearer or X-Chroma-Token) gets 401 and is never forwarded, the token never
reaches Chroma, and a forward Chroma has not answered within --timeout-seconds gets 504 (the
operator's store client waits longer, so it hears it). /healthz and /readyz (Chroma's
heartbeat) are the kubelet's probes, which carry no token (docs/security.md)."""

from __future__ import annotations

import argparse
import hmac
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
from aiohttp import web

log = logging.getLogger("controller.chroma_gate")

# Not forwarded either way (RFC 9110 hop-by-hop); nor, to Chroma, the credential.
HOP_BY_HOP = frozenset((
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
    "transfer-encoding", "upgrade", "host", "content-length"))  # fmt: skip
REQUEST_DROPPED = HOP_BY_HOP | {"authorization", "x-chroma-token"}
UNAUTHORIZED = "Unauthorized: this Chroma needs a token (Authorization: Bearer <token>)"
FORWARD_TIMEOUT_SECONDS = 8.0
# Chroma's own bound on a request body (its max_payload_size_bytes): no more is held.
MAX_BODY_BYTES = 40 * 1024 * 1024


def _error(status: int, error: str, message: str) -> web.Response:
    return web.json_response({"error": error, "message": message}, status=status)


def make_app(token: str, upstream: str, timeout_seconds: float) -> web.Application:
    if not token:
        raise ValueError("the token is empty")
    if timeout_seconds <= 0:
        raise ValueError("the forwarding timeout must be positive")
    upstream = upstream.rstrip("/")

    async def session_ctx(app: web.Application) -> AsyncIterator[None]:
        timeout = aiohttp.ClientTimeout(total=timeout_seconds, sock_connect=5)
        app["session"] = aiohttp.ClientSession(timeout=timeout, auto_decompress=False)
        yield
        await app["session"].close()

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(request: web.Request) -> web.Response:
        try:
            async with request.app["session"].get(
                f"{upstream}/api/v2/heartbeat", timeout=aiohttp.ClientTimeout(total=5)
            ) as resp:
                ok = resp.status == 200
        except (TimeoutError, aiohttp.ClientError):
            ok = False
        return web.Response(status=200 if ok else 503, text="ok" if ok else "chroma not ready")

    async def forward(request: web.Request) -> web.StreamResponse:
        auth = request.headers.get("Authorization", "")
        bearer = auth[:7].lower() == "bearer "
        presented = auth[7:] if bearer else request.headers.get("X-Chroma-Token", "")
        if not hmac.compare_digest(presented.strip().encode(), token.encode()):
            return _error(401, "AuthError", UNAUTHORIZED)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in REQUEST_DROPPED}
        # Read whole, at most Chroma's own limit, so the upstream gets a Content-Length.
        try:
            body = await request.read() if request.body_exists else None
        except web.HTTPRequestEntityTooLarge:
            message = f"the request body is over {MAX_BODY_BYTES} bytes, Chroma's own limit"
            return _error(413, "PayloadTooLarge", message)
        try:
            async with request.app["session"].request(
                request.method, upstream + request.rel_url.raw_path_qs, headers=headers, data=body
            ) as resp:
                out = web.StreamResponse(status=resp.status, reason=resp.reason)
                for k, v in resp.headers.items():
                    if k.lower() not in HOP_BY_HOP:
                        out.headers.add(k, v)
                await out.prepare(request)
                async for chunk in resp.content.iter_chunked(65536):
                    await out.write(chunk)
                await out.write_eof()
                return out
        except TimeoutError:
            message = f"Chroma did not answer within the gate's {timeout_seconds:g}s"
            return _error(504, "GatewayTimeout", message)

    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app.cleanup_ctx.append(session_ctx)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_route("*", "/{tail:.*}", forward)
    return app


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m controller gate", description=__doc__)
    parser.add_argument("--listen", default="0.0.0.0:8000", help="host:port to serve")
    parser.add_argument("--upstream", default="http://127.0.0.1:8001", help="Chroma's URL")
    parser.add_argument("--token-file", type=Path, required=True, help="holds the token")
    parser.add_argument(
        "--timeout-seconds",
        type=float,
        default=FORWARD_TIMEOUT_SECONDS,
        help="longest a forwarded request may take (then 504)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    token = args.token_file.read_text().strip()
    host, _, port = args.listen.rpartition(":")
    log.info(
        "chroma gate on %s, forwarding authenticated requests to %s", args.listen, args.upstream
    )
    web.run_app(
        make_app(token, args.upstream, args.timeout_seconds),
        host=host.strip("[]") or None,
        port=int(port),
        access_log=None,
        print=None,
    )
    return 0
