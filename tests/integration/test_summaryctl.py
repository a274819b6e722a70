"""summaryctl against a real Chroma server: the recovery path and what agents read at boot."""

from __future__ import annotations

import json
import subprocess
import sys

from controller.demo_data import SAMPLE_SESSIONS, memory_rows
from controller.localenv.chroma import ChromaServer
from controller.localenv.controlplane import REPO_ROOT, free_port
from controller.store import MemoryStore, StoreLocation, connect
from tests.integration.harness import load


def summaryctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "controller", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_local_summarize_then_summaries_newest_first(chroma_server: ChromaServer) -> None:
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
        "missing-session",
        "--local",
        "--chroma-url",
        url,
        *cols,
    )
    assert res.returncode == 0, res.stderr
    assert f"[1/3] {older.session_id}: summarized" in res.stdout
    assert "[3/3] missing-session: not-found" in res.stdout
    again = summaryctl("summarize", older.session_id, "--local", "--chroma-url", url, *cols)
    assert "up-to-date" in again.stdout

    listed = summaryctl("summaries", "--limit", "2", "--json", "--chroma-url", url, *cols)
    rows = json.loads(listed.stdout)
    assert [r["metadata"]["sessionId"] for r in rows] == [newer.session_id, older.session_id]
    assert rows[0]["metadata"]["writer"].startswith("summaryctl@")
    text = summaryctl("summaries", "--limit", "1", "--chroma-url", url, *cols).stdout
    assert text.startswith(f"== summary_{newer.session_id}") and "## User Requests" in text


def test_summarize_without_local_flag_explains_the_single_writer_rule() -> None:
    res = summaryctl("summarize", "abc", "--chroma-url", "http://127.0.0.1:9")
    assert res.returncode == 2
    assert "--local" in res.stderr and "summaryctl sunset" in res.stderr
    assert "Traceback" not in res.stderr


def test_unreachable_chroma_is_a_one_line_error() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    res = summaryctl("summaries", "--chroma-url", url)
    assert res.returncode == 2
    assert (
        "cannot connect to Chroma" in res.stderr and "is the Chroma server running?" in res.stderr
    )
    assert "Traceback" not in res.stderr


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
