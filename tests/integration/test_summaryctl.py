"""summaryctl against a real Chroma server and a real control plane: the recovery path,
what agents read at boot, the sunset step, the demo, and what every bad input says."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.cli.main import main as cli_main
from controller.core.naming import summary_object_name, summary_row_id
from controller.store.connection import StoreLocation, connect
from controller.store.memory_store import MemoryStore
from devenv.chroma import ChromaServer
from devenv.controlplane import REPO_ROOT, free_port
from devenv.demo import NAMESPACE as DEMO_NAMESPACE
from devenv.demo_data import SAMPLE_SESSIONS, memory_rows
from devenv.processes import wait_for
from tests.integration.harness import NS, Harness, interaction, load, summarizer_yaml
from tests.support.cli import summaryctl_here as summaryctl


def one_error_line(stderr: str) -> str:
    """The error a user reads: no traceback, and one `summaryctl...: error:` line at the end
    (`demo: error:` for the demo)."""
    assert "Traceback" not in stderr, stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(("summaryctl", "demo")) and "error:" in last, stderr
    return last


def test_summarize_bypassing_the_claim_then_summaries_newest_first(
    chroma_server: ChromaServer,
) -> None:
    url = chroma_server.url
    cols = ["--memory-collection", "cli-memory", "--summary-collection", "cli-sessions"]
    loc = StoreLocation(url=url, memory_collection="cli-memory", summary_collection="cli-sessions")
    older, newer = SAMPLE_SESSIONS[2], SAMPLE_SESSIONS[3]
    load(MemoryStore(connect(loc), loc), memory_rows(older, 1_700_000_000_000))
    load(MemoryStore(connect(loc), loc), memory_rows(newer, 1_700_000_900_000))
    res = summaryctl(
        "summarize",
        older.session_id,
        newer.session_id,
        "--bypass-claim",
        "--chroma-url",
        url,
        *cols,
    )
    assert res.returncode == 0, res.stderr
    assert f"[1/2] {older.session_id}: summarized" in res.stdout
    again = summaryctl("summarize", older.session_id, "--bypass-claim", "--chroma-url", url, *cols)
    assert again.returncode == 0 and "up-to-date" in again.stdout

    listed = summaryctl("summaries", "--limit", "2", "--json", "--chroma-url", url, *cols)
    rows = json.loads(listed.stdout)
    assert [r["metadata"]["sessionId"] for r in rows] == [newer.session_id, older.session_id]
    ledger = json.loads(
        summaryctl("ledger", newer.session_id, "--json", "--chroma-url", url, *cols).stdout
    )
    assert ledger["keys"]["writer"].startswith("summaryctl@")  # who wrote it: the ledger
    text = summaryctl("summaries", "--limit", "1", "--chroma-url", url, *cols).stdout
    assert text.startswith(f"== summary_{newer.session_id}") and "## User Requests" in text


collection_names = st.from_regex(r"[a-z0-9][a-z0-9-]{1,20}[a-z0-9]", fullmatch=True)


@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(memory=collection_names, ledger_is_it=st.booleans())
def test_a_summary_or_ledger_collection_that_is_the_memory_collection_writes_nothing(
    chroma_server: ChromaServer, memory: str, ledger_is_it: bool
) -> None:
    """--summary-collection naming the memory collection, or a name whose ledger
    (NAME-ledger) is it: refused, and the agents' memories are left as they were."""
    memory += f"-{uuid.uuid4().hex[:8]}" + ("-ledger" if ledger_is_it else "")  # a new one
    summary = memory.removesuffix("-ledger") if ledger_is_it else memory
    loc = StoreLocation(url=chroma_server.url, memory_collection=memory)
    load(MemoryStore(connect(loc), loc), [interaction("s1", 0, 1_700_000_000_000, "fix x.py")])
    before = connect(loc).get_collection(memory).get()["ids"]
    cols = ["--memory-collection", memory, "--summary-collection", summary]
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli_main(["summarize", "s1", "--bypass-claim", "--chroma-url", loc.url, *cols])
    assert code == 2
    assert "memoryCollection must differ" in one_error_line(err.getvalue())  # before any call
    assert sorted(connect(loc).get_collection(memory).get()["ids"]) == sorted(before)


