"""Start and stop helper processes for tests: always by PID, even when a test fails."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def down_command(state_dir: Path, default_dir: Path, *, make: str, module: str, flag: str) -> str:
    """The command that stops what `python -m module up` started in state_dir: the make
    target, which knows only the default directory, else the module's own `down`."""
    if state_dir.resolve() == default_dir.resolve():
        return f"make {make}"
    return shlex.join([sys.executable, "-m", module, "down", flag, str(state_dir.resolve())])


def spawn(
    argv: list[str], log: Path, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.Popen[bytes]:
    """Starts argv in its own process group, output to log, killed if the test run dies."""
    from devenv.controlplane import _die_with_parent

    with log.open("ab") as fh:
        return subprocess.Popen(
            argv,
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )


def stop(proc: subprocess.Popen[bytes], grace: float = 10.0) -> int | None:
    """SIGTERM the process group, then SIGKILL after grace seconds; returns the exit code."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
    return proc.returncode


def kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL, as a crash would: no shutdown handlers run."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


def wait_for(
    predicate: Callable[[], T],
    timeout: float,
    interval: float = 0.1,
    message: str | Callable[[], str] = "condition",
    log: Path | Callable[[], str] | None = None,
) -> T:
    """Polls predicate until it returns a truthy value; raises AssertionError on timeout.
    A callable message and log (a file's tail, or a callable's text) are read at the
    timeout, not when the wait began."""
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # the predicate may race a starting server
            last_exc = exc
        time.sleep(interval)
    said = message() if callable(message) else message
    if log is not None:
        said += "\n" + (tail(log) if isinstance(log, Path) else log())
    raise AssertionError(f"timed out after {timeout}s waiting for {said}; last error: {last_exc}")


def tail(path: Path, lines: int = 40) -> str:
    if not path.exists():
        return f"({path} missing)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def cpu_seconds(pid: int) -> float:
    """The process's CPU time so far (utime + stime of /proc/<pid>/stat), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
