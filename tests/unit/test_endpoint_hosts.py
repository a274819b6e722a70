"""core/destinations.py: a model or embedding baseUrl the HTTP clients (httpx) or the
resolver would refuse is refused by the spec, with a message that does not repeat the URL;
it used to pass, and the model probe then raised (the SessionSummarizer's status was not
written, its spec handler retried with a traceback) and each embedding failed."""

from __future__ import annotations

import string

import httpx
import httpx2
import idna
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from controller.api import EmbeddingConfig, ModelSpec, StoreSpec
from controller.cli.args import chroma_url_problem
from controller.status.conditions import spec_problems

labels = st.text(string.ascii_lowercase + string.digits, min_size=1, max_size=20)
# A label no client or resolver takes: empty, over DNS's 63 octets, or not IDNA.
bad_labels = st.one_of(
    st.just(""),
    st.text(string.ascii_lowercase, min_size=64, max_size=80),
    st.sampled_from(["\x80", "\u00e4-", "-\u00e4", "\u00e4\u0300\u0080"]),
)
bad_hosts = st.one_of(
    st.builds(lambda a, bad, b: f"{a}.{bad}.{b}", labels, bad_labels, labels),
    st.builds(lambda n: f"{n}.0.0.1", st.integers(256, 99999)),  # an IPv4 form out of range
    # What a resolver reads as a number, or which httpx sends as a name no resolver takes:
    # a last label of digits or 0x-hex (`1.2.3.0x7f` is 1.2.3.127, `127.1` is 127.0.0.1),
    # an IPv4 address with the root's dot (`127.0.0.1.` is looked up as a name).
    st.builds(lambda a, n: f"{a}.{n}", labels, st.integers(0, 99999).map(str)),
    st.builds(lambda a, n: f"{a}.0x{n:x}", labels, st.integers(0, 2**32)),
    st.builds(lambda n: f"{n}.", st.ip_addresses(v=4).map(str)),
)
# A Kubernetes namespace is a DNS-1123 label and may start with a digit: `svc.1team`, the
# short form of a Service in it, is a name to httpx and every resolver (none of them reads it
# as a number, as it does `1.2.3.0x7f` or `127.1`).
digit_led = st.builds(
    lambda digits, middle, end: f"{digits}{middle}{end}",
    st.text(string.digits, min_size=1, max_size=5),
    st.text(string.ascii_lowercase + string.digits + "-", max_size=20),
    st.sampled_from([*"ghkmqstz_", "team", "prod", "d"]),
).filter(lambda label: not label.startswith("0") or label[-1] not in "abcdefx")
good_hosts = st.one_of(
    st.builds(lambda a, b: f"{a}.x{b}", labels, labels),  # a last label starts with a letter
    st.builds(lambda a, b: f"{a}.{b}", labels, digit_led),
    digit_led,
    st.sampled_from(["127.0.0.1", "[::1]", "localhost", "a_b.svc", "chroma.1team"]),
)
secret = "/s3cr3t"  # a path: a query alone is refused


@given(host=bad_hosts, port=st.sampled_from(["", ":8080"]))
def test_an_endpoint_no_client_or_resolver_takes_is_refused(host: str, port: str) -> None:
    for model in (ModelSpec, EmbeddingConfig):
        with pytest.raises(ValidationError) as err:
            model.model_validate({"baseUrl": f"http://{host}{port}/v1{secret}"})
        assert "baseUrl" in str(err.value) and "s3cr3t" not in str(err.value)


@given(char=st.sampled_from([chr(c) for c in [*range(0x01, 0x09), 0x0E, 0x7F]]))
def test_an_endpoint_with_a_control_character_is_refused(char: str) -> None:
    with pytest.raises(ValidationError):
        ModelSpec.model_validate({"baseUrl": f"http://model.example/v1{char}"})


@given(host=good_hosts, port=st.sampled_from(["", ":8080"]))
def test_an_endpoint_any_client_takes_is_accepted(host: str, port: str) -> None:
    url = f"https://{host}{port}/v1"
    assert ModelSpec.model_validate({"baseUrl": url}).base_url == url
    assert EmbeddingConfig.model_validate({"baseUrl": url}).base_url == url


