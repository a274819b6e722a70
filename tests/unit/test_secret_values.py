"""A Secret's value goes in an HTTP header (a store token, an API key): one no header can
carry is refused naming the Secret and its key, never the value, before anything is sent."""

from __future__ import annotations

import base64
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.handlers.session_summary import Failure, failures_shown
from controller.kube.client import secret_value

word = st.text(alphabet=string.ascii_letters + string.digits + "-_.~+/=!:@", min_size=1)
printable = st.tuples(word, st.sampled_from(["", " "]), word).map("".join)
# A value with a character no header carries: non-ASCII (a pasted quote, a no-break space),
# a line break or another control character inside it, or bytes that are not UTF-8.
odd = st.sampled_from(["é", "\u00a0", "\u201c", "\n", "\r\n", "\x00", "\x7f", "\t"])
unsendable = st.one_of(
    st.tuples(word, odd, word).map(lambda t: "".join(t).encode()),
    st.tuples(word, st.sampled_from([b"\xff", b"\xc3", b"\x80\x80"])).map(
        lambda t: t[0].encode() + t[1]
    ),
)


def encoded(value: bytes) -> dict[str, str]:
    return {"key": base64.b64encode(value).decode()}


@given(value=unsendable)
def test_a_value_no_header_carries_is_refused_naming_the_secret_not_the_value(
    value: bytes,
) -> None:
    with pytest.raises(Failure) as caught, failures_shown():
        secret_value(encoded(value), "ns", "model-key", "key")
    failure = caught.value
    assert failure.reason == "SecretNotFound"
    assert "Secret ns/model-key key 'key'" in failure.message
    kept = value.decode(errors="replace").strip()
    assert kept not in failure.message


@given(value=printable)
def test_a_printable_ascii_value_is_used_as_it_is_around_its_whitespace(value: str) -> None:
    assert secret_value(encoded(f" {value}\n".encode()), "ns", "s", "key") == value.strip()
