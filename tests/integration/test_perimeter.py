"""The operator is nobody's deputy (docs/security.md), on the real control plane with the
operator as a process: a SessionSummarizer that points a Secret at a URL the Secret does not
allow is refused with a condition, and the URL's listener receives nothing; with the URL
allowed, it works. The apiserver refuses credentials in URLs and over-long fields. A second
operator runs the options: unannotated Secrets still allowed (with a warning), and an
operator-wide list of endpoints."""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from controller.core.destinations import (
    ALLOWED_URLS_ANNOTATION,
    ENDPOINT_URL_MESSAGE,
    PATH_MESSAGE,
    endpoint_url_problem,
)
from controller.core.naming import summary_object_name
from devenv.chroma import ChromaServer
from devenv.controlplane import ControlPlane
from devenv.operator import start_operator
from devenv.processes import stop, tail, wait_for
from tests.integration.harness import NS, Harness, interaction, load
from tests.support.openai_server import OpenAIServer, running_openai_server

SECRET_VALUE = "victim-credential-7Hq2"
T0 = 1_760_000_000_000
REPLY = {
    "title": "Key rotation",
    "category": "other",
    "user_requests": ["Rotate the keys."],
    "questions_and_decisions": [],
    "design_choices": [],
    "corrections_and_feedback": [],
    "current_state": ["Keys rotated."],
    "technologies": [],
}


def model_part(
    base_url: str, secret_name: str | None = None, model: str = "test-chat"
) -> dict[str, Any]:
    part: dict[str, Any] = {"backend": "openai", "baseUrl": base_url, "model": model}
    if secret_name:
        part["apiKeySecretRef"] = {"name": secret_name}
    return part


@dataclass
class Listener:
    """A TCP server that records every connection made to it and answers nothing."""

    url: str = ""
    connections: list[bytes] = field(default_factory=list)


@pytest.fixture
def listener() -> Iterator[Listener]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.settimeout(0.2)
    found = Listener(url=f"http://127.0.0.1:{sock.getsockname()[1]}")
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(1)
                try:
                    found.connections.append(conn.recv(65536))
                except OSError:
                    found.connections.append(b"")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield found
    finally:
        done.set()
        thread.join(5)
        sock.close()


def apply(kubectl: Callable[..., str], obj: dict[str, Any]) -> None:
    kubectl("apply", "-f", "-", input=json.dumps(obj))


def secret(namespace: str, name: str, key: str, allowed: str | None) -> dict[str, Any]:
    annotations = {ALLOWED_URLS_ANNOTATION: allowed} if allowed is not None else {}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
        "data": {key: base64.b64encode(SECRET_VALUE.encode()).decode()},
    }


