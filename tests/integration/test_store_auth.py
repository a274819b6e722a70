"""A Chroma server behind a bearer token: the token comes from a Secret, is sent on every
request, and never shows on the object, in Events or in the operator log."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import aiohttp
import pytest
from aiohttp import web

from devenv.processes import wait_for
from tests.integration.harness import NS, Harness, interaction, load
from tests.support.credentials import generated

TOKEN = "s3cret-chroma-token"


@dataclass
class AuthProxy:
    """Forwards to the real Chroma server only requests bearing the expected token."""

    upstream: str
    url: str = ""
    seen: list[str | None] = field(default_factory=list)
    refusal: dict[str, str] = field(default_factory=lambda: {"error": "Unauthorized"})


@pytest.fixture
def auth_proxy(harness: Harness) -> Iterator[AuthProxy]:
    proxy = AuthProxy(upstream=harness.chroma.url)

    async def forward(request: web.Request) -> web.StreamResponse:
        auth = request.headers.get("Authorization")
        proxy.seen.append(auth)
        if auth != f"Bearer {TOKEN}":
            return web.json_response(proxy.refusal, status=401)
        async with (
            aiohttp.ClientSession() as session,
            session.request(
                request.method,
                proxy.upstream + request.path_qs,
                data=await request.read(),
                headers={"Content-Type": request.headers.get("Content-Type", "application/json")},
            ) as resp,
        ):
            body = await resp.read()
            return web.Response(status=resp.status, body=body, content_type=resp.content_type)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", forward)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    proxy.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app, access_log=None)
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.SockSite(runner, sock).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_the_store_token_comes_from_a_secret_and_never_leaks(
    harness: Harness, auth_proxy: AuthProxy
) -> None:
    sid = "it-token"
    load(harness.store(), [interaction(sid, 0, 1_760_000_000_000, "Rotate the signing keys.")])
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "chroma-token",
            "namespace": NS,
            # The Secret's owner allows its value to go to this Chroma, and nowhere else.
            "annotations": {"memorycore.io/allowed-urls": auth_proxy.url},
        },
        "data": {"token": base64.b64encode(TOKEN.encode()).decode()},
    }
    harness.kubectl("apply", "-f", "-", input=json.dumps(secret))
    summarizer = {
        "apiVersion": "memorycore.io/v1alpha1",
        "kind": "SessionSummarizer",
        "metadata": {"name": "tokened", "namespace": NS},
        "spec": {
            "store": {"url": auth_proxy.url, "authSecretRef": {"name": "chroma-token"}},
            "sweep": {"enabled": False},
            "reconcile": {"enabled": False},
        },
    }
    harness.kubectl("apply", "-f", "-", input=json.dumps(summarizer))
    res = harness.summaryctl("sunset", sid, "-n", NS, "--summarizer", "tokened", "--wait", "60")
    assert res.returncode == 0, res.stdout + res.stderr
    assert auth_proxy.seen and set(auth_proxy.seen) == {f"Bearer {TOKEN}"}
    shown = harness.kubectl("get", "ssum,ssumr,events", "-o", "json") + harness.log.read_text()
    assert TOKEN not in shown


def _wrong_token_secret(harness: Harness, name: str, url: str) -> None:
    """A store Secret allowed to go to url, holding a token the store refuses."""
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": NS,
            "annotations": {"memorycore.io/allowed-urls": url},
        },
        "data": {"token": base64.b64encode(b"nope").decode()},
    }
    harness.kubectl("apply", "-f", "-", input=json.dumps(secret))


def test_a_wrong_token_is_reported_on_the_summarizer(
    harness: Harness, auth_proxy: AuthProxy
) -> None:
    _wrong_token_secret(harness, "wrong-token", auth_proxy.url)
    summarizer = {
        "apiVersion": "memorycore.io/v1alpha1",
        "kind": "SessionSummarizer",
        "metadata": {
            "name": "wrong-token",
            "namespace": NS,
            "annotations": {"memorycore.io/allowed-urls": auth_proxy.url},
        },
        "spec": {
            "store": {"url": auth_proxy.url, "authSecretRef": {"name": "wrong-token"}},
            "sweep": {"enabled": False},
            "reconcile": {"enabled": False},
        },
    }
    harness.kubectl("apply", "-f", "-", input=json.dumps(summarizer))

    def store_condition() -> dict[str, str] | None:
        st = (
            json.loads(harness.kubectl("get", "ssumr", "wrong-token", "-o", "json")).get("status")
            or {}
        )
        conds = {c["type"]: c for c in st.get("conditions") or []}
        return conds.get("StoreReachable")

    cond = wait_for(store_condition, 60, 0.3, message="StoreReachable condition")
    assert cond["status"] == "False" and cond["reason"] == "StoreUnavailable"
    assert "nope" not in json.dumps(cond)


def test_a_refusal_quoting_another_credential_is_shown_masked(
    harness: Harness, auth_proxy: AuthProxy
) -> None:
    """A gateway in front of the store that refuses the token and quotes another credential
    (its upstream's): the SessionSummarizer's StoreReachable and Swept conditions, their
    Events and the log show the refusal, never the credential."""
    github, said = generated(5)["github-token"]
    opaque, header = generated(5)["credential-header"]
    auth_proxy.refusal = {"error": "Unauthorized", "message": f"{said} {header}"}
    _wrong_token_secret(harness, "refused-token", auth_proxy.url)
    summarizer = {
        "apiVersion": "memorycore.io/v1alpha1",
        "kind": "SessionSummarizer",
        "metadata": {"name": "refused-token", "namespace": NS},
        "spec": {
            "store": {"url": auth_proxy.url, "authSecretRef": {"name": "refused-token"}},
            "reconcile": {"enabled": False},
        },
    }
    harness.kubectl("apply", "-f", "-", input=json.dumps(summarizer))

    def failed() -> dict[str, dict[str, str]] | None:
        got = json.loads(harness.kubectl("get", "ssumr", "refused-token", "-o", "json"))
        conds = {c["type"]: c for c in (got.get("status") or {}).get("conditions") or []}
        both = [conds.get(t) for t in ("StoreReachable", "Swept")]
        return conds if all(c and c["status"] == "False" for c in both) else None

    conds = wait_for(failed, 90, 0.3, message="StoreReachable and Swept False")
    for type_ in ("StoreReachable", "Swept"):
        assert conds[type_]["reason"] == "StoreUnavailable", conds[type_]
        assert "HTTP 401" in conds[type_]["message"], conds[type_]
        assert "[redacted: github-token]" in conds[type_]["message"], conds[type_]
    events = json.loads(
        harness.kubectl(
            "get", "events", "-n", NS, "-o", "json",
            "--field-selector", "involvedObject.name=refused-token",
        )
    )["items"]  # fmt: skip
    assert any(e["reason"] == "StoreUnavailable" for e in events), events
    shown = json.dumps([conds, events]) + harness.log.read_text()
    for credential in (github, opaque):
        runs = {credential[i : i + 8] for i in range(len(credential) - 7)}
        assert not [run for run in runs if run in shown], credential
