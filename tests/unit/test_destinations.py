"""Where a credential may go (core/destinations.py), without a cluster: a URL prefix allows
exactly the URLs under it, whatever the URL's spelling, and what the refusals say names the
Secret, the refused URL and the annotation to add, never a credential."""

from __future__ import annotations

import ipaddress
import json
import posixpath
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

import httpx
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from controller.core.destinations import (
    _NAME,
    ALLOWED_MODEL_URLS_ANNOTATION,
    ALLOWED_URLS_ANNOTATION,
    DEFAULT_PORTS,
    ENDPOINT_URL_PATTERN,
    SecretUse,
    StoreCredential,
    allowed,
    endpoint_refusal,
    judge_secret,
    memory_destination_refusal,
    parse_prefix,
    parse_prefixes,
    redirect_refusal,
    shown,
    target,
    within,
)
from controller.status.conditions import secrets_allowed
from tests.support.url_spellings import ipv6_spellings, spellings

label = st.text(alphabet=st.sampled_from("abcxyz019-"), min_size=1, max_size=6).filter(
    lambda s: s[0] != "-" and s[-1] != "-"
)
host = st.lists(label, min_size=1, max_size=3).map(".".join)
domain = host.filter(lambda h: h.rsplit(".", 1)[-1][0].isalpha())  # what a wildcard may name
segment = st.one_of(
    label,
    st.sampled_from(["..", ".", "%2e%2e", "%2E.", "%2f", "a%2fb", "\\..", "", "v1", "v10"]),
)
path = st.lists(segment, max_size=4).map(lambda segs: "".join("/" + s for s in segs))
port = st.one_of(st.none(), st.sampled_from([80, 443, 8000, 11434]))
scheme = st.sampled_from(["http", "https", "HTTP", "Https"])
userinfo = st.one_of(st.just(""), st.sampled_from(["u:p4ssw0rd@", "p4ssw0rd@", ":p4ssw0rd@"]))


@st.composite
def urls(draw: st.DrawFn) -> str:
    p = draw(port)
    h = draw(st.one_of(host, host.map(str.upper), host.map(lambda h: h + ".")))
    return f"{draw(scheme)}://{draw(userinfo)}{h}{'' if p is None else f':{p}'}{draw(path)}"


@st.composite
def prefixes(draw: st.DrawFn) -> str:
    p = draw(port)
    h = draw(st.one_of(host, domain.map(lambda h: "*." + h)))
    tail = draw(st.lists(label, max_size=2).map(lambda segs: "".join("/" + s for s in segs)))
    return f"{draw(st.sampled_from(['http', 'https']))}://{h}{'' if p is None else f':{p}'}{tail}"


def served_path(url: str) -> str:
    """The path a server resolves (what the operator's request reaches)."""
    decoded = unquote(urlsplit(url).path).replace("\\", "/")
    normal = posixpath.normpath("/" + decoded.lstrip("/"))
    return "" if normal == "/" else normal


@settings(max_examples=500, deadline=None)
@given(url=urls(), text=prefixes())
def test_a_prefix_allows_only_its_scheme_host_port_and_the_paths_under_it(
    url: str, text: str
) -> None:
    prefix = parse_prefix(text)
    assert prefix is not None, text
    if not within(url, prefix):
        return
    parts = urlsplit(url)
    assert parts.username is None and parts.password is None
    assert parts.scheme.lower() == prefix.scheme
    host = parts.hostname or ""
    if prefix.host.startswith("*."):
        assert host.endswith(prefix.host[1:]) and host != prefix.host[2:]
    else:
        assert host == prefix.host
    assert (parts.port or {"http": 80, "https": 443}[prefix.scheme]) == prefix.port
    served = served_path(url)
    assert served == prefix.path or served.startswith(prefix.path + "/") or not prefix.path


