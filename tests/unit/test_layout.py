"""The layout the architecture map promises, kept true by tests: the domain core is pure,
the import graph has no cycles, and the shipped package holds only the product."""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "controller"
# What the pure core may import: the standard library, pydantic, cachetools (in-memory
# caches), and itself. No cluster, no Chroma, no network, no numpy, and not the API (the API
# imports the core, never back).
CORE_MAY_IMPORT = {"pydantic", "cachetools", "re2", "idna", "controller.core"}  # re2, idna: pure


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


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """Which product module imports which, counting imports inside functions too (a
    deferred import is still an arrow); `from package import module` points at the module."""
    paths = {_module_name(p): p for p in _modules(PACKAGE)}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = {f"{node.module}.{a.name}" for a in node.names} & paths.keys()
                found |= subs or ({node.module} & paths.keys())
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names} & paths.keys()
        graph[name] = found - {name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of the graph, as the modules along it, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        path.pop()
        return None

    return next((c for n in sorted(graph) if n not in state and (c := visit(n))), None)


def test_no_product_module_imports_itself_in_a_circle() -> None:
    assert _cycle(_import_graph()) is None, " -> ".join(_cycle(_import_graph()) or [])


def test_the_cycle_check_sees_a_deferred_import() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycle(graph) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_the_domain_core_imports_nothing_of_the_product_outside_itself() -> None:
    outside = {
        (name, dep)
        for name, deps in _import_graph().items()
        if name.startswith("controller.core")
        for dep in deps
        if not dep.startswith("controller.core")
    }
    assert not outside, sorted(outside)


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


# -- no module keeps state: the process's state is the runtime's (controller/runtime.py) --

# Exempt, by design: the Prometheus metric objects (registered at import, as the client
# library intends), loggers (the logging module's own registry), and what kopf registers
# (its handlers are registered by decorators, not kept in our modules); `__all__`.
_EXEMPT_NAMES = {"__all__"}
# A function that caches what it returns keeps it at module level too. One is left, and
# said so: the Kubernetes API client, one per process as the kubernetes library's own
# default client is, which every kube/ function reaches through api_client(); handing it
# through the runtime instead would change every call into the API (issue 27's note).
_EXEMPT_CACHES = {("controller.kube.client", "api_client")}


def _immutable(value: object, seen: frozenset[int] = frozenset()) -> bool:
    """A value no code can change in place: constants, and containers of them."""
    import dataclasses
    import enum
    import logging
    import re
    import types
    import typing

    import numpy as np
    import prometheus_client.metrics
    import pydantic

    if id(value) in seen or isinstance(value, type):
        return True  # a class (as in a tuple of exception types) is a constant here
    seen = seen | {id(value)}
    if value is None or isinstance(value, str | bytes | int | float | complex | bool):
        return True
    if isinstance(value, tuple | frozenset):
        return all(_immutable(v, seen) for v in value)
    if isinstance(value, types.MappingProxyType):
        return all(_immutable(k, seen) and _immutable(v, seen) for k, v in value.items())
    if isinstance(
        value,
        re.Pattern
        | re2_pattern()
        | typing.TypeVar
        | typing.ParamSpec
        | enum.Enum
        | np.generic
        | range,
    ):
        return True
    if isinstance(value, dt_types()):
        return True
    if isinstance(value, pydantic.TypeAdapter):
        return True  # a compiled validator, as a pattern is
    if isinstance(value, prometheus_client.metrics.MetricWrapperBase | logging.Logger):
        return True  # exempt: see above
    if isinstance(value, pydantic.BaseModel):
        return bool(value.model_config.get("frozen")) and all(
            _immutable(getattr(value, f), seen) for f in type(value).model_fields
        )
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        params = getattr(type(value), "__dataclass_params__", None)
        return bool(params and params.frozen) and all(
            _immutable(getattr(value, f.name), seen) for f in dataclasses.fields(value)
        )
    return False


def re2_pattern() -> type:
    import re2

    return type(re2.compile(""))


def dt_types() -> tuple[type, ...]:
    import datetime as dt

    return (dt.datetime, dt.date, dt.timedelta, dt.timezone)


def _module_names() -> list[str]:
    return [
        ".".join(p.relative_to(ROOT).with_suffix("").parts)
        for p in _modules(PACKAGE)
        if p.name not in ("__main__.py",)
    ]


@pytest.mark.parametrize("module", _module_names())
def test_no_product_module_keeps_mutable_state(module: str) -> None:
    """A module-level container, executor, lock, client or any other object whose state can
    change is process state: it belongs to the runtime (made at start-up, closed at
    shutdown), where a reader sees it and a deleted SessionSummarizer's share is dropped.
    Constants are fine; so are frozen dataclasses and frozen pydantic models of constants."""
    import importlib
    import inspect
    import typing

    mod = importlib.import_module(module.removesuffix(".__init__"))
    assert mod.__file__ is not None
    found = []
    for name, value in vars(mod).items():
        cached = hasattr(value, "cache_info") and getattr(value, "__module__", "") == mod.__name__
        if cached and (mod.__name__, name) not in _EXEMPT_CACHES:
            found.append(f"{name}: a cached function")
    for name in _assigned_at_module_level(Path(mod.__file__)):
        value = getattr(mod, name)
        if name in _EXEMPT_NAMES or inspect.isclass(value) or inspect.isroutine(value):
            continue  # a class, or a function given a second name
        if typing.get_origin(value) is not None or getattr(value, "__module__", "") == "typing":
            continue  # a type alias
        if not _immutable(value):
            found.append(f"{name}: {type(value).__name__}")
    assert not found, f"{module} keeps mutable state at module level: {found}"


def _assigned_at_module_level(path: Path) -> list[str]:
    names = []
    for node in ast.parse(path.read_text()).body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign) and node.value is not None
            else []
        )
        for target in targets:
            for leaf in ast.walk(target):
                if isinstance(leaf, ast.Name):
                    names.append(leaf.id)
    return names


def test_the_state_check_catches_what_it_is_for() -> None:
    import threading
    import types
    from concurrent.futures import ThreadPoolExecutor

    from controller.scheduling import DeadlineQueue

    for bad in (
        {},
        [],
        set(),
        threading.Lock(),
        threading.local(),
        ThreadPoolExecutor(1),
        DeadlineQueue(1),
        types.MappingProxyType({"a": []}),
        ("x", ["y"]),
    ):
        assert not _immutable(bad), bad
    for ok in ((), frozenset({"a"}), types.MappingProxyType({"a": ("b",)}), "s", 1, None):
        assert _immutable(ok), ok
