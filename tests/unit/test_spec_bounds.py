"""Every field a user sets is bounded, and an endpoint URL never carries credentials: the
same rules in the pydantic models, both CRD copies and the chart's values schema."""

from __future__ import annotations

import argparse
import functools
import ipaddress
import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import httpx2
import pytest
import re2
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from controller.api import (
    SECRET_KEY_PATTERN,
    SECRET_NAME_PATTERN,
    EmbeddingConfig,
    ModelSpec,
    SecretKeyRef,
    SessionSummarizerSpec,
    SessionSummarySpec,
    StoreSpec,
)
from controller.cli.args import namespace_arg, object_name_arg
from controller.core.destinations import (
    DEFAULT_PORTS,
    ENDPOINT_URL_MESSAGE,
    ENDPOINT_URL_PATTERN,
    HOST_LENGTH_MESSAGE,
    HOST_LENGTH_PATTERN,
    PATH_MESSAGE,
    endpoint_url_problem,
    target,
)
from tests.support.url_spellings import ipv6_spellings

ROOT = Path(__file__).resolve().parents[2]
CRDS = [ROOT / "crds", ROOT / "charts" / "session-summary-operator" / "crds"]
VALUES_SCHEMA = ROOT / "charts" / "session-summary-operator" / "values.schema.json"


