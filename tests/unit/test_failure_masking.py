"""What a failure shows (a condition, an Event, a log line, summaryctl's error) never quotes a
credential, whoever put it in the failure's text (a gateway's answer, a library's message),
and stays readable: the usual parts of an error text are not masked (docs/privacy.md)."""

from __future__ import annotations

import argparse
import json
import re
import string
import time
from collections.abc import Callable

import httpx
import pytest
from chromadb.errors import ChromaError
from detect_secrets.plugins import keyword
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.cli import main as cli_main
from controller.core.text import one_line
from controller.kube.client import SecretError
from controller.redaction import Redaction
from controller.status.conditions import FAILURES, OWN_TEXT, failure_shown, masked, sweep_failure
from controller.store.errors import StoreUnavailable, guard
from tests.support.credentials import CONTEXT_SHAPES, generated
from tests.unit.test_redaction_tokens import TOKENS

_WORDS = st.lists(st.text(string.ascii_lowercase, min_size=1, max_size=9), max_size=120).map(
    " ".join
)


@st.composite
def said_credentials(draw: st.DrawFn) -> tuple[str, str]:
    """(a credential, a text carrying it): every generated kind, a provider's token, a
    credential by where it stands."""
    which = draw(st.sampled_from(["generated", "token", "context"]))
    if which == "generated":
        seed, kind = draw(st.integers(0, 2**16)), draw(st.sampled_from(list(generated(0))))
        return generated(seed)[kind]
    if which == "token":
        token = draw(TOKENS)
        return token, draw(st.sampled_from(["upstream refused {}", "key {} revoked", "{}"])).format(
            token
        )
    secret, spaced, compact = draw(CONTEXT_SHAPES)
    return secret, draw(st.sampled_from([spaced, compact or spaced]))


def _runs(secret: str, n: int = 8) -> set[str]:
    return {secret[i : i + n] for i in range(len(secret) - n + 1)} or {secret}


def assert_not_shown(secret: str, shown: str, anyway: tuple[str, ...] = ()) -> None:
    """anyway: text shown whatever the secret, and the placeholders shown (hypothesis draws
    words from the code under test, so a drawn secret may share a run with a fixed message:
    that run is no leak)."""
    anyway = (*anyway, *re.findall(r"\[redacted: [^\]]*\]", shown))
    leaked = [run for run in _runs(secret) if run in shown and not any(run in a for a in anyway)]
    assert not leaked, f"{leaked[0]!r} of the credential shown in: {shown}"


def shown_anyway(secret: str, text: str, show: Callable[[str], list[str]]) -> tuple[str, ...]:
    """What show() shows of the same text with another value where the secret stands."""
    return tuple(show(text.replace(secret, "Q" * len(secret)))) if secret in text else ()


def _failure(kind: str, text: str) -> BaseException:
    """An exception of a FAILURES kind (named by class, as failure_shown reads it), or of
    none (a sweep's catch-all)."""
    return type(kind, (RuntimeError,), {})(text)


@settings(max_examples=400, deadline=None)
@given(
    kind=st.sampled_from([*(set(FAILURES) - OWN_TEXT), "OSError"]),
    said=said_credentials(),
    before=_WORDS,
    after=_WORDS,
)
def test_no_failure_shows_a_credential_its_text_carries(
    kind: str, said: tuple[str, str], before: str, after: str
) -> None:
    """Each kind a pass, a sweep or a probe shows (but the operator's own words on what the
    spec names, OWN_TEXT), and the sweep's catch-all: wherever the credential stands in the
    text, at the cut too."""
    secret, text = said

    def show(text: str) -> list[str]:
        exc = _failure(kind, f"{before} {text} {after}")
        shown = [c.message for c in sweep_failure(exc)]
        if kind in FAILURES:
            named = failure_shown(exc)
            assert named is not None
            shown.append(named[1])
        return shown

    for message in show(text):
        assert_not_shown(secret, message, shown_anyway(secret, text, show))