@pytest.fixture(scope="module")
def one_summary(chroma_server: ChromaServer) -> list[str]:
    """A summary collection with one summary in it (the flags that name it)."""
    cols = ["--memory-collection", "ts-memory", "--summary-collection", "ts-sessions"]
    loc = StoreLocation(url=chroma_server.url, memory_collection="ts-memory")
    load(MemoryStore(connect(loc), loc), [interaction("s1", 0, 1_700_000_000_000, "fix x.py")])
    res = summaryctl("summarize", "s1", "--bypass-claim", "--chroma-url", loc.url, *cols)
    assert res.returncode == 0, res.stderr
    return ["--chroma-url", chroma_server.url, *cols]


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(when=st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False, allow_infinity=False))
def test_summaries_lists_a_row_whatever_number_its_timestamp_is(
    chroma_server: ChromaServer, one_summary: list[str], when: float
) -> None:
    """Another writer's row (neo's summarizer, a script) may carry any number there."""
    rows = connect(StoreLocation(url=chroma_server.url)).get_collection("ts-sessions")
    meta = rows.get(ids=["summary_s1"])["metadatas"][0]
    rows.update(ids=["summary_s1"], metadatas=[{**meta, "timestamp": when}])
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = cli_main(["summaries", *one_summary])
    assert code == 0, err.getvalue()
    assert out.getvalue().startswith("== summary_s1  ["), out.getvalue()


def test_summarize_of_an_unknown_session_fails_and_names_it(
    chroma_server: ChromaServer,
) -> None:
    url = chroma_server.url
    cols = ["--memory-collection", "cli-memory-nf", "--summary-collection", "cli-sessions-nf"]
    loc = StoreLocation(
        url=url, memory_collection="cli-memory-nf", summary_collection="cli-sessions-nf"
    )
    known = SAMPLE_SESSIONS[0]
    load(MemoryStore(connect(loc), loc), memory_rows(known, 1_700_000_000_000))
    missing = f"missing-{uuid.uuid4().hex[:8]}"
    res = summaryctl(
        "summarize", known.session_id, missing, "--bypass-claim", "--chroma-url", url, *cols
    )
    assert res.returncode == 1, res.stdout + res.stderr
    assert f"[1/2] {known.session_id}: summarized" in res.stdout  # the others still are
    assert f"[2/2] {missing}: not-found" in res.stdout
    assert f"no memories found for 1 of 2 session(s): {missing}" in res.stderr
    assert "Traceback" not in res.stderr


def test_summarize_without_bypass_claim_explains_the_single_writer_rule() -> None:
    res = summaryctl("summarize", "abc", "--chroma-url", "http://127.0.0.1:9")
    assert res.returncode == 2
    assert "--bypass-claim" in res.stderr and "summaryctl sunset" in res.stderr
    assert "Traceback" not in res.stderr


def test_unreachable_chroma_is_a_one_line_error() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    res = summaryctl("summaries", "--chroma-url", url)
    assert res.returncode == 2
    line = one_error_line(res.stderr)
    assert "cannot connect to Chroma" in line and "is the Chroma server running?" in line


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["sunset", ""], "session id must not be empty"),
        (["sunset", "   "], "session id must not be empty"),
        (["sunset", "x" * 1025], "at most 1024 characters"),
        (["summarize", "", "--bypass-claim", "--chroma-url", "http://127.0.0.1:9"], "session id"),
        (["summaries", "--limit", "-3", "--chroma-url", "http://127.0.0.1:9"], "at least 1"),
        (["summaries", "--chroma-url", "notaurl"], "invalid Chroma URL 'notaurl'"),
        (["summaries", "--chroma-url", "ftp://x"], "invalid Chroma URL 'ftp://x'"),
        (["summaries", "--chroma-url", "http://"], "invalid Chroma URL 'http://': no host"),
        (["summaries", "--chroma-url", "http://host:99999"], "Port out of range"),
        (["sunset", "abc", "--summarizer", "Not_A_Name"], "invalid object name"),
        (["sunset", "abc", "--wait", "-1"], "0 or more seconds"),
    ],
)
def test_a_bad_argument_is_one_line_and_exit_2(args: list[str], says: str) -> None:
    res = summaryctl(*args)
    assert res.returncode == 2, res.stderr
    assert says in one_error_line(res.stderr)


