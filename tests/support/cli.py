"""summaryctl run in the test's own process: main() is what `python -m controller` exits
with, and its output is what a user reads. A process per call cost seconds of imports on a
loaded machine (tests/integration/test_memory_counts.py ran 26 of them)."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
from collections.abc import Mapping
from unittest import mock

from controller.cli.main import main


def summaryctl_here(
    *args: str, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """summaryctl ARGS in process, against the cluster KUBECONFIG names (the harness's), with
    env added to the process's environment for the call."""
    out, err = io.StringIO(), io.StringIO()
    with (
        mock.patch.dict(os.environ, env or {}),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse's refusal of an argument
            code = exc.code if isinstance(exc.code, int) else 2
    return subprocess.CompletedProcess(["summaryctl", *args], code, out.getvalue(), err.getvalue())