@functools.cache  # parsed once: a property test reads it for each of its examples
def spec_schema(where: Path, crd: str) -> dict[str, Any]:
    doc = yaml.safe_load((where / crd).read_text())
    return dict(doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"])


def unbounded(schema: dict[str, Any], path: str) -> list[str]:
    found = []
    kind = schema.get("type")
    if kind == "string" and "enum" not in schema and "maxLength" not in schema:
        found.append(f"{path}: a string without maxLength")
    if kind == "array" and "maxItems" not in schema:
        found.append(f"{path}: an array without maxItems")
    if kind in ("integer", "number") and "maximum" not in schema:
        found.append(f"{path}: a number without maximum")
    for name, sub in (schema.get("properties") or {}).items():
        found += unbounded(sub, f"{path}.{name}")
    if "items" in schema:
        found += unbounded(schema["items"], f"{path}[]")
    return found


@pytest.mark.parametrize("where", CRDS, ids=["crds", "chart"])
@pytest.mark.parametrize(
    "crd", ["sessionsummarizers.memorycore.io.yaml", "sessionsummaries.memorycore.io.yaml"]
)
def test_every_field_of_a_spec_is_bounded(where: Path, crd: str) -> None:
    assert unbounded(spec_schema(where, crd), "spec") == []


@pytest.mark.parametrize("where", CRDS, ids=["crds", "chart"])
def test_the_crds_carry_the_endpoint_and_secret_rules_of_the_models(where: Path) -> None:
    spec = spec_schema(where, "sessionsummarizers.memorycore.io.yaml")["properties"]
    for part in ("model", "embedding"):
        fields = spec[part]["properties"]
        assert fields["baseUrl"]["x-kubernetes-validations"] == [
            {"rule": f"self.matches(r'{ENDPOINT_URL_PATTERN}')", "message": ENDPOINT_URL_MESSAGE},
            {"rule": f"self.matches(r'{HOST_LENGTH_PATTERN}')", "message": HOST_LENGTH_MESSAGE},
        ]
        ref = fields["apiKeySecretRef"]["properties"]
        assert (ref["name"]["pattern"], ref["key"]["pattern"]) == (
            SECRET_NAME_PATTERN,
            SECRET_KEY_PATTERN,
        )
    ref = spec["store"]["properties"]["authSecretRef"]["properties"]
    assert (ref["name"]["pattern"], ref["key"]["pattern"]) == (
        SECRET_NAME_PATTERN,
        SECRET_KEY_PATTERN,
    )


def test_the_chart_values_schema_refuses_the_same_endpoint_urls() -> None:
    schema = json.loads(VALUES_SCHEMA.read_text())["properties"]["summarizer"]["properties"]
    for part in ("model", "embedding"):
        field = schema[part]["properties"]["baseUrl"]
        assert field["pattern"] == "^(" + ENDPOINT_URL_PATTERN[1:-1] + ")?$"
        assert field["allOf"] == [{"pattern": "^$|" + HOST_LENGTH_PATTERN}]


ACCEPTED = [
    "https://api.openai.com/v1",
    "http://localhost:11434/v1",
    "http://[::1]:8080/v1",
    "https://generativelanguage.googleapis.com/v1beta/openai/",
    "http://vllm.models.svc:8000/v1",
    "https://host/v1/@handle",
    "https://api.openai.com./v1",
    "http://chroma.1team:8000/v1",
    "http://chroma.2024-prod:8000/v1",
]
REFUSED = [
    "https://user:s3cr3t@api.openai.com/v1",
    "https://s3cr3t@api.openai.com/v1",
    "https://:s3cr3t@api.openai.com",
    "ftp://api.openai.com/v1",
    "api.openai.com/v1",
    "https:///v1",
    "https://api.openai.com /v1",
    "https://api.openai.com/v1\r\nX-Injected: 1",
    "https://api.openai.com:99999/v1",
    "https://api.openai.com:0/v1",
    "https://" + "a" * 2048,
    "https://api.openai.com/v1\x0b",
    "https://api.openai.com/v1\u00a0",
    "https://api.openai.com\uff03x/v1",
    "http://[::1::]/v1",
    "http://10.0.0.999/v1",
    "https://api.openai.com/v1/%2525/chat",
    "http://vllm.models.svc:8000/v1?x=1",
    "http://127.0.0.1.:8000/v1",
    "http://1.2.3.0x7f/v1",
    "http://127.1/v1",
    "http://chroma.0x/v1",
    "https://model.example/openai?api-version=2024-06-01",
    "https://model.example/v1#f",
]


@pytest.mark.parametrize("url", ACCEPTED)
def test_an_endpoint_url_is_accepted(url: str) -> None:
    assert endpoint_url_problem(url) is None
    assert ModelSpec.model_validate({"baseUrl": url}).base_url == url
    assert EmbeddingConfig.model_validate({"baseUrl": url}).base_url == url


@pytest.mark.parametrize("url", REFUSED)
def test_a_url_with_credentials_or_no_host_is_refused_without_being_repeated(url: str) -> None:
    assert endpoint_url_problem(url) is not None
    for model in (ModelSpec, EmbeddingConfig):
        with pytest.raises(ValidationError) as err:
            model.model_validate({"baseUrl": url})
        assert "s3cr3t" not in str(err.value)


def test_a_store_url_with_credentials_is_refused_without_being_repeated() -> None:
    with pytest.raises(ValidationError) as err:
        StoreSpec.model_validate({"url": "http://admin:hunter2@chroma:8000"})
    assert "hunter2" not in str(err.value)


def crd_admits(field: dict[str, Any], value: str) -> bool:
    """A CRD (or values schema) string field's checks as the apiserver (or Helm) runs them,
    in RE2 as Go's regexp: its maxLength, its patterns (its own, its allOf's) and its
    `self.matches(r'...')` rules (each a search)."""
    if len(value) > field.get("maxLength", 10**9):
        return False
    patterns = [f["pattern"] for f in [field, *field.get("allOf", [])] if "pattern" in f]
    for rule in field.get("x-kubernetes-validations", []):
        matches = re.fullmatch(r"self\.matches\(r'(.*)'\)", rule["rule"], re.DOTALL)
        assert matches, f"a CEL rule this test does not model: {rule['rule']}"
        patterns.append(matches.group(1))
    return all(re2.search(p, value) for p in patterns)


@functools.cache
def values_schema() -> dict[str, Any]:
    return dict(json.loads(VALUES_SCHEMA.read_text()))


def normal_host(host: str) -> str:
    """The address or name the client connects to (an IPv4-mapped address: its IPv4 one)."""
    host = host.lower()
    if ":" not in host:
        return host
    address = ipaddress.IPv6Address(host)
    return str(address.ipv4_mapped or address.compressed)


url_text = st.text(
    alphabet=st.sampled_from("ab1_.-:[]/@?#%25 \t\x0b\x01\u00a0\u2003\uff03é\\"), max_size=12
)
authorities = st.one_of(
    url_text,
    st.lists(
        st.sampled_from(
            ["a", "b1", "1", "x-y", "_s", "-", "", "1t", "0x1f", "0g", "9-a", "xn--zz", "XN--9CA"]
        ),
        min_size=1,
        max_size=4,
    ).map(".".join),
    st.lists(st.sampled_from(["0", "1", "01", "255", "256", "999"]), min_size=3, max_size=5).map(
        ".".join
    ),
    st.lists(st.sampled_from(["0", "1", "ffff", "FFFF", "12345", "", "1.2.3.4"]), max_size=10)
    .map(":".join)
    .map("[{}]".format),
)
ports = st.sampled_from(["", ":", ":0", ":80", ":080", ":65535", ":65536", ":99999", ":+1"])
endpoint_urls = st.one_of(
    st.text(max_size=30),
    st.tuples(
        st.sampled_from(["http://", "https://", "HTTP://", "http:/"]),
        authorities,
        ports,
        st.sampled_from(["", "/v1", "/v1/", "?q=%25", "#f", "/%2e%2e/"]),
        url_text,
    ).map("".join),
)


@settings(max_examples=1500, deadline=None)
@given(url=endpoint_urls)
@example(url="http://127.0.0.1:9/v1//..")
def test_an_endpoint_url_the_crd_admits_is_one_the_operator_and_its_clients_read(
    url: str,
) -> None:
    """The apiserver (RE2) and the operator (Python's re) admit the same baseUrls (but for an
    xn-- label no IDNA name has, and a path URL readers resolve two ways: no pattern decodes
    punycode or resolves dot segments, the operator refuses them), and one they admit has a
    host and port the allow-lists (core/destinations.py) and both HTTP clients (httpx for
    probes, httpx2 under the openai SDK) read alike, and no credentials."""
    problem = endpoint_url_problem(url)
    ours = problem is None
    patterns = ours or "valid IDNA" in str(problem) or problem == PATH_MESSAGE
    for where in CRDS:
        spec = spec_schema(where, "sessionsummarizers.memorycore.io.yaml")["properties"]
        for part in ("model", "embedding"):
            assert crd_admits(spec[part]["properties"]["baseUrl"], url) == patterns, (where, url)
    values = values_schema()["properties"]["summarizer"]["properties"]
    assert crd_admits(values["model"]["properties"]["baseUrl"], url) == (patterns or url == "")
    if not ours:
        return
    reached = target(url)
    assert reached is not None, url
    for client in (httpx.URL, httpx2.URL):
        parsed = client(url)
        assert parsed.host  # an xn-- name decodes
        port = DEFAULT_PORTS[parsed.scheme] if parsed.port is None else parsed.port
        host = normal_host(parsed.raw_host.decode())
        assert (host, port) == (reached.host, reached.port), url
    parts = urlsplit(url)
    assert parts.username is None and parts.password is None


def test_over_long_fields_are_refused_by_the_models() -> None:
    too_long = {
        "model": {"backend": "openai", "baseUrl": "https://h/v1", "model": "m" * 257},
        "embedding": {"model": "e" * 257},
        "store": {"tenant": "t" * 257},
        "excludedMemoryTypes": ["x"] * 65,
    }
    for key, value in too_long.items():
        with pytest.raises(ValidationError):
            SessionSummarizerSpec.model_validate({key: value})
    with pytest.raises(ValidationError):
        ModelSpec.model_validate({"maxInputTokens": 2_000_001})
    with pytest.raises(ValidationError):
        StoreSpec.model_validate({"authSecretRef": {"name": "Not_A_Secret_Name"}})


def is_dns_subdomain(name: str) -> bool:
    """Kubernetes' IsDNS1123Subdomain, said the long way: at most 253 characters of
    dot-separated labels, each lowercase alphanumerics and '-', starting and ending
    alphanumeric."""
    alnum = set("abcdefghijklmnopqrstuvwxyz0123456789")
    labels = name.split(".")
    return 0 < len(name) <= 253 and all(
        label and label[0] in alnum and label[-1] in alnum and set(label) <= alnum | {"-"}
        for label in labels
    )


object_names = st.one_of(
    st.text(alphabet=st.sampled_from("ab09.-A_ é"), max_size=12),
    st.lists(st.sampled_from(["a", "b1", "-", "", "a-", "-a", "x-y", "9"]), max_size=5).map(
        ".".join
    ),
    st.tuples(st.integers(240, 260), st.sampled_from(["", ".a", "a.", "-"])).map(
        lambda n_tail: "a" * n_tail[0] + n_tail[1]
    ),
)


@settings(max_examples=1500, deadline=None)
@given(name=object_names)
def test_a_summarizer_ref_is_accepted_exactly_when_it_can_name_an_object(name: str) -> None:
    """summarizerRef in both CRD copies, the model and summaryctl's --summarizer: one rule,
    a DNS-1123 subdomain, since no SessionSummarizer can have any other name ("a..b", "a.-b")."""
    expected = is_dns_subdomain(name)
    for where in CRDS:
        field = spec_schema(where, "sessionsummaries.memorycore.io.yaml")["properties"]
        assert crd_admits(field["summarizerRef"], name) == expected, where
    try:
        SessionSummarySpec.model_validate({"sessionId": "s", "summarizerRef": name})
        model_accepts = True
    except ValidationError:
        model_accepts = False
    assert model_accepts == expected
    try:
        object_name_arg(name)
        cli_accepts = True
    except argparse.ArgumentTypeError:
        cli_accepts = False
    assert cli_accepts == expected


def is_dns_label(name: str) -> bool:
    """Kubernetes' IsDNS1123Label (a namespace's name): one subdomain label, 63 at most."""
    return len(name) <= 63 and "." not in name and is_dns_subdomain(name)


def _values_field(path: str) -> dict[str, Any]:
    field: dict[str, Any] = values_schema()
    for key in path.split("."):
        field = field["items"] if key == "[]" else field["properties"][key]
    return field


# The chart values naming a Kubernetes object (a Secret, the SessionSummarizer, the peering
# object) or a namespace, and whether "" (unset) is taken.
VALUES_OBJECT_NAMES = {
    "imagePullSecrets.[].name": False,
    "rbac.extraSecretNames.[]": False,
    "peering.name": False,
    "summarizer.name": False,
    "chroma.authSecret.name": True,
    "chroma.bundled.auth.existingSecret": True,
    "summarizer.model.apiKeySecret.name": True,
    "summarizer.embedding.apiKeySecret.name": True,
}
VALUES_NAMESPACES = {
    "watchNamespaces.[]": False,
    "networkPolicy.chromaClientNamespaces.[]": False,
    "summarizer.namespace": True,
}
CRD_SECRET_REFS = ("store.authSecretRef", "model.apiKeySecretRef", "embedding.apiKeySecretRef")

dns_names = st.one_of(
    object_names,
    st.text(alphabet=st.sampled_from("a9.-A\n"), max_size=6),
    st.tuples(st.integers(61, 65), st.sampled_from(["", ".a", "a.", "-", "\n"])).map(
        lambda n_tail: "a" * n_tail[0] + n_tail[1]
    ),
)


@settings(max_examples=1500, deadline=None)
@given(name=dns_names)
def test_every_secret_and_object_name_the_chart_or_a_crd_takes_is_one_kubernetes_takes(
    name: str,
) -> None:
    """A Secret's (or another object's) name in both CRD copies, the chart's values schema,
    the models and summaryctl follows Kubernetes' rule, a DNS-1123 subdomain (a namespace: a
    DNS-1123 label), in RE2 as the apiserver and Helm read their patterns."""
    subdomain, label = is_dns_subdomain(name), is_dns_label(name)
    for where in CRDS:
        spec = spec_schema(where, "sessionsummarizers.memorycore.io.yaml")["properties"]
        for ref in CRD_SECRET_REFS:
            part, field = ref.split(".")
            name_field = spec[part]["properties"][field]["properties"]["name"]
            assert crd_admits(name_field, name) == subdomain, (where, ref)
    unset = name == ""  # "none", where the chart lets a value be unset
    for path, optional in VALUES_OBJECT_NAMES.items():
        assert crd_admits(_values_field(path), name) == (subdomain or (optional and unset)), path
    for path, optional in VALUES_NAMESPACES.items():
        assert crd_admits(_values_field(path), name) == (label or (optional and unset)), path
    try:
        SecretKeyRef.model_validate({"name": name, "key": "k"})
        model_accepts = True
    except ValidationError:
        model_accepts = False
    assert model_accepts == subdomain
    for check, expected in ((object_name_arg, subdomain), (namespace_arg, label)):
        try:
            check(name)
            accepted = True
        except argparse.ArgumentTypeError:
            accepted = False
        assert accepted == expected, check


def _name_of(length: int, label: int) -> str:
    """A host name of `length` characters, its labels `label` characters (the last shorter)."""
    name = ("a" * label + ".") * (length // (label + 1) + 1)
    name = name[:length]
    return name[:-1] + "a" if name.endswith(".") else name  # a label of label + 1 at most


@settings(max_examples=300, deadline=None)
@given(
    length=st.integers(1, 290),
    label=st.integers(1, 62),
    root_dot=st.sampled_from(["", "."]),
    port=st.sampled_from(["", ":8000"]),
)
def test_a_host_name_over_253_characters_is_refused_with_the_limit_everywhere(
    length: int, label: int, root_dot: str, port: str
) -> None:
    """A name of more than 253 characters (the root's dot aside) is never found (DNS's limit,
    255 octets on the wire): the models, summaryctl's store URL check, both CRD copies and the
    chart's values schema refuse it as a baseUrl or a store URL, and the message says why."""
    name = _name_of(length, label)
    accepted = len(name) <= 253
    base_url, store_url = f"http://{name}{root_dot}{port}/v1", f"http://{name}{root_dot}{port}"
    assert (endpoint_url_problem(base_url) is None) == accepted, base_url
    assert (StoreSpec.url_problem(store_url) is None) == accepted, store_url
    if not accepted:
        for model in (ModelSpec, EmbeddingConfig):
            with pytest.raises(ValidationError, match="253 characters"):
                model.model_validate({"baseUrl": base_url})
        longest = f"(253 characters|{StoreSpec.URL_MAX} characters)"  # the URL's own limit
        with pytest.raises(ValidationError, match=longest):
            StoreSpec.model_validate({"url": store_url})
    for where in CRDS:
        spec = spec_schema(where, "sessionsummarizers.memorycore.io.yaml")["properties"]
        assert crd_admits(spec["store"]["properties"]["url"], store_url) == accepted, where
        for part in ("model", "embedding"):
            assert crd_admits(spec[part]["properties"]["baseUrl"], base_url) == accepted, where
    values = values_schema()["properties"]
    assert crd_admits(values["chroma"]["properties"]["url"], store_url) == accepted
    for part in ("model", "embedding"):
        field = values["summarizer"]["properties"][part]["properties"]["baseUrl"]
        assert crd_admits(field, base_url) == accepted


def _admitted_everywhere(host: str) -> list[bool]:
    """Whether a baseUrl and a store URL on host pass the models, summaryctl's store URL check,
    both CRD copies and the chart's values schema."""
    base_url, store_url = f"http://{host}:8000/v1", f"http://{host}:8000"
    verdicts = [endpoint_url_problem(base_url) is None, StoreSpec.url_problem(store_url) is None]
    for where in CRDS:
        spec = spec_schema(where, "sessionsummarizers.memorycore.io.yaml")["properties"]
        verdicts.append(crd_admits(spec["store"]["properties"]["url"], store_url))
        for part in ("model", "embedding"):
            verdicts.append(crd_admits(spec[part]["properties"]["baseUrl"], base_url))
    values = values_schema()["properties"]
    verdicts.append(crd_admits(values["chroma"]["properties"]["url"], store_url))
    for part in ("model", "embedding"):
        field = values["summarizer"]["properties"][part]["properties"]["baseUrl"]
        verdicts.append(crd_admits(field, base_url))
    return verdicts


ipv6_addresses = st.one_of(
    st.ip_addresses(v=6),
    st.ip_addresses(v=4).map(lambda a: ipaddress.IPv6Address(f"::ffff:{a}")),  # IPv4-mapped
    st.ip_addresses(v=4).map(lambda a: ipaddress.IPv6Address(f"::{a}")),  # IPv4-compatible
)


@settings(max_examples=300, deadline=None)
@given(address=ipv6_addresses, zone=st.sampled_from(["eth0", "1", "lo"]))
def test_every_spelling_of_an_ipv6_address_is_one_endpoint_and_a_zone_id_is_none(
    address: ipaddress.IPv6Address, zone: str
) -> None:
    """An IPv6 address in [brackets], however RFC 4291 lets it be written ("::ffff:127.0.0.1"
    as well as "::ffff:7f00:1"), is taken as a baseUrl or store URL everywhere a URL is checked,
    and reaches one destination: an IPv4-mapped address its IPv4 address, which an allow-list
    compares. A zone id ("%25eth0": a link on one node) is refused everywhere."""
    for spelling in ipv6_spellings(address):
        assert all(_admitted_everywhere(f"[{spelling}]")), spelling
        reached = target(f"http://[{spelling}]:8000/v1")
        assert reached is not None and reached.host == str(address.ipv4_mapped or address)
    assert not any(_admitted_everywhere(f"[{address.compressed}%25{zone}]"))
