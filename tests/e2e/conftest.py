"""The e2e tier: the operator's own image, installed by helm, in real Pods.

Runs under hack/e2e.sh (`make e2e`), which sets SSO_E2E=1 and either
- SSO_E2E_KUBECONFIG: a kind cluster it made, the image already loaded into it; or
- SSO_E2E_IMAGE_ARCHIVE: the image as an OCI archive (hack/build-image.sh), and then this
  session starts the local node (devenv/node.py) itself and always tears it down, restoring
  the host, even when a test fails.
Elsewhere (a plain `pytest`) the tests are skipped: they need root or Docker and minutes.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from devenv.controlplane import tools_bin_dir

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / "charts" / "session-summary-operator"
NAMESPACE = "sso-e2e"
RELEASE = "sso"
IMAGE_TAG = "e2e"
IMAGE_NAME = f"docker.io/library/session-summary-operator:{IMAGE_TAG}"

RESULTS: dict[str, Any] = {"passed": 0, "failed": 0}


@dataclass
class Cluster:
    """kubectl and helm aimed at the cluster under test."""

    target: str  # "local-node" or "kind"
    env: dict[str, str]
    node: Any = None  # the devenv.node.LocalNode on the local node; None on kind

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        res = subprocess.run(
            ["kubectl", *args],
            input=input,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and res.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} exited {res.returncode}:\n{res.stderr}{res.stdout}"
            )
        return res

    def helm(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        res = subprocess.run(
            ["helm", *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if res.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} exited {res.returncode}:\n{res.stderr}")
        return res

    def json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)


def _diagnostics(cluster: Cluster) -> str:
    parts = []
    for args in (
        ("get", "pods,pvc,sessionsummaries", "-A", "-o", "wide"),
        ("-n", NAMESPACE, "get", "events", "--sort-by=.lastTimestamp"),
        ("-n", NAMESPACE, "logs", "-l", "app.kubernetes.io/component=operator", "--tail=40",
         "--prefix", "--all-containers"),
    ):  # fmt: skip
        res = cluster.kubectl(*args, check=False)
        parts.append(f"$ kubectl {' '.join(args)}\n{res.stdout[-6000:]}{res.stderr[-2000:]}")
    return "\n".join(parts)


_CLUSTER: Cluster | None = None


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    global _CLUSTER
    if os.environ.get("SSO_E2E") != "1":
        pytest.skip("the e2e tier runs under hack/e2e.sh (make e2e): real Pods need root or kind")
    env = dict(os.environ)
    env["PATH"] = f"{tools_bin_dir()}{os.pathsep}{env.get('PATH', '')}"
    kubeconfig = os.environ.get("SSO_E2E_KUBECONFIG")
    if kubeconfig:
        env["KUBECONFIG"] = kubeconfig
        _CLUSTER = Cluster("kind", env)
        try:
            yield _CLUSTER
        finally:
            _CLUSTER = None
        return

    from devenv.node import HostSnapshot, running_node

    archive = os.environ.get("SSO_E2E_IMAGE_ARCHIVE")
    if not archive:
        pytest.fail("SSO_E2E_IMAGE_ARCHIVE is not set (hack/e2e.sh builds the image)")
    before = HostSnapshot.take()
    started = time.monotonic()
    # hack/e2e.sh names the directory, to tear the node down itself if this process dies.
    node_dir = os.environ.get("SSO_E2E_NODE_DIR")
    with running_node(Path(node_dir) if node_dir else tmp_path_factory.mktemp("node")) as node:
        RESULTS["node_ready_s"] = round(time.monotonic() - started, 1)
        t0 = time.monotonic()
        node.import_image(Path(archive), IMAGE_NAME)
        RESULTS["image_import_s"] = round(time.monotonic() - t0, 1)
        # No provisioner on the local node: a volume for the bundled Chroma's claim.
        node.make_host_path_pv("sso-e2e-chroma", size="1Gi")
        env["KUBECONFIG"] = str(node.kubeconfig)
        _CLUSTER = Cluster("local-node", env, node)
        try:
            yield _CLUSTER
        finally:
            _CLUSTER = None
    after = HostSnapshot.take()
    changed = [
        what
        for what, a, b in (
            ("iptables", before.iptables, after.iptables),
            ("interfaces", before.links, after.links),
            ("network namespaces", before.netns, after.netns),
            ("sysctls", before.sysctls, after.sysctls),
            ("cgroups", before.cgroups, after.cgroups),
            ("ipsets", before.ipsets, after.ipsets),
            ("paths", before.created_paths, after.created_paths),
        )
        if a != b
    ]
    RESULTS["host_restored"] = not changed
    if changed:
        RESULTS["host_changed"] = changed


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.failed and _CLUSTER is not None and report.when == "call":
        report.sections.append(("cluster diagnostics", _diagnostics(_CLUSTER)))
    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "tests/e2e" not in report.nodeid:
        return
    if report.when == "call" and report.passed:
        RESULTS["passed"] += 1
    elif report.failed:
        RESULTS["failed"] += 1


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e" in str(item.path):
            item.add_marker(pytest.mark.e2e)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    path = os.environ.get("SSO_E2E_RESULTS")
    if path and os.environ.get("SSO_E2E") == "1":
        Path(path).write_text(json.dumps(RESULTS))
