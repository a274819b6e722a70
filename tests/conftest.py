"""Shared fixtures: the real control plane and a real Chroma server, one per test session."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from devenv.chroma import ChromaServer, running_chroma
from devenv.controlplane import ControlPlane, running_control_plane

_CONTROL_PLANE: ControlPlane | None = None

# Tests assert behaviour, not time (speed is bench/'s): no per-example deadline, which a
# loaded machine misses (one example took 349 ms against hypothesis's 200 ms default).
settings.register_profile("behaviour", deadline=None)
settings.load_profile("behaviour")


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """etcd + kube-apiserver for the whole session; stopped even if tests fail."""
    global _CONTROL_PLANE
    with running_control_plane(tmp_path_factory.mktemp("controlplane")) as cp:
        _CONTROL_PLANE = cp
        try:
            yield cp
        finally:
            _CONTROL_PLANE = None


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChromaServer]:
    with running_chroma(tmp_path_factory.mktemp("chroma")) as server:
        yield server


@pytest.fixture(scope="session")
def kube_env(control_plane: ControlPlane) -> dict[str, str]:
    return control_plane.env()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """On a failure with the control plane up, attach the apiserver's last log lines."""
    report = yield
    if (
        report.failed
        and _CONTROL_PLANE is not None
        and "control_plane" in getattr(item, "fixturenames", ())
    ):
        report.sections.append(("kube-apiserver log (tail)", _CONTROL_PLANE.log_tail(lines=30)))
    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """A failure is named with its last lines as it happens, not only in the summary at the
    end: a run cut short (CI's time limit) still shows why each test failed."""
    _note_module_time(report)
    if not report.failed:
        return
    text = str(report.longrepr or "").strip().splitlines()
    said = [line for line in text if line.startswith("E ")]
    last = ([line for line in said if "Error" in line or "assert" in line] or said)[:6]
    last = last or text[-6:]
    print(f"\nFAILED {report.nodeid} ({report.when}, {report.duration:.0f} s)")
    for line in last:
        print(f"    {line[:300]}")


# Each worker's modules, in the order it ran them, with their seconds (setup + call +
# teardown, so a module's fixture starts count): what LONGEST_FIRST is tuned from.
_MODULE_TIMES: dict[str, dict[str, float]] = {}  # worker -> module -> seconds
_WORKER_SPANS: dict[str, list[float]] = {}  # worker -> [first start, last end]


def _note_module_time(report: pytest.TestReport) -> None:
    gateway = getattr(getattr(report, "node", None), "gateway", None)
    worker = str(getattr(gateway, "id", "main"))  # xdist's worker on the controller
    module = report.nodeid.split("::", 1)[0]
    times = _MODULE_TIMES.setdefault(worker, {})
    times[module] = times.get(module, 0.0) + report.duration
    span = _WORKER_SPANS.setdefault(worker, [report.start, report.stop])
    span[:] = [min(span[0], report.start), max(span[1], report.stop)]


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Per worker: its first test's start to its last test's end, and its modules of 20 s
    or more in the order it ran them."""
    if not _WORKER_SPANS:
        return
    terminalreporter.section("module seconds per worker (setup + call + teardown)")
    for worker, times in sorted(_MODULE_TIMES.items()):
        start, stop = _WORKER_SPANS[worker]
        line = (
            f"{worker}: {stop - start:.0f} s from first start to last end, "
            f"{sum(times.values()):.0f} s in {len(times)} modules"
        )
        long = [f"{Path(m).name} {s:.0f}" for m, s in times.items() if s >= 20]
        terminalreporter.write_line(line + ("; " + ", ".join(long) if long else ""))


# The longest modules (minutes each, most of it waiting on servers), started first: with
# `make test`'s workers (`--dist loadfile --no-loadscope-reorder`) a module runs whole on one
# worker in this order, and the many short unit modules fill in at the end.
LONGEST_FIRST = (
    "test_lease_faults.py",
    "test_authorities.py",
    "test_single_writer.py",
    "test_real_model.py",
    "test_every_memory.py",
    "test_benches.py",
    "test_quiet_waiting.py",
    "test_runtime_lifecycle.py",
    "test_shutdown.py",
    "test_ledger_crashes.py",
)


def _run_order(item: pytest.Item) -> tuple[int, int]:
    name = item.path.name
    if name in LONGEST_FIRST:
        return (0, LONGEST_FIRST.index(name))
    return (2, 0) if item.path.parent.name == "unit" else (1, 0)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "integration" in str(item.path):
            item.add_marker(pytest.mark.integration)
        if item.path.parent.name == "bench":
            item.add_marker(pytest.mark.bench)
    items.sort(key=_run_order)  # stable: each module's own order is kept


def docker_and_kind_available() -> str | None:
    """None if kind e2e can run here, else the reason it cannot."""
    if shutil.which("docker") is None:
        return "docker CLI not found"
    if os.system("docker info >/dev/null 2>&1") != 0:
        return "no Docker engine answers `docker info`"
    if shutil.which("kind") is None:
        return "kind not found on PATH"
    return None


REPO_ROOT = Path(__file__).resolve().parents[1]
