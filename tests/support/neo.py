"""neo's memory-core, the client agents run, called from tests through tests/neo/driver.mjs.

The package is installed from the npm registry by hack/install-neo.sh (cached by the
lockfile's hash; SSO_NEO_CLIENT_DIR names an installed neo.mjs instead). Each call starts one
node process that runs a list of operations in order with neo's own services: memories go in
through MemoryService.addMemory and the embed daemon's drainWalOnce, summaries are read with
SummaryService.listSummaries (get_all_summaries) and querySummaries, and neo's own summary
writer is SessionService.summarizeSession. Settings reach neo as its NEO_* environment.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from devenv.controlplane import REPO_ROOT, installed_bin_dir

DRIVER = REPO_ROOT / "tests" / "neo" / "driver.mjs"
NEO_DIMENSION = 4096  # neo's NEO_VECTOR_DIMENSION default (openAiCompatible provider)
NEO_EMBEDDING_MODEL = "text-embedding-qwen3-embedding-8b"  # neo's default embedding model


def neo_client_dir() -> Path:
    """The installed neo.mjs package (hack/install-neo.sh, or SSO_NEO_CLIENT_DIR)."""
    return installed_bin_dir("install-neo.sh", "SSO_NEO_CLIENT_DIR")


class NeoError(AssertionError):
    """An operation of neo's code failed; the message carries its stack."""


@dataclass
class NeoClient:
    """One neo deployment: its Chroma, its embeddings/chat endpoint, its data directories."""

    package: Path
    chroma_url: str
    model_host: str  # the OpenAI-compatible server, without /v1 (neo appends /v1/...)
    workdir: Path
    dimension: int = NEO_DIMENSION
    memory_collection: str = "neo-agent-memory"
    summary_collection: str = "neo-agent-sessions"
    policy: str = "team"
    extra_env: dict[str, str] = field(default_factory=dict)

    def env(self, **overrides: str) -> dict[str, str]:
        where = urlsplit(self.chroma_url)
        self.workdir.mkdir(parents=True, exist_ok=True)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.workdir / "home"),
            "NEO_CLIENT_DIR": str(self.package),
            "NEO_CHROMA_HOST": where.hostname or "127.0.0.1",
            "NEO_CHROMA_PORT": str(where.port or 8000),
            "NEO_EMBEDDING_PROVIDER": "openAiCompatible",
            "NEO_MODEL_PROVIDER": "openAiCompatible",
            "NEO_OPENAI_COMPATIBLE_HOST": self.model_host,
            "NEO_VECTOR_DIMENSION": str(self.dimension),
            "NEO_MEMORY_COLLECTION_NAME": self.memory_collection,
            "NEO_SESSION_COLLECTION_NAME": self.summary_collection,
            "NEO_MEMORY_SHARING_DEFAULT_POLICY": self.policy,
            "NEO_PLANE_DATA_ROOT": str(self.workdir / "plane"),
            "NEO_AI_DAEMON_DIR": str(self.workdir / "daemon"),
            "NEO_MEMORY_WAL_DIR": str(self.workdir / "wal"),
            "NEO_MEMORY_DB_PATH": str(self.workdir / "graph.sqlite"),
            "NEO_MEMORY_EMBED_DAEMON_DIR": str(self.workdir / "embed-daemon"),
        }
        return {**env, **self.extra_env, **overrides}

    def run(self, *operations: dict[str, Any], timeout: float = 180, **env: str) -> list[Any]:
        """Runs the operations in one node process; their values, in order."""
        proc = subprocess.run(
            ["node", str(DRIVER)],
            input=json.dumps(list(operations)),
            env=self.env(**env),
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.workdir,
        )
        try:
            results = json.loads(proc.stdout or "[]")
        except ValueError:
            output = f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
            raise NeoError(f"neo driver exited {proc.returncode}:\n{output}") from None
        failed = [r for r in results if not r.get("ok")]
        if failed or proc.returncode != 0 or len(results) != len(operations):
            detail = failed[0]["error"] if failed else proc.stderr[-4000:]
            raise NeoError(f"neo driver failed: {detail}")
        return [r["value"] for r in results]

    def one(self, operation: dict[str, Any], **env: str) -> Any:
        return self.run(operation, timeout=180, **env)[0]

    # -- what an agent does -----------------------------------------------------------------

    def add_memories(self, memories: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """MemoryService.addMemory per memory, then the embed daemon's drain: the rows are in
        Chroma, embedded by neo's own embedding function, when this returns."""
        added, drained = self.run({"op": "add", "memories": memories}, {"op": "drain"})
        errors = [a for a in added if a.get("error")]
        if errors:
            raise NeoError(f"addMemory refused: {errors[0]}")
        if drained["failed"]:
            raise NeoError(f"the embed drain failed for {drained['failed']} record(s)")
        return list(added)

    def list_summaries(self, **options: Any) -> dict[str, Any]:
        """SummaryService.listSummaries: get_all_summaries, what an agent reads at boot."""
        result = self.one({"op": "list", **options})
        if result.get("error"):
            raise NeoError(f"listSummaries failed: {result}")
        return dict(result)

    def query_summaries(self, **options: Any) -> dict[str, Any]:
        result = self.one({"op": "query", **options})
        if result.get("error"):
            raise NeoError(f"querySummaries failed: {result}")
        return dict(result)

    def summarize(self, session_id: str, user_id: str | None = None) -> Any:
        """neo's own summary writer, SessionService.summarizeSession (its chat model is the
        OpenAI-compatible server at model_host)."""
        return self.one({"op": "summarize", "sessionId": session_id, "userId": user_id})
