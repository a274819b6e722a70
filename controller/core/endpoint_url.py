"""Endpoint base URLs (the model's and the embedding's): which are accepted. Pure."""

from __future__ import annotations

import posixpath
import re
from urllib.parse import unquote, urlsplit

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
# DNS's limit (255 octets on the wire), a second pattern: RE2 has no lookahead to bound
# _NAME as a whole.
HOST_LENGTH_PATTERN = r"^https?://(\[|[^/:]{1,253}\.?([:/]|$))"
HOST_LENGTH_MESSAGE = "must have a host name of at most 253 characters (DNS's limit)"
IDNA_MESSAGE = (
    "must have a host name whose labels are all valid IDNA (RFC 5891) when one is an xn-- "
    "label (punycode): {label!r} is not"
)
# A path in printable ASCII whose escapes decode once (no %25: core/destinations.py). No query
# or fragment: the openai SDK appends its paths after them.
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
    if problem := host_name_problem(url):
        return problem
    return PATH_MESSAGE if normal_path(urlsplit(url).path) is None else None


def normal_path(path: str) -> str | None:
    """The path a server resolves: escapes decoded once, backslashes as slashes, dot segments
    applied. None when an escape is left after decoding, or when the client's dot segments
    on the path as written reach elsewhere ("/v1/a%2fb/../.." is sent as "/", "/a//../c" as
    "/a/c": the client keeps empty segments, RFC 3986's remove_dot_segments)."""

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
    """What the patterns cannot say of a URL they admit: DNS's limit on the name, and IDNA's
    rules, which no regular expression states (a label of any case "xn--zz" is no punycode)."""
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
