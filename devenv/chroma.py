"""A real Chroma server (`chroma run`) on loopback for tests and the demo."""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from subprocess import Popen

from devenv.controlplane import free_port
from devenv.processes import spawn, stop, tail, wait_for


@dataclass
class ChromaServer:
    port: int
    path: Path
    log: Path
    proc: Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def heartbeat(self) -> bool:
        with urllib.request.urlopen(f"{self.url}/api/v2/heartbeat", timeout=2) as resp:
            return "nanosecond heartbeat" in json.load(resp)

    def start(self, timeout: float = 60) -> ChromaServer:
        chroma = Path(sys.executable).with_name("chroma")
        argv = [
            str(chroma),
            "run",
            "--path",
            str(self.path),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
        ]
        self.proc = spawn(argv, self.log)
        try:
            wait_for(self._ready, timeout, message=f"chroma on {self.url}")
        except AssertionError as exc:
            self.stop()
            raise AssertionError(f"{exc}\nchroma log:\n{tail(self.log)}") from None
        return self

    def _ready(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"chroma exited with {self.proc.returncode}:\n{tail(self.log)}")
        return self.heartbeat()

    def stop(self) -> None:
        if self.proc is not None:
            stop(self.proc)
            self.proc = None


@contextlib.contextmanager
def running_chroma(workdir: Path | None = None, port: int | None = None) -> Iterator[ChromaServer]:
    own = workdir is None
    base = Path(tempfile.mkdtemp(prefix="sso-chroma-")) if workdir is None else workdir
    base.mkdir(parents=True, exist_ok=True)
    server = ChromaServer(port=port or free_port(), path=base / "data", log=base / "chroma.log")
    try:
        yield server.start()
    finally:
        server.stop()
        if own:
            shutil.rmtree(base, ignore_errors=True)
