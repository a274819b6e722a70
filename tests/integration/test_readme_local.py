"""What a new user runs, run as written: the README's local section ("Run the operator on
your machine") and docs/agents.md's ways to write a memory, taken from the documents
themselves, so the test breaks when they change. A real control plane, a real Chroma, the
operator as a local process, offline: from an empty Chroma to a summary of the memories
written as documented."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import uuid
from pathlib import Path

from controller.core.memories import SUNSET_MARKER_TYPE
from controller.store.memory_store import collection_config
from devenv.controlplane import REPO_ROOT, free_port
from devenv.processes import stop
from tests.integration.harness import Harness

README = REPO_ROOT / "README.md"
AGENTS = REPO_ROOT / "docs" / "agents.md"


def section(text: str, heading: str) -> str:
    """A markdown section, from its heading to the next one of its level."""
    start = text.index(f"\n{heading}\n")
    level = heading.split(" ")[0]
    end = text.find(f"\n{level} ", start + len(heading) + 2)
    return text[start : end if end >= 0 else None]


def blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", text, re.S | re.M)


def make_recipe(target: str) -> str:
    """The command `make <target>` runs (its one recipe line), with the Makefile's VENV."""
    makefile = (REPO_ROOT / "Makefile").read_text()
    recipe = re.search(rf"^{target}:.*\n\t(.+)$", makefile, re.M)
    assert recipe is not None, f"no recipe for {target} in the Makefile"
    return recipe.group(1).replace("$(VENV)", ".venv")


def localized(script: str, replacements: dict[str, str]) -> str:
    """The script with what would collide with the user's own machine (the control plane's
    directory, Chroma's port and data) made this test's; each must be in the script."""
    for old, new in replacements.items():
        assert old in script, f"the README's local section no longer has {old!r}"
        script = script.replace(old, new)
    return script


def test_the_readme_local_section_runs_as_written_from_an_empty_chroma_to_a_summary(
    tmp_path: Path,
) -> None:
    (script,) = blocks(section(README.read_text(), "## Run the operator on your machine"), "bash")
    state, port = tmp_path / "cluster", free_port()
    runnable = localized(
        script,
        {
            "make cluster-up": f"{make_recipe('cluster-up')} --dir {state}",
            "make cluster-down": f"{make_recipe('cluster-down')} --dir {state}",
            "$PWD/.cluster": str(state),
            "--port 8000": f"--port {port}",
            "127.0.0.1:8000": f"127.0.0.1:{port}",
            "/tmp/chroma-data": str(tmp_path / "chroma-data"),
        },
    )
    # The shell a user types into: no kube context or venv of ours on its PATH; what is
    # started in the background is stopped when the script ends (the README's `kill %1 %2`).
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "VIRTUAL_ENV")}
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
    prologue = "set -euxo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null; wait' EXIT\n"
    log = tmp_path / "readme.log"
    with log.open("w") as out:
        shell = subprocess.Popen(
            ["bash", "-c", prologue + runnable],
            cwd=REPO_ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            code = shell.wait(timeout=600)
        finally:
            stop(shell)  # its process group: chroma and the operator, if still there
            subprocess.run(
                [sys.executable, "-m", "devenv.controlplane", "down", "--dir", str(state)],
                cwd=REPO_ROOT,
                capture_output=True,
                timeout=120,
            )
    output = log.read_text(errors="replace")
    assert code == 0, output[-6000:]
    remember = next(line for line in script.splitlines() if "summaryctl remember" in line)
    session = remember.split()[2]
    prompt = re.search(r'--prompt "([^"]+)"', script)
    assert prompt is not None
    assert re.search(r"Ready=True Healthy: .* \(measured \d{4}-\d\d-\d\dT", output), output
    assert re.search(r"^Summarized: summarized 1 new of 1 memories", output, re.M), output
    assert f"== summary_{session}" in output and prompt.group(1) in output, output


def agents_md_snippets(url: str, memory: str) -> tuple[list[str], str]:
    """docs/agents.md's `summaryctl remember` commands and its chromadb snippet, aimed at
    this test's Chroma and memory collection."""
    text = AGENTS.read_text()
    (python,) = blocks(text, "python")
    host, port = url.removeprefix("http://").split(":")
    python = localized(
        python,
        {
            'host="127.0.0.1", port=8000': f'host="{host}", port={port}',
            '"neo-agent-memory"': repr(memory),
        },
    )
    commands = [
        shlex.split(line)[1:]
        for block in blocks(text, "bash")
        for line in block.splitlines()
        if line.startswith("summaryctl remember")
    ]
    assert commands, "docs/agents.md shows no summaryctl remember"
    for argv in commands:
        argv[argv.index("--chroma-url") + 1] = url
        argv += ["--memory-collection", memory]
    return commands, python


def test_the_ways_docs_agents_md_writes_memories_work_offline_in_an_empty_chroma(
    harness: Harness,
) -> None:
    """Each documented way, each into a memory collection that does not exist yet: the
    chromadb snippet (a whole agent-interaction memory and a sunset marker) and `summaryctl
    remember --sunset-marker`. The operator's own reads find both kinds."""
    for way in ("snippet", "summaryctl"):
        memory = f"agents-md-{way}-{uuid.uuid4().hex[:6]}"
        commands, python = agents_md_snippets(harness.chroma.url, memory)
        if way == "snippet":
            res = subprocess.run(
                [sys.executable, "-c", python], cwd=REPO_ROOT, capture_output=True, text=True,
                timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"},
            )  # fmt: skip
            assert res.returncode == 0, res.stderr
            session = re.search(r'session_id = "([^"]+)"', python)
            assert session is not None
            sid = session.group(1)
        else:
            for argv in commands:
                res = harness.summaryctl(*argv)
                assert res.returncode == 0, res.stdout + res.stderr
            sid = commands[0][1]
        store = harness.store(memory, f"{memory}-sessions")
        markers = [m for m in store.scan_markers(SUNSET_MARKER_TYPE, 0) if m[1] == sid]
        assert len(markers) == 1, markers  # what the sweep's marker scan acts on
        recorded = collection_config(store.memories()).get("embedding_function") or {}
        assert recorded.get("name") == "default", recorded  # all-MiniLM-L6-v2, as ours
        if way == "snippet":  # the turn is read and summarized as the operator does
            done = harness.summaryctl(
                "summarize", sid, "--bypass-claim", "--chroma-url", harness.chroma.url,
                "--memory-collection", memory, "--summary-collection", f"{memory}-sessions",
            )  # fmt: skip
            assert done.returncode == 0, done.stdout + done.stderr
            assert f"{sid}: summarized (1 new memories" in done.stdout
            summary = store.read_summary(sid)
            assert summary is not None and "Add a /healthz endpoint" in str(summary)