def summarizer(namespace: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    spec = {"sweep": {"enabled": False}, "reconcile": {"enabled": False}, **spec}
    return {
        "apiVersion": "memorycore.io/v1alpha1",
        "kind": "SessionSummarizer",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def sunset_object(namespace: str, sid: str, summarizer_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "memorycore.io/v1alpha1",
        "kind": "SessionSummary",
        "metadata": {"name": summary_object_name(sid), "namespace": namespace},
        "spec": {"sessionId": sid, "summarizerRef": summarizer_name, "trigger": "sunset"},
    }


def conditions(kubectl: Callable[..., str], kind: str, name: str) -> dict[str, dict[str, str]]:
    obj = json.loads(kubectl("get", kind, name, "-o", "json"))
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def wait_condition(
    kubectl: Callable[..., str], kind: str, name: str, ctype: str, reason: str, log: Any
) -> dict[str, str]:
    def seen() -> dict[str, str] | None:
        cond = conditions(kubectl, kind, name).get(ctype)
        return cond if cond and cond["reason"] == reason else None

    return wait_for(seen, 60, 0.3, message=f"{kind}/{name} {ctype}={reason}", log=log)


def everything_shown(kubectl: Callable[..., str], log: Any) -> str:
    return kubectl("get", "ssum,ssumr,events", "-o", "json") + log.read_text()


# --- the confused deputy, refused ---------------------------------------------------------


def _target_spec(part: str, url: str, chroma: str, key_secret: str) -> dict[str, Any]:
    if part == "store":
        return {"store": {"url": url, "authSecretRef": {"name": key_secret}}}
    ref = {"apiKeySecretRef": {"name": key_secret}}
    if part == "model":
        return {"store": {"url": chroma}, "model": model_part(url + "/v1", key_secret)}
    return {
        "store": {"url": chroma},
        "embedding": {"provider": "openai", "baseUrl": url + "/v1", **ref},
    }


PROBE = {"store": "StoreReachable", "model": "ModelReady", "embedding": "EmbeddingReady"}


@pytest.mark.parametrize("part", ["store", "model", "embedding"])
@pytest.mark.parametrize("annotation", [None, "https://api.example.com/v1"], ids=["none", "other"])
def test_a_secret_is_never_sent_to_a_url_it_does_not_allow(
    harness: Harness, listener: Listener, part: str, annotation: str | None
) -> None:
    tag = f"{part}-{'none' if annotation is None else 'other'}"
    key = "token" if part == "store" else "api-key"
    apply(harness.kubectl, secret(NS, f"victim-{tag}", key, annotation))
    name, sid = f"exfil-{tag}", f"it-exfil-{tag}"
    spec = _target_spec(part, listener.url, harness.chroma.url, f"victim-{tag}")
    apply(harness.kubectl, summarizer(NS, name, spec))

    probe = wait_condition(
        harness.kubectl, "ssumr", name, PROBE[part], "SecretHostNotAllowed", harness.log
    )
    scope = conditions(harness.kubectl, "ssumr", name)["SecretsAllowed"]
    for cond in (probe, scope):
        assert cond["status"] == "False"
        assert f"Secret {NS}/victim-{tag}" in cond["message"]
        assert listener.url in cond["message"]
        assert ALLOWED_URLS_ANNOTATION in cond["message"]

    load(harness.store(), [interaction(sid, 0, T0, "Rotate the keys.")])
    apply(harness.kubectl, sunset_object(NS, sid, name))
    failed = wait_condition(
        harness.kubectl,
        "ssum",
        summary_object_name(sid),
        "Summarized",
        "SecretHostNotAllowed",
        harness.log,
    )
    assert f"victim-{tag}" in failed["message"]
    events = json.loads(harness.kubectl("get", "events", "-o", "json"))["items"]
    assert any(
        e["reason"] == "SecretHostNotAllowed" and e["involvedObject"]["name"] == name
        for e in events
    )
    time.sleep(2)  # the retried pass, the probes: still nothing may reach the listener
    assert listener.connections == []
    assert SECRET_VALUE not in everything_shown(harness.kubectl, harness.log)
    harness.kubectl("delete", "ssum", summary_object_name(sid), "--wait=false")


def test_with_the_url_allowed_the_key_goes_there_and_the_summary_is_written(
    harness: Harness,
) -> None:
    with running_openai_server(default_reply=json.dumps(REPLY)) as model:
        apply(harness.kubectl, secret(NS, "model-key-late", "api-key", None))
        name, sid = "allowed-model", "it-allowed-model"
        spec = {
            "store": {
                "url": harness.chroma.url,
                "memoryCollection": f"{name}-memory",
                "summaryCollection": f"{name}-sessions",
            },
            "model": model_part(model.base_url, "model-key-late"),
        }
        apply(harness.kubectl, summarizer(NS, name, spec))
        wait_condition(
            harness.kubectl, "ssumr", name, "ModelReady", "SecretHostNotAllowed", harness.log
        )
        assert model.requests == []

        # The Secret's owner allows the endpoint: the probes pass without a spec change.
        harness.kubectl(
            "annotate", "secret", "model-key-late", f"{ALLOWED_URLS_ANNOTATION}={model.base_url}"
        )
        wait_condition(
            harness.kubectl, "ssumr", name, "SecretsAllowed", "AllowedBySecrets", harness.log
        )
        wait_condition(harness.kubectl, "ssumr", name, "ModelReady", "EndpointOK", harness.log)

        store = harness.store(f"{name}-memory", f"{name}-sessions")
        load(store, [interaction(sid, 0, T0, "Rotate the keys.")])
        res = harness.summaryctl("sunset", sid, "-n", NS, "--summarizer", name, "--wait", "60")
        assert res.returncode == 0, res.stdout + res.stderr + tail(harness.log)
        assert store.summaries().get(ids=[f"summary_{sid}"])["ids"] == [f"summary_{sid}"]
        sent = {r.headers.get("Authorization") for r in model.requests}
        assert sent == {f"Bearer {SECRET_VALUE}"}
        assert SECRET_VALUE not in everything_shown(harness.kubectl, harness.log)


# --- what the apiserver refuses -------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "field_path"),
    [
        ({"model": model_part("https://u:s3cr3t@api.example.com/v1")}, "spec.model.baseUrl"),
        ({"embedding": {"baseUrl": "http://k@e.example/v1"}}, "spec.embedding.baseUrl"),
        ({"store": {"url": "http://admin:s3cr3t@chroma:8000"}}, "spec.store.url"),
        ({"model": {"model": "m" * 257}}, "spec.model.model"),
        ({"model": {"maxInputTokens": 2_000_001}}, "spec.model.maxInputTokens"),
        ({"model": {"baseUrl": "https://h/" + "p" * 2048}}, "spec.model.baseUrl"),
        ({"embedding": {"model": "e" * 257}}, "spec.embedding.model"),
        ({"store": {"tenant": "t" * 257}}, "spec.store.tenant"),
        ({"store": {"authSecretRef": {"name": "n" * 254}}}, "spec.store.authSecretRef.name"),
        ({"store": {"authSecretRef": {"name": "x", "key": "k/k"}}}, "spec.store.authSecretRef.key"),
        ({"excludedMemoryTypes": ["tick"] * 65}, "spec.excludedMemoryTypes"),
        ({"excludedMemoryTypes": ["t" * 257]}, "spec.excludedMemoryTypes[0]"),
        ({"sweep": {"idleSeconds": 2_592_001}}, "spec.sweep.idleSeconds"),
        ({"visibility": {"identityTrustTiers": {"": "owner"}}}, "identityTrustTiers"),
    ],
    ids=[
        "model-userinfo", "embedding-userinfo", "store-userinfo", "model-name", "max-input-tokens",
        "base-url-length", "embedding-model", "tenant", "secret-name", "secret-key",
        "excluded-count", "excluded-length", "idle-seconds", "identity",
    ],
)  # fmt: skip
def test_the_apiserver_refuses_credentials_in_urls_and_over_long_fields(
    harness: Harness, spec: dict[str, Any], field_path: str
) -> None:
    res = harness.cp.kubectl_run(
        "apply", "-f", "-", input=json.dumps(summarizer(NS, "refused", spec)), check=False
    )
    assert res.returncode != 0
    assert "is invalid" in res.stderr and field_path in res.stderr, res.stderr
    assert "refused" not in harness.kubectl("get", "ssumr", "-o", "name")


BASE_URLS = [
    "https://api.openai.com/v1",
    "http://vllm.models.svc:8000/v1?x=1",
    "http://[::1]:8080/v1",
    "http://[1:2:3:4:5:6:7::]/v1",
    "http://[::ffff:127.0.0.1]:8080/v1",  # IPv4-mapped, dotted (RFC 4291, 2.2)
    "http://[::FFFF:7F00:1]:8080/v1",
    "http://[1:2:3:4:5:6:1.2.3.4]/v1",
    "http://[fe80::1%25eth0]/v1",  # a zone id
    "http://[::ffff:1.2.3]/v1",
    "http://10.0.0.1:65535/v1#f",
    "https://API.OpenAI.com/v1/@handle/%2e%2e/",
    "https://s3cr3t@api.openai.com/v1",
    "http://:",
    "http://[::1::]/v1",
    "http://[1:2:3:4:5:6:7:8:9]/v1",
    "http://10.0.0.999/v1",
    "http://1-2-3-4/v1",
    "https://api.openai.com:0/v1",
    "https://api.openai.com:65536/v1",
    "https://api.openai.com./v1",
    "https://api.openai.com/v1\x0b",
    "https://api.openai.com/v1\x01",
    "https://api.openai.com/\u00a0v1",
    "https://api.openai.com\u2003/v1",
    "https://api\uff03x.openai.com/v1",
    "https://bücher.example/v1",
    "https://api.openai.com/v1/%25",
    "http://chroma.1team:8000/v1",
    "http://1.2.3.0x7f/v1",
    "http://127.0.0.1.:8000/v1",
    "http://" + "a" * 63 + ("." + "a" * 63) * 3 + ".svc/v1",  # 259 characters: DNS's limit
]


def test_the_apiserver_admits_the_base_urls_the_operator_reads(harness: Harness) -> None:
    """The CRD's rule runs in Go's regexp, the operator's in Python's re: one pattern, read
    alike, so a baseUrl `kubectl apply` admits is never InvalidSpec later (but for a host with
    an xn-- label, which no pattern decodes, and a path URL readers resolve two ways: the next
    tests); the refusal says what a baseUrl must be and never repeats it."""
    docs = [
        summarizer(NS, f"base-url-{i}", {"model": {"baseUrl": url}})
        for i, url in enumerate(BASE_URLS)
    ]
    manifest = "\n---\n".join(json.dumps(d) for d in docs)
    res = harness.cp.kubectl_run(
        "apply", "--dry-run=server", "-f", "-", input=manifest, check=False
    )
    for i, url in enumerate(BASE_URLS):
        refused = f'"base-url-{i}" is invalid' in res.stderr
        assert refused == (endpoint_url_problem(url) is not None), (url, res.stderr)
    assert ENDPOINT_URL_MESSAGE in res.stderr and "s3cr3t" not in res.stderr


def test_an_xn_host_that_is_no_idna_name_is_shown_on_the_summarizer_in_one_line(
    harness: Harness,
) -> None:
    """No pattern can decode punycode, so the apiserver admits "xn--zz" (no IDNA A-label),
    which httpx decodes and refuses under chromadb ("Invalid A-label" at each pass, as if
    Chroma were down): the operator shows it as SpecValid False naming each field and the
    rule, with a Warning Event."""
    name = "idna-hosts"
    spec = {
        "store": {"url": "http://xn--zz.svc:8000"},
        "model": model_part("http://XN--A.models:8080/v1"),
    }
    apply(harness.kubectl, summarizer(NS, name, spec))
    try:
        cond = wait_condition(
            harness.kubectl, "ssumr", name, "SpecValid", "InvalidSpec", harness.log
        )
        message = cond["message"]
        assert "\n" not in message and "Invalid A-label" not in message, message
        assert "spec.store.url" in message and "'xn--zz' is not" in message, message
        assert "spec.model.baseUrl" in message and "'xn--a' is not" in message, message
        events = json.loads(harness.kubectl("get", "events", "-o", "json"))["items"]
        assert any(
            e["reason"] == "InvalidSpec" and e["involvedObject"]["name"] == name for e in events
        )
    finally:
        harness.kubectl("delete", "ssumr", name, "--wait=false")


def test_a_base_path_url_readers_resolve_two_ways_is_shown_on_the_summarizer_as_such(
    harness: Harness,
) -> None:
    """No pattern resolves dot segments, so the apiserver admits "/v1//.." (httpx sends "/v1",
    a server that collapses "//" reads "/"): SpecValid False says what is wrong with the path,
    with a Warning Event, not a refusal naming an address that is allowed."""
    name = "two-way-paths"
    spec = {
        "model": model_part("http://127.0.0.1:9/v1//.."),
        "embedding": {"provider": "openai", "baseUrl": "http://127.0.0.1:9/a%2fb/..", "model": "e"},
    }
    apply(harness.kubectl, summarizer(NS, name, spec))
    try:
        cond = wait_condition(
            harness.kubectl, "ssumr", name, "SpecValid", "InvalidSpec", harness.log
        )
        for field in ("spec.model.baseUrl", "spec.embedding.baseUrl"):
            assert f"{field}: Value error, baseUrl {PATH_MESSAGE}" in cond["message"], cond
        assert "127.0.0.1:9" not in cond["message"] and "may add" not in cond["message"]
        events = json.loads(harness.kubectl("get", "events", "-o", "json"))["items"]
        assert any(
            e["reason"] == "InvalidSpec"
            and e["involvedObject"]["name"] == name
            and PATH_MESSAGE in e["message"]
            for e in events
        )
    finally:
        harness.kubectl("delete", "ssumr", name, "--wait=false")


# --- the options: unannotated Secrets for one more release, an operator-wide list -----------

OPTIONS_NS = "perimeter-options"


@dataclass
class OptionsOperator:
    cp: ControlPlane
    log: Any
    model: OpenAIServer

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        return self.cp.kubectl_run("-n", OPTIONS_NS, *args, input=input, check=check).stdout


@pytest.fixture(scope="module")
def options_operator(
    harness: Harness, chroma_server: ChromaServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OptionsOperator]:
    cp = harness.cp
    cp.kubectl_run("create", "namespace", OPTIONS_NS, check=False)
    log = tmp_path_factory.mktemp("options") / "operator.log"
    with running_openai_server(default_reply=json.dumps(REPLY)) as model:
        env = dict(
            cp.env(),
            SSO_REPLICA_ID="it-options",
            SSO_SWEEP_TICK_SECONDS="1",
            SSO_RETRY_BASE_SECONDS="0.5",
            SSO_RETRY_MAX_SECONDS="2",
            SSO_FAILURE_GATE="3",
            SSO_ALLOW_UNANNOTATED_SECRETS="true",
            SSO_ALLOWED_ENDPOINTS=f"{chroma_server.url}, {model.base_url}",
        )
        proc = start_operator(log, env, "--standalone", "--namespace", OPTIONS_NS)
        try:
            yield OptionsOperator(cp, log, model)
        finally:
            stop(proc)
            print("options operator log tail:\n" + tail(log, 40))


def test_an_unannotated_secret_is_still_sent_while_allowed_with_a_warning(
    options_operator: OptionsOperator, harness: Harness
) -> None:
    op = options_operator
    apply(op.kubectl, secret(OPTIONS_NS, "legacy-key", "api-key", None))
    name, sid = "legacy", "it-legacy-unannotated"
    store = {"memoryCollection": "legacy-memory", "summaryCollection": "legacy-sessions"}
    spec = {
        "store": {"url": harness.chroma.url, **store},
        "model": model_part(op.model.base_url, "legacy-key"),
    }
    apply(op.kubectl, summarizer(OPTIONS_NS, name, spec))
    warning = wait_condition(
        op.kubectl, "ssumr", name, "SecretsAllowed", "SecretNotAnnotated", op.log
    )
    assert warning["status"] == "False" and "next release" in warning["message"]
    events = json.loads(op.kubectl("get", "events", "-o", "json"))["items"]
    assert any(e["reason"] == "SecretNotAnnotated" and e["type"] == "Warning" for e in events)

    load(
        harness.store("legacy-memory", "legacy-sessions"),
        [interaction(sid, 0, T0, "Rotate the keys.")],
    )
    apply(op.kubectl, sunset_object(OPTIONS_NS, sid, name))
    wait_condition(op.kubectl, "ssum", summary_object_name(sid), "Summarized", "Summarized", op.log)
    assert f"Bearer {SECRET_VALUE}" in {r.headers.get("Authorization") for r in op.model.requests}


def test_an_annotation_is_the_owners_word_even_while_unannotated_secrets_are_allowed(
    options_operator: OptionsOperator, harness: Harness
) -> None:
    op = options_operator
    apply(op.kubectl, secret(OPTIONS_NS, "scoped-key", "api-key", "https://api.example.com/v1"))
    spec = {
        "store": {"url": harness.chroma.url},
        "model": model_part(op.model.base_url, "scoped-key"),
    }
    before = len(op.model.requests)
    apply(op.kubectl, summarizer(OPTIONS_NS, "scoped", spec))
    wait_condition(op.kubectl, "ssumr", "scoped", "ModelReady", "SecretHostNotAllowed", op.log)
    assert len(op.model.requests) == before


def test_a_url_outside_the_operators_allowed_endpoints_is_never_contacted(
    options_operator: OptionsOperator, listener: Listener, harness: Harness
) -> None:
    op = options_operator
    apply(op.kubectl, summarizer(OPTIONS_NS, "elsewhere", {"store": {"url": listener.url}}))
    cond = wait_condition(
        op.kubectl, "ssumr", "elsewhere", "StoreReachable", "EndpointNotAllowed", op.log
    )
    # A local process: the variable it reads, not the chart value that sets it in a Pod.
    assert listener.url in cond["message"] and "SSO_ALLOWED_ENDPOINTS" in cond["message"]
    model_spec = {
        "store": {"url": harness.chroma.url},
        "model": model_part(listener.url + "/v1"),
        "embedding": {"provider": "openai", "baseUrl": listener.url + "/v1"},
    }
    apply(op.kubectl, summarizer(OPTIONS_NS, "elsewhere-model", model_spec))
    wait_condition(
        op.kubectl, "ssumr", "elsewhere-model", "ModelReady", "EndpointNotAllowed", op.log
    )
    wait_condition(
        op.kubectl, "ssumr", "elsewhere-model", "EmbeddingReady", "EndpointNotAllowed", op.log
    )
    time.sleep(2)
    assert listener.connections == []
