"""summaryctl's argument checks: every input ends in a result or one clear line, never a
Python traceback, and nothing is called with an argument the API or the store would
misread. Runs in-process with no cluster (KUBECONFIG names a missing file) and no store (a
Chroma URL that refuses connections), so every call fails fast."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from controller.api import SessionSummarySpec, StoreSpec
from controller.cli.args import chroma_url_problem
from controller.cli.main import main
from controller.core.naming import blank_session_id
from controller.core.text import printable
from controller.kube import client as kube
from controller.redaction import DEFAULT_REDACTION
from controller.store.connection import StoreLocation
from tests.unit.test_failure_masking import assert_not_shown, said_credentials

REFUSED = "http://127.0.0.1:1"  # nothing listens on port 1: connections fail at once


@contextlib.contextmanager
def no_cluster(tmp: str) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KUBECONFIG", f"{tmp}/no-such-kubeconfig")
        mp.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        for var in ("CHROMA_URL", "CHROMA_TOKEN", "SSO_NAMESPACE"):
            mp.delenv(var, raising=False)
        kube.api_client.cache_clear()
        try:
            yield
        finally:
            kube.api_client.cache_clear()


def run(argv: list[str]) -> tuple[int, str, str]:
    """main() as the console script runs it: stdout strict UTF-8, stderr backslashreplace
    (Python's own settings), SystemExit from argparse turned into its exit code."""
    out_bytes, err_bytes = io.BytesIO(), io.BytesIO()
    out = io.TextIOWrapper(out_bytes, encoding="utf-8", errors="strict", write_through=True)
    err = io.TextIOWrapper(err_bytes, encoding="utf-8", errors="backslashreplace")
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
    err.flush()
    return code, out_bytes.getvalue().decode(), err_bytes.getvalue().decode()


ODD = [
    "",
    " ",
    "\t\n ",
    "-",
    "--",
    "-x",
    "0",
    "-3",
    "-1",
    "99999999999999999999999",
    "1e309",
    "nan",
    "inf",
    "-inf",
    "0x10",
    "é",
    "会话-1",
    "\u202eevil",
    "\x00",
    "a\x00b",
    "\x1b[31mred",
    "\udcff",  # an undecodable byte from the shell, as Python passes it on
    "a" * 1024,
    "a" * 1025,
    "x" * 5000,
    "../../etc/passwd",
    "Default",
    "default",
    "my_summarizer",
    "a.b",
]
BAD_URLS = [
    "notaurl",
    "ftp://x",
    "http://",
    "https://",
    "http://host:99999",
    "http://host:-1",
    "http://host:abc",
    "http://[::1",
    "http:///path",
    "http://user:pw@host:8000",
    "http://host:8000/api/v2",
    "http://host:8000?x=1",
    "http://ho st:8000",
    "//host:8000",
    "localhost:8000",
]
odd = st.one_of(st.sampled_from(ODD), st.text(max_size=40), st.text(min_size=1020, max_size=1030))
urls = st.one_of(st.sampled_from([*BAD_URLS, REFUSED]), st.text(max_size=30))
numbers = st.one_of(st.sampled_from(ODD), st.integers(-(10**30), 10**30).map(str))


@st.composite
def argvs(draw: st.DrawFn) -> list[str]:
    command = draw(st.sampled_from(["sunset", "summaries", "summarize", "other"]))
    if command == "sunset":
        argv = ["sunset", draw(odd)]
        for flag, values in (("-n", odd), ("--summarizer", odd), ("--wait", numbers)):
            if draw(st.booleans()):
                argv += [flag, draw(values)]
        return argv
    if command in ("summaries", "summarize"):
        argv = [command]
        if command == "summarize":
            argv += draw(st.lists(odd, min_size=1, max_size=3))
            if draw(st.booleans()):
                argv.append("--bypass-claim")
        else:
            argv += ["--limit", draw(numbers)] if draw(st.booleans()) else []
        argv += ["--chroma-url", draw(urls)]
        for flag in ("--tenant", "--database", "--memory-collection", "--summary-collection"):
            if draw(st.booleans()):
                argv += [flag, draw(odd)]
        return argv
    return draw(st.lists(odd, max_size=3))


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(argv=argvs())
def test_no_input_ends_in_a_traceback(
    argv: list[str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    with no_cluster(str(tmp_path_factory.getbasetemp())):
        code, out, err = run(argv)
    assert code in (0, 1, 2), (argv, code, err)
    assert "Traceback" not in err and "Traceback" not in out, (argv, err)
    if code != 0:
        assert "error:" in err, (argv, err)
        # One line that says it (argparse puts its usage lines before it).
        assert err.strip().splitlines()[-1].startswith("summaryctl"), (argv, err)


@pytest.mark.parametrize("session_id", ["", "   ", "\t\n", "a" * 1025])
def test_sunset_refuses_a_session_id_no_memory_can_carry_before_any_api_call(
    session_id: str, tmp_path: object
) -> None:
    with no_cluster(str(tmp_path)):
        code, _, err = run(["sunset", session_id])
    assert code == 2
    assert "session id" in err
    assert "Kubernetes" not in err  # it never got as far as looking for a cluster


@st.composite
def undecodable(draw: st.DrawFn) -> str:
    """Text with a byte the shell could not decode (Python passes it on as a lone surrogate)."""
    text = draw(st.text(max_size=30))
    at = draw(st.integers(0, len(text)))
    return text[:at] + chr(draw(st.integers(0xDC80, 0xDCFF))) + text[at:]


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(flag=st.sampled_from(["--prompt", "--response", "--thought"]), value=undecodable())
def test_remember_refuses_undecodable_text_before_any_store_call(
    flag: str, value: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    argv = ["remember", "s1", "--prompt", "p", "--response", "r", f"{flag}={value}"]
    with no_cluster(str(tmp_path_factory.getbasetemp())):
        code, out, err = run([*argv, "--chroma-url", REFUSED])
    assert code == 2 and out == "", err
    assert f"argument {flag}" in err and "not valid text" in err, err
    assert "Chroma" not in err  # refused before anything was called


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    prompt=st.none() | st.text(max_size=20),
    response=st.none() | st.text(max_size=20),
    marker=st.booleans(),
)
def test_remember_writes_a_whole_turn_or_a_marker_and_nothing_in_between(
    prompt: str | None,
    response: str | None,
    marker: bool,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A turn has both halves (one alone was stored as 'User Prompt: None'); a marker none."""
    argv = ["remember", "s1", "--chroma-url", REFUSED, *(["--sunset-marker"] if marker else [])]
    argv += [f"--prompt={prompt}"] if prompt is not None else []
    argv += [f"--response={response}"] if response is not None else []
    with no_cluster(str(tmp_path_factory.getbasetemp())):
        code, _, err = run(argv)
    halves = (prompt is not None) + (response is not None)
    whole = halves == 0 if marker else halves == 2
    assert code == 2
    assert ("cannot connect to Chroma" in err) == whole, err  # went on to write
    # the refusal names what is wrong, never asks for what was given
    assert ("give --prompt and --response" in err) == (not marker and halves == 0), err
    assert ("--sunset-marker is instead of a turn" in err) == (marker and halves > 0), err
    if not marker and halves == 1:
        given, missing = (
            ("--prompt", "--response") if prompt is not None else ("--response", "--prompt")
        )
        assert f"{given} needs {missing}" in err, err


@settings(max_examples=20, deadline=None)
@given(command=st.sampled_from(["summaries", "ledger s1", "verify s1", "handover", "remember s1"]))
def test_a_chroma_url_and_a_path_given_together_are_refused_naming_both(command: str) -> None:
    """Two stores named: --path was used and --chroma-url silently ignored."""
    from controller.cli.main import build_parser

    argv = [*command.split(), "--chroma-url", REFUSED, "--path", "/dev/null/chroma"]  # never made
    code, _, err = run(argv)
    assert code == 2 and "--path: not allowed with argument --chroma-url" in err, err
    with pytest.MonkeyPatch.context() as mp:  # CHROMA_URL in the environment: --path wins
        mp.setenv("CHROMA_URL", REFUSED)
        assert build_parser().parse_args([*command.split(), "--path", "/x"]).path == "/x"


KUBECONFIGS = {
    "not YAML": b"apiVersion: v1\nclusters: [\n",
    "a list": b"- a\n- b\n",
    "a string": b"hello\n",
    "empty": b"",
    "binary": bytes(range(256)),
    "no such context": b"apiVersion: v1\nkind: Config\ncurrent-context: nope\ncontexts: []\n",
}


@pytest.mark.parametrize("kind", [*KUBECONFIGS, "a directory", "missing"])
def test_an_unusable_kubeconfig_is_one_line_naming_it_and_exit_2(kind: str, tmp_path: Any) -> None:
    path = tmp_path / "kubeconfig"
    if kind == "a directory":
        path.mkdir()
    elif kind != "missing":
        path.write_bytes(KUBECONFIGS[kind])
    with no_cluster(str(tmp_path)), pytest.MonkeyPatch.context() as mp:
        mp.setenv("KUBECONFIG", str(path))
        code, out, err = run(["sunset", "s1", "-n", "agents"])
    assert code == 2 and out == "", err
    assert err.startswith("summaryctl: error: no Kubernetes context: cannot use " + str(path))
    assert err.count("\n") == 1 and "\\n" not in err, err


def test_sunset_accepts_the_longest_session_id_the_crd_allows(tmp_path: object) -> None:
    with no_cluster(str(tmp_path)):
        code, _, err = run(["sunset", "a" * 1024])
    assert code == 2 and "no Kubernetes context" in err  # past the checks, at the API


def test_summarize_writes_nothing_without_bypass_claim_and_says_what_it_confirms(
    tmp_path: object,
) -> None:
    with no_cluster(str(tmp_path)):
        code, out, err = run(["summarize", "s1", "--chroma-url", REFUSED])
    assert code == 2 and out == ""
    assert "pass --bypass-claim" in err and "summaryctl sunset" in err
    assert "cannot connect" not in err  # refused before the store is asked


def test_summarize_with_bypass_claim_goes_on_to_the_store(tmp_path: object) -> None:
    with no_cluster(str(tmp_path)):
        code, _, err = run(["summarize", "s1", "--bypass-claim", "--chroma-url", REFUSED])
    assert code == 2 and "cannot connect to Chroma" in err
    assert "deprecated" not in err


def test_the_removed_local_flag_is_refused_not_taken_for_bypass_claim(tmp_path: object) -> None:
    with no_cluster(str(tmp_path)):
        code, _, err = run(["summarize", "s1", "--local", "--chroma-url", REFUSED])
    assert code == 2 and "unrecognized arguments: --local" in err
    assert "use --bypass-claim" not in err and "--bypass-claim confirms the same" in err
    assert "cannot connect to Chroma" not in err  # stopped before any store was reached


def _long_options() -> list[tuple[str, tuple[str, ...], str]]:
    """(command, the session ids it needs before its options, a long option of it)."""
    from controller.cli.main import build_parser

    parser = build_parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    found = []
    for name, command in sub.choices.items():
        needed = tuple("s1" for a in command._actions if not a.option_strings and a.nargs != "?")
        for action in command._actions:
            found += [(name, needed, o) for o in action.option_strings if o.startswith("--")]
    return [f for f in found if f[2] != "--help"]


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_no_command_takes_a_prefix_of_its_option_for_the_option(data: st.DataObject) -> None:
    # `summarize s --b` was --bypass-claim, `forget s --y` was --yes: a confirmation typed
    # by half. Every proper prefix of a long option that is no option itself is refused.
    name, needed, option = data.draw(st.sampled_from(_long_options()))
    prefix = option[: data.draw(st.integers(3, len(option) - 1))]
    assume(prefix not in {o for n, _, o in _long_options() if n == name})
    with no_cluster("/nonexistent"):
        code, _, err = run([name, *needed, prefix])
    assert code == 2 and f"unrecognized arguments: {prefix}" in err, err


def test_summarize_help_names_bypass_claim_not_the_old_local(tmp_path: object) -> None:
    with no_cluster(str(tmp_path)):
        code, out, _ = run(["summarize", "--help"])
    assert code == 0
    assert "--bypass-claim" in out and "without the operator's session claim" in out
    assert "[--local]" not in out and "  --local" not in out


@pytest.mark.parametrize("limit", ["-3", "0", "x", "1.5"])
def test_summaries_limit_must_be_a_positive_whole_number(limit: str, tmp_path: object) -> None:
    with no_cluster(str(tmp_path)):
        code, out, err = run(["summaries", "--limit", limit, "--chroma-url", REFUSED])
    assert code == 2
    assert "--limit" in err and out == ""
    assert "cannot connect" not in err  # refused before the store is asked


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("notaurl", "scheme must be http or https"),
        ("ftp://x", "scheme must be http or https"),
        ("http://", "no host"),
        ("http://host:99999", "out of range"),
        ("http://host:abc", "integer"),
        ("http://host:0", "port 0"),
        ("http://host:8000/api/v2", "path"),
    ],
)
def test_an_invalid_chroma_url_is_named_invalid_not_unreachable(
    url: str, why: str, tmp_path: object
) -> None:
    with no_cluster(str(tmp_path)):
        code, _, err = run(["summaries", "--chroma-url", url])
    assert code == 2
    assert f"invalid Chroma URL {url!r}" in err and why in err
    assert "cannot connect" not in err and "running?" not in err


SECRET = st.text("ABCDEFGHJKMNPQRSTUVWXYZ23456789", min_size=12, max_size=30)


@st.composite
def urls_with_secrets(draw: st.DrawFn) -> tuple[str, str]:
    """(a URL, the secret it carries in its userinfo, query or fragment)."""
    secret = draw(SECRET)
    where = draw(st.sampled_from(["password", "user", "query", "fragment"]))
    head = draw(st.sampled_from(["http://", "https://", "HTTP://", "", "ftp://"]))
    host = draw(st.sampled_from(["127.0.0.1", "chroma", "[::1]", "host:99999", "h:abc", ""]))
    path = draw(st.sampled_from(["", "/", "/api/v2"]))
    userinfo = {"password": f"user:{secret}@", "user": f"{secret}@"}.get(where, "")
    tail = {"query": f"?token={secret}&x=1", "fragment": f"#{secret}"}.get(where, "")
    return f"{head}{userinfo}{host}{path}{tail}", secret


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(urls_with_secrets(), st.booleans())
def test_a_refused_chroma_url_is_quoted_without_its_credentials(
    url_secret: tuple[str, str], from_env: bool
) -> None:
    url, secret = url_secret
    with no_cluster("/nonexistent"), pytest.MonkeyPatch.context() as mp:
        if from_env:
            mp.setenv("CHROMA_URL", url)
        code, out, err = run(["summaries"] if from_env else ["summaries", "--chroma-url", url])
    assert code == 2 and "invalid Chroma URL" in err
    assert secret[:6] not in out + err


@pytest.mark.parametrize(
    "url",
    [
        "http://localhost:8000",
        "https://chroma.example:443/",
        "http://127.0.0.1",
        "http://[::1]:8000",
    ],
)
def test_a_server_address_is_a_valid_chroma_url(url: str) -> None:
    assert chroma_url_problem(url) is None


def test_an_unreachable_but_valid_url_still_reads_as_could_not_connect(tmp_path: object) -> None:
    with no_cluster(str(tmp_path)):
        code, _, err = run(["summaries", "--chroma-url", REFUSED])
    assert code == 2 and "cannot connect to Chroma" in err and "invalid" not in err


def test_demo_with_an_invalid_chroma_url_starts_nothing(
    tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    from devenv.demo import main as demo_main

    with no_cluster(str(tmp_path)):
        code = demo_main(["--chroma-url", "http://host:99999"])
    out, err = capsys.readouterr()
    assert code == 2 and "invalid Chroma URL" in err
    assert "==>" not in out  # not one step of the demo ran


def test_the_demo_is_not_a_summaryctl_command(tmp_path: object) -> None:
    """It lives in the development tooling (`make demo`), not in the shipped CLI."""
    with no_cluster(str(tmp_path)):
        code, _, err = run(["demo"])
    assert code == 2 and "invalid choice" in err


# -- a SessionSummarizer's settings for summaries / summarize ------------------------------


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("kind: [unclosed", "is not YAML"),
        ("kind: SessionSummary\nspec: {}\n", "is not a SessionSummarizer manifest"),
        (
            "kind: SessionSummarizer\nspec: {embedding: {provider: word2vec}}\n",
            "invalid spec in",
        ),
        (
            "kind: SessionSummarizer\nspec: {visibility: {memorySharing: everyone}}\n",
            "invalid spec in",
        ),
    ],
)
def test_a_bad_summarizer_manifest_is_one_line_naming_the_file(
    tmp_path: pytest.TempPathFactory, content: str, says: str
) -> None:
    manifest = tmp_path / "s.yaml"  # type: ignore[operator]
    manifest.write_text(content)
    with no_cluster(str(tmp_path)):
        code, out, err = run(
            ["summarize", "s1", "--bypass-claim", "--summarizer-file", str(manifest)]
        )
    assert code == 2 and out == ""
    assert says in err and str(manifest) in err and err.count("\n") == 1


not_a_manifest = st.one_of(
    st.binary(max_size=200),  # not UTF-8, a NUL, a BOM: whatever an editor or a typo leaves
    st.text(max_size=200).map(str.encode),
    st.sampled_from([b"[" * 5000, b"{a: " * 5000, "kind: Sessi\xf3n".encode("latin-1")]),
)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(content=not_a_manifest)
def test_any_file_that_is_no_summarizer_manifest_is_one_line_naming_it_and_exit_2(
    content: bytes, tmp_path_factory: pytest.TempPathFactory
) -> None:
    manifest = tmp_path_factory.getbasetemp() / "any.yaml"
    manifest.write_bytes(content)
    with no_cluster(str(tmp_path_factory.getbasetemp())):
        code, out, err = run(["summaries", "--summarizer-file", str(manifest)])
    assert code == 2 and out == "", (content, err)
    assert err.count("\n") == 1 and str(manifest) in err, (content, err)


NAMESPACE = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
not_text = st.one_of(
    st.integers(),
    st.floats(),
    st.booleans(),
    st.lists(st.text(max_size=5), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    namespace=st.one_of(
        not_text, st.text(min_size=1, max_size=70), st.from_regex(NAMESPACE, fullmatch=True)
    )
)
def test_a_manifests_namespace_is_a_namespace_name_or_one_line_naming_the_file_and_exit_2(
    namespace: object, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Not read as str(7), nor sent to the API as a name no namespace can have."""
    manifest = tmp_path_factory.getbasetemp() / "ns.yaml"
    doc = {"kind": "SessionSummarizer", "metadata": {"name": "x", "namespace": namespace}}
    manifest.write_text(yaml.safe_dump(doc))
    read = yaml.safe_load(manifest.read_text())["metadata"]["namespace"]
    with no_cluster(str(tmp_path_factory.getbasetemp())):
        code, out, err = run(
            ["summaries", "--summarizer-file", str(manifest), "--chroma-url", REFUSED]
        )
    if read == "" or (isinstance(read, str) and re.fullmatch(NAMESPACE, read)):
        assert "metadata.namespace" not in err, err
    else:
        assert (code, out, err.count("\n")) == (2, "", 1), err
        assert err.startswith(f"summaryctl: error: {manifest}: metadata.namespace"), err


def test_a_missing_summarizer_manifest_says_so(tmp_path: pytest.TempPathFactory) -> None:
    with no_cluster(str(tmp_path)):
        code, _, err = run(["summaries", "--summarizer-file", f"{tmp_path}/nope.yaml"])
    assert code == 2 and "cannot read" in err and "nope.yaml" in err


def test_summarizer_and_summarizer_file_exclude_each_other(
    tmp_path: pytest.TempPathFactory,
) -> None:
    with no_cluster(str(tmp_path)):
        code, _, err = run(["summaries", "--summarizer", "a", "--summarizer-file", "b.yaml"])
    assert code == 2 and "not allowed with argument" in err


def test_a_manifests_store_is_used_and_a_flag_overrides_it(
    tmp_path: pytest.TempPathFactory,
) -> None:
    manifest = tmp_path / "s.yaml"  # type: ignore[operator]
    manifest.write_text(
        "kind: SessionSummarizer\nmetadata: {name: x, namespace: agents}\n"
        f"spec: {{store: {{url: '{REFUSED}', memoryCollection: their-memory}}}}\n"
    )
    with no_cluster(str(tmp_path)):
        code, _, err = run(["summaries", "--summarizer-file", str(manifest)])
        assert code == 2 and "127.0.0.1:1" in err
        code, _, err = run(
            ["summaries", "--summarizer-file", str(manifest), "--chroma-url", "http://127.0.0.1:2"]
        )
        assert code == 2 and "127.0.0.1:2" in err and "127.0.0.1:1" not in err


def test_summarize_writes_to_the_manifests_store_as_the_operator_would(
    tmp_path: pytest.TempPathFactory,
) -> None:
    from controller.cli.main import build_parser
    from controller.cli.settings import load_summarizer, store_location

    manifest = tmp_path / "s.yaml"  # type: ignore[operator]
    manifest.write_text(
        "kind: SessionSummarizer\nmetadata: {name: x, namespace: agents}\n"
        f"spec: {{store: {{url: '{REFUSED}', tenant: team1, timeoutSeconds: 5}}, "
        "document: {maxChars: 2000}}\n"
    )
    argv = ["summarize", "s1", "--bypass-claim", "--summarizer-file", str(manifest)]
    with no_cluster(str(tmp_path)):
        args = build_parser().parse_args([*argv, "--database", "db2"])
        location = store_location(args, load_summarizer(args))
    assert (location.url, location.tenant, location.database) == (REFUSED, "team1", "db2")
    assert location.timeout_seconds == 5 and location.document_max_chars == 2000


@pytest.mark.parametrize(
    ("field", "env"),
    [
        ("store.authSecretRef", "CHROMA_TOKEN"),
        ("embedding.apiKeySecretRef", "EMBEDDING_API_KEY"),
        ("model.apiKeySecretRef", "MODEL_API_KEY"),
    ],
)
def test_each_secret_a_summarizer_names_is_read_from_its_env_var_first(
    field: str, env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from controller.cli.settings import read_secret

    monkeypatch.setenv(env, "from-env")  # the cluster is never asked
    assert read_secret(field, "agents", object(), "https://x.example") == "from-env"


# -- what a new user reads: served or not, covered or not, the docs' command list ---------

import argparse  # noqa: E402
import functools  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from unittest import mock  # noqa: E402

import yaml  # noqa: E402

from controller.cli.commands import _report_lines, unserved  # noqa: E402
from controller.cli.main import build_parser  # noqa: E402
from controller.handlers.session_summary import Retry  # noqa: E402
from controller.operator import configure_logging, quiet_kopf  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def summarizer_with(replica: dict[str, str] | None) -> dict[str, object]:
    conditions = [{"type": "ReplicaActive", **replica}] if replica else []
    return {
        "metadata": {"namespace": "agents", "name": "default"},
        "status": {"conditions": conditions},
    }


def test_a_summarizer_is_served_when_an_operator_reports_an_active_replica_on_it() -> None:
    assert unserved(summarizer_with({"status": "True", "reason": "Standalone"})) is None
    never = unserved(summarizer_with(None))
    assert never is not None and "no operator serves namespace 'agents'" in never
    assert "--namespace, SSO_NAMESPACES" in never
    tie = unserved(summarizer_with({"status": "False", "message": "replicas a, b share"}))
    assert (
        tie
        == "no operator replica is active for SessionSummarizer agents/default: replicas a, b share"
    )


def report(
    memories: int, uncovered: int = 0, untimed: list[dict[str, object]] | None = None
) -> dict[str, object]:
    return {
        "sessionId": "s", "memories": memories, "summary": "structured", "uncovered": uncovered,
        "rows": [], "ranges": [], "unreadableTimes": untimed or [],
    }  # fmt: skip


@given(st.integers(1, 50), st.integers(0, 3), st.integers(0, 3))
def test_verify_says_what_covered_means_and_tells_missing_from_unreadable_times(
    timed: int, missing: int, unreadable: int
) -> None:
    untimed = [{"id": f"m{i}", "timestamp": None, "summarized": True} for i in range(missing)]
    untimed += [
        {"id": f"u{i}", "timestamp": "'1.7e12'", "summarized": True} for i in range(unreadable)
    ]
    total = timed + missing + unreadable
    lines = _report_lines(report(total, untimed=untimed))
    assert lines[0] == (
        f"s: all {total} of its memories are covered: a pass of its summary read each one "
        "(what it kept of them: summaryctl summaries --full)"
    )
    assert sum(line.endswith("  no timestamp") for line in lines) == missing
    assert sum(line.endswith("  timestamp '1.7e12'") for line in lines) == unreadable
    if untimed:
        assert (
            f"{missing} of its memories have no timestamp and {unreadable} one the operator"
            in lines[1]
        )


@given(summary=st.sampled_from(["structured", "earlier text only", "none"]))
def test_verify_of_a_session_without_memories_never_says_they_are_covered(summary: str) -> None:
    """A mistyped id, or a session whose memories are gone: not 'all 0 ... covered: a pass
    of its summary read each one'."""
    lines = _report_lines({**report(0), "summary": summary})
    assert lines == ["s: no memory carries this sessionId: nothing to cover (is the id right?)"]


@given(
    sessions=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=1, max_size=4),
    as_json=st.booleans(),
)
def test_verify_succeeds_only_when_every_session_has_memories_and_all_are_covered(
    sessions: list[tuple[int, int]], as_json: bool
) -> None:
    """An id with no memories is not verified (a mistyped id, memories gone): exit 1, as
    `summarize` of such an id, with or without --json."""
    reports = iter([report(total, min(uncovered, total)) for total, uncovered in sessions])
    store = argparse.Namespace(read_summary=lambda sid: None, session_rows=lambda sid, mask: None)
    ids = [f"s{i}" for i in range(len(sessions))]
    with (
        store_serving(store),
        mock.patch("controller.cli.commands._report", lambda *a: next(reports)),
    ):
        code, out, _ = run(["verify", *ids, *(["--json"] if as_json else []), "--path", "/x"])
    failed = any(total == 0 or uncovered for total, uncovered in sessions)
    assert code == (1 if failed else 0), (sessions, out)


def test_verify_names_what_is_not_covered_yet() -> None:
    lines = _report_lines(report(3, 1, [{"id": "u", "timestamp": None, "summarized": False}]))
    assert lines[0].startswith("s: 1 of its 3 memories are not covered (no pass of its summary")
    assert lines[-1] == "  u  no timestamp  (not covered yet)"


def test_the_operator_log_drops_only_kopfs_timer_successes() -> None:
    def record(message: str) -> logging.LogRecord:
        return logging.LogRecord("kopf.objects", logging.INFO, __file__, 1, message, None, None)

    assert not quiet_kopf(record("Timer 'sweep' succeeded."))
    assert quiet_kopf(record("Handler 'summarize' succeeded."))
    assert quiet_kopf(record("Timer 'sweep' failed with an exception and will try again"))


@contextlib.contextmanager
def operator_log() -> Iterator[io.StringIO]:
    """Logging as the operator configures it, its stderr a buffer (pytest's capture handlers
    set aside: basicConfig configures only a root without handlers)."""
    root, kopf_objects = logging.getLogger(), logging.getLogger("kopf.objects")
    clients = [logging.getLogger(n) for n in ("httpx", "httpx2")]
    saved = root.handlers[:], root.level, [c.level for c in clients]
    root.handlers.clear()
    buffer = io.StringIO()
    try:
        with contextlib.redirect_stderr(buffer):
            configure_logging(verbose=False)
        yield buffer
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        for client, level in zip(clients, saved[2], strict=True):
            client.setLevel(level)
        kopf_objects.removeFilter(quiet_kopf)


def test_the_operator_log_has_no_line_per_http_call() -> None:
    """Chroma's client logs each request through httpx, the openai SDK (model, embeddings)
    through httpx2, at INFO: a line per call, every pass."""
    with operator_log() as log_text:
        for name in ("httpx", "httpx2"):
            logging.getLogger(name).info('HTTP Request: POST http://m/v1/chat "HTTP/1.1 200 OK"')
    assert log_text.getvalue() == ""


def test_kopfs_error_line_for_a_retry_is_left_out_and_for_a_failure_kept() -> None:
    """kopf logs every TemporaryError at ERROR from inside its `except` (kopf's execution.py);
    a wait for another writer is a Retry, which the handler logged at INFO already."""
    import kopf

    with operator_log() as log_text:
        for raised in (Retry("session 's' is being summarized by x"), kopf.TemporaryError("down")):
            try:
                raise raised
            except kopf.TemporaryError as exc:
                logging.getLogger("kopf.objects").error(
                    f"Handler 'summarize' failed temporarily: {exc}"
                )
    lines = log_text.getvalue().splitlines()
    assert [line.split(" ", 2)[2] for line in lines] == [
        "ERROR kopf.objects Handler 'summarize' failed temporarily: down"
    ]


LINE_BREAKERS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029\x1b[2K\x00\t\u202e"


@given(text=st.text(st.one_of(st.sampled_from(LINE_BREAKERS), st.characters()), max_size=40))
def test_text_a_user_wrote_never_splits_or_forges_a_line_of_the_operator_log(text: str) -> None:
    """A session id, a store's or a model's error text, logged as the operator logs them:
    one line per record, the text shown with its control characters escaped; a traceback's
    lines are indented, so only a record begins a line at column 0."""
    # masking (below) reads the text where it stands: `APIKEY: claim` is a header
    logged = (f"session {printable(text)}: claim lost", f"ValueError: the store said {text}")
    assume(all(DEFAULT_REDACTION.text(printable(t)) == printable(t) for t in logged))
    with operator_log() as log_text:
        logging.getLogger("controller.kube.claims").warning("session %s: claim lost", text)
        try:
            raise ValueError(f"the store said {text}")
        except ValueError:
            logging.getLogger("kopf.objects").exception("Handler 'summarize' failed")
    record, failed, *traceback, end = log_text.getvalue().split("\n")
    assert record.endswith(f" WARNING controller.kube.claims session {printable(text)}: claim lost")
    assert failed.endswith(" ERROR kopf.objects Handler 'summarize' failed") and end == ""
    assert all(line.startswith("  ") for line in traceback)
    said = "\n".join(printable(part) for part in text.split("\n"))  # its lines kept, indented
    assert "\n".join(line[2:] for line in traceback).endswith(f"ValueError: the store said {said}")
    assert all(line.isprintable() for line in (record, failed, *traceback))


@settings(max_examples=150, deadline=None)
@given(said=said_credentials(), where=st.sampled_from(["argument", "exception", "both"]))
def test_the_operator_log_shows_no_credential_a_record_quotes(
    said: tuple[str, str], where: str
) -> None:
    """A store's, a model's or the API server's error text may quote a credential; the
    operator logs it (its own lines, kopf's handler failures with their tracebacks)
    masked, as a condition shows it."""
    secret, text = said

    def logged(text: str) -> str:
        with operator_log() as log_text:
            try:
                raise ValueError(text if where != "argument" else "the store is down")
            except ValueError:
                logging.getLogger("kopf.objects").exception(
                    "Handler 'summarize' failed: %s", text if where != "exception" else "down"
                )
        return log_text.getvalue()

    shown = logged(text)
    assert "Handler 'summarize' failed" in shown
    assert_not_shown(secret, shown, (logged("Q"),))  # the log's own words are no leak


def test_the_docs_list_every_summaryctl_command() -> None:
    commands = {
        name
        for action in build_parser()._actions
        if isinstance(action, argparse._SubParsersAction)
        for name in action.choices
    }
    text = (REPO / "docs" / "configuration.md").read_text()
    listed = set(re.findall(r"^summaryctl (\w+)", text.split("## summaryctl", 1)[1], re.M))
    assert listed == commands
    package_doc = set(
        re.findall(
            r"^summaryctl (\w+)", (REPO / "controller" / "cli" / "__init__.py").read_text(), re.M
        )
    )
    assert package_doc == commands


def test_no_readme_command_names_a_host_that_exists_only_in_a_cluster() -> None:
    hosts = re.findall(r"--chroma-url https?://([^:/\s]+)", (REPO / "README.md").read_text())
    assert hosts and set(hosts) == {"127.0.0.1"}, hosts


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_reinstalls_the_venv_only_when_what_it_is_built_from_changed(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    venv.mkdir()
    stamp = venv / ".installed"
    stamp.touch()
    later = time.time() + 60  # newer than every file the install reads
    os.utime(stamp, (later, later))

    def planned(*extra: str) -> str:
        return subprocess.run(
            ["make", "-n", "-C", str(REPO), "venv", f"VENV={venv}", *extra],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip

    assert "install-python.sh" not in planned()
    assert "install-python.sh" in planned("-W", "requirements.lock")
    stamp.unlink()
    assert "install-python.sh" in planned()


# kube-apiserver 1.34's answers to a GET of a SessionSummary: with no CRD for the type (the
# group missing, or only its other CRD installed), and with the CRD but no such object.
NO_TYPE = "404 page not found\n"
NO_OBJECT = (
    '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":'
    '"sessionsummaries.memorycore.io \\"x\\" not found","reason":"NotFound","details":'
    '{"name":"x","group":"memorycore.io","kind":"sessionsummaries"},"code":404}\n'
)


def test_a_cluster_without_the_crds_says_to_install_them() -> None:
    from kubernetes.client.exceptions import ApiException

    from controller.cli.args import CliError, kube_call

    def answer(found: str) -> str:
        exc = ApiException(status=404, reason="Not Found")
        exc.body = found

        def call() -> None:
            raise exc

        with pytest.raises(CliError) as raised:
            kube_call(call)
        return str(raised.value)

    assert "kubectl apply -f crds/" in answer(NO_TYPE)
    assert answer(NO_OBJECT) == 'not found: sessionsummaries.memorycore.io "x" not found'


@functools.cache  # built once: a strategy reads it for each command it draws
def _subcommands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


plausible = st.sampled_from(["s1", "default", "0", "1", "2.5", "neo-agent-memory", "a.yaml"])


@st.composite
def any_command(draw: st.DrawFn) -> list[str]:
    """Any subcommand with any of its flags (taken from the parser: a new flag is covered
    too), each given a plausible or an odd value; never --path (an embedded Chroma)."""
    name, parser = draw(st.sampled_from(sorted(_subcommands().items())))
    argv = [name]
    for action in parser._actions:
        if action.dest in ("help", "path") or not draw(st.booleans()):
            continue
        flag = action.option_strings[0] if action.option_strings else None
        if action.nargs == 0:
            argv.append(str(flag))
            continue
        value = draw(urls if flag == "--chroma-url" else st.one_of(plausible, odd, numbers))
        value = value.replace("\x00", "")  # an argv string cannot hold a NUL
        argv += [f"{flag}={value}"] if flag else ["--", value] if value.startswith("-") else [value]
    return argv


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(argv=any_command())
def test_with_no_cluster_and_no_store_every_command_does_nothing_and_says_why_in_one_line(
    argv: list[str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Exit 2 ("nothing was done", docs/configuration.md) and a line naming the problem,
    never an exception's class name: that is the catch-all for a failure nobody named."""
    with no_cluster(str(tmp_path_factory.getbasetemp())), pytest.MonkeyPatch.context() as mp:
        mp.setenv("CHROMA_URL", REFUSED)
        code, out, err = run(argv)
    last = err.strip().splitlines()[-1] if err.strip() else ""
    assert code == 2, (argv, code, out, err)
    assert last.startswith("summaryctl") and "error:" in last, (argv, err)
    assert not re.match(r"summaryctl: error: [A-Z]\w+: ", last), (argv, err)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(memories=st.booleans(), yes=st.booleans(), wait=st.booleans(), summarizer=st.booleans())
def test_forget_refuses_a_confirmation_without_what_it_confirms_and_the_reverse(
    memories: bool,
    yes: bool,
    wait: bool,
    summarizer: bool,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """--yes confirms --memories: either without the other is refused before any API call,
    naming what is missing; both, or neither, go on to ask the cluster."""
    argv = ["forget", "s1", *(["--memories"] if memories else []), *(["--yes"] if yes else [])]
    argv += (["--wait", "5"] if wait else []) + (["--summarizer", "default"] if summarizer else [])
    with no_cluster(str(tmp_path_factory.getbasetemp())):
        code, out, err = run(argv)
    assert code == 2 and out == "", err
    assert ("add --yes" in err) == (memories and not yes), err
    assert ("add --memories" in err) == (yes and not memories), err
    assert ("no Kubernetes context" in err) == (memories == yes), err  # went on
    assert len(err.splitlines()) == 1, err


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(session=st.booleans(), wait=st.booleans(), summarizer=st.booleans())
def test_rebuild_all_with_secrets_names_only_what_is_wrong_with_its_arguments(
    session: bool, wait: bool, summarizer: bool, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A user who gave --summarizer is not told it is needed, nor one who gave no --wait
    that --wait is refused."""
    argv = ["rebuild", "--all-with-secrets", *(["s1"] if session else [])]
    argv += (["--wait", "5"] if wait else []) + (["--summarizer", "default"] if summarizer else [])
    with no_cluster(str(tmp_path_factory.getbasetemp())):
        code, out, err = run(argv)
    if session or wait or not summarizer:
        assert code == 2 and out == "", err
        assert ("SESSION_ID" in err) == session, err
        assert ("--wait" in err) == wait, err
        assert ("needs --summarizer" in err) == (not summarizer), err


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(wait=st.floats(min_value=0, max_value=1e9, exclude_min=True).map(repr))
def test_rebuild_all_with_secrets_refuses_a_wait_it_would_not_honour(
    wait: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    argv = ["rebuild", "--all-with-secrets", "--summarizer", "default", "--wait", wait]
    with no_cluster(str(tmp_path_factory.getbasetemp())):
        code, out, err = run(argv)
    assert code == 2 and out == "", err
    assert "--wait" in err and "Kubernetes" not in err, err  # before any call


# -- what a store or a cluster holds reaches a terminal: it never drives it ----------------


@contextlib.contextmanager
def a_store_holding(text: str) -> Iterator[None]:
    """open_store yields a store whose every row and key carries text (an agent's memory
    can: the summary quotes it, its id names it; another cluster's operator names itself)."""
    from controller.core.ledger import AuthorityRecord

    class Store:
        location = argparse.Namespace(ledger_collection="neo-agent-sessions-ledger")

        def latest_summaries(self, limit: int) -> list[tuple[str, str, dict[str, object]]]:
            meta = {"sessionId": text, "category": text, "timestamp": 1, "memoryCount": 1}
            return [(f"summary_{text}", f"# {text}\n\n- {text}\n", meta)]

        def stored_summary(self, session_id: str) -> tuple[str, dict[str, object]]:
            return text, {"writer": text, "watermarkMemoryId": text, "triggerSource": text}

        def read_summary(self, session_id: str) -> None:
            return None

        def session_rows(self, session_id: str, mask: object) -> object:
            return argparse.Namespace(
                total=2, keys=[(1, text)], untimed=(text,), untimed_values={text: text}
            )

        def authorities(self) -> list[AuthorityRecord]:
            return [AuthorityRecord(f"other {text}", text, 1, 60.0)]

        def remove_authorities(self, uids: list[str]) -> None:
            pass

    with store_serving(Store()):
        yield


@contextlib.contextmanager
def store_serving(store: object) -> Iterator[None]:
    """open_store yields store (and the default summarizer), whatever the flags say."""
    from controller.api import SessionSummarizerSpec
    from controller.cli.settings import SummarizerSettings

    defaults = SummarizerSettings(SessionSummarizerSpec(), "default", None)

    @contextlib.contextmanager
    def open_store(args: object) -> Iterator[tuple[object, SummarizerSettings]]:
        yield store, defaults

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("controller.cli.settings.open_store", open_store)
        yield


@contextlib.contextmanager
def a_cluster_holding(text: str, phase: str = "Summarized") -> Iterator[None]:
    """Every Kubernetes call summaryctl makes answers with text wherever an object holds free
    text (a condition's reason and message, a pass's message, kube-system's UID); a pass
    ends in phase."""
    asked: dict[str, str] = {}
    conditions = [
        {"type": kind, "status": "True", "reason": text, "message": text, "lastProbeTime": text}
        for kind in ("Ready", "ReplicaActive")
    ]

    def get_summarizer(namespace: str, name: str) -> dict[str, object]:
        status = {"conditions": conditions, "lastHandledProbeRequest": asked.get("probe")}
        return {"metadata": {"namespace": namespace, "name": name}, "status": status}

    def get_summary(namespace: str, name: str) -> dict[str, object]:
        summarized = {"type": "Summarized", "status": "False", "reason": f"Failing{text}"}
        status = {"observedGeneration": 1, "phase": phase, "message": text}
        return {"metadata": {"generation": 1}, "status": {**status, "conditions": [summarized]}}

    def patch(*where: str, body: dict[str, dict[str, dict[str, str]]]) -> None:
        asked["probe"] = next(iter(body["metadata"]["annotations"].values()))

    custom = argparse.Namespace(
        patch_namespaced_custom_object=lambda *a: patch(*a[:-1], body=a[-1])
    )
    kube_system = argparse.Namespace(metadata=argparse.Namespace(uid=text))
    core = argparse.Namespace(read_namespace=lambda name: kube_system)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kube, "get_summarizer", get_summarizer)
        mp.setattr(kube, "get_summary", get_summary)
        mp.setattr(kube, "request_summary", lambda ns, sid, **kw: (text, "created"))
        mp.setattr(kube, "custom", lambda: custom)
        mp.setattr(kube, "core", lambda: core)
        # This cluster answers a probe request at once: check's pause between polls waits
        # for nothing (half a second an example).
        mp.setattr(time, "sleep", lambda seconds: None)
        # A session id a SessionSummary can carry (never blank), holding the text.
        mp.setattr("controller.cli.commands._with_secrets", lambda args: [f"s {text}"])
        yield


@pytest.mark.parametrize("answer_at", [0.0, 12.0, 29.0])
def test_check_that_runs_out_of_time_reports_the_operators_last_answer(answer_at: float) -> None:
    """The operator answers check's first request (not Ready) at answer_at seconds, then
    never again: check reports that answer, not that the operator may be down."""
    from controller.status import conditions

    clock = [0.0]
    handled: list[str] = []
    requests: list[str] = []
    ready = {"type": "Ready", "status": "False", "reason": "StoreUnreachable", "message": "down"}

    def get_summarizer(namespace: str, name: str) -> dict[str, object]:
        if requests and not handled and clock[0] >= answer_at:
            handled.append(requests[0])
        status = {"conditions": [ready], "lastHandledProbeRequest": handled[-1] if handled else ""}
        return {"metadata": {"namespace": namespace, "name": name}, "status": status}

    def sleep(seconds: float) -> None:
        clock[0] += seconds

    custom = argparse.Namespace(
        patch_namespaced_custom_object=lambda *a: requests.append(
            next(iter(a[-1]["metadata"]["annotations"].values()))
        )
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kube, "get_summarizer", get_summarizer)
        mp.setattr(kube, "custom", lambda: custom)
        mp.setattr(conditions, "now_rfc3339", lambda precise: f"request {len(requests)}")
        mp.setattr("controller.cli.commands.time", argparse.Namespace(
            monotonic=lambda: clock[0], sleep=sleep
        ))  # fmt: skip
        code, out, err = run(["check", "-n", "agents", "--wait", "30"])
    assert "Ready=False StoreUnreachable: down" in out
    assert code == 1 and len(requests) == 2, (requests, err)
    assert "is the operator running" not in err, err
    assert "last answered Ready=False StoreUnreachable: down" in err, err


# Every command that prints what a store or a cluster holds, how its pass ends, its exit code.
PRINTING = [
    (["summaries"], "Summarized", 0),
    (["summaries", "--full"], "Summarized", 0),
    (["summaries", "--json"], "Summarized", 0),
    (["ledger", "s1"], "Summarized", 0),
    (["ledger", "s1", "--json"], "Summarized", 0),
    (["verify", "s1"], "Summarized", 1),  # a memory no summary covers
    (["verify", "s1", "--json"], "Summarized", 1),
    (["handover"], "Summarized", 0),
    (["sunset", "s1", "--wait", "5"], "Summarized", 0),
    (["sunset", "s1", "--wait", "5"], "Failed", 1),
    (["sunset", "s1", "--wait", "5"], "Pending", 1),
    (["check"], "Summarized", 0),
    (["rebuild", "--all-with-secrets", "--summarizer", "default"], "Summarized", 0),
]
STORE_COMMANDS = ("summaries", "ledger", "verify", "handover")
any_text = st.text(st.characters(exclude_categories=()), max_size=30) | st.sampled_from(
    ["\x1b[2J\x1b[31mred", "\x1b]0;title\x07", "\r", "\x7f\x85\x9b", "\u202e\u2066", "\ud800"]
)


@settings(max_examples=200, deadline=None)
@given(text=any_text, command=st.sampled_from(PRINTING))
def test_no_text_a_store_or_a_cluster_holds_reaches_the_terminal_raw(
    text: str, command: tuple[list[str], str, int]
) -> None:
    """A summary quotes its memories, a condition's message quotes an error: an escape
    sequence (C0, DEL, C1) or a bidi override in one is shown, not obeyed (it could clear
    the screen, retitle the window, hide or reorder what is shown)."""
    argv, phase, exit_code = command
    with a_store_holding(text), a_cluster_holding(text, phase):
        store_flag = ["--chroma-url", REFUSED] if argv[0] in STORE_COMMANDS else []
        code, out, err = run([*argv, *store_flag])
    assert code == exit_code and "error" not in err, (code, err)
    assert all(c.isprintable() or c == "\n" for c in out + err), (out, err)


@settings(max_examples=100, deadline=None)
@given(
    text=st.text("ab", max_size=3),
    command=st.sampled_from([c for c in PRINTING if c[0][0] in ("check", "sunset")]),
)
def test_an_empty_reason_or_message_leaves_no_dangling_colon(
    text: str, command: tuple[list[str], str, int]
) -> None:
    """A condition or a pass with an empty message (or reason) prints what it has: never
    'SpecAccepted: ' with nothing after the colon."""
    argv, phase, _ = command
    with a_cluster_holding(text, phase):
        _, out, err = run(argv)
    for line in (out + err).splitlines():
        assert not re.search(r":\s+($|\(measured)|\s:", line), line


@settings(max_examples=150, deadline=None)
@given(text=any_text, argv=st.sampled_from([["summaries"], ["ledger", "s1"], ["verify", "s1"]]))
def test_json_output_is_valid_json_that_gives_back_what_the_store_holds(
    text: str, argv: list[str]
) -> None:
    with a_store_holding(text):
        _, out, _ = run([*argv, "--json", "--chroma-url", REFUSED])
    data = json.loads(out)
    if argv[0] == "summaries":
        assert (
            data[0]["document"] == f"# {text}\n\n- {text}\n" and data[0]["id"] == f"summary_{text}"
        )
    elif argv[0] == "ledger":
        assert data["document"] == text and data["keys"]["writer"] == text
    else:
        assert data[0]["unreadableTimes"][0]["id"] == text


@settings(max_examples=100, deadline=None)
@given(
    sessions=st.lists(
        st.text(min_size=1, max_size=8).filter(lambda s: not blank_session_id(s)),
        min_size=1,
        max_size=6,
        unique=True,
    ),
    data=st.data(),
)
def test_rebuild_all_with_secrets_asks_for_every_session_and_names_each_one_refused(
    sessions: list[str], data: st.DataObject
) -> None:
    """One session the API server refuses (its id, an admission webhook) does not keep the
    others' secrets stored: each is asked, each refusal is one line, and the exit code says
    some (1) or all (2) failed."""
    from kubernetes.client.exceptions import ApiException

    refused = data.draw(st.sets(st.sampled_from(sessions)))
    asked: list[str] = []

    def request_summary(namespace: str, session_id: str, **kw: object) -> tuple[str, str]:
        asked.append(session_id)
        if session_id in refused:
            exc = ApiException(status=422, reason="Unprocessable Entity")
            exc.body = json.dumps({"message": f"spec.sessionId of {session_id!r} refused"})
            raise exc
        return "name", "created"

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kube, "request_summary", request_summary)
        mp.setattr("controller.cli.commands._with_secrets", lambda args: sessions)
        mp.setattr("controller.cli.commands.served", lambda namespace, ref: None)
        code, out, err = run(["rebuild", "--all-with-secrets", "--summarizer", "default"])
    assert asked == sessions
    for session_id in sessions:
        why = f"rejected by the API server: spec.sessionId of {session_id!r} refused"
        failed = printable(f"not asked: {session_id}: {why}") in err.splitlines()
        done = printable(f"rebuild asked: {session_id}") in out.splitlines()
        assert (failed, done) == (session_id in refused, session_id not in refused), (out, err)
    assert code == (2 if len(refused) == len(sessions) else 1 if refused else 0), err


@settings(max_examples=100, deadline=None)
@given(
    sessions=st.lists(
        st.text(min_size=1, max_size=8)
        | st.sampled_from(["", " ", "\t\n", "\u3000"])
        | st.integers(1025, 3000).map(lambda n: "s" * n),
        min_size=1,
        max_size=6,
        unique=True,
    )
)
def test_rebuild_all_with_secrets_names_a_session_no_summary_object_can_name_and_asks_the_rest(
    sessions: list[str],
) -> None:
    """A stored row's sessionId that no SessionSummary can carry (blank, or longer than its
    1,024 characters: another writer's row) is one line saying so, as the sweep and the
    marker scan skip it; the other sessions are still asked, and the exit code is 1 (some)
    or 2 (none asked)."""
    unnamable = [s for s in sessions if blank_session_id(s) or len(s) > 1024]
    asked: list[str] = []

    class Api:
        def create_namespaced_custom_object(self, *args: object, **kw: object) -> object:
            body = args[-1]
            assert isinstance(body, dict)
            asked.append(body["spec"]["sessionId"])
            return body

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kube, "custom", Api)
        mp.setattr("controller.cli.commands._with_secrets", lambda args: sessions)
        mp.setattr("controller.cli.commands.served", lambda namespace, ref: None)
        code, out, err = run(["rebuild", "--all-with-secrets", "--summarizer", "default"])
    assert asked == [s for s in sessions if s not in unnamable], err
    assert all(printable(f"rebuild asked: {s}") in out.splitlines() for s in asked), out
    assert "Error" not in err, err
    not_asked = [line for line in err.splitlines() if line.startswith("not asked: ")]
    assert len(not_asked) == len(unnamable), err
    expected = 0 if not unnamable else 2 if len(unnamable) == len(sessions) else 1
    assert code == expected, err


@settings(max_examples=50, deadline=None)
@given(
    keys=st.sampled_from([{}, {"sessionId": None}])
    | st.builds(dict, sessionId=st.integers() | st.floats(allow_nan=False) | st.booleans())
)
def test_summaries_full_shows_a_row_naming_no_session_as_it_is(
    keys: dict[str, object],
) -> None:
    """A row without a string sessionId (another writer's) is its own document: not the
    summary of a session whose id is that value's text ("None", "1")."""
    from controller.core.summary import StructuredSummary

    class Store:
        def latest_summaries(self, limit: int) -> list[tuple[str, str, dict[str, object]]]:
            return [("summary_x", "the row's own text", {"timestamp": 1, **keys})]

        def read_summary(self, sid: str) -> StructuredSummary:
            return StructuredSummary(session_id=sid, title=f"the summary of session {sid}")

    with store_serving(Store()):
        code, out, err = run(["summaries", "--full", "--chroma-url", REFUSED])
    assert code == 0, err
    assert "the row's own text" in out and "the summary of session" not in out, out


def test_every_summaryctl_line_is_printed_through_out() -> None:
    """A command that printed on its own would bypass out()'s escaping: the property test
    above covers the commands there are; this keeps a new one on the same path."""
    cli = Path(__file__).resolve().parents[2] / "controller" / "cli"
    calls = [
        (path.name, line.strip())
        for path in sorted(cli.glob("*.py"))
        for line in path.read_text().splitlines()
        if re.search(r"\bprint\(|sys\.std(out|err)\.write", line)
    ]
    out_itself = 'print(*map(printable, lines), sep="\\n", file=sys.stderr if err else sys.stdout)'
    assert calls == [("args.py", out_itself)], calls


@settings(max_examples=30, deadline=None)
@given(
    name=st.from_regex(r"[a-z][a-z0-9]{2,20}", fullmatch=True) | st.none(),
    ledger=st.booleans(),
    command=st.sampled_from(
        [["summaries"], ["remember", "s1", "--prompt", "p", "--response", "r"], ["verify", "s1"]]
    ),
)
def test_a_memory_collection_the_operator_writes_is_refused_before_the_store(
    name: str | None, ledger: bool, command: list[str]
) -> None:
    """As a SessionSummarizer's spec may not (StoreSpec): the memories never in the summary
    collection nor its ledger, the summary collection named or left to its default."""
    summary = name or StoreLocation(url=None).summary_collection
    named = ["--summary-collection", name] if name else []
    memory = summary + StoreSpec.LEDGER_SUFFIX if ledger else summary
    argv = [*command, "--chroma-url", REFUSED, *named, "--memory-collection", memory]
    code, out, err = run(argv)
    assert code == 2 and out == "", err
    assert "memoryCollection must differ" in err and "cannot connect" not in err


@settings(max_examples=40, deadline=None)
@given(
    length=st.integers(3, StoreSpec.COLLECTION_NAME_MAX),
    command=st.sampled_from(
        [
            ["summarize", "--bypass-claim", "s1"],
            ["summaries"],
            ["ledger", "s1"],
            ["remember", "s1", "--prompt", "p", "--response", "r"],
        ]
    ),
)
def test_a_summary_collection_without_room_for_its_ledger_is_refused_before_the_store(
    length: int, command: list[str]
) -> None:
    """As a SessionSummarizer's spec refuses it (StoreSpec): a summary collection whose
    ledger's name (+ "-ledger") Chroma would refuse is refused at once, not after a pass has
    read the session and asked the model, at its first write."""
    name = "s" * length
    code, out, err = run([*command, "--chroma-url", REFUSED, "--summary-collection", name])
    fits = length + len(StoreSpec.LEDGER_SUFFIX) <= StoreSpec.COLLECTION_NAME_MAX
    assert code == 2 and out == "", err
    assert ("cannot connect" in err) == fits and ("ledger" in err) != fits, err


# Each summaryctl argument that names a spec field, and the field: the CLI must take a value
# exactly when the spec does, or it reads a store no SessionSummarizer can name (and a
# session no SessionSummary can carry), or refuses one they can.
SPEC_FIELDS = {
    "--tenant": (StoreSpec, "tenant"),
    "--database": (StoreSpec, "database"),
    "--memory-collection": (StoreSpec, "memory_collection"),
    "--summary-collection": (StoreSpec, "summary_collection"),
    "--chroma-url": (StoreSpec, "url"),
    "SESSION_ID": (SessionSummarySpec, "session_id"),
}
# Every length bound of those fields and of Chroma's names: values are made either side.
_LENGTHS = st.integers(0, 6) | st.sampled_from([253, 256, 300, 505, 512, 1024]).flatmap(
    lambda bound: st.integers(bound - 8, bound + 1)
)


def _spec_takes(flag: str, value: str) -> bool:
    model, field = SPEC_FIELDS[flag]
    try:
        model.model_validate({field: value})
    except ValidationError as exc:  # a rule on a pair (memories apart) is not this field's
        return not any(error["loc"] for error in exc.errors())
    return True


@settings(max_examples=400, deadline=None)
@given(
    flag=st.sampled_from(sorted(SPEC_FIELDS)),
    length=_LENGTHS,
    head=st.text(alphabet=st.sampled_from("ab1_-./+: \t\x01é"), max_size=3),
    tail=st.text(alphabet=st.sampled_from("ab1_-./+: \t\x01é"), max_size=3),
)
def test_an_argument_naming_a_spec_field_takes_exactly_what_the_spec_takes(
    flag: str, length: int, head: str, tail: str
) -> None:
    """A tenant holding '/' read another tenant ("x/../default_tenant"); a 300-character
    --database was taken, which spec.store.database (NAME_MAX 256) refuses."""
    if flag == "--chroma-url":  # what summaryctl runs on --chroma-url and CHROMA_URL
        value = "http://" + head + ("ab." * length)[:length] + "c" + tail
        assert (chroma_url_problem(value) is None) == _spec_takes(flag, value), value
        return
    value = head + ("a1" * length)[:length] + tail
    assume(value != "--")  # argparse drops a bare "--" value
    argv = ["sunset", "--", value] if flag == "SESSION_ID" else ["summaries", f"{flag}={value}"]
    with no_cluster("/nonexistent"):
        code, out, err = run([*argv, *(["--chroma-url", REFUSED] if flag != "SESSION_ID" else [])])
    assert code == 2 and out == "", err
    taken = "cannot connect" in err or "no Kubernetes context" in err  # past the checks
    assert taken == _spec_takes(flag, value), (value, err)
    if not taken:
        assert f"argument {flag}" in err, err


def test_rebuild_all_with_secrets_without_a_cluster_says_so_once(tmp_path: object) -> None:
    """No context (or no connection) fails every request alike: one line, not one a session."""
    sessions = [f"s{i}" for i in range(5)]
    with no_cluster(str(tmp_path)), pytest.MonkeyPatch.context() as mp:
        mp.setattr("controller.cli.commands._with_secrets", lambda args: sessions)
        code, out, err = run(["rebuild", "--all-with-secrets", "--summarizer", "default"])
    assert code == 2 and out == "", err
    assert err.count("no Kubernetes context") == 1, err


ELSEWHERE = "http://elsewhere.example:8000"


@pytest.mark.parametrize(
    ("command", "spec"),
    [
        (["summaries"], f"{{store: {{url: '{ELSEWHERE}'}}}}"),
        (["remember", "s1", "--sunset-marker"], f"{{store: {{url: '{ELSEWHERE}'}}}}"),
        (["summarize", "s1", "--bypass-claim"], f"{{store: {{url: '{ELSEWHERE}'}}}}"),
        (
            ["summarize", "s1", "--bypass-claim"],
            f"{{embedding: {{provider: openai, model: e, baseUrl: '{ELSEWHERE}/v1'}}}}",
        ),
        (
            ["summarize", "s1", "--bypass-claim"],
            f"{{model: {{backend: openai, model: m, baseUrl: '{ELSEWHERE}/v1'}}}}",
        ),
    ],
)
def test_an_endpoint_outside_the_allowed_endpoints_is_one_line_and_exit_2(
    tmp_path: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    command: list[str],
    spec: str,
) -> None:
    """The form of every other refused setting (a Secret's allow-list included), not the
    catch-all `EndpointNotAllowed: ...` and exit 1."""
    from controller.config import CONFIG

    allowed = CONFIG.model_validate(
        {"allowed_endpoints": f"{REFUSED}, http://chroma:8000", "allowed_model_urls": ELSEWHERE}
    )
    monkeypatch.setattr("controller.backends.CONFIG", allowed)
    # The model and the embedding are built once the store is open: a store that opens.
    monkeypatch.setattr("controller.cli.settings.connect", lambda location: None)
    monkeypatch.setattr("controller.cli.settings.MemoryStore", lambda client, location: None)
    manifest = tmp_path / "s.yaml"  # type: ignore[operator]
    manifest.write_text(f"kind: SessionSummarizer\nmetadata: {{name: x}}\nspec: {spec}\n")
    with no_cluster(str(tmp_path)):
        code, out, err = run([*command, "--summarizer-file", str(manifest)])
    assert (code, out, err.count("\n")) == (2, "", 1), err
    assert err.startswith("summaryctl: error: ") and "EndpointNotAllowed" not in err
    assert ELSEWHERE in err and "allowed endpoints" in err


class EmbeddingStore:
    """A store that opens, and embeds what it is given to write."""

    def add_memories(self, *rows: object, create: bool, embed: Any) -> None:
        embed(["a memory"])


def test_remember_through_an_embedding_endpoint_that_cannot_be_reached_is_one_line_and_exit_2(
    tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The form of every other failure to reach an endpoint, not the catch-all
    `EmbeddingError: ConnectError ...` and exit 1."""
    from controller.config import CONFIG

    allowed = CONFIG.model_validate({"allowed_model_urls": REFUSED})
    monkeypatch.setattr("controller.backends.CONFIG", allowed)
    monkeypatch.setattr("controller.cli.settings.connect", lambda location: None)
    monkeypatch.setattr("controller.cli.settings.MemoryStore", lambda *_: EmbeddingStore())
    manifest = tmp_path / "s.yaml"  # type: ignore[operator]
    spec = f"{{embedding: {{provider: openai, model: e, baseUrl: '{REFUSED}/v1'}}}}"
    manifest.write_text(f"kind: SessionSummarizer\nmetadata: {{name: x}}\nspec: {spec}\n")
    with no_cluster(str(tmp_path)):
        code, out, err = run(
            ["remember", "s1", "--sunset-marker", "--summarizer-file", str(manifest)]
        )
    assert (code, out, err.count("\n")) == (2, "", 1), err
    assert err.startswith(
        f"summaryctl: error: the embedding failed: ConnectError calling {REFUSED}"
    )


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    failure=st.sampled_from(["EmbeddingError", "ModelUnavailable", "InvalidModelOutput"]),
    said=st.text(min_size=1, max_size=40),
)
def test_every_error_an_embedding_or_a_model_raises_is_said_as_summaryctl_says_failures(
    tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, failure: str, said: str
) -> None:
    """remember: one line and exit 2; summarize: each session's own FAILED line, the next
    session still tried, exit 1. Never the catch-all `summaryctl: error: ModelUnavailable: ...`
    that stops at the first session."""
    from controller.embeddings.minilm import EmbeddingError
    from controller.summarizers import chat_prompt

    error = {
        "EmbeddingError": EmbeddingError,
        "ModelUnavailable": chat_prompt.ModelUnavailable,
        "InvalidModelOutput": chat_prompt.InvalidModelOutput,
    }[failure](said)

    def fail(*args: object, **kwargs: object) -> Any:
        raise error

    monkeypatch.setattr("controller.cli.settings.connect", lambda location: None)
    monkeypatch.setattr("controller.cli.settings.MemoryStore", lambda *_: EmbeddingStore())
    monkeypatch.setattr("controller.backends.build_embedding_function", lambda spec: fail)
    monkeypatch.setattr("controller.pipeline.summarize_session", fail)
    store = ["--chroma-url", REFUSED]
    with no_cluster(str(tmp_path)):
        if failure == "EmbeddingError":  # what remember meets: an embedding fails
            code, out, err = run(["remember", "s1", "--sunset-marker", *store])
            assert (code, out) == (2, "") and err.count("\n") == 1, err
            assert err == f"summaryctl: error: the embedding failed: {printable(said)}\n"
        code, out, err = run(["summarize", "s1", "s2", "--bypass-claim", *store])
    assert (code, out) == (1, ""), err
    assert err.splitlines() == [
        f"[1/2] s1: FAILED: {printable(said)}",
        f"[2/2] s2: FAILED: {printable(said)}",
        "summaryctl: 2 of 2 session(s) failed: s1, s2",
    ]


@pytest.mark.parametrize("manifest_url", [None, "http://chroma:8000", ELSEWHERE])
@pytest.mark.parametrize("chroma_url", [None, "http://chroma:8000", ELSEWHERE])
def test_the_store_url_used_is_the_one_the_allowed_endpoints_judge(
    tmp_path: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    manifest_url: str | None,
    chroma_url: str | None,
) -> None:
    """--chroma-url (or CHROMA_URL) over a summarizer's store.url: the URL summaryctl
    connects to is allowed or refused, never the one it does not use (it used to check only
    the manifest's, and connected to a refused --chroma-url)."""
    from controller.config import CONFIG

    monkeypatch.delenv("CHROMA_URL", raising=False)
    allowed = CONFIG.model_validate({"allowed_endpoints": "http://chroma:8000"})
    monkeypatch.setattr("controller.backends.CONFIG", allowed)
    reached: list[str | None] = []
    monkeypatch.setattr("controller.cli.settings.connect", lambda loc: reached.append(loc.url))
    monkeypatch.setattr("controller.cli.settings.MemoryStore", lambda client, location: None)
    argv = ["remember", "s1", "--sunset-marker"]
    if manifest_url is not None:
        manifest = tmp_path / "s.yaml"  # type: ignore[operator]
        spec = f"{{store: {{url: '{manifest_url}'}}}}"
        manifest.write_text(f"kind: SessionSummarizer\nmetadata: {{name: x}}\nspec: {spec}\n")
        argv += ["--summarizer-file", str(manifest)]
    if chroma_url is not None:
        argv += ["--chroma-url", chroma_url]
    used = chroma_url or manifest_url
    with no_cluster(str(tmp_path)):
        code, _, err = run(argv)
    if used == ELSEWHERE:
        assert (code, reached, err.count("\n")) == (2, [], 1), err
        assert ELSEWHERE in err and "allowed endpoints" in err, err
    else:
        assert reached == ([used] if used else []) and "allowed endpoints" not in err, err


@pytest.mark.parametrize("annotation", ["http://model.example/v1", "http://other.example/v1"])
def test_summarize_asks_the_store_secrets_owner_before_the_model_gets_memories(
    tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, annotation: str
) -> None:
    """The store Secret's allowed-model-urls decides, as before an operator's pass: a model
    it does not list is refused, one line naming the Secret, exit 2, before a memory is read."""
    from controller.core.destinations import ALLOWED_MODEL_URLS_ANNOTATION, ALLOWED_URLS_ANNOTATION

    annotations = {
        ALLOWED_URLS_ANNOTATION: "http://chroma:8000",
        ALLOWED_MODEL_URLS_ANNOTATION: annotation,
    }
    secret = annotations, {"token": "dA=="}
    monkeypatch.setattr("controller.kube.client.read_secret", lambda ns, name: secret)
    monkeypatch.setattr("controller.cli.settings.connect", lambda location: None)
    monkeypatch.setattr("controller.cli.settings.MemoryStore", lambda client, location: None)
    built: list[object] = []
    monkeypatch.setattr(
        "controller.summarizers.chat_model.ChatModelSummarizer", lambda c: built.append(c)
    )
    model = "{backend: openai, model: m, baseUrl: 'http://model.example/v1'}"
    spec = f"{{store: {{url: 'http://chroma:8000', authSecretRef: {{name: tok}}}}, model: {model}}}"
    manifest = tmp_path / "s.yaml"  # type: ignore[operator]
    manifest.write_text(f"kind: SessionSummarizer\nmetadata: {{name: x}}\nspec: {spec}\n")
    with no_cluster(str(tmp_path)):
        code, _, err = run(
            ["summarize", "s1", "--bypass-claim", "--summarizer-file", str(manifest)]
        )
    if annotation == "http://model.example/v1":
        assert built and "may not receive" not in err, err
    else:
        assert (code, built, err.count("\n")) == (2, [], 1), err
        assert "Secret default/tok (store.authSecretRef)" in err and "may not receive" in err


@pytest.mark.parametrize("manifest_url", ["http://chroma:8000", ELSEWHERE])
@pytest.mark.parametrize("secret", [False, True])
@pytest.mark.parametrize("token", [None, "env-token"])
@pytest.mark.parametrize("source", ["--summarizer-file", "--summarizer"])
def test_an_embedded_store_consults_no_store_url_and_no_store_secret(
    tmp_path: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    manifest_url: str,
    secret: bool,
    token: str | None,
    source: str,
) -> None:
    """--path over a summarizer's store: no URL is reached, so its store.url is not judged by
    the allowed endpoints, its store Secret not read and no token passed (a user was refused,
    or needed the cluster, for a URL never contacted); its collections still hold."""
    from controller.config import CONFIG

    allowed = CONFIG.model_validate({"allowed_endpoints": "http://chroma:8000"})
    monkeypatch.setattr("controller.backends.CONFIG", allowed)
    reached: list[tuple[str | None, str | None, str | None, str]] = []
    monkeypatch.setattr(
        "controller.cli.settings.connect",
        lambda loc: reached.append((loc.url, loc.path, loc.token, loc.memory_collection)),
    )
    monkeypatch.setattr("controller.cli.settings.MemoryStore", lambda client, location: None)
    read: list[str] = []
    monkeypatch.setattr("controller.kube.client.read_secret", lambda ns, name: read.append(name))
    auth = ", authSecretRef: {name: tok}" if secret else ""
    spec = f"{{store: {{url: '{manifest_url}', memoryCollection: mine{auth}}}}}"
    manifest = tmp_path / "s.yaml"  # type: ignore[operator]
    manifest.write_text(f"kind: SessionSummarizer\nmetadata: {{name: x}}\nspec: {spec}\n")
    store = {"url": manifest_url, "memoryCollection": "mine"}
    obj = {"spec": {"store": store | ({"authSecretRef": {"name": "tok"}} if secret else {})}}
    monkeypatch.setattr("controller.cli.settings.summarizer_object", lambda ns, name: obj)
    where = str(manifest) if source == "--summarizer-file" else "x"
    path = str(tmp_path / "chroma")  # type: ignore[operator]
    with no_cluster(str(tmp_path)):
        if token is not None:
            monkeypatch.setenv("CHROMA_TOKEN", token)
        _, _, err = run(["remember", "s1", "--sunset-marker", source, where, "--path", path])
    assert (reached, read) == ([(None, path, None, "mine")], []), err
    assert "allowed endpoints" not in err and "Secret" not in err, err


MODEL = "{backend: openai, model: m, baseUrl: '%s/v1'}"
EMBEDDING = "{provider: openai, model: e, baseUrl: '%s/v1'}"
# A refused destination: (the allowed endpoints, the allowed model URLs, extra arguments, the
# manifest's spec, the setting the refusal names), and the commands that reach its check.
REFUSALS = {
    "store.url": (
        "http://chroma:8000", "", [], f"{{store: {{url: '{ELSEWHERE}'}}}}", "ENDPOINTS",
        ["summaries", "remember", "summarize"],
    ),
    "--chroma-url": (
        "http://chroma:8000", "", ["--chroma-url", ELSEWHERE], "{store: {url: 'http://chroma:8000'}}",
        "ENDPOINTS", ["summaries", "remember", "summarize"],
    ),
    "embedding endpoint": (
        "http://chroma:8000", ELSEWHERE, [], f"{{embedding: {EMBEDDING % ELSEWHERE}}}",
        "ENDPOINTS", ["remember", "summarize"],
    ),
    "model endpoint": (
        "http://chroma:8000", ELSEWHERE, [], f"{{model: {MODEL % ELSEWHERE}}}", "ENDPOINTS",
        ["summarize"],
    ),
    "embedding memories": (
        "", "http://other:1", [], f"{{embedding: {EMBEDDING % ELSEWHERE}}}", "MODEL_URLS",
        ["remember", "summarize"],
    ),
    "model memories": (
        "", "http://other:1", [], f"{{model: {MODEL % ELSEWHERE}}}", "MODEL_URLS", ["summarize"],
    ),
    "model memories, unannotated store Secret": (
        "", "http://other:1", [],
        "{store: {url: 'http://chroma:8000', authSecretRef: {name: tok}}, "
        f"model: {MODEL % ELSEWHERE}}}", "MODEL_URLS", ["summarize"],
    ),
}  # fmt: skip
COMMANDS = {
    "summaries": ["summaries"],
    "remember": ["remember", "s1", "--sunset-marker"],
    "summarize": ["summarize", "s1", "--bypass-claim"],
}


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    refusal=st.sampled_from(sorted(REFUSALS)),
    command=st.sampled_from(sorted(COMMANDS)),
    in_pod=st.booleans(),
)
def test_a_refused_destination_tells_the_summaryctl_user_what_to_set_for_summaryctl(
    tmp_path: pytest.TempPathFactory, refusal: str, command: str, in_pod: bool
) -> None:
    """summaryctl judges destinations by SSO_ALLOWED_ENDPOINTS and SSO_ALLOWED_MODEL_URLS in
    its own environment: a refusal names those, in summaryctl's environment, never the
    operator's chart value or process (it used to tell the user to ask whoever runs the
    operator, whose settings summaryctl never reads)."""
    from controller.config import CONFIG
    from controller.core.destinations import ALLOWED_URLS_ANNOTATION

    endpoints, model_urls, extra, spec, setting, reach = REFUSALS[refusal]
    assume(command in reach)
    allowed = CONFIG.model_validate(
        {"allowed_endpoints": endpoints, "allowed_model_urls": model_urls}
    )
    manifest = tmp_path / "s.yaml"  # type: ignore[operator]
    manifest.write_text(f"kind: SessionSummarizer\nmetadata: {{name: x}}\nspec: {spec}\n")
    secret = {ALLOWED_URLS_ANNOTATION: "http://chroma:8000"}, {"token": "dA=="}
    with no_cluster(str(tmp_path)), pytest.MonkeyPatch.context() as mp:
        mp.setattr("controller.backends.CONFIG", allowed)
        mp.setattr("controller.kube.client.read_secret", lambda ns, name: secret)
        mp.setattr("controller.cli.settings.connect", lambda location: None)
        # A store that opens: the embedding and the model are checked once it is open.
        mp.setattr("controller.cli.settings.MemoryStore", lambda *_: mock.MagicMock())
        if in_pod:  # the operator's wording there: the chart value
            mp.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
            mp.delenv("KUBECONFIG")
        argv = [*COMMANDS[command], "--summarizer-file", str(manifest), *extra]
        code, out, err = run(argv)
    assert (code, out, err.count("\n")) == (2, "", 1), err
    assert f"SSO_ALLOWED_{setting} in summaryctl's environment" in err, err
    assert "summaryctl's allowed" in err and "operator" not in err, err


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    command=st.sampled_from(["remember", "summarize"]),
    field=st.sampled_from(["model", "embedding"]),
    token_by=st.sampled_from(["CHROMA_TOKEN", "--path"]),
    source=st.sampled_from(["--summarizer-file", "--summarizer"]),
    allowed=st.booleans(),
)
def test_a_store_secret_the_user_replaced_is_never_read_to_judge_a_model(
    tmp_path: pytest.TempPathFactory,
    command: str,
    field: str,
    token_by: str,
    source: str,
    allowed: bool,
) -> None:
    """With CHROMA_TOKEN (or --path, no token) the store is not read with its Secret: the
    check before memories go to a model or embedding endpoint does not read that Secret
    either (it used to, so a command that had all it needs failed without a cluster or the
    right to read Secrets); summaryctl's SSO_ALLOWED_MODEL_URLS decides, and a refusal says
    why no Secret's owner does."""
    from controller.config import CONFIG

    assume(command == "summarize" or field == "embedding")
    endpoint = MODEL % ELSEWHERE if field == "model" else EMBEDDING % ELSEWHERE
    store = "{url: 'http://chroma:8000', authSecretRef: {name: tok}}"
    spec = f"{{store: {store}, {field}: {endpoint}}}"
    manifest = tmp_path / "s.yaml"  # type: ignore[operator]
    manifest.write_text(f"kind: SessionSummarizer\nmetadata: {{name: x}}\nspec: {spec}\n")
    obj = yaml.safe_load(manifest.read_text())
    config = CONFIG.model_validate({"allowed_model_urls": ELSEWHERE if allowed else ""})
    read: list[str] = []

    def unreadable(namespace: str, name: str) -> None:
        read.append(name)
        raise kube.SecretError(f"not allowed to read Secret {namespace}/{name}")

    with no_cluster(str(tmp_path)), pytest.MonkeyPatch.context() as mp:
        mp.setattr("controller.backends.CONFIG", config)
        mp.setattr("controller.kube.client.read_secret", unreadable)
        mp.setattr("controller.cli.settings.summarizer_object", lambda ns, name: obj)
        mp.setattr("controller.cli.settings.connect", lambda location: None)
        mp.setattr("controller.cli.settings.MemoryStore", lambda *_: mock.MagicMock())
        mp.setattr("controller.backends.build_embedding_function", lambda s: len)
        mp.setattr("controller.summarizers.chat_model.ChatModelSummarizer", mock.MagicMock())
        mp.setattr("controller.pipeline.summarize_session", mock.Mock(side_effect=ValueError))
        (tmp_path / "db").mkdir(exist_ok=True)  # type: ignore[operator]
        where = ["--path", str(tmp_path / "db")] if token_by == "--path" else []  # type: ignore[operator]
        if token_by == "CHROMA_TOKEN":
            mp.setenv("CHROMA_TOKEN", "from-env")
        named = str(manifest) if source == "--summarizer-file" else "x"
        _, _, err = run([*COMMANDS[command], source, named, *where])
    assert read == [] and "Secret default/tok" not in err, err
    refused = f"{field}.baseUrl {ELSEWHERE}/v1 may not receive the memories: the store is read"
    assert (refused in err) is not allowed, err
    if not allowed:
        assert token_by in err and "SSO_ALLOWED_MODEL_URLS in summaryctl's environment" in err


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    command=st.sampled_from(["remember", "summarize"]),
    field=st.sampled_from(["model", "embedding"]),
    name=st.sampled_from(["tok", "s3-creds", "api-key", "db-password"]),
)
def test_a_store_secret_unreadable_at_the_memory_check_is_its_own_line_and_exit_2(
    tmp_path: pytest.TempPathFactory, command: str, field: str, name: str
) -> None:
    """The check before memories go to an endpoint reads the store's Secret again; when that
    read fails, summaryctl prints the Secret's message as it is (our words, never masked)
    and exits 2, as for any failure that says what to fix."""
    assume(command == "summarize" or field == "embedding")
    endpoint = (MODEL if field == "model" else EMBEDDING) % ELSEWHERE
    store = f"{{url: 'http://chroma:8000', authSecretRef: {{name: {name}}}}}"
    manifest = tmp_path / "s.yaml"  # type: ignore[operator]
    manifest.write_text(
        f"kind: SessionSummarizer\nmetadata: {{name: x}}\nspec: {{store: {store}, {field}: "
        f"{endpoint}}}\n"
    )
    said = f"Secret default/{name} not found (kubectl -n default get secret {name})"

    def unreadable(namespace: str, secret: str) -> None:
        raise kube.SecretError(said)

    with no_cluster(str(tmp_path)), pytest.MonkeyPatch.context() as mp:
        mp.setattr("controller.cli.settings.read_secret", lambda *_: "the-token")
        mp.setattr("controller.kube.client.read_secret", unreadable)
        mp.setattr("controller.cli.settings.connect", lambda location: None)
        mp.setattr("controller.cli.settings.MemoryStore", lambda *_: mock.MagicMock())
        code, out, err = run([*COMMANDS[command], "--summarizer-file", str(manifest)])
    assert (code, out, err) == (2, "", f"summaryctl: error: {said}\n")


def _json_nested(inner: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    return st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    _json_nested,
    max_leaves=8,
)
LEDGER_KEYS = ("sectionsJson", "referencesJson", "coverageJson", "legacySummary")


@settings(max_examples=300, deadline=None)
@given(
    keys=st.dictionaries(
        st.sampled_from(LEDGER_KEYS),
        st.one_of(
            st.text(max_size=20),
            json_values.map(json.dumps),
            st.integers(),
            st.floats(allow_nan=False),
            st.booleans(),
        ),
    )
)
def test_a_ledger_entry_not_as_the_operator_writes_it_is_named_never_a_bare_decoding_error(
    keys: dict[str, object],
) -> None:
    """Another writer's row (or an edited one) may hold anything in the keys `ledger`
    measures: it shows them, or says in one line which key of which session it cannot read
    (exit 2); it used to end in `JSONDecodeError: Expecting value: ...` or `AttributeError:
    'list' object has no attribute 'items'`, exit 1."""

    class Store:
        location = argparse.Namespace(summary_collection="s", ledger_collection="s-ledger")

        def stored_summary(self, session_id: str) -> tuple[str, dict[str, object]]:
            return "# doc", dict(keys)

    with store_serving(Store()):
        code, out, err = run(["ledger", "s1", "--chroma-url", REFUSED])
    if code == 0:
        assert "session:        s1" in out and err == "", err
    else:
        assert (code, out, err.count("\n")) == (2, "", 1), err
        named = re.match(r"summaryctl: error: session 's1': its (\w+) is not as", err)
        assert named and named.group(1) in keys, err


@settings(max_examples=300, deadline=None)
@given(
    status=st.sampled_from([400, 403, 404, 409, 422, 429, 500, 502, 503]),
    reason=st.one_of(st.none(), st.just(""), st.text(min_size=1, max_size=20)),
    body=st.one_of(
        st.none(),
        st.text(max_size=30),
        json_values.map(json.dumps),
        st.fixed_dictionaries({"kind": st.just("Status")}, optional={"message": json_values}).map(
            json.dumps
        ),
    ),
)
def test_a_kubernetes_refusal_always_says_why(
    status: int, reason: str | None, body: str | None
) -> None:
    """An API answer without a Status message (a proxy's page, an empty body, a Status with
    none) still gives a reason after its prefix: it used to print `forbidden: None` or
    `not found: ` with nothing after it."""
    from kubernetes.client.exceptions import ApiException

    from controller.cli.args import CliError, kube_call

    exc = ApiException(status=status, reason=reason)
    exc.body = body

    def refused() -> None:
        raise exc

    with pytest.raises(CliError) as said:
        kube_call(refused)
    text = str(said.value)
    prefix = {404: "not found: ", 403: "forbidden: ", 422: "rejected by the API server: "}
    why = text.removeprefix(prefix.get(status, f"Kubernetes API error {status}: "))
    assert why.strip() and (why != "None" or "None" in (reason or "") + (body or "")), text
    with contextlib.suppress(ValueError, AttributeError):  # a Status's message, as it is
        given_message = json.loads(body or "").get("message")
        if isinstance(given_message, str) and given_message.strip():
            assert why == given_message, text


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    command=st.sampled_from(
        [
            ["summaries"],
            ["ledger", "s1"],
            ["verify", "s1"],
            ["handover"],
            ["summarize", "s1", "--bypass-claim"],
        ]
    ),
    # Any name a file system takes: no separator, no NUL, no lone surrogate (unwritable).
    name=st.text(
        st.characters(blacklist_characters="/\x00", blacklist_categories=["Cs"]),
        min_size=1,
        max_size=12,
    ),
    as_file=st.booleans(),
)
def test_a_command_that_reads_never_makes_a_store_at_a_mistyped_path(
    tmp_path: Path, command: list[str], name: str, as_file: bool
) -> None:
    """Only `remember` makes a store at --path; any other command refuses a path that is no
    directory in one line and leaves nothing behind (a typo made a Chroma database there)."""
    assume(name not in (".", ".."))
    root = tmp_path / "t"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir()
    path = root / name
    if as_file:
        path.write_text("")
    code, out, err = run([*command, "--path", str(path / "db") if not as_file else str(path)])
    assert code == 2 and out == "", (code, out, err)
    assert err.count("\n") == 1 and "is no directory (`remember` makes a store there)" in err, err
    assert sorted(p.name for p in root.iterdir()) == ([name] if as_file else []), err


@pytest.mark.parametrize("kind", ["github-token", "aws-access-key", "own-pattern"])
def test_verify_masks_an_unreadable_timestamp_by_the_summarizers_rules(
    tmp_path: Path, kind: str
) -> None:
    """verify quotes a memory's timestamp it cannot read: masked as a pass masks that
    field (docs/privacy.md), by the named summarizer's extraPatterns too."""
    import chromadb
    from chromadb.config import Settings

    from tests.support.credentials import generated

    secret = "acme_" + "4f0c9a7be21d58e6f3b0a9c1"
    if kind != "own-pattern":
        secret = generated(7)[kind][0]
    db = tmp_path / "db"
    client = chromadb.PersistentClient(path=str(db), settings=Settings(anonymized_telemetry=False))
    client.create_collection("neo-agent-memory", embedding_function=None).add(
        ids=["m1", "m2"],
        documents=["User Prompt: add retries", "User Prompt: cap them"],
        embeddings=[[0.1, 0.2], [0.2, 0.1]],
        metadatas=[
            {"sessionId": "s1", "timestamp": 1764500000000},
            {"sessionId": "s1", "timestamp": f"written with {secret}"},
        ],
    )
    manifest = tmp_path / "s.yaml"
    manifest.write_text(
        "apiVersion: memorycore.io/v1alpha1\nkind: SessionSummarizer\n"
        "metadata: {name: default, namespace: agents}\nspec:\n  redaction:\n    extraPatterns:\n"
        "    - {name: acme-token, pattern: 'acme_[a-z0-9]{24}'}\n"
    )
    for as_json in ([], ["--json"]):
        with no_cluster(str(tmp_path)):
            argv = ["verify", "s1", "--path", str(db), "--summarizer-file", str(manifest)]
            code, out, err = run([*argv, *as_json])
        assert code == 1 and "m2" in out and "[redacted: " in out, (out, err)
        assert secret[:10] not in out, out


def test_the_demos_help_is_shown_whatever_the_operators_settings() -> None:
    """The demo checks --chroma-url with summaryctl's argument checks; importing them must not
    load the SSO_* settings (an invalid one stops the process before argparse runs)."""
    import sys

    env = {**os.environ, "SSO_ALLOWED_ENDPOINTS": "nope"}
    done = subprocess.run(
        [sys.executable, "-m", "devenv.demo", "--help"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0 and done.stdout.startswith("usage:"), done.stderr
