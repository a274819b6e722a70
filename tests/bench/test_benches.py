"""The smoke tier: every script in bench/ runs in its quick mode, so a bench that no longer
runs fails `make test` instead of the next measurement (docs/benchmarks.md, "Quick mode").

Each run declared in a bench's QUICK_RUNS (tests/support/bench_contract.py) is
`python -m bench.NAME --quick ARGS...`; it must exit 0 and its last line must have the
figure line's documented format (name, keys in order, a number where one is due). Values
are not checked: a quick run is not a measurement. A bench without a quick mode fails
here by name, as does one whose line changed without its docstring.

The benches share one control plane and one Chroma server (devenv.bench), emptied of
collections before each run; each run's temporary files go under its pytest tmp_path.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controller.store.connection import StoreLocation, connect
from devenv.bench import SHARED_CHROMA_URL, SHARED_CONTROL_PLANE
from devenv.chroma import running_chroma
from devenv.controlplane import REPO_ROOT, running_control_plane
from tests.support.bench_contract import (
    ContractError,
    QuickRun,
    bench_scripts,
    parse_figure_line,
    quick_runs,
)

RUN_TIMEOUT_S = 240  # one quick run; the whole tier takes under 5 minutes on 2 cores
INTERRUPT_GRACE_S = 30  # after SIGINT, for the bench's finally blocks to stop its servers


def declared_runs() -> list[Any]:
    params: list[Any] = []
    for script in bench_scripts():
        try:
            runs = quick_runs(script)
        except ContractError as exc:  # fails as a test of its own, by the bench's name
            params.append(pytest.param(exc, id=script.stem))
            continue
        params += [pytest.param(run, id=run.id) for run in runs]
    return params


@pytest.fixture(scope="module")
def shared_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """One control plane and one Chroma server for every bench of the tier."""
    with (
        running_control_plane(tmp_path_factory.mktemp("bench-cp")) as cp,
        running_chroma(tmp_path_factory.mktemp("bench-chroma")) as chroma,
    ):
        cp.save_state()  # what devenv.bench reads to use it
        yield {SHARED_CONTROL_PLANE: str(cp.workdir), SHARED_CHROMA_URL: chroma.url}


def empty_chroma(url: str) -> None:
    """A run starts on a store with no collections, as on a Chroma of its own."""
    client = connect(StoreLocation(url=url))
    for collection in client.list_collections():
        client.delete_collection(collection.name)


def run_bench(run: QuickRun, env: dict[str, str]) -> tuple[int, str, str, float]:
    """(exit status, stdout, stderr, seconds). A run past RUN_TIMEOUT_S gets SIGINT, so its
    finally blocks stop what it started (its servers also die with it: PR_SET_PDEATHSIG)."""
    argv = [sys.executable, "-m", f"bench.{run.bench}", "--quick", *run.args]
    started = time.monotonic()
    proc = subprocess.Popen(
        argv,
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=INTERRUPT_GRACE_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        pytest.fail(
            f"`{' '.join(argv[2:])}` did not finish in {RUN_TIMEOUT_S}s\n"
            f"stdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}"
        )
    return proc.returncode, out, err, time.monotonic() - started


@pytest.mark.parametrize("run", declared_runs())
def test_quick_run_exits_0_and_prints_its_figure_line(
    run: QuickRun | ContractError, shared_servers: dict[str, str], tmp_path: Path
) -> None:
    if isinstance(run, ContractError):
        pytest.fail(str(run))
    empty_chroma(shared_servers[SHARED_CHROMA_URL])
    env = dict(os.environ, **shared_servers, TMPDIR=str(tmp_path))
    status, out, err, seconds = run_bench(run, env)
    command = f"python -m bench.{run.bench} --quick {' '.join(run.args)}".rstrip()
    print(f"{command}: exit {status} in {seconds:.0f}s")
    assert status == 0, f"{command} exited {status}\nstdout:\n{out[-3000:]}\nstderr:\n{err[-4000:]}"
    lines = [line for line in out.splitlines() if line.strip()]
    assert lines, f"{command} printed nothing\nstderr:\n{err[-3000:]}"
    parse_figure_line(run.figure, lines[-1])