def _answered(status: int, body: str) -> Callable[[], None]:
    """A store call answered by a gateway (chromadb raises its answer as an Exception while
    handling httpx's HTTPStatusError)."""

    def call() -> None:
        request = httpx.Request("POST", "http://chroma.example:8000/api/v2/tenants/t/get")
        response = httpx.Response(status, text=body, request=request)
        try:
            response.raise_for_status()
        except httpx.HTTPStatusError:
            raise Exception(body)  # noqa: B904 (chromadb raises it while handling the error)

    return call


@settings(max_examples=300, deadline=None)
@given(
    status=st.sampled_from([400, 401, 403, 404, 500, 502, 503]),
    said=said_credentials(),
    shape=st.sampled_from(["chroma", "short", "json"]),
)
def test_a_store_answer_quoting_a_credential_is_shown_masked(
    status: int, said: tuple[str, str], shape: str
) -> None:
    """A gateway's or Chroma's error answer that quotes another credential: the store's
    message (up to 240 characters of it) reaches StoreReachable, Swept and a pass's failure
    masked, with the summarizer's rules."""
    secret, text = said

    def show(text: str) -> list[str]:
        body = {
            "chroma": json.dumps({"error": "Unauthorized", "message": text}),
            "short": one_line(text),
            "json": json.dumps({"error": text}),
        }[shape]
        with pytest.raises(StoreUnavailable) as failed:
            guard("reading memories", _answered(status, body))
        named = failure_shown(failed.value, Redaction())
        assert named is not None and named[0] == "StoreUnavailable"
        return [named[1], *(c.message for c in sweep_failure(failed.value))]

    for message in show(text):
        assert_not_shown(secret, message, shown_anyway(secret, text, show))


@settings(max_examples=300, deadline=None)
@given(
    status=st.sampled_from([400, 401, 500]),
    said=said_credentials(),
    pad=st.integers(0, 260),
    shape=st.sampled_from(["chroma", "own"]),
)
def test_a_store_answer_cut_at_its_bound_shows_no_part_of_a_credential(
    status: int, said: tuple[str, str], pad: int, shape: str
) -> None:
    """Wherever the credential stands in a store's answer, at the 240 characters kept of it
    too: the cut falls between words (the first part of a token is no token the rules know,
    and masking comes after the cut)."""
    secret, text = said

    def show(text: str) -> list[str]:
        message = f"{'a' * pad} {text} and more words"
        if shape == "chroma":
            call = _answered(status, json.dumps({"error": "Unauthorized", "message": message}))
        else:

            def call() -> None:
                raise ChromaError(message)

        with pytest.raises(StoreUnavailable) as failed:
            guard("reading memories", call)
        named = failure_shown(failed.value, Redaction())
        assert named is not None and named[0] == "StoreUnavailable"
        return [named[1], *(c.message for c in sweep_failure(failed.value))]

    for message in show(text):
        assert_not_shown(secret, message, shown_anyway(secret, text, show))


def test_a_summarizers_own_pattern_masks_what_its_failures_show() -> None:
    own = Redaction((("acme", r"acme_[0-9a-f]{24}"),))
    secret = "acme_0123456789abcdef01234567"
    with pytest.raises(StoreUnavailable) as failed:
        guard("reading memories", _answered(502, json.dumps({"error": f"key {secret} expired"})))
    named = failure_shown(failed.value, own)
    assert named is not None and "[redacted: acme]" in named[1]
    assert_not_shown(secret, named[1])
    assert_not_shown(secret, sweep_failure(failed.value, own)[0].message)


# A host whose last label ends in a credential's name and word characters (`pwd0`, `mytoken`,
# `db.secret`) reads as `pwd0: <value>`: its port and path are masked, on the side of safety.
_KEY_HOST = re.compile(rf"(?:{'|'.join(keyword.DENYLIST)}|token)\w*$", re.IGNORECASE)
HOSTS = st.one_of(
    st.ip_addresses(v=4).map(str),
    st.ip_addresses(v=6).map(lambda a: f"[{a}]"),
    st.from_regex(r"[a-z][a-z0-9-]{0,12}(\.[a-z][a-z0-9-]{0,12}){0,3}", fullmatch=True).filter(
        lambda host: not _KEY_HOST.search(host)
    ),
)
# Names as people give them (words, a version, a number); a quoted name as random as a key
# (`'a123456789-bcdefghijk0s'`, `'b0123456-ahklm-cdefgijn'`) is masked as any quoted random
# string is, so the names here keep their digits to a version at the end.
K8S_NAMES = st.from_regex(r"[a-z]{2,10}(-[a-z]{2,10}){0,3}(-v?[0-9]{1,3})?", fullmatch=True)


