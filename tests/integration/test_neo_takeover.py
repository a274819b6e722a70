"""docs/migrating-from-neo.md, "Taking over, step by step", run as written: the page's
command block and its SessionSummarizer manifest are read from the page (only neo's
addresses and the session id are put in), and each command is run in order, with neo's own
code (tests/support/neo.py) around them: neo's agents write the memories and neo's own
summary writer (SessionService.summarizeSession) its summaries first; neo's readers
(listSummaries, querySummaries) read the result last. A step the page adds, drops or
changes changes what runs here; one this test cannot run fails it."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from controller.core.naming import summary_row_id
from devenv.chroma import ChromaServer, running_chroma
from devenv.controlplane import REPO_ROOT
from devenv.operator import start_operator
from devenv.processes import stop, tail
from tests.integration.harness import Harness, summaryctl_on
from tests.integration.test_neo_client import neo_summary_reply, turn
from tests.support.neo import NEO_DIMENSION, NEO_EMBEDDING_MODEL, NeoClient, neo_client_dir
from tests.support.openai_server import OpenAIServer, running_openai_server

PAGE = REPO_ROOT / "docs" / "migrating-from-neo.md"
# The page's names for neo's deployment, replaced by this test's real ones.
DOC_CHROMA = "http://chroma.memory.svc:8000"
DOC_EMBEDDING = "http://lmstudio.models.svc:1234/v1"
DOC_SESSION = "SESSION_ID"
NEO_TEXT = "NEO-SUMMARY: the billing export retries three times, then pages on-call."


def page_steps() -> tuple[list[str], str]:
    """(the commands of the step-by-step block, the manifest it applies as summarizer.yaml)."""
    text = PAGE.read_text()
    section = text.split("## Taking over, step by step", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "the step-by-step section has no bash block"
    commands = [
        line.strip()
        for line in block.group(1).splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    manifests = re.findall(r"```yaml\n(# summarizer\.yaml\n.*?)```", text, re.S)
    assert len(manifests) == 1, "one manifest is summarizer.yaml"
    return commands, manifests[0]


def test_the_page_names_neos_deployment_as_this_test_replaces_it() -> None:
    commands, manifest = page_steps()
    joined = "\n".join(commands)
    assert DOC_EMBEDDING in joined and DOC_SESSION in joined
    assert DOC_CHROMA in manifest and DOC_EMBEDDING in manifest
    assert NEO_EMBEDDING_MODEL in manifest


@pytest.fixture
def neo_chroma(tmp_path: Path) -> Iterator[ChromaServer]:
    """neo's own Chroma: its default collections, nobody else's rows."""
    with running_chroma(tmp_path / "chroma") as server:
        yield server


@pytest.fixture
def neo_endpoint() -> Iterator[OpenAIServer]:
    """neo's embedding endpoint and its summary writer's chat model."""
    with running_openai_server(
        embedding_dimension=NEO_DIMENSION, embedding_model=NEO_EMBEDDING_MODEL
    ) as server:
        yield server


def test_following_the_page_takes_neos_store_over_and_neos_readers_read_the_result(
    harness: Harness, neo_chroma: ChromaServer, neo_endpoint: OpenAIServer, tmp_path: Path
) -> None:
    cp = harness.cp
    neo = NeoClient(
        neo_client_dir(),
        neo_chroma.url,
        neo_endpoint.base_url.removesuffix("/v1"),
        tmp_path / "neo",
    )
    sid, untouched = f"neo-takeover-{uuid.uuid4().hex[:6]}", f"neo-only-{uuid.uuid4().hex[:6]}"

    # Before the operator: neo's agents write, neo's own summary task summarizes.
    neo.add_memories([turn(untouched, "Rename the ledger export job.")])
    neo.add_memories(
        [
            turn(sid, "Make the billing export retry three times."),
            turn(sid, "Page on-call after the third failure."),
        ]
    )
    for session in (untouched, sid):
        neo_endpoint.script_chat(neo_summary_reply(f"{NEO_TEXT} ({session})"))
        assert neo.summarize(session)["summaryId"] == summary_row_id(session)
    neo.add_memories([turn(sid, "Record that the export now streams in pages of 500.")])

    commands, manifest = page_steps()
    place = {DOC_CHROMA: neo_chroma.url, DOC_EMBEDDING: neo_endpoint.base_url, DOC_SESSION: sid}

    def placed(text: str) -> str:
        for name, real in place.items():
            text = text.replace(name, real)
        return text

    (tmp_path / "summarizer.yaml").write_text(placed(manifest))
    namespace = yaml.safe_load(manifest)["metadata"]["namespace"]
    operators: list[subprocess.Popen[bytes]] = []
    log = tmp_path / "operator.log"

    def run(line: str) -> subprocess.CompletedProcess[str] | None:
        words = shlex.split(placed(line).removesuffix("&"))
        env = dict(cp.env(), SSO_REPLICA_ID="neo-takeover", SSO_METRICS_PORT="0")
        while "=" in words[0] and words[0].split("=", 1)[0].isupper():
            key, value = words.pop(0).split("=", 1)
            env[key] = value
        if words[:4] == ["python", "-m", "controller", "run"]:
            env.setdefault("SSO_ALLOWED_MODEL_URLS", "")  # only what the page sets
            operators.append(start_operator(log, env, *words[4:]))
            return None
        if words[0] == "summaryctl":
            argv = [sys.executable, "-m", "controller", *words[1:]]
        elif words[0] == "kubectl":
            argv = [str(cp.kubectl), *(str(tmp_path / w) if w.endswith(".yaml") else w
                                      for w in words[1:])]  # fmt: skip
        else:
            raise AssertionError(f"a step this test cannot run: {line}")
        res = subprocess.run(argv, env=env, cwd=REPO_ROOT, capture_output=True, text=True,
                             timeout=180)  # fmt: skip
        assert res.returncode == 0, f"{line}\n{res.stdout}{res.stderr}\n{tail(log, 40)}"
        return res

    try:
        start = next(i for i, c in enumerate(commands) if "controller run" in c)
        for line in commands[:start]:
            run(line)
        # The README's operator, without the page's step 2: refused, and told what to set.
        bare = re.sub(r"^(\w+=\S+\s+)+", "", commands[start])
        run(bare)
        refused = summaryctl_on(cp, "sunset", sid, "-n", namespace, "--wait", "60")
        assert refused.returncode == 1, refused.stdout + refused.stderr
        said = refused.stdout + refused.stderr
        assert "MemoryDestinationNotAllowed" in said and "SSO_ALLOWED_MODEL_URLS" in said, said
        assert "chart value" not in said, said
        stop(operators.pop(), grace=30)
        for line in commands[start:]:
            run(line)
    finally:
        for proc in operators:
            stop(proc, grace=30)
        cp.kubectl_run("delete", "namespace", namespace, "--wait=false", check=False)
        print("operator log tail:\n" + tail(log, 60))

    # neo's readers: the taken-over session with neo's own summary whole in it and the
    # memory neo never summarized; the other session still neo's own.
    boot = {s["sessionId"]: s for s in neo.list_summaries(limit=5)["summaries"]}
    assert set(boot) == {sid, untouched}
    ours = boot[sid]["summary"]
    assert f"{NEO_TEXT} ({sid})" in ours
    assert "streams in pages of 500" in ours and "retry three times" in ours
    assert boot[sid]["memoryCount"] == 3
    assert boot[untouched]["summary"] == f"{NEO_TEXT} ({untouched})"
    found = neo.query_summaries(query="billing export retries pages on-call", nResults=2)
    assert "degraded" not in found and sid in [r["sessionId"] for r in found["results"]]