def reader_prefix(text: str) -> tuple[str, str, int | None, str]:
    """How a person reads a prefix: scheme://host[:port]path, the host a wildcard only when
    it starts with "*." (IPv6 in brackets, any port when written ":*")."""
    written = re.fullmatch(r"([a-z]+)://(\[[^\]]*\]|[^:/]*)(:[^/]*)?(/.*)?", text)
    assert written is not None, text
    scheme, host, port, rest = written.groups()
    host = host.lower()
    if host.startswith("["):
        host = ipaddress.IPv6Address(host[1:-1]).compressed
    port = (port or "").lstrip(":")  # "h:" is h's default port
    number = None if port == "*" else int(port) if port else DEFAULT_PORTS[scheme]
    return scheme, host, number, served_path(f"http://h{rest or ''}")


def _connects_to(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The address a client connects to: an IPv4-mapped IPv6 address's IPv4 address."""
    address = ipaddress.ip_address(host.strip("[]"))
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    return mapped or address


def reaches(url: str) -> tuple[str, str, int, str] | None:
    """Where the HTTP client the operator sends with (httpx, under openai and chromadb)
    sends a request for url: scheme, host, port, and the path the server resolves."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL:
        return None
    host = parsed.host
    if ":" in host:  # an IPv4-mapped address is connected to at its IPv4 address
        host = str(_connects_to(host))
    port = DEFAULT_PORTS[parsed.scheme] if parsed.port is None else parsed.port
    raw_path = parsed.raw_path.decode().partition("?")[0]
    return parsed.scheme, host, port, served_path(f"http://h{raw_path}")


authority = st.one_of(
    host,
    host.map(lambda h: "*." + h),
    st.sampled_from(["[::1]", "[0:0::1]", "*.", "*", "*.*.a", "a.*.b", "[::1].evil", "x.[::1]"]),
)
junk = st.sampled_from(["://*.evil", "://*.", "x://*.y", "*.", ":", "@", "[::1]", "%2e%2e"])
written_port = st.sampled_from(["", ":80", ":443", ":8000", ":*", ":0", ":080", ":65536", ":"])


@st.composite
def any_prefixes(draw: st.DrawFn) -> str:
    """Prefix texts, well formed or not: a wildcard, brackets or ports in odd places, and
    wildcard-like text in the path."""
    segments = draw(st.lists(st.one_of(label, junk), max_size=3))
    tail = "".join("/" + s for s in segments)
    scheme_ = draw(st.sampled_from(["http", "https"]))
    return f"{scheme_}://{draw(authority)}{draw(written_port)}{tail}"


@settings(max_examples=1000, deadline=None)
@given(text=any_prefixes())
def test_a_prefix_means_what_a_reader_of_it_reads(text: str) -> None:
    """A wildcard host only where the host is written, never from "*." in a path."""
    prefix = parse_prefix(text)
    if prefix is not None:
        assert (prefix.scheme, prefix.host, prefix.port, prefix.path) == reader_prefix(text)


@st.composite
def reaching_urls(draw: st.DrawFn, prefix_text: str) -> str:
    """URLs near a prefix: its own text with the wildcard filled in, a neighbouring or
    malformed authority, any port spelling, a path below it or beside it."""
    base = prefix_text.replace(":*", draw(written_port)).replace(
        "*.", draw(st.sampled_from(["a.", "wildcard.", "", "*.", "10."])), 1
    )
    scheme_, _, rest = base.partition("://")
    auth, slash, path_ = rest.partition("/")
    auth = draw(
        st.sampled_from(
            [auth, f"x.{auth}", f"{auth}.x", f"{auth}x", f"evil.[{auth}]", f"[{auth}].evil"]
        )
    )
    tail = draw(st.lists(st.one_of(label, junk, segment), max_size=3))
    return f"{scheme_}://{auth}{slash}{path_}" + "".join("/" + s for s in tail)


@settings(max_examples=1000, deadline=None)
@given(st.data())
def test_a_prefix_allows_a_url_only_where_the_client_sends_it_within_the_prefix(
    data: st.DataObject,
) -> None:
    """Whatever the prefix and the URL, an allowed URL reaches, by the HTTP client's own
    reading, the prefix's scheme, host (or a host under its wildcard), port and paths."""
    text = data.draw(any_prefixes())
    prefix = parse_prefix(text)
    if prefix is None:
        return
    url = data.draw(reaching_urls(text))
    if not within(url, prefix):
        return
    sent = reaches(url)
    assert sent is not None, url
    scheme_, host_, port_, path_ = sent
    assert scheme_ == prefix.scheme and prefix.port in (None, port_), url
    if prefix.host.startswith("*."):
        assert host_.endswith(prefix.host[1:]) and host_ != prefix.host[2:], url
        assert not host_.replace(".", "").isdigit(), url  # a domain's host, not an address
    else:
        assert host_ == prefix.host, url
    assert not prefix.path or path_ == prefix.path or path_.startswith(prefix.path + "/")


@settings(max_examples=300, deadline=None)
@given(text=prefixes(), suffix=path)
@example(text="http://0", suffix="/0//..").via("httpx sends /0, a server reads /")
def test_a_prefix_allows_what_it_names_and_the_paths_below_it(text: str, suffix: str) -> None:
    prefix = parse_prefix(text)
    assert prefix is not None
    url = text.replace("*.", "any.") + suffix
    served = served_path(url)
    inside = served.startswith(prefix.path) and served[len(prefix.path) :][:1] in ("", "/")
    raw = urlsplit(url).path
    assert inside or not within(url, prefix), (url, served)
    # An escaped dot, slash or a backslash the client and a server may read apart is refused,
    # as is a path the client sends as another (dot segments after an empty one: "/a//..").
    sent = served_path(str(httpx.URL(url)))
    if "%" not in unquote(raw) and not re.search(r"%(2e|2f|5c)|\\", raw, re.IGNORECASE):
        assert within(url, prefix) == (inside and sent == served), (url, served, sent)


@pytest.mark.parametrize(
    "url",
    [
        "https://api.openai.com.evil.example/v1",
        "https://evil.example/api.openai.com/v1",
        "https://api.openai.com/v10",
        "https://api.openai.com/v1/../admin",
        "https://api.openai.com/v1/%2e%2e/admin",
        "https://api.openai.com/v1%2f..%2fadmin",
        "https://api.openai.com/v1/%252e%252e/admin",
        "https://api.openai.com/v1/a%2fb/../..",  # the client sends "/"
        "https://api.openai.com/v1/a%5cb/../../admin",
        "http://api.openai.com/v1",
        "https://api.openai.com:8443/v1",
        "https://api.openai.com:0/v1",
        "https://x.[::1]/v1",
        "https://key@api.openai.com/v1",
        "https://api.openai.com/v1\r\nHost: evil",
        "https://api.openai.com./v1",  # another host to a Pod's resolver
    ],
)
def test_near_misses_are_not_allowed(url: str) -> None:
    assert not allowed(url, parse_prefixes("https://api.openai.com/v1")[0])


@pytest.mark.parametrize(
    "url",
    [
        "https://api.openai.com/v1",
        "https://api.openai.com/v1/",
        "https://API.OpenAI.com:443/v1/chat/completions",
        "https://api.openai.com/v1/x/../models",
    ],
)
def test_spellings_of_an_allowed_url_are_allowed(url: str) -> None:
    assert allowed(url, parse_prefixes("https://api.openai.com/v1")[0])


def test_a_wildcard_host_is_any_host_under_it_but_not_itself() -> None:
    prefixes_ = parse_prefixes("http://*.svc.cluster.local:8000")[0]
    assert allowed("http://chroma.memory.svc.cluster.local:8000", prefixes_)
    assert not allowed("http://svc.cluster.local:8000", prefixes_)
    assert not allowed("http://chroma.svc.cluster.local.evil:8000", prefixes_)
    # "*." in a path is text: it neither makes the host a wildcard nor stands alone.
    in_path = parse_prefix("https://good.example/x://*.evil")
    assert in_path is not None and in_path.host == "good.example"
    assert not allowed("https://a.good.example/x:/wildcard.evil", [in_path])
    assert parse_prefix("https://*.") is None and parse_prefix("https://*.:8000") is None
    # A wildcard names a domain's hosts, never IP addresses by their last octets.
    assert parse_prefix("http://*.0.1") is None and parse_prefix("http://*.1") is None
    assert parse_prefix("http://*.svc.0x1a") is None and parse_prefix("http://*.svc.12") is None
    # A name's last label may start with a digit, as an endpoint URL's may (a namespace).
    assert parse_prefix("http://*.svc.1a") is not None and parse_prefix("http://*.a1.b")


def test_an_annotation_lists_prefixes_separated_by_commas_or_spaces_and_names_bad_ones() -> None:
    valid, invalid = parse_prefixes(
        " https://a.example/v1,http://chroma:8000\n  ftp://x https://u:p@h https://h/?q https://b "
    )
    assert [p.text for p in valid] == ["https://a.example/v1", "http://chroma:8000", "https://b"]
    assert invalid == ["ftp://x", "https://u:p@h", "https://h/?q"]


@settings(max_examples=300, deadline=None)
@given(url=urls())
def test_a_shown_url_never_carries_its_credentials(url: str) -> None:
    assert "p4ssw0rd" not in shown(url)
    assert target(url) is None or "@" not in shown(url)


USE = SecretUse(
    "model.apiKeySecretRef", "agents", "openai-key", "https://u:p4ssw0rd@evil.example/v1"
)


@pytest.mark.parametrize(
    ("annotation", "allow_unannotated"),
    [(None, False), ("https://api.openai.com/v1", False), ("ftp://nope", True)],
)
def test_a_refusal_names_the_secret_the_url_and_the_annotation_never_a_credential(
    annotation: str | None, allow_unannotated: bool
) -> None:
    verdict = judge_secret(USE, annotation, allow_unannotated=allow_unannotated)
    assert not verdict.allowed and not verdict.warning
    for part in ("Secret agents/openai-key", "https://evil.example/v1", ALLOWED_URLS_ANNOTATION):
        assert part in verdict.refusal
    assert "p4ssw0rd" not in verdict.refusal and "u:" not in verdict.refusal
    condition = secrets_allowed([verdict])
    assert (condition.status, condition.reason) == ("False", "SecretHostNotAllowed")


def test_an_unannotated_secret_goes_only_while_allowed_and_then_with_a_warning() -> None:
    use = SecretUse("store.authSecretRef", "agents", "chroma-token", "http://chroma:8000")
    refused = judge_secret(use, None)
    assert not refused.allowed
    assert f"kubectl annotate secret -n agents chroma-token {ALLOWED_URLS_ANNOTATION}=" in (
        refused.refusal
    )
    warned = judge_secret(use, None, allow_unannotated=True)
    assert warned.allowed and "next release" in warned.warning
    condition = secrets_allowed([warned])
    assert (condition.status, condition.reason) == ("False", "SecretNotAnnotated")
    # An annotation, once there, is the owner's word, whatever the operator allows.
    assert not judge_secret(use, "http://other:8000", allow_unannotated=True).allowed
    assert judge_secret(use, "http://chroma:8000", allow_unannotated=False).allowed


def test_the_secrets_condition_is_true_only_when_every_secret_allows_its_url() -> None:
    use = SecretUse("model.apiKeySecretRef", "agents", "openai-key", "https://api.example/v1")
    ok = judge_secret(use, "https://api.example/v1")
    assert ok.allowed
    assert secrets_allowed([ok]).status == "True"
    assert secrets_allowed([]).reason == "NoSecrets"
    assert secrets_allowed([ok], ["Secret agents/x not found"]).status == "Unknown"


def test_the_operator_wide_list_refuses_what_it_does_not_name_and_an_empty_list_nothing() -> None:
    assert endpoint_refusal("store.url", "http://anywhere:1", []) is None
    listed = parse_prefixes("http://chroma.memory.svc:8000, https://api.openai.com/v1")[0]
    assert endpoint_refusal("store.url", "http://chroma.memory.svc:8000", listed) is None
    refusal = endpoint_refusal("model.baseUrl", "http://169.254.169.254/latest", listed)
    assert refusal is not None
    assert "model.baseUrl http://169.254.169.254/latest" in refusal
    assert "operator.allowedEndpoints" in refusal


# --- where the memories may go ----------------------------------------------------------------

OWNER = StoreCredential("agents", "team-chroma", "https://api.openai.com/v1, http://[::1]:8080/v1")


@settings(max_examples=200)
@given(st.data())
def test_memories_go_to_what_the_store_owner_allows_in_any_spelling(data: st.DataObject) -> None:
    allowed_url = data.draw(
        st.one_of(spellings("https", "api.openai.com", 443), spellings("http", "::1", 8080))
    )
    assert memory_destination_refusal("model.baseUrl", allowed_url, OWNER, []) is None
    refused_url = data.draw(
        st.one_of(
            spellings("https", "api.openai.com", 8443),
            spellings("http", "api.openai.com", 80),
            spellings("https", "api.openai.com.evil.example", 443),
            spellings("http", "::2", 8080),
            spellings("http", "127.0.0.1", 8080),
            spellings("https", "api.openai.com", 443, "/v2"),
        )
    )
    refusal = memory_destination_refusal("embedding.baseUrl", refused_url, OWNER, [])
    assert refusal is not None
    assert "embedding.baseUrl" in refusal and "Secret agents/team-chroma" in refusal
    assert f"{ALLOWED_MODEL_URLS_ANNOTATION} annotation allows https://api.openai.com/v1" in refusal


def test_without_the_owners_word_the_install_list_decides_and_empty_allows_nothing() -> None:
    install = parse_prefixes("http://vllm.models.svc:8000/v1")[0]
    unannotated = StoreCredential("agents", "team-chroma", None)
    ok = "http://vllm.models.svc:8000/v1"
    assert memory_destination_refusal("model.baseUrl", ok, None, install) is None
    assert memory_destination_refusal("model.baseUrl", ok, unannotated, install) is None
    bare = memory_destination_refusal("model.baseUrl", "https://x.example/v1", None, [])
    assert bare is not None and "store has no credential" in bare
    assert "allow nothing" in bare and "operator.allowedModelUrls" in bare
    owned = memory_destination_refusal("model.baseUrl", "https://x.example/v1", unannotated, [])
    assert owned is not None
    assert (
        "`kubectl annotate secret -n agents team-chroma "
        f"{ALLOWED_MODEL_URLS_ANNOTATION}=https://x.example/v1`"
    ) in owned
    # The owner's annotation is their word even against the install's list.
    strict = StoreCredential("agents", "team-chroma", "")
    assert memory_destination_refusal("model.baseUrl", ok, strict, install) is not None


def test_a_prefix_with_port_star_allows_any_port_of_its_host_only() -> None:
    [any_port] = parse_prefixes("http://127.0.0.1:*/v1")[0]
    assert within("http://127.0.0.1:1/v1/chat", any_port)
    assert within("http://127.0.0.1/v1", any_port)
    assert not within("https://127.0.0.1:1/v1", any_port)
    assert not within("http://127.0.0.2:1/v1", any_port)
    assert not within("http://127.0.0.1:1/v2", any_port)
    assert parse_prefix("http://h:*x") is None


def test_a_redirect_is_named_without_its_credentials() -> None:
    text = redirect_refusal("http://a:1/v1/chat/completions", 307, "http://u:pw@b:2/in?k=v")
    assert "http://b:2/in" in text and "pw" not in text and "307" in text
    assert "http://a:1/v1/x" in redirect_refusal("http://a:1/v1/y", 302, "x")


@settings(max_examples=300, deadline=None)
@given(
    location=st.text(max_size=30)
    | st.sampled_from(["http://[", "http://[::1", "//[x]/", "http://a:99999/", "http://a:x/"])
    | st.builds("{}://{}".format, st.sampled_from(["http", "https", ""]), st.text(max_size=20)),
    secret=st.sampled_from(["", "u:pw@"]),
)
def test_a_redirect_anywhere_is_refused_with_a_message_and_no_credentials(
    location: str, secret: str
) -> None:
    """Whatever Location an endpoint answers with (it is the endpoint's to say), the refusal
    is a message, never an exception, and shows no credentials."""
    # no "pw" in the Location itself, in any case (a host is shown lowercased: `A://PW`)
    text = redirect_refusal(f"http://{secret}a:1/v1/y", 302, re.sub("(?i)pw", "p", location))
    assert "HTTP 302" in text and "pw" not in text


_SCHEMA = json.loads(
    (Path(__file__).parents[2] / "charts/session-summary-operator/values.schema.json").read_text()
)
_LISTS = ("allowedEndpoints", "allowedModelUrls")
_SCHEMA_PATTERNS = [
    _SCHEMA["properties"]["operator"]["properties"][key]["items"]["pattern"] for key in _LISTS
]


@settings(max_examples=500, deadline=None)
@given(url=st.from_regex(ENDPOINT_URL_PATTERN, fullmatch=True))
def test_every_endpoint_a_summarizer_may_name_can_be_allow_listed(url: str) -> None:
    """A host an endpoint URL accepts ("a_b.svc", "chroma.1team") can be written as an
    allowed prefix, exactly and as a wildcard over its parent when that is a name, in
    SSO_ALLOWED_ENDPOINTS and in the chart's values alike; a wildcard over the parent of an
    IP address stays refused."""
    t = target(url)
    assume(t is not None)
    assert t is not None
    written = f"[{t.host}]" if ":" in t.host else t.host
    prefixes_ = [f"{t.scheme}://{written}:{t.port}"]
    parent = t.host.partition(".")[2]
    if "." in t.host and re.fullmatch(rf"(?i){_NAME}\.?", parent) and not _is_ip(t.host):
        prefixes_.append(f"{t.scheme}://*.{parent}:{t.port}")
    for text in prefixes_:
        prefix = parse_prefix(text)
        assert prefix is not None and within(url, prefix), text
        assert all(re.fullmatch(p, text) for p in _SCHEMA_PATTERNS), text
    if _is_ip(t.host) and "." in t.host:
        wildcard = f"{t.scheme}://*.{parent}"
        assert parse_prefix(wildcard) is None
        assert not any(re.fullmatch(p, wildcard) for p in _SCHEMA_PATTERNS)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _mapped_spellings(address: ipaddress.IPv4Address) -> st.SearchStrategy[str]:
    """An IPv4 address as written, or as the IPv4-mapped IPv6 address a client connects to it
    by ("[::ffff:7f00:1]" reaches 127.0.0.1): hex groups, expanded, with a dotted tail."""
    mapped = ipaddress.IPv6Address(f"::ffff:{address}")
    return st.sampled_from(
        [
            str(address),
            f"[{mapped.compressed}]",
            f"[{mapped.compressed.upper()}]",
            f"[{mapped.exploded}]",
            f"[::ffff:{address}]",
            f"[0:0:0:0:0:ffff:{address}]",
        ]
    )


@settings(max_examples=300, deadline=None)
@given(data=st.data(), allowed_address=st.ip_addresses(v=4))
def test_an_ipv4_address_and_its_ipv4_mapped_ipv6_spellings_are_one_destination(
    data: st.DataObject, allowed_address: ipaddress.IPv4Address
) -> None:
    """A client sends to "[::ffff:a.b.c.d]" (in any spelling) by connecting to a.b.c.d: a
    prefix allows a URL exactly when the two reach the same address, however each is
    written, and the message shows the address the request goes to."""
    prefix_host = data.draw(_mapped_spellings(allowed_address), label="prefix host")
    sent_address = data.draw(
        st.just(allowed_address) | st.ip_addresses(v=4),
        label="sent address",
    )
    url_host = data.draw(_mapped_spellings(sent_address), label="url host")
    prefix = parse_prefix(f"http://{prefix_host}:8000/v1")
    assert prefix is not None
    url = f"http://{url_host}:8000/v1/chat/completions"
    assert within(url, prefix) == (_connects_to(url_host) == _connects_to(prefix_host)), url
    assert shown(url) == f"http://{sent_address}:8000/v1/chat/completions"


@settings(max_examples=300, deadline=None)
@given(
    name=domain,
    prefix_dot=st.booleans(),
    url_dot=st.booleans(),
    wildcard=st.booleans(),
    upper=st.booleans(),
)
def test_a_name_with_the_roots_dot_is_another_host_than_the_name_without(
    name: str, prefix_dot: bool, url_dot: bool, wildcard: bool, upper: bool
) -> None:
    """In a Pod, a name without the root's dot is first looked up under the search domains
    ("vllm.dev" is the Service vllm of namespace dev), the name with it only as written (the
    internet's "vllm.dev."): a prefix allows a URL only when the client sends the host it
    names, its root's dot included; the chart's values take either."""
    text = f"http://{'*.' if wildcard else ''}{name}{'.' if prefix_dot else ''}:8000/v1"
    prefix = parse_prefix(text)
    assert prefix is not None, text
    assert all(re.fullmatch(p, text) for p in _SCHEMA_PATTERNS), text
    written = f"{'a.' if wildcard else ''}{name.upper() if upper else name}"
    url = f"http://{written}{'.' if url_dot else ''}:8000/v1/chat/completions"
    assert httpx.URL(url).host.endswith(".") == url_dot  # what the client resolves
    assert within(url, prefix) == (prefix_dot == url_dot), url
    assert shown(url) == url.lower()


@settings(max_examples=500, deadline=None)
@given(
    segments=st.lists(
        st.sampled_from(["", ".", "..", "a", "b", "c", "%2e%2e", "..\\"]), max_size=8
    ),
    under=st.sampled_from(["", "/a", "/c", "/a/c", "/b/c"]),
)
@example(segments=["a", "", "..", "c"], under="/c")
@example(segments=[":", "", "a.evil", "..", "..", ":", "", "*.evil"], under="/:/*.evil")
def test_empty_and_dot_segments_are_judged_where_the_client_sends_them(
    segments: list[str], under: str
) -> None:
    """`/a//../c` is sent as `/a/c` (the client keeps the empty segment `..` removes), not
    `/c`: an allowed URL's path is the prefix's path, or under it, as the client sends it."""
    url, prefix = "http://h/" + "/".join(segments), parse_prefix("http://h" + under)
    assert prefix is not None
    if within(url, prefix):
        sent = reaches(url)
        assert sent is not None, url
        path = sent[3]
        assert not under or path == under or path.startswith(under + "/"), (url, path)


def _literal_spellings(address: ipaddress.IPv6Address) -> list[str]:
    """An IPv6 address in each RFC 4291 spelling, and an IPv4-mapped one also as its IPv4."""
    mapped = [str(address.ipv4_mapped)] if address.ipv4_mapped else []
    return mapped + [f"[{spelling}]" for spelling in ipv6_spellings(address)]


# Addresses that look alike: one IPv4 address mapped (::ffff:a.b.c.d, reached at a.b.c.d),
# compatible (::a.b.c.d, an IPv6 address of its own) and translated (::ffff:0:a.b.c.d).
_ipv4_forms = st.sampled_from(["::ffff:{}", "::{}", "::ffff:0:{}"])
_look_alike = st.builds(
    lambda form, v4: ipaddress.IPv6Address(form.format(v4)),
    _ipv4_forms,
    st.sampled_from(["127.0.0.1", "10.0.0.1", "169.254.169.254"]),
)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), allowed=_look_alike | st.ip_addresses(v=6))
def test_an_allow_list_covers_every_spelling_of_its_address_and_no_look_alike(
    data: st.DataObject, allowed: ipaddress.IPv6Address
) -> None:
    """However a prefix and a URL write their IP literal (hex or dotted tail, compressed or
    not, either case), the prefix allows the URL exactly when the client connects to the same
    address: 127.0.0.1 and [::ffff:127.0.0.1] are one, [::127.0.0.1] (IPv4-compatible,
    which no client reaches at 127.0.0.1) and [::ffff:0:127.0.0.1] are others. The chart's
    operator.allowedEndpoints and allowedModelUrls take each spelling, as the operator does."""
    sent = data.draw(st.just(allowed) | _look_alike | st.ip_addresses(v=6), label="sent")
    prefix_host = data.draw(st.sampled_from(_literal_spellings(allowed)), label="prefix host")
    url_host = data.draw(st.sampled_from(_literal_spellings(sent)), label="url host")
    prefix = parse_prefix(f"http://{prefix_host}:8000/v1")
    assert prefix is not None, prefix_host
    assert all(re.fullmatch(p, prefix.text) for p in _SCHEMA_PATTERNS), prefix.text
    url = f"http://{url_host}:8000/v1/chat/completions"
    assert within(url, prefix) == (_connects_to(url_host) == _connects_to(prefix_host)), url