@settings(max_examples=300, deadline=None)
@given(
    host=HOSTS,
    port=st.integers(1, 65535),
    uid=st.uuids().map(str),
    name=K8S_NAMES,
    status=st.sampled_from([400, 404, 409, 500, 502, 503, 504]),
    method=st.sampled_from(["GET", "POST"]),
)
def test_the_usual_parts_of_an_error_stay_readable(
    host: str, port: int, uid: str, name: str, status: int, method: str
) -> None:
    """URLs with their hosts (public addresses too: no rule masks an address), ports, paths,
    HTTP status lines, Kubernetes names and uuids are shown as they are."""
    texts = [
        f"Chroma error while reading memories: the server at http://{host}:{port} answered "
        f"HTTP {status} to {method} /api/v2/tenants/default_tenant/databases/default_database/"
        f"collections/{uid}/get with a 1234-character, 1-line body, not Chroma's API",
        f"Chroma unreachable while listing session rows: [Errno 111] Connection refused "
        f"(http://{host}:{port})",
        f"SessionClaim {name} held by {name}-{uid[:8]} (uid {uid}) until 2026-12-01T11:22:33Z",
        f"model unavailable: https://{host}:{port}/v1/chat/completions: HTTP {status} "
        f"(check model.apiKeySecretRef): the token is missing or refused",
        f"memory collection {name!r} does not exist in Chroma at http://{host}:{port}; "
        f"did you mean {name + 's'!r}?",
    ]
    for text in texts:
        assert masked(text, 1000) == one_line(text, 1000)
    secret = SecretError(f"Secret {name}/{name[:3]}3-token has no key 'token'")
    assert failure_shown(secret) == ("SecretNotFound", str(secret), True)


def test_a_huge_failure_text_is_masked_in_bounded_time() -> None:
    """Only what is shown is masked (cut between words first): a 16 MiB answer costs no
    more than a short one."""
    secret, said = generated(7)["github-token"]
    exc = _failure("StoreUnavailable", f"{said} " + " ".join(["refused"] * 2_000_000))
    started = time.monotonic()
    named = failure_shown(exc)
    assert time.monotonic() - started < 1, time.monotonic() - started
    assert named is not None and "[redacted: github-token]" in named[1]
    assert_not_shown(secret, named[1])