# An xn-- label (punycode), of any case: mostly no IDNA A-label ("xn--zz", "xn--a"), some one
# ("xn--9ca" is "é", "xn--pple-43d" mixes Cyrillic and Latin), beside plain labels.
_UNICODE_LABELS = st.text(
    st.sampled_from("aé-zяπ中ع0\u0301\u200d"), min_size=1, max_size=12
).filter(lambda text: not text.isascii())


def _a_label(text: str) -> str | None:
    try:
        return idna.encode(text).decode()
    except idna.IDNAError:
        return None


xn_labels = st.one_of(
    st.text(string.ascii_lowercase + string.digits + "-", max_size=20).map("xn--{}".format),
    _UNICODE_LABELS.map(_a_label).filter(bool),
    st.sampled_from(["xn--zz", "xn--a", "xn--ls8h", "xn--pple-43d", "xn--9ca", "xn--" + "a" * 60]),
).map(lambda label: label.upper() if len(label) % 3 == 0 else label)
plain_labels = st.sampled_from(["svc", "a_b", "ab--cd", "x" * 64, "models", "1team"])
idna_hosts = st.builds(
    lambda labels, dot: ".".join(labels) + dot,
    st.lists(xn_labels | plain_labels, min_size=1, max_size=4).filter(
        lambda labels: any(label.lower().startswith("xn--") for label in labels)
    ),
    st.sampled_from(["", "."]),
)


@settings(max_examples=400, deadline=None)
@given(host=idna_hosts, port=st.sampled_from(["", ":8080"]))
def test_an_internationalized_host_is_taken_when_the_client_decodes_it_else_refused_in_a_line(
    host: str, port: str
) -> None:
    """A host with an xn-- label is an internationalized name, which httpx decodes (chromadb's
    client on its first request, failing "Invalid A-label"): the spec and summaryctl take it
    when every label is valid IDNA, and otherwise refuse it with one line naming the field and
    the rule, never with the codec's words."""
    base_url, store_url = f"http://{host}{port}/v1{secret}", f"http://{host}{port}"
    refusals = []
    for model in (ModelSpec, EmbeddingConfig):
        try:
            model.model_validate({"baseUrl": base_url})
        except ValidationError as exc:
            refusals.append(("baseUrl", spec_problems(exc)))
    try:
        StoreSpec.model_validate({"url": store_url})
    except ValidationError as exc:
        refusals.append(("url", spec_problems(exc)))
    if problem := chroma_url_problem(store_url):
        refusals.append(("Chroma URL", f"invalid Chroma URL: {problem}"))
    assert len(refusals) in (0, 4), refusals  # one verdict for every field
    if not refusals:
        for client in (httpx.URL, httpx2.URL):
            assert client(base_url).host  # decodes
        return
    for field, message in refusals:
        assert field in message and "\n" not in message and "s3cr3t" not in message
        assert "Invalid A-label" not in message and "Codepoint" not in message, message
        assert "IDNA" in message or "a host name" in message or "host[:port]" in message


@settings(max_examples=100, deadline=None)
@given(
    labels=st.lists(labels, max_size=3),
    long=st.text(string.ascii_lowercase + "-_", min_size=64, max_size=80).map(lambda t: f"a{t}a"),
    at=st.integers(0, 3),
)
def test_a_host_label_over_63_characters_is_refused_naming_the_limit(
    labels: list[str], long: str, at: int
) -> None:
    """DNS takes labels of 63 octets at most: the model, embedding and store URL and
    summaryctl's --chroma-url refuse a longer one in a line naming the field and the limit."""
    host = ".".join([*labels[:at], long, *labels[at:]]) + (".svc" if at >= len(labels) else "")
    messages = []
    for model in (ModelSpec, EmbeddingConfig):
        with pytest.raises(ValidationError) as err:
            model.model_validate({"baseUrl": f"http://{host}:8080/v1{secret}"})
        messages.append(spec_problems(err.value))
    with pytest.raises(ValidationError) as err:
        StoreSpec.model_validate({"url": f"http://{host}:8080"})
    messages.append(spec_problems(err.value))
    messages.append(f"--chroma-url {chroma_url_problem(f'http://{host}:8080')}")
    for message, field in zip(messages, ["baseUrl", "baseUrl", "url", "--chroma-url"], strict=True):
        assert field in message and "1-63 characters" in message and "\n" not in message
        assert "s3cr3t" not in message
