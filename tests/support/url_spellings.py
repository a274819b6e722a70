"""Generated spellings of one endpoint URL (hypothesis): the ways a SessionSummarizer's
author may write the same scheme, host, port and path (the CRD refuses user:password@ and
an upper-case scheme): host case, the default port written or not, an IPv6 address
compressed, expanded or upper case, an IPv4 address IPv4-mapped ("[::ffff:7f00:1]"), the
path's tail. Never the root's dot: "vllm.dev." is another host than "vllm.dev" to a Pod's
resolver."""

from __future__ import annotations

import ipaddress

from hypothesis import strategies as st

DEFAULT_PORTS = {"http": 80, "https": 443}


def _mixed_case(draw: st.DrawFn, text: str) -> str:
    flips = draw(st.lists(st.booleans(), min_size=len(text), max_size=len(text)))
    return "".join(c.upper() if flip else c for c, flip in zip(text, flips, strict=True))


@st.composite
def spellings(draw: st.DrawFn, scheme: str, host: str, port: int, path: str = "/v1") -> str:
    """A URL that reaches scheme://host:port{path}/..., spelled one of many ways."""
    if ":" in host:
        address = ipaddress.IPv6Address(host)
        form = draw(st.sampled_from([address.compressed, address.exploded]))
        written_host = f"[{_mixed_case(draw, form)}]"
    elif host.replace(".", "").isdigit():  # an IPv4 address, or its IPv4-mapped IPv6 one
        mapped = ipaddress.IPv6Address(f"::ffff:{host}")
        form = draw(st.sampled_from(["", mapped.compressed, mapped.exploded]))
        written_host = f"[{_mixed_case(draw, form)}]" if form else host
    else:
        written_host = _mixed_case(draw, host)
    ports = [f":{port}"] + ([""] if DEFAULT_PORTS[scheme] == port else [])
    tail = draw(st.sampled_from(["", "/", "/chat/completions", "/./", "/x/../"]))
    return f"{scheme}://{written_host}{draw(st.sampled_from(ports))}{path}{tail}"


def ipv6_spellings(address: ipaddress.IPv6Address) -> list[str]:
    """Every way RFC 4291 (2.2) writes one IPv6 address: compressed, in full, upper case, and
    the last 32 bits as a dotted IPv4 address ("::ffff:127.0.0.1", "::1.2.3.4")."""
    tail = ipaddress.IPv4Address(int(address) & 0xFFFF_FFFF)
    # The same first 96 bits over a non-zero tail: "::" never swallows the tail's groups.
    head = ipaddress.IPv6Address(int(address) | 0xFFFF_FFFF).compressed
    return [
        address.compressed,
        address.exploded,
        address.compressed.upper(),
        f"{address.exploded.rsplit(':', 2)[0]}:{tail}",
        f"{head.removesuffix('ffff:ffff')}{tail}",
    ]
