"""The integration tests share one control plane (tests/integration/conftest.py), so each
test module's namespaces must be its own: an operator of one test watching a namespace
another test also fills serves, counts and reports that test's objects as well
(test_runtime_lifecycle.py once shared "lifecycle" with test_lifecycle.py, and its
runtime counts were never 0). Every namespace a module names as a literal, in the ways
the tests name them, is checked against every other module's."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# NS = "x"; ns = "x"; ns, n = "x", ...; own_operator(cp, "x", ...); "--namespace", "x";
# "create", "namespace", "x".
_NAMED = re.compile(
    r"""^\s*(?:NS|NAMESPACE|ns)(?:,\s*\w+)*\s*=\s*"([a-z][a-z0-9-]*)"
      | own_operator\(\s*\w+,\s*"([a-z][a-z0-9-]*)"
      | "--namespace",\s*"([a-z][a-z0-9-]*)"
      | "namespace",\s*"([a-z][a-z0-9-]*)"
    """,
    re.X | re.M,
)


def namespaces_by_module() -> dict[str, set[str]]:
    found: dict[str, set[str]] = defaultdict(set)
    for path in sorted(
        [
            *ROOT.glob("tests/integration/test_*.py"),
            ROOT / "tests/integration/harness.py",  # "ops": the shared operator's
            *ROOT.glob("tests/e2e/test_*.py"),
        ]
    ):
        for match in _NAMED.finditer(path.read_text()):
            found[str(path.relative_to(ROOT))].add(next(g for g in match.groups() if g))
    return found


def test_no_two_test_modules_use_one_namespace() -> None:
    owners: dict[str, list[str]] = defaultdict(list)
    for module, names in namespaces_by_module().items():
        for name in names - {"default", "kube-system"}:
            owners[name].append(module)
    shared = {name: mods for name, mods in owners.items() if len(mods) > 1}
    assert shared == {}, f"namespaces named by more than one test module: {shared}"


def test_the_scan_finds_the_namespaces_it_is_for() -> None:
    found = namespaces_by_module()
    assert "runtime-life" in found["tests/integration/test_runtime_lifecycle.py"]
    assert "lifecycle" in found["tests/integration/test_lifecycle.py"]
    assert "pause" in found["tests/integration/test_lease_faults.py"]
    assert "ops" in found["tests/integration/harness.py"]
    assert sum(len(v) for v in found.values()) >= 15, dict(found)