@pytest.mark.parametrize("kind", list(generated(0)))
def test_summaryctls_last_resort_error_line_is_masked(
    kind: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A failure nobody named (and a CliError quoting a store's answer) is one line, masked."""
    secret, said = generated(3)[kind]

    def failing(args: argparse.Namespace) -> int:
        raise RuntimeError(f"the gateway answered: {said}")

    parser = argparse.ArgumentParser()
    parser.set_defaults(func=failing)
    monkeypatch.setattr(cli_main, "build_parser", lambda: parser)
    assert cli_main.main([]) == 1
    err = capsys.readouterr().err
    assert err.startswith("summaryctl: error: RuntimeError: the gateway answered")
    assert_not_shown(secret, err)


_VALUE_WORD = st.text(string.ascii_lowercase + string.digits, min_size=3, max_size=9)


@settings(max_examples=300, deadline=None)
@given(
    limit=st.sampled_from([300, 1000, 4000]),
    flat=st.booleans(),
    seed=st.integers(0, 2**16),
    kind=st.sampled_from(list(generated(0))),
    name=st.sampled_from(["password", "api_key", "secret", "db_password"]),
    quoted=st.sampled_from(['{}="{}"', "{}: '{}'", '{} = "{}"']),
    words=st.lists(_VALUE_WORD, min_size=3, max_size=8),
    at=st.integers(1, 7),
)
def test_a_secret_cut_at_the_masked_starts_end_is_never_shown(
    limit: int,
    flat: bool,
    seed: int,
    kind: str,
    name: str,
    quoted: str,
    words: list[str],
    at: int,
) -> None:
    """A quoted value of several words cut at the end of the start that is masked (twice
    what is shown) is no secret the rules know: what was masked before it (credentials
    that shrink to their placeholders) must not pull its first words into what is shown."""
    masked_before = []
    while sum(len(s) + 1 for s in masked_before) < 1.2 * limit:
        masked_before.append(generated(seed + len(masked_before))[kind][1])
    head = " ".join(masked_before) + " "
    value = " ".join(words)
    said = quoted.format(name, value)
    space = [i for i, c in enumerate(said) if c == " " and said.index(value) < i][
        min(at, len(words) - 1) - 1
    ]  # the window's cut falls at this space of the value
    fill = max(0, 2 * limit - len(head) - space)  # words of 1 and 2 letters, each and a space
    filler = "ab " * (fill % 2) + "a " * ((fill - 3 * (fill % 2)) // 2)
    shown = masked(f"{head}{filler}{said} and more", limit, flat=flat)
    other = quoted.format(name, "Q" * len(value))  # the same text, another value
    assert_not_shown(value, shown, (masked(f"{head}{filler}{other} and more", limit, flat=flat),))


@settings(max_examples=80, deadline=None)
@given(said=said_credentials(), pad=st.integers(150, 300))
def test_summaryctl_shows_no_part_of_a_credential_an_embedding_failure_quotes_at_its_cut(
    said: tuple[str, str], pad: int
) -> None:
    """summaryctl's `the embedding cannot be used: ...` bounds the library's text: cut where
    the credential in it stands, what summaryctl then masks shows no part of it."""
    import contextlib
    import io
    from unittest import mock

    from controller.api import SessionSummarizerSpec
    from controller.cli import settings as cli_settings
    from controller.embeddings.minilm import EmbeddingError

    secret, text = said
    failure = EmbeddingError(f"{'x' * pad} {text}")
    with mock.patch.object(cli_settings.backends, "build_embedding_function", side_effect=failure):
        defaults = cli_settings.SummarizerSettings(SessionSummarizerSpec(), "default", None)
        with pytest.raises(cli_settings.CliError) as raised:
            cli_settings.embedder(defaults)
    parser = argparse.ArgumentParser()
    parser.set_defaults(func=mock.Mock(side_effect=raised.value))
    shown = io.StringIO()
    with contextlib.redirect_stderr(shown), mock.patch.object(cli_main, "build_parser") as built:
        built.return_value = parser
        assert cli_main.main([]) == 2
    said_anyway = "summaryctl: error: the embedding cannot be used: "
    assert shown.getvalue().startswith(said_anyway)
    assert_not_shown(secret, shown.getvalue(), (said_anyway, "[redacted: "))


@settings(max_examples=200, deadline=None)
@given(status=st.sampled_from([401, 403, 500, 503]), said=said_credentials())
def test_the_fence_authoritys_read_failure_is_shown_masked(
    status: int, said: tuple[str, str]
) -> None:
    """The claims' fence reads kube-system's UID; an API server's (or a proxy's) refusal that
    quotes a credential is masked in the exception's own text (kopf logs it) and in
    FencingUnavailable."""
    from kubernetes.client.exceptions import ApiException

    from controller import runtime
    from controller.core.ledger import FenceUnavailable

    secret, text = said

    def show(text: str) -> list[str]:
        class _Refusing:
            def read_namespace(self, name: str) -> None:
                refusal = ApiException(status=status, reason="Refused")
                refusal.body = json.dumps({"kind": "Status", "message": text})
                raise refusal

        with pytest.MonkeyPatch.context() as patch, pytest.raises(FenceUnavailable) as failed:
            patch.setattr(runtime.kube, "core", _Refusing)
            runtime.Runtime.fence_authority.func(object())  # type: ignore[attr-defined]
        named = failure_shown(failed.value, Redaction())
        assert named is not None and named[0] == "FencingUnavailable"
        assert "kube-system" in named[1]
        return [str(failed.value), named[1], *(c.message for c in sweep_failure(failed.value))]

    for message in show(text):
        assert_not_shown(secret, message, shown_anyway(secret, text, show))
