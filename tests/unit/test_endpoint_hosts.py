"""core/endpoint_url.py: a model or embedding baseUrl the HTTP clients (httpx) or the
resolver would refuse is refused by the spec, with a message that does not repeat the URL;
it used to pass, and the model probe then raised (the SessionSummarizer's status was not
written, its spec handler retried with a traceback) and each embedding failed."""

from __future__ import annotations

import string

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from controller.api import EmbeddingConfig, ModelSpec

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
)
good_hosts = st.one_of(
    st.builds(lambda a, b: f"{a}.x{b}", labels, labels),  # a last label starts with a letter
    st.sampled_from(["127.0.0.1", "[::1]", "localhost", "a_b.svc"]),
)
secret = "?key=s3cr3t"


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
