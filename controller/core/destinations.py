"""Accepted endpoint URLs, and where a credential may be sent (docs/security.md). Pure.

A Secret's value goes only to URLs its owner's annotation lists; memories read with a store
credential only to the model endpoints its Secret (else the install) allows. One rule,
`within`: scheme, host, port, and a path inside the prefix's once resolved.
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from urllib.parse import unquote, urljoin, urlsplit

import idna

# One pattern for RE2 (the CRD's CEL `matches`, the chart's values schema) and Python's re:
# ASCII classes and escaped punctuation only; what it admits, the clients read as written.
_OCTET = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = rf"{_OCTET}(\.{_OCTET}){{3}}"
_H16 = "[0-9A-Fa-f]{1,4}"
_LS32 = f"({_H16}:{_H16}|{_IPV4})"  # "::ffff:10.0.0.1" is "::ffff:a00:1" (RFC 4291, 2.2)
# RFC 3986's IPv6address: n groups before "::" and what is left of the 8 after it.
_AFTER_GAP = (
    *(f"({_H16}:){{{n}}}{_LS32}" for n in (4, 3, 2)),
    f"{_H16}:{_LS32}",
    _LS32,
    _H16,
    "",
)
_IPV6 = "|".join(
    [f"({_H16}:){{6}}{_LS32}", f"::({_H16}:){{5}}{_LS32}", f"({_H16})?::{_AFTER_GAP[0]}"]
    + [f"(({_H16}:){{0,{n}}}{_H16})?::{after}" for n, after in enumerate(_AFTER_GAP) if n]
)
# A DNS name whose last label is no number (a resolver reads "1.2.3.0x7f" as 1.2.3.127): a
# letter first, or a digit and a last letter no number ends with. Labels of 63 at most.
_LABEL = "[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_LAST_LABEL = (
    "[A-Za-z]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
    "|[1-9][A-Za-z0-9_-]{0,61}[A-Za-z_]|0[A-Za-z0-9_-]{0,61}[G-WYZg-wyz_]"
)
_NAME = rf"({_LABEL}\.)*({_LAST_LABEL})"
_PORT = "(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3})"
# host[:port]: a name (it may end in the root's "."), an IPv4 address (not: the clients send
# "127.0.0.1." as a name, which no resolver finds), or an [IPv6 address]; never user:password@.
AUTHORITY_PATTERN = rf"({_NAME}\.?|{_IPV4}|\[({_IPV6})\])(:{_PORT})?"
# DNS's limit (255 octets on the wire): a second pattern, RE2 has no lookahead to bound _NAME.
HOST_LENGTH_PATTERN = r"^https?://(\[|[^/:]{1,253}\.?([:/]|$))"
HOST_LENGTH_MESSAGE = "must have a host name of at most 253 characters (DNS's limit)"
IDNA_MESSAGE = (
    "must have a host name whose labels are all valid IDNA (RFC 5891) when one is an xn-- "
    "label (punycode): {label!r} is not"
)
# A path in printable ASCII whose escapes decode once (no %25: `within`); no query or
# fragment: the openai SDK appends its paths after them.
_PATH = r'/([!"$&->@-~]|%([013-9A-Fa-f][0-9A-Fa-f]|2[0-46-9A-Fa-f]))*'
ENDPOINT_URL_PATTERN = rf"^https?://{AUTHORITY_PATTERN}({_PATH})?$"
ENDPOINT_URL_MAX = 2048
# No pattern can say it (the CRD admits such a path; SpecValid refuses it).
PATH_MESSAGE = (
    "must have a path that URL readers resolve alike: its '.' or '..' segments, after an "
    "empty segment ('//'), a backslash or an escape such as %2e, %2f or %5c, resolve one way "
    "in the HTTP client and another on a server; write the base URL without them"
)
ENDPOINT_URL_MESSAGE = (
    "must be an http(s) URL: a host name (labels of 1-63 characters, the last no number), "
    "an IPv4 or [IPv6] address, an optional port 1-65535, then a path in printable ASCII "
    "(no %25); no query or fragment (the client appends its paths after them) and no "
    "user:password@ (put the key in a Secret: apiKeySecretRef)"
)


def endpoint_url_problem(url: str) -> str | None:
    """Why an endpoint base URL is refused; None when accepted. Never repeats the URL."""
    if len(url) > ENDPOINT_URL_MAX:
        return f"must be at most {ENDPOINT_URL_MAX} characters"
    if not re.fullmatch(ENDPOINT_URL_PATTERN, url):
        return ENDPOINT_URL_MESSAGE
    path_problem = PATH_MESSAGE if normal_path(urlsplit(url).path) is None else None
    return host_name_problem(url) or path_problem


def normal_path(path: str) -> str | None:
    """The path a server resolves (escapes decoded once, \\ as /, dot segments applied). None
    when an escape is left after decoding, or the client's dot segments reach elsewhere
    ("/v1/a%2fb/../.." is sent as "/", "/a//../c" as "/a/c": RFC 3986's remove_dot_segments)."""

    def resolved(text: str) -> str:
        normal = posixpath.normpath("/" + unquote(text).replace("\\", "/").lstrip("/"))
        return "" if normal == "/" else normal

    sent: list[str] = []
    for segment in path.split("/")[1:]:
        if segment == "..":
            sent = sent[:-1]
        elif segment != ".":
            sent.append(segment)
    if "%" in unquote(path) or resolved(path) != resolved("/" + "/".join(sent)):
        return None
    return resolved(path)


def host_name_problem(url: str) -> str | None:
    """What no pattern says of a URL: DNS's limit on the name, IDNA's rules ("xn--zz")."""
    if not re.match(HOST_LENGTH_PATTERN, url):
        return HOST_LENGTH_MESSAGE
    labels = re.split(r"[:/]", url.split("//", 1)[1])[0].lower().rstrip(".").split(".")
    if not any(label.startswith("xn--") for label in labels):
        return None
    for label in labels:
        try:
            idna.decode(label)
        except idna.IDNAError:
            return IDNA_MESSAGE.format(label=label)
    return None


def checked_endpoint_url(value: str | None) -> str | None:
    if value is not None and (problem := endpoint_url_problem(value)):
        raise ValueError(f"baseUrl {problem}")
    return value


ALLOWED_URLS_ANNOTATION = "memorycore.io/allowed-urls"
ALLOWED_MODEL_URLS_ANNOTATION = "memorycore.io/allowed-model-urls"
# Whose allowed endpoints a refusal names: the operator's, or summaryctl's own (its SSO_*).
OPERATOR = "the operator"
DEFAULT_PORTS = MappingProxyType({"http": 80, "https": 443})


@dataclass(frozen=True)
class UrlPrefix:
    """An allowed URL prefix, or where a URL sends a request (`target`: its port known)."""

    scheme: str
    host: str  # lower case; "*.example.com" for any host under it
    port: int | None  # None: any port (written `:*`)
    path: str  # normalized, no trailing "/"; "" is every path
    text: str  # as written


_NETLOC = re.compile(r"(\[[^\[\]]+\]|[^\[\]:@]+)(:[0-9]*)?")


def target(url: str) -> UrlPrefix | None:
    """Where a URL reaches; None unless a plain http(s) URL with a host and no credentials."""
    if any(ord(c) <= 0x20 or ord(c) == 0x7F for c in url):
        return None
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname or port == 0:
        return None
    # urlsplit reads "[::1]" out of "evil.[::1]"; "@" is refused: credentials never go.
    if not _NETLOC.fullmatch(parts.netloc):
        return None
    path = normal_path(parts.path)
    if path is None:
        return None
    # The root's dot stays: in a Pod, "vllm.dev" is looked up under the search domains first.
    host = parts.hostname.lower()
    if parts.netloc.startswith("["):  # one spelling per IPv6 address ("::1", "0:0:0:0:0:0:0:1")
        try:
            address = ipaddress.IPv6Address(host)
        except ValueError:
            return None
        # A client reaches an IPv4-mapped address ("::ffff:7f00:1") at its IPv4 address.
        host = str(address.ipv4_mapped or address.compressed)
    return UrlPrefix(scheme, host, DEFAULT_PORTS[scheme] if port is None else port, path, url)


def shown(url: str) -> str:
    """A URL as a message may show it: never its user:password@, query or fragment (of one
    no client reads alike: the text without anything up to an "@" or from a "?" or "#")."""
    t = target(url)
    if t is None:
        try:
            parts = urlsplit(url)
            host, port = parts.hostname, parts.port
        except ValueError:
            return _as_written(url)
        if not host or not parts.scheme.isascii() or not parts.scheme.isalnum():
            return _as_written(url)
        scheme = parts.scheme.lower()
        path = normal_path(parts.path) if url.isprintable() and " " not in url else None
    else:
        scheme, host, path = t.scheme, t.host, t.path
        port = None if DEFAULT_PORTS[scheme] == t.port else t.port
    host = f"[{host}]" if ":" in host else host
    return f"{scheme}://{host}" + (f":{port}" if port is not None else "") + (path or "")


def _as_written(url: str) -> str:
    return re.split(r"[?#]", re.sub(r"^([^/@]*//)?.*@", r"\1", url, flags=re.S), maxsplit=1)[0]


# A wildcard is a domain's hosts: "*.0.1" would be IP addresses ending in .0.1 instead, so
# the domain is a name as an endpoint URL reads one (its last label no number).
_HOST = re.compile(rf"([a-z0-9_]([a-z0-9_.-]*[a-z0-9_])?|\*\.{_NAME})\.?|[0-9a-f:.]+")


def parse_prefix(text: str) -> UrlPrefix | None:
    """A prefix as written in an annotation or SSO_ALLOWED_ENDPOINTS; None when invalid."""
    any_port = re.match(r"([^:/?#]+://[^/?#]*?):\*(?=[/?#]|$)", text)
    raw = any_port.group(1) + text[any_port.end() :] if any_port else text
    # "*." is a wildcard only where the host begins, never in a path ("/x://*.y").
    probe, wildcard = re.subn(r"^([^:/?#]+://)\*\.", r"\1wildcard.", raw)
    t = target(probe)
    if t is None or (wildcard and not t.host.startswith("wildcard.")):
        return None
    parts = urlsplit(probe)
    host = "*." + t.host.removeprefix("wildcard.") if wildcard else t.host
    if parts.query or parts.fragment or raw.endswith(("?", "#")) or not _HOST.fullmatch(host):
        return None
    return UrlPrefix(t.scheme, host, None if any_port else t.port, t.path, text)


def parse_prefixes(text: str) -> tuple[list[UrlPrefix], list[str]]:
    """(valid prefixes, invalid entries) of a list separated by commas or whitespace."""
    parsed = [(e, parse_prefix(e)) for e in re.split(r"[,\s]+", text.strip()) if e]
    return [p for _, p in parsed if p is not None], [e for e, p in parsed if p is None]


def within(url: str, prefix: UrlPrefix) -> bool:
    t = target(url)
    if t is None or t.scheme != prefix.scheme or prefix.port not in (None, t.port):
        return False
    if prefix.host.startswith("*."):  # a host under the domain, not the domain itself
        if not t.host.endswith(prefix.host[1:]) or len(t.host) < len(prefix.host):
            return False
    elif t.host != prefix.host:
        return False
    return not prefix.path or t.path == prefix.path or t.path.startswith(prefix.path + "/")


def allowed(url: str, prefixes: Iterable[UrlPrefix]) -> bool:
    return any(within(url, p) for p in prefixes)


class DestinationRefused(Exception):
    """A request refused: the message says why and what would allow it, never a credential."""


class SecretHostNotAllowed(DestinationRefused): ...


class EndpointNotAllowed(DestinationRefused): ...


class MemoryDestinationNotAllowed(DestinationRefused): ...


@dataclass(frozen=True)
class SecretUse:  # a Secret key that a SessionSummarizer field would send to a URL
    field: str  # e.g. "store.authSecretRef"
    namespace: str
    name: str
    url: str

    @property
    def secret(self) -> str:
        return f"Secret {self.namespace}/{self.name}"


@dataclass(frozen=True)
class SecretVerdict:
    use: SecretUse
    allowed: bool
    warning: str = ""  # allowed only because unannotated Secrets are still allowed
    refusal: str = ""


def _annotate(namespace: str, name: str, dest: str, *, model: bool = False) -> str:
    annotation = ALLOWED_MODEL_URLS_ANNOTATION if model else ALLOWED_URLS_ANNOTATION
    return f"kubectl annotate secret -n {namespace} {name} {annotation}={dest}"


def judge_secret(
    use: SecretUse, annotation: str | None, *, allow_unannotated: bool = False
) -> SecretVerdict:
    """May the Secret's value go to use.url? Its owner's annotation decides; without one, only
    while allow_unannotated (the previous release's behaviour), with a warning."""
    dest = shown(use.url)
    refused = f"{use.secret} ({use.field}) does not allow sending its value to {dest}"
    if annotation is None:
        how = f"its owner allows it with `{_annotate(use.namespace, use.name, dest)}`"
        if not allow_unannotated:
            refusal = f"{refused}: it has no {ALLOWED_URLS_ANNOTATION} annotation; {how}"
            return SecretVerdict(use, False, refusal=refusal)
        warning = (
            f"{use.secret} ({use.field}) has no {ALLOWED_URLS_ANNOTATION} annotation; its value "
            f"goes to {dest} only because unannotated Secrets are still allowed (chart value "
            f"operator.allowUnannotatedSecrets), which ends with the next release: {how}"
        )
        return SecretVerdict(use, True, warning=warning)
    prefixes, invalid = parse_prefixes(annotation)
    if allowed(use.url, prefixes):
        return SecretVerdict(use, True)
    listed = ", ".join(p.text for p in prefixes) or "nothing valid"
    bad = f"; ignored invalid entries: {', '.join(invalid)}" if invalid else ""
    why = f"its {ALLOWED_URLS_ANNOTATION} annotation allows {listed}{bad}"
    return SecretVerdict(use, False, refusal=f"{refused}: {why}; its owner may add {dest} to it")


def endpoint_refusal(
    field: str,
    url: str,
    allowed_endpoints: Sequence[UrlPrefix],
    setting: str = "the chart value operator.allowedEndpoints",
    program: str = OPERATOR,
) -> str | None:
    """Why `program`'s SSO_ALLOWED_ENDPOINTS refuse a URL; None: allowed (empty: all are)."""
    if not allowed_endpoints or allowed(url, allowed_endpoints):
        return None
    listed = ", ".join(p.text for p in allowed_endpoints)
    return (
        f"{field} {shown(url)} is not among {program}'s allowed endpoints ({listed}); "
        f"add it to {setting}"
    )


@dataclass(frozen=True)
class StoreCredential:
    """The store's Secret (store.authSecretRef) and its allowed-model-urls annotation."""

    namespace: str
    name: str
    annotation: str | None


def memory_destination_refusal(
    field: str,
    url: str,
    credential: StoreCredential | None,
    install_list: Sequence[UrlPrefix],
    setting: str = "the chart value operator.allowedModelUrls",
    program: str = OPERATOR,
    without: str | None = None,
) -> str | None:
    """Why memories (and summaries) may not go to url; None: they may. The store credential's
    annotation decides; without one (`without`: why), `program`'s SSO_ALLOWED_MODEL_URLS,
    where empty allows nothing."""
    annotation = credential.annotation if credential is not None else None
    prefixes, invalid = (install_list, []) if annotation is None else parse_prefixes(annotation)
    if allowed(url, prefixes):
        return None
    dest = shown(url)
    listed = ", ".join(p.text for p in prefixes) or "nothing"
    head = f"{field} {dest} may not receive the memories"
    admin = f"whoever runs {program} may add {dest} to {setting}"
    if credential is None:
        return (
            f"{head}: {without or 'the store has no credential (store.authSecretRef)'}, so "
            f"{program}'s allowed model URLs decide, and they allow {listed}; {admin}"
        )
    secret = f"Secret {credential.namespace}/{credential.name} (store.authSecretRef)"
    if annotation is None:
        command = _annotate(credential.namespace, credential.name, dest, model=True)
        return (
            f"{head} read with {secret}: it has no {ALLOWED_MODEL_URLS_ANNOTATION} annotation "
            f"and {program}'s allowed model URLs allow {listed}; the Secret's owner allows "
            f"it with `{command}`, or {admin}"
        )
    bad = f"; ignored invalid entries: {', '.join(invalid)}" if invalid else ""
    return (
        f"{head} read with {secret}: its {ALLOWED_MODEL_URLS_ANNOTATION} annotation allows "
        f"{listed}{bad}; the Secret's owner may add {dest} to it"
    )


def redirect_refusal(url: str, status: int, location: str | None) -> str:
    """Redirects are never followed (they could send what an allowed endpoint receives
    anywhere): the error names where it pointed, without credentials."""
    try:  # the Location is the endpoint's to say: it may be no URL at all
        where = shown(urljoin(url, location)) if location else "nowhere (no Location)"
    except ValueError:
        where = "an invalid URL"
    return (
        f"{shown(url)} answered HTTP {status}, a redirect to {where}: redirects are not "
        "followed; point the URL at the endpoint itself"
    )
