"""Release 0.1.0 (commit b04b779) as its own code: its `controller` package, taken from git,
loads and summarizes a session in a child process, so a row and ledger entry are exactly what that
release writes (its ledger: a head and segment records). For the upgrade tests."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from devenv.controlplane import REPO_ROOT

RELEASE_0_1_0 = "b04b779"

_CHILD = """
import json, sys
from controller.embeddings.minilm import LocalMiniLMEmbedding
from controller.pipeline import summarize_session
from controller.store.connection import StoreLocation, connect
from controller.store.memory_store import MemoryStore

model = LocalMiniLMEmbedding()
for line in sys.stdin:
    job = json.loads(line)
    location = StoreLocation(
        url=job["url"], memory_collection=job["memory"], summary_collection=job["summary"]
    )
    store = MemoryStore(connect(location), location)
    kinds = []
    for ids, documents, metadatas in job["steps"]:
        store.add_memories(ids, documents, metadatas, create=True)
        outcome = summarize_session(
            store, job["session"], embed=lambda texts: list(model(texts)),
            writer="release-0.1.0", trigger="test", chunk_size=job["chunk_size"],
            checkpoint_passes=1,
        )
        kinds.append(outcome.kind)
    print("done " + json.dumps(kinds), flush=True)
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


@dataclass
class Release010:
    """A child process running release 0.1.0's code, one job at a time on its stdin."""

    child: subprocess.Popen[str]
    errors: IO[bytes]

    def summarize(
        self,
        url: str,
        memory: str,
        summary: str,
        session: str,
        steps: list[list[tuple[str, str, dict[str, Any]]]],
        chunk_size: int = 2,
    ) -> list[str]:
        """Release 0.1.0's code adds each step's memories (id, document, metadata) and
        summarizes the session after each; the outcomes' kinds."""
        columns = [[list(column) for column in zip(*step, strict=True)] for step in steps]
        job: dict[str, Any] = {"url": url, "memory": memory, "summary": summary}
        job |= {"session": session, "steps": columns, "chunk_size": chunk_size}
        assert self.child.stdin is not None and self.child.stdout is not None
        self.child.stdin.write(json.dumps(job) + "\n")
        self.child.stdin.flush()
        while answer := self.child.stdout.readline():  # past anything else it prints
            if answer.startswith("done "):
                return list(json.loads(answer.removeprefix("done ")))
        self.child.wait(60)  # the child died: its traceback
        self.errors.seek(0)
        raise AssertionError(self.errors.read().decode(errors="replace")[-3000:])


@contextlib.contextmanager
def release_0_1_0(tree: Path) -> Iterator[Release010]:
    """Release 0.1.0's code in a child process of its own while the block runs, started
    once: its imports and its MiniLM load take seconds."""
    with tempfile.TemporaryFile() as errors:  # not a pipe nobody reads: no deadlock
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD],
            cwd=tree,
            env={**os.environ, "PYTHONPATH": str(tree)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )
        try:
            yield Release010(child, errors)
        finally:
            if child.stdin is not None:
                child.stdin.close()
            try:
                child.wait(60)
            finally:
                if child.poll() is None:
                    child.kill()
