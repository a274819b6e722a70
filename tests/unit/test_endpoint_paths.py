"""The model probe asks the endpoint the chat client would call, whatever the baseUrl's path:
the path the probe's GET reaches and the path of the chat client's POST (the openai SDK)
differ only in their last segment, on a real HTTP server that records them. A baseUrl the
SDK cannot extend (a query or a fragment: it appends its paths after them) is refused by
the spec, with a message that says so and does not repeat the URL."""

from __future__ import annotations

import json
import posixpath
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

import httpx
import httpx2
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from controller.api import EmbeddingConfig, ModelSpec, SessionSummarizerSpec
from controller.config import CONFIG
from controller.core.destinations import PATH_MESSAGE, endpoint_url_problem
from controller.embeddings.remote import openai_client
from controller.handlers.session_summarizer import check_model
from controller.status.conditions import spec_valid

ANSWER = {
    "id": "x",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
    ],
    "data": [],
}


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[int, list[str]]]:
    """A loopback HTTP server that records each request's path and answers 200."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen.append(self.path)
            body = json.dumps(ANSWER).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_POST = do_GET

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd.server_port, seen
    httpd.shutdown()
    httpd.server_close()


paths = st.lists(
    st.sampled_from(["", "v1", "a", ".", "..", "%41", "openai", "?q=1", "#f", "?api-version=1"]),
    max_size=4,
).map(lambda parts: "/" + "/".join(parts))


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(path=paths, slash=st.sampled_from(["", "/"]))
@example(path="/v1//.", slash="").via("a dot after an empty segment: the client resolves it")
@example(path="/v1//..", slash="").via("the same, one level up")
def test_the_model_probe_asks_where_the_chat_client_posts(
    server: tuple[int, list[str]], monkeypatch: pytest.MonkeyPatch, path: str, slash: str
) -> None:
    port, seen = server
    base = f"http://127.0.0.1:{port}{path}{slash}"
    if endpoint_url_problem(base) is not None:
        return
    # The memories may go to this endpoint (a store without a credential: the install's list).
    monkeypatch.setattr(
        "controller.backends.CONFIG",
        CONFIG.model_validate({"allowed_model_urls": f"http://127.0.0.1:{port}"}),
    )
    spec = SessionSummarizerSpec.model_validate(
        {"model": {"backend": "openai", "model": "m", "baseUrl": base}}
    )
    seen.clear()
    condition = check_model(spec, "agents")
    client, headers = openai_client(base, None, 5, 0)
    with client:
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}], extra_headers=headers
        )
    [probed, posted] = seen
    assert condition.status == "True", (base, condition.message)
    assert probed.removesuffix("models") == posted.removesuffix("chat/completions"), base
    assert probed.endswith("/models") and posted.endswith("/chat/completions"), (base, seen)


@given(
    part=st.sampled_from(["?", "#"]),
    # After a marker no message holds: the message must not echo what follows the URL's path
    # (a key in a query), and a bare drawn word ("the") may be a word of the message itself.
    rest=st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=20).map(
        lambda rest: f"Zq7{rest}"
    ),
)
def test_a_base_url_with_a_query_or_a_fragment_is_refused_saying_why(part: str, rest: str) -> None:
    url = f"https://model.example/v1{part}{rest}"
    for model in (ModelSpec, EmbeddingConfig):
        with pytest.raises(ValidationError) as err:
            model.model_validate({"baseUrl": url})
        assert "no query or fragment" in str(err.value)
        assert rest not in str(err.value)


def served(path: str) -> str:
    """The path a server that decodes and normalizes reaches (the allow-lists' reading)."""
    return posixpath.normpath("/" + unquote(path).replace("\\", "/").lstrip("/"))


SEGMENTS = ["", "v1", "a", ".", "..", "%2e", "%2E%2e", "%2f", "%5C", "\\", "a\\b", "%41", "x.y"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(SEGMENTS), max_size=5).map(lambda parts: "/" + "/".join(parts)))
@example("/v1//..").via("the report: an empty segment, then '..'")
def test_a_base_path_readers_resolve_two_ways_is_refused_by_the_spec_saying_so(path: str) -> None:
    """A path the HTTP clients (httpx for probes, httpx2 under the openai SDK) send as another
    path than the one a server resolves it to is SpecValid False, naming the field and what
    is wrong (it was refused later as if its address were not allowed); the rest is taken."""
    base = f"http://127.0.0.1:9{path}"
    sent = {url(base).raw_path.decode() for url in (httpx.URL, httpx2.URL)}
    two_ways = any(served(s) != served(path) for s in sent)
    for part, kind in (("model", "backend"), ("embedding", "provider")):
        try:
            SessionSummarizerSpec.model_validate(
                {part: {kind: "openai", "baseUrl": base, "model": "m"}}
            )
        except ValidationError as invalid:
            assert two_ways, (base, str(invalid))
            condition = spec_valid(invalid)
            assert (condition.status, condition.reason) == ("False", "InvalidSpec")
            assert condition.message == f"spec.{part}.baseUrl: Value error, baseUrl {PATH_MESSAGE}"
        else:
            assert not two_ways, (base, sent)