@st.composite
def _urls_with_secrets(draw: st.DrawFn) -> tuple[str, str]:
    """(a URL, the secret it carries in its userinfo, query or fragment)."""
    secret = draw(st.text("ABCDEFGHJKMNPQRSTUVWXYZ23456789", min_size=12, max_size=30))
    where = draw(st.sampled_from(["password", "user", "query", "fragment"]))
    head = draw(st.sampled_from(["http://", "https://", "", "ftp://"]))
    host = draw(st.sampled_from(["127.0.0.1", "chroma", "[::1]", "host:99999", "h:abc", ""]))
    path = draw(st.sampled_from(["", "/", "/v1"]))
    # A password may hold `@` and `:` itself: a reader takes the userinfo up to the last `@`.
    held = secret[:6] + draw(st.sampled_from(["", "@", ":@", "@@", "@:"])) + secret[6:]
    userinfo = {"password": f"user:{held}@", "user": f"{held}@"}.get(where, "")
    tail = {"query": f"?token={secret}&x=1", "fragment": f"#{secret}"}.get(where, "")
    return f"{head}{userinfo}{host}{path}{tail}", secret


@settings(max_examples=200, deadline=None)
@given(_urls_with_secrets())
def test_no_message_quoting_a_url_shows_its_credentials(url_secret: tuple[str, str]) -> None:
    """The spec's url check, the store's connect and the operator's SSO_ALLOWED_* check
    quote the URL as shown() does: never its userinfo, query or fragment."""
    from pydantic import ValidationError

    from controller import config
    from controller.api import StoreSpec
    from controller.store.connection import StoreLocation, connect

    url, secret = url_secret
    said = [shown(url)]
    with pytest.raises(ValidationError) as invalid:
        StoreSpec(url=url)
    said.append(str(invalid.value))
    with pytest.raises(ValueError) as refused:
        connect(StoreLocation(url=url))
    said.append(str(refused.value))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SSO_ALLOWED_ENDPOINTS", url)
        mp.setenv("SSO_ALLOWED_MODEL_URLS", url)
        with pytest.raises(SystemExit) as unset:
            config.load()
    said.append(str(unset.value))
    assert not [text for text in said if secret[:6] in text or secret[6:12] in text]
