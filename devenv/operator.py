"""The one way the demo, the integration tests and the benches start the operator: a local
process, `python -m devenv.operator ARGS...`, which is `python -m controller run ARGS...`
plus, when SSO_WRITE_JOURNAL names a file, the write journal (devenv.journal) that the
chaos tests read to prove no two writers overlapped.

    proc = start_operator(log, env, "--standalone", "--namespace", "ops")
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from devenv.controlplane import REPO_ROOT
from devenv.processes import spawn


def operator_argv(*args: str) -> list[str]:
    """The command line of a local operator process with these `controller run` args."""
    return [sys.executable, "-m", "devenv.operator", *args]


def start_operator(
    log: Path, env: dict[str, str], *args: str, cwd: Path | None = None
) -> subprocess.Popen[bytes]:
    """Starts the operator (stopped with devenv.processes.stop, by PID); output to log."""
    return spawn(operator_argv(*args), log, env=env, cwd=cwd or REPO_ROOT)


def main(argv: list[str]) -> None:
    from controller.__main__ import one_blas_thread, run_operator

    one_blas_thread()
    journal = os.environ.get("SSO_WRITE_JOURNAL")
    if journal:
        from controller import pipeline
        from devenv.journal import Journal

        pipeline.WRITE_OBSERVERS.append(Journal(Path(journal)))
    run_operator(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
