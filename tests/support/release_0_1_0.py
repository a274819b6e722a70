"""Release 0.1.0 (commit b04b779) as its own code: its `controller` package, taken from git,
loads and summarizes a session in a child process, so a row and ledger entry are exactly what that
release writes (its ledger: a head and segment records). For the upgrade tests."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

from devenv.controlplane import REPO_ROOT

RELEASE_0_1_0 = "b04b779"

_CHILD = """
import json, sys
from controller.embeddings.minilm import LocalMiniLMEmbedding
from controller.pipeline import summarize_session
from controller.store.connection import StoreLocation, connect
from controller.store.memory_store import MemoryStore

job = json.loads(sys.argv[1])
location = StoreLocation(
    url=job["url"], memory_collection=job["memory"], summary_collection=job["summary"]
)
store = MemoryStore(connect(location), location)
model = LocalMiniLMEmbedding()
for ids, documents, metadatas in job["steps"]:
    store.add_memories(ids, documents, metadatas, create=True)
    outcome = summarize_session(
        store, job["session"], embed=lambda texts: list(model(texts)), writer="release-0.1.0",
        trigger="test", chunk_size=job["chunk_size"], checkpoint_passes=1,
    )
    print(outcome.kind)
"""


def release_tree(dest: Path) -> Path:
    """Release 0.1.0's `controller` package under dest (from this repository's history)."""
    if not (dest / "controller").is_dir():
        archive = subprocess.run(
            ["git", "archive", "--format=tar", RELEASE_0_1_0, "controller"],
            cwd=REPO_ROOT,
            capture_output=True,
            check=True,
        ).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(dest, filter="data")
    return dest


def summarize_as_release_0_1_0(
    tree: Path,
    url: str,
    memory: str,
    summary: str,
    session: str,
    steps: list[list[tuple[str, str, dict[str, Any]]]],
    chunk_size: int = 2,
) -> list[str]:
    """Release 0.1.0's code, in one child process, adds each step's memories (id,
    document, metadata) and summarizes the session after each; the outcomes' kinds."""
    columns = [[list(column) for column in zip(*step, strict=True)] for step in steps]
    job: dict[str, Any] = {"url": url, "memory": memory, "summary": summary, "session": session}
    job |= {"steps": columns, "chunk_size": chunk_size}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(job)],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-len(steps) :]
