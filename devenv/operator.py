"""The one way the demo, the integration tests and the benches start the operator: a local
process, `python -m devenv.operator ARGS...`, which is `python -m controller run ARGS...`
plus, when SSO_WRITE_JOURNAL names a file, the write journal (devenv.journal) that the
chaos tests read to prove no two writers overlapped, a wrapper around the pipeline's
write_row.

    proc = start_operator(log, env, "--standalone", "--namespace", "ops")
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
from pathlib import Path

from devenv.controlplane import REPO_ROOT
from devenv.processes import spawn


def operator_argv(*args: str) -> list[str]:
    """The command line of a local operator process with these `controller run` args."""
    return [sys.executable, "-m", "devenv.operator", *args]


LOOPBACK_MODELS = "http://127.0.0.1:*, http://localhost:*"


def start_operator(
    log: Path,
    env: dict[str, str],
    *args: str,
    cwd: Path | None = None,
    clock_offset_s: int | None = None,
) -> subprocess.Popen[bytes]:
    """Starts the operator (stopped with devenv.processes.stop, by PID); output to log.

    clock_offset_s: the process's wall clock runs this far ahead (negative: behind), under
    Debian's libfaketime; its monotonic clock stays the host's, as on a host whose clock is
    set wrong.

    The test model and embedding servers listen on loopback, on free ports: the memories
    may go there (SSO_ALLOWED_MODEL_URLS) unless env says otherwise."""
    env = {"SSO_ALLOWED_MODEL_URLS": LOOPBACK_MODELS, **env}
    if clock_offset_s is not None:
        env = dict(env, **skewed_clock_env(clock_offset_s))
    return spawn(operator_argv(*args), log, env=env, cwd=cwd or REPO_ROOT)


LIBFAKETIME_GLOB = "/usr/lib/*/faketime/libfaketimeMT.so.1"


def skewed_clock_env(offset_s: int) -> dict[str, str]:
    """The environment that sets a process's wall clock offset_s seconds off (libfaketime,
    the thread-safe build; hack/install-system.sh installs Debian's package)."""
    found = sorted(glob.glob(LIBFAKETIME_GLOB))
    if not found:
        raise RuntimeError(
            f"libfaketime not found ({LIBFAKETIME_GLOB}): install Debian's libfaketime "
            "(hack/install-system.sh does)"
        )
    return {
        "LD_PRELOAD": found[0],
        "FAKETIME": f"{offset_s:+d}",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }


def main(argv: list[str]) -> None:
    from controller.__main__ import one_blas_thread, run_operator

    one_blas_thread()
    from devenv.journal import watch_writes

    watch_writes(
        os.environ.get("SSO_WRITE_JOURNAL"), os.environ.get("SSO_TEST_PAUSE_BEFORE_UPSERT")
    )
    run_operator(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
