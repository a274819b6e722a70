"""The layout the architecture map promises, kept true by tests: the domain core is pure,
modules stay small enough to read, and the shipped package holds only the product."""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "controller"
MAX_LINES = 400
# What the pure core may import: the standard library, pydantic, and itself (plus the typed
# API's constants). No cluster, no Chroma, no network, no numpy.
CORE_MAY_IMPORT = {"pydantic", "controller.core", "controller.api"}


def _modules(under: Path) -> list[Path]:
    return sorted(p for p in under.rglob("*.py") if "__pycache__" not in p.parts)


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


@pytest.mark.parametrize("path", _modules(PACKAGE), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_product_module_is_longer_than_a_reader_can_hold(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(ROOT)} has {lines} lines"


@pytest.mark.parametrize("path", _modules(PACKAGE / "core"), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_domain_core_imports_no_io(path: Path) -> None:
    stdlib = sys.stdlib_module_names
    foreign = {
        name
        for name in _imports(path)
        if name.split(".")[0] not in stdlib
        and not any(name == ok or name.startswith(ok + ".") for ok in CORE_MAY_IMPORT)
    }
    assert not foreign, f"{path.relative_to(ROOT)} imports {sorted(foreign)}"


def test_the_wheel_ships_the_operator_and_summaryctl_only(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(ROOT),
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    packages = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert packages == {"controller"}
    shipped = {n for n in names if n.startswith("controller/")}
    for dev in ("devenv", "localenv", "demo", "journal", "controlplane"):
        assert not any(dev in n for n in shipped), dev
    assert "controller/cli/main.py" in shipped and "controller/operator.py" in shipped
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert (
        "summaryctl = controller.cli.main:main"
        in zipfile.ZipFile(wheel).read(entry_points).decode()
    )


def test_the_openai_sdk_is_loaded_only_by_an_operator_that_uses_an_endpoint() -> None:
    """It costs ~14 MB of RSS (bench/operator_rss.py); the extractive backend and the local
    embedding never need it."""
    probe = "import sys, controller.operator; print('openai' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False"