@st.composite
def unsendable_tokens(draw: st.DrawFn) -> tuple[str, str]:
    """(token, its secret part): a token with a character no HTTP header carries, as a CRLF
    .env file or a multi-line Secret leaves it."""
    secret = draw(st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=12, max_size=40))
    odd = draw(st.sampled_from(["\n", "\r", "\r\n", "\x7f", "\x1b", "\u2028", "é"]))
    at = draw(st.integers(0, len(secret)))
    return secret[:at] + odd + secret[at:], secret


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(token=unsendable_tokens())
def test_a_token_no_header_can_carry_is_refused_and_never_printed(
    chroma_server: ChromaServer, token: tuple[str, str]
) -> None:
    value, secret = token
    err = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stderr(err):
        mp.setenv("CHROMA_TOKEN", value)
        code = cli_main(["summaries", "--chroma-url", chroma_server.url])
    assert code == 2
    line = one_error_line(err.getvalue())
    assert "token" in line
    for half in (secret[: len(secret) // 2], secret[len(secret) // 2 :]):
        assert half not in line, line


def test_sunset_without_a_cluster_says_how_to_get_one(tmp_path) -> None:  # type: ignore[no-untyped-def]
    res = subprocess.run(
        [sys.executable, "-m", "controller", "sunset", "abc"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "KUBECONFIG": str(tmp_path / "none")},
    )
    assert res.returncode == 2
    assert "make cluster-up" in res.stderr and "Traceback" not in res.stderr


def test_handover_without_a_cluster_says_how_to_get_one(
    chroma_server: ChromaServer, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    res = subprocess.run(
        [sys.executable, "-m", "controller", "handover", "--chroma-url", chroma_server.url],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "KUBECONFIG": str(tmp_path / "none")},
    )
    assert res.returncode == 2, res.stderr
    assert "KUBECONFIG" in one_error_line(res.stderr)


def test_sunset_with_summarizer_on_an_existing_object_applies_it(harness: Harness) -> None:
    sid = f"cli-retarget-{uuid.uuid4().hex[:8]}"
    other_sessions = f"cli-other-{uuid.uuid4().hex[:8]}"
    load(
        harness.store(), [interaction(sid, i, 1_750_000_000_000 + i, f"step {i}") for i in range(3)]
    )
    harness.kubectl(
        "apply",
        "-f",
        "-",
        input=summarizer_yaml("cli-other", harness.chroma.url, summary=other_sessions),
    )
    try:
        first = summaryctl("sunset", sid, "-n", NS, "--wait", "60")
        assert first.returncode == 0, first.stdout + first.stderr
        assert "created" in first.stdout and "summarizerRef default" in first.stdout

        moved = summaryctl("sunset", sid, "-n", NS, "--summarizer", "cli-other", "--wait", "60")
        assert moved.returncode == 0, moved.stdout + moved.stderr
        assert "patched" in moved.stdout and "summarizerRef set to cli-other" in moved.stdout
        assert harness.obj(sid)["spec"]["summarizerRef"] == "cli-other"
        # The pass ran with cli-other's store settings: its summary collection has the row.
        got = harness.store(summary=other_sessions).summaries().get(ids=[f"summary_{sid}"])
        assert got["ids"] == [f"summary_{sid}"]

        again = summaryctl("sunset", sid, "-n", NS)
        assert again.returncode == 0, again.stderr
        assert "summarizerRef unchanged" in again.stdout
        assert harness.obj(sid)["spec"]["summarizerRef"] == "cli-other"

        generation = harness.obj(sid)["metadata"]["generation"]
        typo = summaryctl("sunset", sid, "-n", NS, "--summarizer", "cli-othr")
        assert typo.returncode == 2
        line = one_error_line(typo.stderr)
        assert f"no SessionSummarizer 'cli-othr' in namespace '{NS}'" in line, line
        assert "SessionSummarizers: " in line and "--summarizer" in line
        assert harness.obj(sid)["metadata"]["generation"] == generation  # nothing changed
    finally:
        harness.kubectl("delete", "ssum", summary_object_name(sid), "--ignore-not-found")
        harness.kubectl("delete", "ssumr", "cli-other", "--ignore-not-found", "--timeout=60s")


def _demo(harness: Harness, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "devenv.demo", "--use-current-context", *args],
        env=dict(harness.cp.env(), SSO_TOOLS_BIN=str(harness.cp.bin_dir), **env),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _namespace(harness: Harness) -> dict[str, object] | None:
    out = harness.cp.kubectl_run(
        "get", "namespace", DEMO_NAMESPACE, "--ignore-not-found", "-o", "json"
    ).stdout
    return json.loads(out) if out.strip() else None


def test_demo_with_an_unreachable_store_fails_in_one_line_and_leaves_nothing(
    harness: Harness,
) -> None:
    assert _namespace(harness) is None  # the state a user starts from
    res = _demo(harness, "--chroma-url", f"http://127.0.0.1:{free_port()}")
    assert res.returncode == 2, res.stdout + res.stderr
    line = one_error_line(res.stderr)
    assert "demo failed" in line and "cannot connect to Chroma" in line
    assert _namespace(harness) is None


def test_a_demo_that_fails_midway_removes_what_it_created(harness: Harness) -> None:
    """The operator it starts dies (a bad setting in the user's environment) after the
    namespace and the SessionSummarizer exist: both go, and the error says why."""
    if _namespace(harness) is not None:
        pytest.skip(f"namespace {DEMO_NAMESPACE} exists already")
    # No --chroma-url: the demo's own Chroma gets the sample sessions, not the harness's.
    res = _demo(harness, SSO_WORKERS="many")
    try:
        assert res.returncode in (1, 2), res.stdout + res.stderr
        said = res.stderr.strip()
        assert "many" in said and ("SSO_WORKERS" in said or "the operator exited" in said)
        # The settings are read when the operator's handlers load (a timer's interval is
        # one of them), so the demo may refuse before it creates anything; if the operator
        # started and died, the demo names its log and removes what it created.
        if res.returncode == 2:
            logs = re.search(r"\(logs: (/\S+)\)", one_error_line(res.stderr))
            assert logs is not None  # the user is told where the operator's log is
            shutil.rmtree(logs.group(1), ignore_errors=True)
            assert "removing what the demo created" in res.stdout
        left = harness.cp.kubectl_run(
            "-n", DEMO_NAMESPACE, "get", "ssumr,ssum", "-o", "name"
        ).stdout
        assert left.strip() == ""
        ns = _namespace(harness)
        # Deleted: gone, or (this control plane has no namespace controller) Terminating.
        assert ns is None or (ns.get("metadata") or {}).get("deletionTimestamp")  # type: ignore[union-attr]
    finally:
        _finalize_namespace(harness)


def test_the_demo_shows_every_summary_and_the_session_the_sweep_found(harness: Harness) -> None:
    if _namespace(harness) is not None:
        pytest.skip(f"namespace {DEMO_NAMESPACE} exists already")
    res = _demo(harness)
    try:
        assert res.returncode == 0, res.stdout + res.stderr
        assert res.stdout.count("== summary_") == len(SAMPLE_SESSIONS), res.stdout
        swept = SAMPLE_SESSIONS[-1].session_id  # the one the demo does not sunset
        assert f"the sweep found {swept} (nobody sunset it)" in res.stdout, res.stdout
    finally:
        _finalize_namespace(harness)


def _finalize_namespace(harness: Harness) -> None:
    """What the namespace controller of a real cluster does once the namespace is empty."""
    ns = _namespace(harness)
    if ns is None:
        return
    if not (ns.get("metadata") or {}).get("deletionTimestamp"):  # type: ignore[union-attr]
        harness.cp.kubectl_run("delete", "namespace", DEMO_NAMESPACE, "--wait=false")
        ns = _namespace(harness) or {}
    ns["spec"] = {"finalizers": []}
    harness.cp.kubectl_run(
        "replace",
        "--raw",
        f"/api/v1/namespaces/{DEMO_NAMESPACE}/finalize",
        "-f",
        "-",
        input=json.dumps(ns),
    )
    wait_for(lambda: _namespace(harness) is None, 30, 0.2, message="demo namespace gone")


def test_cluster_up_prints_a_path_with_summaryctl(tmp_path) -> None:  # type: ignore[no-untyped-def]
    state = tmp_path / "cluster"
    env = dict(os.environ)
    up = subprocess.run(
        [sys.executable, "-m", "devenv.controlplane", "up", "--dir", str(state)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    try:
        assert up.returncode == 0, up.stderr
        exports = [line for line in up.stdout.splitlines() if line.startswith("export ")]
        shell = "\n".join(exports) + "\ncommand -v summaryctl kubectl\n"
        found = subprocess.run(
            ["bash", "-c", shell], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}
        ).stdout.split()
        assert found == [
            str(os.path.join(os.path.dirname(sys.executable), "summaryctl")),
            str(state / "bin" / "kubectl"),
        ]
    finally:
        subprocess.run(
            [sys.executable, "-m", "devenv.controlplane", "down", "--dir", str(state)],
            cwd=REPO_ROOT,
            capture_output=True,
            timeout=60,
        )


def test_the_manifests_in_the_docs_are_accepted_by_the_apiserver(harness: Harness) -> None:
    """What docs/configuration.md and the README tell a user to apply, through the real
    apiserver's validation (CEL rules included), in a dry run."""
    from tests.unit.test_docs_examples import EXAMPLES

    assert len(EXAMPLES) >= 5
    for where, obj in EXAMPLES:
        doc = json.loads(json.dumps(obj))
        doc["metadata"]["namespace"] = NS
        res = harness.cp.kubectl_run(
            "apply", "--dry-run=server", "-f", "-", input=json.dumps(doc), check=False
        )
        assert res.returncode == 0, f"{where}: {res.stderr}"


# -- a request where nobody serves it: said at once, nothing left behind -------------------


def _summaries_in(harness: Harness, namespace: str) -> list[str]:
    out = harness.cp.kubectl_run("-n", namespace, "get", "ssum", "-o", "name").stdout
    return out.split()


@pytest.mark.parametrize("command", ["sunset", "rebuild", "forget"])
def test_a_request_without_n_says_where_the_summarizers_are_and_changes_nothing(
    harness: Harness, command: str
) -> None:
    """No -n: namespace default, which has no SessionSummarizer (the harness's is in ops)."""
    sid = f"no-ns-{uuid.uuid4().hex[:6]}"
    started = time.monotonic()
    res = summaryctl(command, sid, "--wait", "120")
    assert time.monotonic() - started < 60, "it waited instead of saying so"
    assert res.returncode == 2, res.stdout + res.stderr
    line = one_error_line(res.stderr)
    assert "no SessionSummarizer 'default' in namespace 'default'" in line, line
    assert_names_where_it_is(line)
    assert f"sessionsummary.memorycore.io/{summary_object_name(sid)}" not in _summaries_in(
        harness, "default"
    )


def assert_names_where_it_is(line: str) -> None:
    """The namespaces that have a SessionSummarizer 'default' (the harness's, NS, among
    them: the other tests' namespaces may have one too) and the -n to pass."""
    found = re.search(r"SessionSummarizers: (.+) \(use (.+)\)$", line)
    assert found is not None, line
    assert f"{NS}/default" in found.group(1).split(", "), line
    assert found.group(2) in (f"-n {NS}", "-n NAMESPACE --summarizer NAME"), line


def test_a_request_in_a_namespace_no_operator_serves_changes_nothing(harness: Harness) -> None:
    """A SessionSummarizer the operator never reported on (its namespace is not served):
    every command that asks for a pass refuses, --all-with-secrets with a secret to ask for."""
    ns = f"unserved-{uuid.uuid4().hex[:6]}"
    harness.cp.kubectl_run("create", "namespace", ns)
    manifest = summarizer_yaml(
        "default", harness.chroma.url, memory=f"{ns}-memory", summary=f"{ns}-sessions"
    ).replace(f"namespace: {NS}", f"namespace: {ns}")
    harness.cp.kubectl_run("apply", "-f", "-", input=manifest)
    harness.store(f"{ns}-memory", f"{ns}-sessions").client.create_collection(f"{ns}-sessions").add(
        ids=[summary_row_id("leaky")],
        documents=["Deployed with AKIAABCDEFGHIJKLMNOP as the access key."],
        metadatas=[{"sessionId": "leaky", "timestamp": 1_770_000_000_000}],
        embeddings=[[0.1] * 384],
    )
    asking = [[command, "anything", "--wait", "30"] for command in ("sunset", "forget", "rebuild")]
    for argv in [*asking, ["rebuild", "--all-with-secrets", "--summarizer", "default"]]:
        res = summaryctl(*argv, "-n", ns)
        assert res.returncode == 2, res.stdout + res.stderr
        line = one_error_line(res.stderr)
        assert f"no operator serves namespace '{ns}'" in line and "nothing was changed" in line
    assert _summaries_in(harness, ns) == []


def test_a_sunset_nobody_takes_up_removes_the_object_it_created(harness: Harness) -> None:
    """The summarizer says an operator serves it (its last report), but none runs now: at
    the end of --wait, the object this sunset created, never touched, is removed."""
    ns = f"stopped-{uuid.uuid4().hex[:6]}"
    harness.cp.kubectl_run("create", "namespace", ns)
    manifest = summarizer_yaml("default", harness.chroma.url).replace(
        f"namespace: {NS}", f"namespace: {ns}"
    )
    harness.cp.kubectl_run("apply", "-f", "-", input=manifest)
    reported = {"status": {"activeReplica": "gone", "conditions": [{
        "type": "ReplicaActive", "status": "True", "reason": "Standalone", "message": "gone",
    }]}}  # fmt: skip
    harness.cp.kubectl_run(
        "-n", ns, "patch", "ssumr", "default", "--subresource=status", "--type=merge",
        "-p", json.dumps(reported),
    )  # fmt: skip
    res = summaryctl("sunset", "nobody-home", "-n", ns, "--wait", "3")
    assert res.returncode == 2, res.stdout + res.stderr
    line = one_error_line(res.stderr)
    assert "no pass has started" in line and "removed the SessionSummary" in line, line
    assert _summaries_in(harness, ns) == []


@pytest.mark.parametrize(
    "args",
    [
        ["check"],
        ["verify", "some-session", "--summarizer", "default"],
        ["summaries", "--summarizer", "default"],
        ["remember", "s", "--sunset-marker", "--summarizer", "default"],
    ],
)
def test_every_summarizer_not_found_names_the_namespace_and_the_n_to_use(
    harness: Harness, args: list[str]
) -> None:
    res = summaryctl(*args)
    assert res.returncode == 2, res.stdout + res.stderr
    line = one_error_line(res.stderr)
    assert "no SessionSummarizer 'default' in namespace 'default'" in line, line
    assert_names_where_it_is(line)
    assert "sessionsummarizers.memorycore.io" not in line, line


@pytest.fixture
def model_server() -> Iterator[tuple[str, list[str]]]:
    """A local HTTP server standing for a model or embedding endpoint: it records each path
    it is asked and answers 500 (what it answers does not matter: being asked does)."""
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            asked.append(self.path)
            self.send_response(500)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", asked
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("field", ["model", "embedding"])
@pytest.mark.parametrize("allowed", [False, True])
def test_summarize_sends_memories_only_where_the_operator_would(
    chroma_server: ChromaServer,
    model_server: tuple[str, list[str]],
    tmp_path: pytest.TempPathFactory,
    field: str,
    allowed: bool,
) -> None:
    """The check the operator makes before each pass (the store credential's
    allowed-model-urls, else the install's SSO_ALLOWED_MODEL_URLS, where empty allows
    nothing): a model or embedding endpoint it refuses is refused, one line and exit 2, and
    never asked; summarize used to send it the store's memories (and remember, the memory it
    writes to an embedding endpoint)."""
    endpoint, asked = model_server
    spec = (
        f"{{model: {{backend: openai, model: m, baseUrl: '{endpoint}'}}}}"
        if field == "model"
        else f"{{embedding: {{provider: openai, model: e, baseUrl: '{endpoint}'}}}}"
    )
    manifest = tmp_path / "s.yaml"  # type: ignore[operator]
    manifest.write_text(f"kind: SessionSummarizer\nmetadata: {{name: x}}\nspec: {spec}\n")
    memory, sessions = f"cli-memory-{field}-{allowed:d}", f"cli-sessions-{field}-{allowed:d}"
    loc = StoreLocation(
        url=chroma_server.url, memory_collection=memory, summary_collection=sessions
    )
    session = SAMPLE_SESSIONS[0]
    load(MemoryStore(connect(loc), loc), memory_rows(session, 1_700_000_000_000))
    env = {**os.environ, "SSO_ALLOWED_MODEL_URLS": endpoint if allowed else "http://other:1/v1"}
    cols = ["--memory-collection", memory, "--summary-collection", sessions]
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "controller",
            "summarize",
            session.session_id,
            "--bypass-claim",
            "--summarizer-file",
            str(manifest),
            "--chroma-url",
            chroma_server.url,
            *cols,
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    if allowed:
        assert asked, res.stdout + res.stderr
    else:
        assert (res.returncode, res.stdout, asked) == (2, "", []), res.stderr
        line = one_error_line(res.stderr)
        assert f"{field}.baseUrl {endpoint} may not receive the memories" in line, line
    if field == "embedding":  # remember embeds the memory it writes there, too
        asked.clear()
        fresh = ["--memory-collection", f"{memory}-r", "--summary-collection", f"{sessions}-r"]
        res = subprocess.run(
            [
                sys.executable,
                "-m",
                "controller",
                "remember",
                session.session_id,
                "--sunset-marker",
                "--summarizer-file",
                str(manifest),
                "--chroma-url",
                chroma_server.url,
                *fresh,
            ],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        assert bool(asked) == allowed, res.stdout + res.stderr
        if not allowed:
            assert res.returncode == 2 and "may not receive" in one_error_line(res.stderr)


@pytest.mark.parametrize(
    ("held", "new"),
    [("Decided to write the parser in C.", "Decided to write the parser in C++."),
     ("Retry only when status == 200.", "Retry only when status != 200."),
     ("Retry only after 5 hours.", "Retry only after -5 hours."),
     ("Decided to pay $400.", "Decided to pay €400.")],
)  # fmt: skip
def test_a_fact_differing_from_a_summarized_one_only_in_a_symbol_is_kept(
    chroma_server: ChromaServer, held: str, new: str
) -> None:
    """Remembered, summarized, remembered again: a decision that differs from the one the
    summary holds only in a symbol (C / C++, == / !=) is a second fact, not a repeat."""
    sid = f"symbol-{uuid.uuid4().hex[:8]}"
    where = ["--chroma-url", chroma_server.url, "--memory-collection", "sym-memory",
             "--summary-collection", "sym-sessions"]  # fmt: skip
    for text in (held, new):
        said = summaryctl("remember", sid, "--prompt", "Go on.", "--response", text, *where)
        assert said.returncode == 0, said.stderr
        done = summaryctl("summarize", sid, "--bypass-claim", *where)
        assert done.returncode == 0, done.stderr
    full = summaryctl("summaries", "--full", "--limit", "50", *where).stdout
    kept = full[full.index(f"== {summary_row_id(sid)} ") :].split("\n== ")[0]
    assert f"- {held}\n" in kept and f"- {new}\n" in kept.partition("## Current State")[0], kept
