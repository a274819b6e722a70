"""The Helm chart on the real control plane: lint, the rendered manifests validated by the
apiserver, install and uninstall, the restricted Pod Security level, and least privilege:
the operator run with the chart's ServiceAccount token does its whole job and is refused
what it does not need."""

from __future__ import annotations

import base64
import contextlib
import copy
import importlib.metadata as md
import json
import math
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from controller.core.destinations import ALLOWED_URLS_ANNOTATION, SecretUse, judge_secret
from controller.core.naming import summary_object_name
from controller.store.connection import StoreLocation, connect
from controller.store.memory_store import MemoryStore
from devenv.chroma import ChromaServer
from devenv.controlplane import REPO_ROOT, ControlPlane, free_port, tools_bin_dir
from devenv.processes import spawn, stop, tail, wait_for
from tests.integration.harness import interaction, load
from tests.unit.test_supply_chain import locked

CHART = REPO_ROOT / "charts" / "session-summary-operator"
KIND_VALUES = CHART / "values-kind.yaml"
NEO_VALUES = CHART / "values-neo.yaml"
INSTANCE = "app.kubernetes.io/instance"
SCHEMA_ERROR = "values don't meet the specifications of the schema"
# What `helm install` finds in the cluster and `helm template` cannot: the API server's
# address and an external Chroma's destination (the NetworkPolicy names both).
OFFLINE = [
    "--set-json", 'networkPolicy.apiServer.cidrs=["10.96.0.1/32"]',
    "--set-json", 'networkPolicy.chromaTo=[{"ipBlock":{"cidr":"10.0.0.7/32"}}]',
]  # fmt: skip


def run(argv: list[Any], env: dict[str, str], input: str | None = None) -> Any:
    return subprocess.run(
        [str(a) for a in argv],
        env=env,
        input=input,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def helm(cp: ControlPlane, *args: Any, check: bool = True) -> subprocess.CompletedProcess[str]:
    res: subprocess.CompletedProcess[str] = run([cp.helm, *args], cp.env())
    if check:
        assert res.returncode == 0, f"helm {' '.join(map(str, args))}: {res.stderr}{res.stdout}"
    return res


def kubectl(
    cp: ControlPlane, *args: str, input: str | None = None, kubeconfig: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return cp.kubectl_run(*args, input=input, check=False, kubeconfig=kubeconfig)


def docs_of(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def render(cp: ControlPlane, release: str, namespace: str, *args: Any) -> list[dict[str, Any]]:
    return docs_of(helm(cp, "template", release, CHART, "-n", namespace, *OFFLINE, *args).stdout)


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def values_file(tmp_path: Path, values: dict[str, Any], name: str = "values.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(values))
    return path


def ensure_namespace(cp: ControlPlane, name: str, labels: dict[str, str] | None = None) -> None:
    kubectl(cp, "create", "namespace", name)  # may exist: namespaces are never finalized here
    if labels:
        pairs = [f"{k}={v}" for k, v in labels.items()]
        cp.kubectl_run("label", "--overwrite", "namespace", name, *pairs)


@pytest.fixture(scope="module")
def chart_crds(control_plane: ControlPlane) -> Iterator[None]:
    """The chart's CRDs, installed if absent and removed again at the end of the module if
    this module installed them, so the session's control plane is left as found."""
    cp = control_plane
    created: list[str] = []
    for path in sorted((CHART / "crds").glob("*.yaml")):
        for doc in docs_of(path.read_text()):
            name = doc["metadata"]["name"]
            if kubectl(cp, "get", "crd", name).returncode != 0:
                cp.kubectl_run("apply", "-f", "-", input=yaml.safe_dump(doc))
                created.append(name)
    cp.kubectl_run("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
    yield
    for name in created:
        _release_finalizers(cp, name)
        kubectl(cp, "delete", "crd", name, "--wait=true", "--timeout=90s")


@pytest.fixture(scope="module", autouse=True)
def api_server_endpoints(control_plane: ControlPlane) -> Iterator[None]:
    """The `kubernetes` EndpointSlice a cluster's API server keeps of itself (this one runs
    with --endpoint-reconciler-type=none, on loopback, which a slice may not name: a
    documentation address stands in): `helm install` discovers the API server's address
    and port for the NetworkPolicy from it."""
    cp = control_plane
    slice_ = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "kubernetes",
            "namespace": "default",
            "labels": {"kubernetes.io/service-name": "kubernetes"},
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["192.0.2.10"]}],  # loopback is refused here
        "ports": [{"name": "https", "port": cp.api_port, "protocol": "TCP"}],
    }
    made = kubectl(cp, "-n", "default", "get", "endpointslice", "kubernetes").returncode != 0
    if made:
        cp.kubectl_run("apply", "-f", "-", input=json.dumps(slice_))
    yield
    if made:
        kubectl(cp, "-n", "default", "delete", "endpointslice", "kubernetes")


def _release_finalizers(cp: ControlPlane, resource: str, namespace: str | None = None) -> None:
    """Objects whose operator is gone keep kopf's finalizer; drop it so they can be deleted."""
    scope = ["-n", namespace] if namespace else ["-A"]
    listed = kubectl(cp, "get", resource, *scope, "-o", "json")
    for obj in json.loads(listed.stdout or "{}").get("items", []):
        if obj["metadata"].get("finalizers"):
            where = ["-n", obj["metadata"]["namespace"]] if "namespace" in obj["metadata"] else []
            kubectl(
                cp, "patch", resource, obj["metadata"]["name"], *where,
                "--type", "merge", "-p", '{"metadata": {"finalizers": null}}',
            )  # fmt: skip


def dry_run_apply(cp: ControlPlane, docs: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    return kubectl(
        cp,
        "apply",
        "--dry-run=server",
        "--validate=strict",
        "-f",
        "-",
        input=yaml.safe_dump_all(docs),
    )


# --- the chart's files --------------------------------------------------------------------


def test_chart_crds_are_exact_copies_of_the_top_level_crds() -> None:
    top = {p.name: p.read_bytes() for p in (REPO_ROOT / "crds").glob("*.yaml")}
    chart = {p.name: p.read_bytes() for p in (CHART / "crds").glob("*.yaml")}
    assert sorted(chart) == sorted(top), "the chart's crds/ must hold exactly the CRDs of crds/"
    drifted = [name for name in top if chart[name] != top[name]]
    assert not drifted, f"copy crds/*.yaml to {CHART / 'crds'}: {drifted} differ"


# Values passed through whole (Kubernetes objects): documented as one row each.
OPAQUE_VALUES = {"resources", "podSecurityContext", "securityContext"}


def _leaves(values: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted paths of every value; an empty map or a list is a value of its own."""
    paths: list[str] = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and key not in OPAQUE_VALUES:
            paths += _leaves(value, path + ".")
        else:
            paths.append(path)
    return paths


def _schema_has(schema: dict[str, Any], path: str) -> bool:
    node = schema
    for part in path.split("."):
        props = node.get("properties") or {}
        if part not in props:
            return False
        node = props[part]
    return True


def test_every_value_has_a_schema_and_a_row_in_the_docs() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    docs = (REPO_ROOT / "docs" / "configuration.md").read_text()
    assert "## Helm values" in docs
    table = docs.split("## Helm values", 1)[1]
    paths = _leaves(values)
    assert len(paths) > 60
    assert [p for p in paths if not _schema_has(schema, p)] == []
    assert [p for p in paths if f"`{p}`" not in table] == []


def _runtime_closure() -> list[str]:
    """name==version of everything pyproject's runtime dependencies pull in (no extras)."""
    seen: set[tuple[str, frozenset[str]]] = set()
    todo: list[tuple[str, frozenset[str]]] = []
    for raw in md.distribution("session-summary-operator").requires or []:
        req = Requirement(raw)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            todo.append((canonicalize_name(req.name), frozenset(req.extras)))
    while todo:
        item = todo.pop()
        if item in seen:
            continue
        seen.add(item)
        name, extras = item
        for raw in md.distribution(name).requires or []:
            req = Requirement(raw)
            envs = [{"extra": e} for e in ("", *extras)]
            if req.marker is None or any(req.marker.evaluate(e) for e in envs):
                todo.append((canonicalize_name(req.name), frozenset(req.extras)))
    names = {name for name, _ in seen}
    return sorted(f"{canonicalize_name(n)}=={md.version(n)}" for n in names)


def test_requirements_lock_pins_the_runtime_dependencies_the_tests_ran_with() -> None:
    pinned = sorted(
        f"{name}=={version}"
        for name, (version, _) in locked(REPO_ROOT / "requirements.lock").items()
    )
    expected = _runtime_closure()
    assert "kopf==" + md.version("kopf") in expected
    assert pinned == expected, "regenerate the locks: hack/update-locks.sh\n" + "\n".join(
        sorted(set(expected) ^ set(pinned))
    )


# --- lint, validation, schema -------------------------------------------------------------


@pytest.fixture(scope="module")
def tools() -> Path:
    return tools_bin_dir()


@pytest.mark.parametrize(
    "extra",
    [[], ["-f", str(KIND_VALUES)], ["-f", str(NEO_VALUES)]],
    ids=["default", "kind", "neo"],
)
def test_helm_lint_strict_passes(tools: Path, extra: list[str]) -> None:
    res = run([tools / "helm", "lint", "--strict", CHART, *OFFLINE, *extra], dict(os.environ))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "0 chart(s) failed" in res.stdout
    assert "[WARNING]" not in res.stdout and "[ERROR]" not in res.stdout


VALIDATION_CASES = {
    "default": [],
    "kind": ["-f", str(KIND_VALUES)],
    "neo": [
        "-f",
        str(NEO_VALUES),
        "--set",
        "summarizer.visibility.memorySharing=private",
        "--set",
        "summarizer.visibility.sharedAgents={neo-gpt}",
        "--set",
        "summarizer.visibility.identityTrustTiers.@alice=owner",
    ],
    "namespaced-with-secrets": [
        "--set",
        "watchNamespaces={chart-validate-a,chart-validate-b}",
        "--set",
        "summarizer.namespace=chart-validate-a",
        "--set",
        "chroma.authSecret.name=chroma-token",
        "--set",
        "summarizer.model.apiKeySecret.name=model-key",
        "--set",
        "summarizer.embedding.apiKeySecret.name=embedding-key",
        "--set",
        "podDisruptionBudget.minAvailable=1",
    ],
    "perimeter-options": [
        "-f",
        str(KIND_VALUES),
        "--set",
        "networkPolicy.chromaClientNamespaces={agents-a,agents-b}",
        "--set",
        "networkPolicy.apiServer.cidrs={10.0.0.1/32}",
        "--set-json",
        'networkPolicy.extraEgress=[{"to":[{"ipBlock":{"cidr":"192.0.2.0/24"}}]}]',
        "--set",
        "operator.allowedEndpoints={http://chroma.memory.svc:8000,https://api.openai.com/v1}",
        "--set",
        "operator.allowUnannotatedSecrets=true",
        "--set",
        "chroma.bundled.auth.existingSecret=my-chroma-token",
    ],
    "no-perimeter": [
        "-f",
        str(KIND_VALUES),
        "--set",
        "networkPolicy.enabled=false",
        "--set",
        "chroma.bundled.auth.enabled=false",
    ],
}


@pytest.mark.usefixtures("chart_crds")
@pytest.mark.parametrize("case", sorted(VALIDATION_CASES))
def test_rendered_manifests_pass_the_apiservers_schema_validation(
    control_plane: ControlPlane, case: str
) -> None:
    cp = control_plane
    for ns in ("chart-validate", "chart-validate-a", "chart-validate-b"):
        ensure_namespace(cp, ns)
    docs = render(cp, "val", "chart-validate", *VALIDATION_CASES[case])
    # A Pod (the `helm test` hook's) is admitted only with its ServiceAccount there: helm
    # creates the hook's ServiceAccount first; a dry run cannot, so it is made for real.
    for pod in of_kind(docs, "Pod"):
        [account] = [
            d for d in of_kind(docs, "ServiceAccount")
            if d["metadata"]["name"] == pod["spec"]["serviceAccountName"]
        ]  # fmt: skip
        kubectl(cp, "apply", "-f", "-", input=yaml.safe_dump(account))
    res = dry_run_apply(cp, docs)
    assert res.returncode == 0, res.stderr
    accepted = [line for line in res.stdout.splitlines() if line.endswith("(server dry run)")]
    assert len(accepted) == len(docs), res.stdout
    assert "Warning" not in res.stderr, res.stderr
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "ServiceAccount", "ClusterRole", "SessionSummarizer"} <= kinds
    if case in ("kind", "perimeter-options"):
        assert {"StatefulSet", "Service", "NetworkPolicy"} <= kinds
    if case == "no-perimeter":
        assert not {"NetworkPolicy", "Secret"} & kinds
    if case == "neo":
        spec = of_kind(docs, "SessionSummarizer")[0]["spec"]
        assert spec["embedding"]["model"] == "text-embedding-qwen3-embedding-8b"
        assert spec["visibility"] == {
            "memorySharing": "private",
            "sharedAgents": ["neo-gpt"],
            "identityTrustTiers": {"@alice": "owner"},
        }
    if case == "namespaced-with-secrets":
        operator_roles = [
            r for r in of_kind(docs, "Role")
            if r["metadata"]["labels"].get("app.kubernetes.io/component") != "test"
        ]  # fmt: skip
        assert [r["metadata"]["namespace"] for r in operator_roles] == [
            "chart-validate-a",
            "chart-validate-b",
        ]


@pytest.mark.usefixtures("chart_crds")
def test_the_chart_crds_pass_strict_validation_as_an_upgrade(control_plane: ControlPlane) -> None:
    docs = [d for p in sorted((CHART / "crds").glob("*.yaml")) for d in docs_of(p.read_text())]
    res = dry_run_apply(control_plane, docs)
    assert res.returncode == 0, res.stderr


@pytest.mark.usefixtures("chart_crds")
def test_the_apiserver_validation_step_rejects_an_invalid_manifest(
    control_plane: ControlPlane,
) -> None:
    """The control for the test above: a field the schema does not know is refused."""
    cp = control_plane
    ensure_namespace(cp, "chart-validate")
    docs = render(cp, "val", "chart-validate")
    broken = copy.deepcopy(docs)
    of_kind(broken, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["bogus"] = 1
    res = dry_run_apply(cp, broken)
    assert res.returncode != 0
    assert 'unknown field "spec.template.spec.containers[0].bogus"' in res.stderr


def test_service_monitor_renders_only_when_enabled(control_plane: ControlPlane) -> None:
    cp = control_plane
    assert of_kind(render(cp, "mon", "chart-validate"), "ServiceMonitor") == []
    docs = render(
        cp,
        "mon",
        "chart-validate",
        "--set",
        "metrics.serviceMonitor.enabled=true",
        "--set",
        "metrics.serviceMonitor.labels.release=prometheus",
    )
    [monitor] = of_kind(docs, "ServiceMonitor")
    [service] = [s for s in of_kind(docs, "Service") if s["metadata"]["name"].endswith("-metrics")]
    [deployment] = of_kind(docs, "Deployment")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == ["chart-validate"]
    [endpoint] = monitor["spec"]["endpoints"]
    [port] = service["spec"]["ports"]
    assert endpoint["port"] == port["name"] == "metrics"
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert port["targetPort"] == "metrics" and ports["metrics"] == 9090
    assert service["spec"]["selector"].items() <= (
        deployment["spec"]["template"]["metadata"]["labels"].items()
    )
    # Validated by the apiserver wherever prometheus-operator's CRD is installed.
    served = kubectl(cp, "api-resources", "--api-group=monitoring.coreos.com", "-o", "name")
    if "servicemonitors.monitoring.coreos.com" in served.stdout:
        ensure_namespace(cp, "chart-validate")
        res = dry_run_apply(cp, [monitor])
        assert res.returncode == 0, res.stderr


BAD_VALUES = {
    "replicas-as-text": ({"replicaCount": "two"}, "at '/replicaCount': got string, want integer"),
    "unknown-key": ({"replicas": 2}, "additional properties 'replicas' not allowed"),
    "namespaces-not-a-list": ({"watchNamespaces": "team-a"}, "at '/watchNamespaces'"),
    "namespace-not-a-name": ({"watchNamespaces": ["Team_A"]}, "at '/watchNamespaces/0'"),
    "bool-as-text": ({"chroma": {"bundled": {"enabled": "yes"}}}, "/chroma/bundled/enabled"),
    "port-out-of-range": ({"metrics": {"port": 70000}}, "at '/metrics/port'"),
    "pull-policy": ({"image": {"pullPolicy": "Sometimes"}}, "at '/image/pullPolicy'"),
    "backend": ({"summarizer": {"model": {"backend": "gpt"}}}, "/summarizer/model/backend"),
    "url-without-scheme": ({"chroma": {"url": "chroma:8000"}}, "at '/chroma/url'"),
    "url-host-over-253": (  # DNS's limit
        {"chroma": {"url": "http://" + "a" * 63 + ("." + "a" * 63) * 3 + ".svc:8000"}},
        "at '/chroma/url'",
    ),
    "model-url-host-over-253": (
        {"summarizer": {"model": {"baseUrl": "http://" + ("a" * 63 + ".") * 4 + "svc/v1"}}},
        "at '/summarizer/model/baseUrl'",
    ),
    "sweep-too-often": ({"summarizer": {"sweep": {"intervalSeconds": 1}}}, "intervalSeconds"),
    "env-not-a-list": ({"extraEnv": {"A": "b"}}, "at '/extraEnv'"),
    "endpoint-with-credentials": (
        {"operator": {"allowedEndpoints": ["https://u:p@api.openai.com/v1"]}},
        "at '/operator/allowedEndpoints/0'",
    ),
    "model-url-with-credentials": (
        {"summarizer": {"model": {"baseUrl": "https://k@api.openai.com/v1"}}},
        "at '/summarizer/model/baseUrl'",
    ),
    "network-policy-typo": ({"networkPolicy": {"enable": False}}, "'enable' not allowed"),
}


@pytest.mark.parametrize("case", sorted(BAD_VALUES))
def test_values_schema_rejects_wrong_values(tools: Path, tmp_path: Path, case: str) -> None:
    values, expected = BAD_VALUES[case]
    path = values_file(tmp_path, values)
    res = run([tools / "helm", "template", "x", CHART, *OFFLINE, "-f", path], dict(os.environ))
    assert res.returncode != 0
    assert SCHEMA_ERROR in res.stderr and expected in res.stderr, res.stderr


INCONSISTENT_VALUES = {
    "replicas-without-peering": (
        {"peering": {"enabled": False}},
        "replicaCount > 1 needs peering.enabled",
    ),
    "summarizer-outside-watched": (
        {"watchNamespaces": ["team-a"], "summarizer": {"namespace": "team-b"}},
        'summarizer.namespace "team-b" is not in watchNamespaces',
    ),
    "gate-timeout-not-below-the-stores": (
        {"chroma": {"bundled": {"enabled": True}}, "summarizer": {"store": {"timeoutSeconds": 8}}},
        "must be longer than chroma.bundled.auth.forwardTimeoutSeconds",
    ),
    "openai-without-endpoint": (
        {"summarizer": {"model": {"backend": "openai"}}},
        "summarizer.model.backend openai needs summarizer.model.baseUrl",
    ),
    # values-neo.yaml with only the endpoint changed (neo's default host): every pass would
    # be refused with MemoryDestinationNotAllowed, so the chart says so first.
    "embedding-endpoint-not-allowed": (
        {"summarizer": {"embedding": {"provider": "openai", "baseUrl": "http://ollama:11434/v1"}},
         "operator": {"allowedModelUrls": ["http://lmstudio.models.svc:1234/v1"]}},
        "summarizer.embedding.baseUrl http://ollama:11434/v1 may not receive the memories: "
        "add it to operator.allowedModelUrls",
    ),
    "model-endpoint-not-allowed": (
        {"summarizer": {"model": {"backend": "openai", "model": "m",
                                  "baseUrl": "http://vllm.models.svc:8000/v1"}}},
        "summarizer.model.baseUrl http://vllm.models.svc:8000/v1 may not receive the memories",
    ),
    "endpoint-allowed-only-by-a-longer-prefix": (
        {"summarizer": {"model": {"backend": "openai", "model": "m", "baseUrl": "http://v:8000"}},
         "operator": {"allowedModelUrls": ["http://v:8000/v1"]}},
        "summarizer.model.baseUrl http://v:8000 may not receive the memories",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(INCONSISTENT_VALUES))
def test_values_that_contradict_each_other_fail_with_a_message(
    tools: Path, tmp_path: Path, case: str
) -> None:
    values, expected = INCONSISTENT_VALUES[case]
    path = values_file(tmp_path, values)
    res = run([tools / "helm", "template", "x", CHART, *OFFLINE, "-f", path], dict(os.environ))
    assert res.returncode != 0
    assert expected in res.stderr, res.stderr


# --- values the schema accepts reach the operator as settings it loads --------------------

SCHEMA = json.loads((CHART / "values.schema.json").read_text())


def operator_settings(tools: Path, values: dict[str, Any]) -> Any:
    """The operator's settings as the Pod would load them from the rendered Deployment, or
    the render's error message: a value the schema accepts must give one or the other, never
    a Pod the operator refuses to start in (a crash loop)."""
    from controller.config import OperatorConfig

    res = run(
        [tools / "helm", "template", "x", CHART, *OFFLINE, "-f", "-"],
        dict(os.environ),
        input=yaml.safe_dump(values),
    )
    if res.returncode != 0:
        return res.stderr
    (deployment,) = of_kind(docs_of(res.stdout), "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {
        e["name"].removeprefix("SSO_").lower(): e["value"]
        for e in container["env"]
        if e["name"].startswith("SSO_") and "value" in e and not e["value"].startswith("$(")
    }
    return OperatorConfig(**env)


def _within(prop: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Numbers the schema property `prop` accepts, its bounds and huge ones included."""
    low = prop.get("minimum", prop.get("exclusiveMinimum", 0))
    high = prop.get("maximum", 10**12)
    ints = st.integers(math.ceil(low), high).filter(lambda n: n != prop.get("exclusiveMinimum"))
    if prop["type"] == "integer":
        return ints
    floats = st.floats(low, high, exclude_min="exclusiveMinimum" in prop, allow_nan=False)
    return st.one_of(ints, floats)


INTEGER_SETTINGS = {
    name: prop
    for name, prop in SCHEMA["properties"]["operator"]["properties"].items()
    if prop["type"] == "integer"
}


@settings(max_examples=60, deadline=None)
@given(st.fixed_dictionaries({}, optional={k: _within(p) for k, p in INTEGER_SETTINGS.items()}))
def test_every_integer_setting_the_schema_accepts_reaches_the_operator(
    tools: Path, values: dict[str, Any]
) -> None:
    """Helm reads a values file's numbers as floats and prints one of a million or more as
    1e+06, which an integer setting refuses: the Pod would crash-loop."""
    loaded = operator_settings(tools, {"operator": values})
    assert not isinstance(loaded, str), loaded
    for name, value in values.items():
        field = re.sub(r"[A-Z]", lambda m: "_" + m.group(0).lower(), name)
        assert getattr(loaded, field) == value, name


CLAIM_SETTINGS = ("claimTtlSeconds", "claimMarginSeconds", "claimRenewSeconds")


@settings(max_examples=60, deadline=None)
@given(
    st.fixed_dictionaries(
        {},
        optional={
            k: _within(SCHEMA["properties"]["operator"]["properties"][k] | {"type": "number"})
            for k in CLAIM_SETTINGS
        },
    )
)
def test_claim_timings_the_operator_refuses_fail_the_render_with_a_message(
    tools: Path, values: dict[str, Any]
) -> None:
    """The operator refuses a renew period not below claimTtlSeconds - claimMarginSeconds (a
    pass would stop writing before its first renewal); the chart must say so at install,
    not leave a Pod that stops at start."""
    loaded = operator_settings(tools, {"operator": values})
    if isinstance(loaded, str):
        assert "shorter than operator.claimTtlSeconds - operator.claimMarginSeconds" in loaded


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(["allowedEndpoints", "allowedModelUrls"]).flatmap(
        lambda key: st.tuples(
            st.just(key),
            st.from_regex(
                SCHEMA["properties"]["operator"]["properties"][key]["items"]["pattern"],
                fullmatch=True,
            ).filter(lambda u: len(u) <= 2048),
        )
    )
)
def test_every_url_prefix_the_schema_accepts_is_one_the_operator_reads(
    tools: Path, setting: tuple[str, str]
) -> None:
    """operator.allowedEndpoints and allowedModelUrls: a prefix the schema lets through must
    be one the operator reads, with nothing else (a comma would split it), or its Pod stops
    at start (a crash loop) on its own allowlist."""
    key, prefix = setting
    loaded = operator_settings(tools, {"operator": {key: [prefix]}})
    assert not isinstance(loaded, str) or SCHEMA_ERROR in loaded, loaded
    if not isinstance(loaded, str):
        field = re.sub(r"[A-Z]", lambda m: "_" + m.group(0).lower(), key)
        assert [p.text for p in getattr(loaded, field)] == [prefix]


def test_no_secret_is_readable_unless_the_values_name_it(control_plane: ControlPlane) -> None:
    """A secrets rule with empty resourceNames would grant every Secret: it must not exist."""
    docs = render(control_plane, "sec", "chart-validate")
    rules = [r for role in of_kind(docs, "ClusterRole") for r in role["rules"]]
    assert [r for r in rules if "secrets" in r["resources"]] == []
    docs = render(control_plane, "sec", "chart-validate", "--set", "chroma.authSecret.name=tok")
    rules = [r for role in of_kind(docs, "ClusterRole") for r in role["rules"]]
    [secrets] = [r for r in rules if "secrets" in r["resources"]]
    assert secrets == {
        "apiGroups": [""],
        "resources": ["secrets"],
        "resourceNames": ["tok"],
        "verbs": ["get"],
    }


# --- install and uninstall ----------------------------------------------------------------


def _labelled(cp: ControlPlane, release: str, namespace: str | None) -> list[str]:
    """Every object of any listable kind labelled with the release, in namespace (or
    cluster-scoped kinds when namespace is None)."""
    scope = "--namespaced=true" if namespace else "--namespaced=false"
    kinds = cp.kubectl_run("api-resources", "--verbs=list", scope, "-o", "name").stdout.split()
    where = ["-n", namespace] if namespace else []
    out = cp.kubectl_run(
        "get", ",".join(kinds), *where, "-l", f"{INSTANCE}={release}", "-o", "name"
    )
    return out.stdout.split()


INSTALL_CASES = {
    "cluster-wide-with-bundled-chroma": ["-f", str(KIND_VALUES)],
    "namespaced": [
        *("--set", "watchNamespaces={chart-install-ns}", "--set", "replicaCount=1"),
        *("--set-json", 'networkPolicy.chromaTo=[{"ipBlock":{"cidr":"10.0.0.7/32"}}]'),
    ],
}


@pytest.mark.usefixtures("chart_crds")
@pytest.mark.parametrize("case", sorted(INSTALL_CASES))
def test_install_succeeds_and_uninstall_leaves_only_the_crds(
    control_plane: ControlPlane, case: str
) -> None:
    cp = control_plane
    ns = "chart-install" if case.startswith("cluster") else "chart-install-ns"
    release = "inst"
    ensure_namespace(cp, ns)
    helm(cp, "install", release, CHART, "-n", ns, *INSTALL_CASES[case])
    try:
        created = docs_of(helm(cp, "get", "manifest", release, "-n", ns).stdout)
        kinds = {d["kind"] for d in created}
        assert {"Deployment", "ServiceAccount", "ClusterRole", "PodDisruptionBudget"} <= kinds
        assert {"SessionSummarizer", "ValidatingAdmissionPolicy"} <= kinds
        if case.startswith("cluster"):
            assert {"StatefulSet", "ClusterKopfPeering", "NetworkPolicy", "Secret"} <= kinds
            # The API server's address and port, discovered at install.
            [policy] = [d for d in created if d["metadata"]["name"] == f"{release}-{CHART.name}"
                        and d["kind"] == "NetworkPolicy"]  # fmt: skip
            api = policy["spec"]["egress"][0]
            assert api["to"] == [{"ipBlock": {"cidr": "192.0.2.10/32"}}]
            assert {"port": cp.api_port, "protocol": "TCP"} in api["ports"]
        else:
            assert {"Role", "RoleBinding", "KopfPeering"} <= kinds
        for d in created:  # everything the chart rendered exists and carries the label
            where = ["-n", d["metadata"]["namespace"]] if "namespace" in d["metadata"] else []
            got = kubectl(cp, "get", d["kind"], d["metadata"]["name"], *where, "-o", "json")
            assert got.returncode == 0, got.stderr
            assert json.loads(got.stdout)["metadata"]["labels"][INSTANCE] == release
        assert len(_labelled(cp, release, ns)) >= len([d for d in created if "namespace" in d])
    finally:
        helm(cp, "uninstall", release, "-n", ns, "--wait", "--timeout", "60s")
    # What stays, as docs/install.md says: the default SessionSummarizer (helm.sh/resource-
    # policy keep: it carries the operator's finalizer), the bundled Chroma's token (kept, so
    # agents keep theirs across a reinstall), and the CRDs.
    kept = ["sessionsummarizer.memorycore.io/default"]
    if case.startswith("cluster"):
        kept.insert(0, f"secret/{release}-session-summary-operator-chroma-token")
    assert sorted(_labelled(cp, release, ns)) == sorted(kept)
    assert _labelled(cp, release, None) == []
    for d in created:
        where = ["-n", d["metadata"]["namespace"]] if "namespace" in d["metadata"] else []
        got = kubectl(cp, "get", d["kind"], d["metadata"]["name"], *where, "-o", "json")
        if d["kind"] in ("SessionSummarizer", "Secret"):
            assert "deletionTimestamp" not in json.loads(got.stdout)["metadata"]
            continue
        assert got.returncode != 0 and "NotFound" in got.stderr, (d["kind"], got.stdout)
    for obj in kept:  # no operator ran here: no finalizer to wait for
        cp.kubectl_run("-n", ns, "delete", obj)
    releases = kubectl(cp, "get", "secrets", "-n", ns, "-l", f"owner=helm,name={release}")
    assert "No resources found" in releases.stderr
    # What stays, as docs/install.md says: the CRDs (Helm never deletes them).
    for crd in ("sessionsummaries.memorycore.io", "sessionsummarizers.memorycore.io"):
        assert kubectl(cp, "get", "crd", crd).returncode == 0


@pytest.mark.usefixtures("chart_crds")
def test_the_bundled_chromas_token_is_generated_once_kept_and_allowed_only_there(
    control_plane: ControlPlane,
) -> None:
    cp, ns, release = control_plane, "chart-token", "tok"
    ensure_namespace(cp, ns)
    secret_name = f"{release}-session-summary-operator-chroma-token"

    def token_secret() -> dict[str, Any]:
        return dict(
            json.loads(cp.kubectl_run("-n", ns, "get", "secret", secret_name, "-o", "json").stdout)
        )

    helm(cp, "install", release, CHART, "-n", ns, "-f", KIND_VALUES)
    try:
        first = token_secret()
        token = base64.b64decode(first["data"]["token"]).decode()
        assert len(token) == 48 and token.isalnum()
        helm(
            cp,
            "upgrade",
            release,
            CHART,
            "-n",
            ns,
            "-f",
            KIND_VALUES,
            "--set-string",
            "podAnnotations.x=1",
        )
        assert token_secret()["data"] == first["data"]  # an upgrade keeps it
        summarizer = json.loads(
            cp.kubectl_run("-n", ns, "get", "ssumr", "default", "-o", "json").stdout
        )["spec"]
        assert summarizer["store"]["authSecretRef"] == {"name": secret_name, "key": "token"}
        # Its owner (the chart) allows exactly the bundled Chroma's URL.
        annotations = first["metadata"]["annotations"]
        use = SecretUse("store.authSecretRef", ns, secret_name, summarizer["store"]["url"])
        assert judge_secret(use, annotations[ALLOWED_URLS_ANNOTATION]).allowed
        elsewhere = SecretUse("store.authSecretRef", ns, secret_name, "http://evil.example:8000")
        assert not judge_secret(elsewhere, annotations[ALLOWED_URLS_ANNOTATION]).allowed
        manifest = docs_of(helm(cp, "get", "manifest", release, "-n", ns).stdout)
        [sts] = of_kind(manifest, "StatefulSet")
        containers = {c["name"]: c for c in sts["spec"]["template"]["spec"]["containers"]}
        assert "127.0.0.1" in containers["chroma"]["args"]  # only the gate reaches Chroma
        assert "ports" not in containers["chroma"]
        assert containers["gate"]["ports"][0]["containerPort"] == 8000
    finally:
        helm(cp, "uninstall", release, "-n", ns, "--wait", "--timeout", "60s")
    assert token_secret()["data"] == first["data"]  # kept on uninstall for a reinstall
    helm(cp, "install", release, CHART, "-n", ns, "-f", KIND_VALUES)
    try:
        assert token_secret()["data"] == first["data"]  # adopted, same token
    finally:
        helm(cp, "uninstall", release, "-n", ns, "--wait", "--timeout", "60s")
        cp.kubectl_run("-n", ns, "delete", f"secret/{secret_name}", "ssumr/default")


def _peers(rule: dict[str, Any], key: str) -> list[dict[str, Any]]:
    peers = rule.get(key)
    assert peers, f"a rule without {key!r} admits everyone: {rule}"
    return list(peers)


def test_the_network_policies_admit_only_what_the_values_name(control_plane: ControlPlane) -> None:
    docs = render(
        control_plane, "np", "chart-validate", "-f", KIND_VALUES,
        "--set", "networkPolicy.chromaClientNamespaces={agents}",
    )  # fmt: skip
    policies = {p["metadata"]["name"]: p["spec"] for p in of_kind(docs, "NetworkPolicy")}
    operator, chroma = (
        policies["np-session-summary-operator"],
        policies["np-session-summary-operator-chroma"],
    )
    [deployment] = of_kind(docs, "Deployment")
    operator_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert operator["podSelector"]["matchLabels"].items() <= operator_labels.items()
    assert sorted(operator["policyTypes"]) == sorted(chroma["policyTypes"]) == ["Egress", "Ingress"]
    # The operator: ingress only to the metrics port from the scrape path.
    [metrics] = operator["ingress"]
    assert metrics["ports"] == [{"port": 9090, "protocol": "TCP"}]
    assert _peers(metrics, "from")[0]["podSelector"]["matchLabels"] == {
        "app.kubernetes.io/name": "prometheus"
    }
    # Chroma: only the operator's Pods and the agents' namespace, on the gate's port; no egress.
    [ingress] = chroma["ingress"]
    peers = _peers(ingress, "from")
    assert peers[0] == {"podSelector": {"matchLabels": operator["podSelector"]["matchLabels"]}}
    assert peers[1]["namespaceSelector"]["matchExpressions"][0]["values"] == ["agents"]
    assert len(peers) == 2 and ingress["ports"] == [{"port": 8000, "protocol": "TCP"}]
    assert chroma["egress"] == []
    # The operator's egress: the API server, the cluster DNS's Pods, the bundled Chroma's
    # Pods; no model egress unless listed.
    api, dns, to_chroma = operator["egress"]
    assert api == {
        "to": [{"ipBlock": {"cidr": "10.96.0.1/32"}}],
        "ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}],
    }
    assert _peers(dns, "to")[0]["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}
    assert {p["port"] for p in dns["ports"]} == {53}
    assert (
        _peers(to_chroma, "to")[0]["podSelector"]["matchLabels"]
        == chroma["podSelector"]["matchLabels"]
    )


def documented_values(tmp_path: Path) -> dict[str, list[str]]:
    """Every combination of values the docs show: each YAML block of docs/ made only of
    chart values (docs/install.md's my-values.yaml, docs/security.md's examples), alone and
    with each of the chart's values files, and the chart tests' own cases."""
    top = set(yaml.safe_load((CHART / "values.yaml").read_text()))
    blocks = {}
    for doc in sorted((REPO_ROOT / "docs").glob("*.md")):
        for n, match in enumerate(re.finditer(r"```yaml\n(.*?)```", doc.read_text(), re.S)):
            with contextlib.suppress(yaml.YAMLError):
                values = yaml.safe_load(match.group(1))
                if isinstance(values, dict) and values and set(values) <= top:
                    name = f"{doc.stem}-{n}"
                    blocks[name] = ["-f", str(values_file(tmp_path, values, f"{name}.yaml"))]
    files = {"default": [], "kind": ["-f", str(KIND_VALUES)], "neo": ["-f", str(NEO_VALUES)]}
    combos = {f"{f}+{b}": [*fa, *ba] for f, fa in files.items() for b, ba in blocks.items()}
    return {**files, **combos, **VALIDATION_CASES}


def test_no_egress_rule_lacks_a_destination_in_any_documented_values(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    """A rule without `to` admits every address on its ports (docs/security.md): the chart
    renders none, nor an empty peer, nor a rule to every address."""
    cases = documented_values(tmp_path)
    assert {"default+install-0", "neo+security-0"} <= cases.keys(), sorted(cases)
    for case, args in cases.items():
        res = helm(control_plane, "template", "np", CHART, "-n", "agents", *OFFLINE, *args,
                   check="+" not in case)  # fmt: skip
        if res.returncode != 0:  # a block that lists other model URLs than the file's endpoint
            assert "may not receive the memories" in res.stderr, (case, res.stderr)
            continue
        policies = of_kind(docs_of(res.stdout), "NetworkPolicy")
        operator = [p for p in policies if p["metadata"]["name"] == "np-session-summary-operator"]
        assert len(operator) == (0 if "networkPolicy.enabled=false" in args else 1), case
        for policy in policies:
            for rule in policy["spec"].get("egress") or []:
                peers = _peers(rule, "to")
                assert all(peers), (case, rule)
                anywhere = {p.get("ipBlock", {}).get("cidr") for p in peers}
                assert not anywhere & {"0.0.0.0/0", "::/0"}, (case, rule)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ([], "networkPolicy.apiServer.cidrs is required"),
        (
            ["--set-json", 'networkPolicy.apiServer.cidrs=["10.96.0.1/32"]',
             "--set", "chroma.url=https://chroma.example.com"],
            "networkPolicy.chromaTo is required",
        ),
        (
            [*OFFLINE, "--set-json", 'networkPolicy.modelEgress=[{"ports":[{"port":443}]}]'],
            "missing property 'to'",
        ),
    ],
    ids=["api-server", "external-chroma", "model-rule"],
)  # fmt: skip
def test_without_a_destination_helm_template_fails_and_says_which_value(
    tools: Path, values: list[str], message: str
) -> None:
    res = run([tools / "helm", "template", "x", CHART, *values], dict(os.environ))
    assert res.returncode != 0 and message in res.stderr, res.stderr


# --- Pod Security ---------------------------------------------------------------------------


def _pod_from(workload: dict[str, Any], name: str, namespace: str) -> dict[str, Any]:
    template = copy.deepcopy(workload["spec"]["template"])
    spec = template["spec"]
    for claim in workload["spec"].get("volumeClaimTemplates", []):
        volume_name = claim["metadata"]["name"]
        spec.setdefault("volumes", []).append(
            {"name": volume_name, "persistentVolumeClaim": {"claimName": f"{volume_name}-{name}"}}
        )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": template["metadata"]["labels"],
        },
        "spec": spec,
    }


def test_pod_templates_are_admitted_at_the_restricted_pod_security_level(
    control_plane: ControlPlane,
) -> None:
    cp = control_plane
    ns = "chart-psa"
    ensure_namespace(
        cp,
        ns,
        {
            "pod-security.kubernetes.io/enforce": "restricted",
            "pod-security.kubernetes.io/enforce-version": "latest",
        },
    )
    docs = render(cp, "psa", ns, "-f", KIND_VALUES)
    # No controller-manager here: ServiceAccounts are not created for us.
    for sa in ("default", of_kind(docs, "ServiceAccount")[0]["metadata"]["name"]):
        kubectl(cp, "-n", ns, "create", "serviceaccount", sa)
    workloads = of_kind(docs, "Deployment") + of_kind(docs, "StatefulSet")
    assert len(workloads) == 2
    for workload in workloads:
        pod = _pod_from(workload, workload["metadata"]["name"] + "-0", ns)
        res = kubectl(cp, "create", "--dry-run=server", "-f", "-", input=json.dumps(pod))
        assert res.returncode == 0, f"{workload['kind']}: {res.stderr}"
        assert "(server dry run)" in res.stdout and "violate" not in res.stderr

    # The control: the same pod, privileged-escalation allowed, is refused in this namespace.
    pod = _pod_from(of_kind(docs, "Deployment")[0], "escalating", ns)
    pod["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
    res = kubectl(cp, "create", "--dry-run=server", "-f", "-", input=json.dumps(pod))
    assert res.returncode != 0
    assert 'violates PodSecurity "restricted:latest"' in res.stderr
    assert "allowPrivilegeEscalation != false" in res.stderr


# --- least privilege: the operator with the chart's ServiceAccount ------------------------

LP_NS = "chart-rbac"
LP_RELEASE = "lp"
LP_REPLICA = "chart-rbac-0"
LP_MEMORY, LP_SESSIONS = "chart-rbac-memory", "chart-rbac-sessions"


@dataclass
class ChartOperator:
    """The chart installed namespaced; the operator as a local process with the chart's
    ServiceAccount token, the args and environment of the chart's Deployment."""

    cp: ControlPlane
    chroma: ChromaServer
    service_account: str
    kubeconfig: Path
    log: Path
    metrics_port: int
    health_port: int

    def as_operator(self, *args: str) -> subprocess.CompletedProcess[str]:
        return kubectl(self.cp, *args, kubeconfig=self.kubeconfig)

    def can_i(self, *args: str) -> str:
        return self.as_operator("auth", "can-i", *args, "-n", LP_NS).stdout.strip()

    def store(self) -> MemoryStore:
        loc = StoreLocation(
            url=self.chroma.url, memory_collection=LP_MEMORY, summary_collection=LP_SESSIONS
        )
        return MemoryStore(connect(loc), loc)

    def summary_object(self, session_id: str) -> dict[str, Any] | None:
        res = kubectl(
            self.cp, "-n", LP_NS, "get", "ssum", summary_object_name(session_id), "-o", "json"
        )
        return json.loads(res.stdout) if res.returncode == 0 else None

    def wait_summarized(self, session_id: str, timeout: float = 90) -> dict[str, Any]:
        def done() -> dict[str, Any] | None:
            obj = self.summary_object(session_id)
            status = (obj or {}).get("status") or {}
            ok = obj is not None and status.get("phase") == "Summarized"
            return (
                obj
                if ok and status.get("observedGeneration") == obj["metadata"]["generation"]
                else None
            )

        return wait_for(done, timeout, 0.3, message=f"{session_id} Summarized", log=self.log)

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.read().decode()


def _chart_container(cp: ControlPlane) -> dict[str, Any]:
    manifest = docs_of(helm(cp, "get", "manifest", LP_RELEASE, "-n", LP_NS).stdout)
    [deployment] = of_kind(manifest, "Deployment")
    return dict(deployment["spec"]["template"]["spec"]["containers"][0])


@pytest.fixture(scope="module")
def chart_operator(
    control_plane: ControlPlane,
    chroma_server: ChromaServer,
    chart_crds: None,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ChartOperator]:
    cp = control_plane
    workdir = tmp_path_factory.mktemp("chart-rbac")
    ensure_namespace(cp, LP_NS)
    for name, key in (("chroma-token", "token"), ("model-key", "api-key"), ("unrelated", "x")):
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": name,
                "namespace": LP_NS,
                "annotations": {"memorycore.io/allowed-urls": chroma_server.url},
            },
            "data": {key: base64.b64encode(f"{name}-value".encode()).decode()},
        }
        cp.kubectl_run("apply", "-f", "-", input=json.dumps(secret))
    values = {
        "watchNamespaces": [LP_NS],
        "operator": {"sweepTickSeconds": 1, "retryBaseSeconds": 0.5, "retryMaxSeconds": 5},
        # The test Chroma has no auth: the token is read (RBAC) and sent, and ignored.
        "chroma": {"url": chroma_server.url, "authSecret": {"name": "chroma-token"}},
        "summarizer": {
            "store": {"memoryCollection": LP_MEMORY, "summaryCollection": LP_SESSIONS},
            "model": {"apiKeySecret": {"name": "model-key"}},
            "sweep": {"intervalSeconds": 5, "idleSeconds": 0},
        },
    }
    helm(cp, "install", LP_RELEASE, CHART, "-n", LP_NS, "-f", values_file(workdir, values))
    proc = None
    log = workdir / "operator.log"
    try:
        container = _chart_container(cp)
        service_account = f"{LP_RELEASE}-session-summary-operator"
        kubeconfig = cp.service_account_kubeconfig(
            LP_NS, service_account, workdir / "sa.kubeconfig"
        )
        metrics_port, health_port = free_port(), free_port()
        env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
        assert env["SSO_NAMESPACES"] == LP_NS
        # The kubelet expands $(POD_IP); the local process serves on loopback instead.
        assert env["SSO_METRICS_ADDRESS"] == "$(POD_IP)"
        env.update(
            SSO_REPLICA_ID=LP_REPLICA,
            SSO_METRICS_PORT=str(metrics_port),
            SSO_METRICS_ADDRESS="127.0.0.1",
            HOME=str(workdir),
        )
        args = list(container["args"])
        args[args.index("--liveness") + 1] = f"http://127.0.0.1:{health_port}/healthz"
        assert "--standalone" not in args and "--peering" in args
        proc = spawn(
            [sys.executable, "-m", "controller", "run", *args],
            log,
            env=dict(cp.env(), KUBECONFIG=str(kubeconfig), **env),
            cwd=REPO_ROOT,
        )
        op = ChartOperator(
            cp, chroma_server, service_account, kubeconfig, log, metrics_port, health_port
        )
        yield op
    finally:
        if proc is not None:
            stop(proc)
            print("operator (chart ServiceAccount) log tail:\n" + tail(log, 60))
        helm(cp, "uninstall", LP_RELEASE, "-n", LP_NS, check=False)
        _release_finalizers(cp, "sessionsummarizers.memorycore.io", LP_NS)
        kubectl(cp, "-n", LP_NS, "delete", "sessionsummarizers.memorycore.io", "--all")


def test_the_operator_with_the_chart_service_account_does_its_whole_job(
    chart_operator: ChartOperator,
) -> None:
    op, cp = chart_operator, chart_operator.cp
    now = int(time.time() * 1000)
    swept, sunset = "chart-rbac-swept", "chart-rbac-sunset"
    load(
        op.store(), [interaction(swept, i, now - 600_000 + i, f"Swept step {i}") for i in range(3)]
    )
    load(
        op.store(),
        [interaction(sunset, i, now - 300_000 + i, f"Sunset step {i}") for i in range(4)],
    )

    # The agent's sunset step (its own credentials), then the operator's work as the SA.
    res = subprocess.run(
        [sys.executable, "-m", "controller", "sunset", sunset, "-n", LP_NS, "--wait", "90"],
        env=cp.env(),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stdout + res.stderr + tail(op.log)
    assert op.wait_summarized(sunset)["status"]["memoryCount"] == 4
    by_sweep = op.wait_summarized(swept)  # created by the sweep: RBAC create
    assert by_sweep["spec"]["trigger"] == "sweep" and by_sweep["status"]["writer"] == LP_REPLICA

    rows = op.store().summaries().get(ids=[f"summary_{swept}", f"summary_{sunset}"])
    assert sorted(rows["ids"]) == sorted([f"summary_{swept}", f"summary_{sunset}"])
    # Who wrote each is in its ledger entry (the row carries only what readers use).
    stored = [op.store().stored_summary(s) for s in (swept, sunset)]
    assert {kept[1]["writer"] for kept in stored if kept} == {LP_REPLICA}

    def summarizer_with_leader() -> dict[str, Any] | None:
        obj = json.loads(
            cp.kubectl_run("-n", LP_NS, "get", "ssumr", "default", "-o", "json").stdout
        )
        # activeReplica is the peering reporter's: written a poll after kopf registers.
        return obj if (obj.get("status") or {}).get("activeReplica") else None

    summarizer = wait_for(summarizer_with_leader, 30, 0.3, message="activeReplica", log=op.log)
    # The sweep timer's finalizer: why the chart keeps this object on helm uninstall.
    assert "memorycore.io/session-summary-operator" in summarizer["metadata"]["finalizers"]
    status = summarizer["status"]
    assert status["activeReplica"] == LP_REPLICA
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions["StoreReachable"] == "True"
    peering = cp.kubectl_run(
        "-n", LP_NS, "get", "kopfpeerings.kopf.dev", "session-summary-operator", "-o", "json"
    )
    assert LP_REPLICA in (json.loads(peering.stdout).get("status") or {})
    events = json.loads(cp.kubectl_run("-n", LP_NS, "get", "events", "-o", "json").stdout)
    reasons = {(e["involvedObject"]["name"], e["reason"]) for e in events["items"]}
    assert (summary_object_name(sunset), "Summarized") in reasons

    metrics = op.metrics()
    summarized = re.search(
        r'^session_summary_summaries_total\{result="summarized"\} (\S+)$', metrics, re.M
    )
    assert summarized and float(summarized.group(1)) >= 2
    # The gauge follows the peering object, polled every few seconds: eventually 1 here.
    active = f'session_summary_active_replica{{replica="{LP_REPLICA}"}} 1.0'
    wait_for(lambda: active in op.metrics(), 30, 0.5, message=f"{active}", log=op.log)
    with urllib.request.urlopen(f"http://127.0.0.1:{op.health_port}/healthz", timeout=5) as r:
        assert r.status == 200

    # What a user sees: printer columns by plural, short name and category.
    for resource in ("sessionsummaries", "ssum"):
        lines = cp.kubectl_run("-n", LP_NS, "get", resource).stdout.splitlines()
        assert lines[0].split() == [
            "NAME", "PHASE", "READY", "SESSION", "MEMORIES", "SUMMARIZED", "AGE",
        ]  # fmt: skip
        row = next(line.split() for line in lines if line.startswith(summary_object_name(sunset)))
        assert row[1:5] == ["Summarized", "True", sunset, "4"]
    wide = cp.kubectl_run("-n", LP_NS, "get", "ssum", "-o", "wide").stdout.splitlines()[0].split()
    assert wide[-2:] == ["TITLE", "REASON"]
    everything = cp.kubectl_run("-n", LP_NS, "get", "memorycore", "-o", "name").stdout.split()
    assert f"sessionsummary.memorycore.io/{summary_object_name(sunset)}" in everything
    assert "sessionsummarizer.memorycore.io/default" in everything

    # Retention deletes the finished objects (RBAC delete); the summaries stay in Chroma.
    cp.kubectl_run(
        "-n", LP_NS, "patch", "ssumr", "default", "--type", "merge",
        "-p", '{"spec": {"retention": {"summarizedTTLSeconds": 1}}}',
    )  # fmt: skip
    wait_for(
        lambda: op.summary_object(sunset) is None and op.summary_object(swept) is None,
        60,
        0.5,
        message="retention deleting the objects",
        log=op.log,
    )
    assert (
        len(op.store().summaries().get(ids=[f"summary_{swept}", f"summary_{sunset}"])["ids"]) == 2
    )

    log = op.log.read_text()
    for refused in ("Forbidden", " 403", "Not enough permissions"):
        assert refused not in log, f"{refused!r} in the operator log:\n{tail(op.log, 80)}"


# The operator's needs, as `kubectl auth can-i` answers them for the chart's ServiceAccount.
ALLOWED = [
    ("get", "secret/chroma-token"),  # named in chroma.authSecret
    ("get", "secret/model-key"),  # named in summarizer.model.apiKeySecret
    ("create", "sessionsummaries.memorycore.io"),  # the sweep
    ("patch", "sessionsummaries.memorycore.io"),  # claims, the sweep, kopf's annotations
    ("delete", "sessionsummaries.memorycore.io"),  # retention
    ("patch", "sessionsummaries.memorycore.io", "--subresource=status"),
    ("watch", "sessionsummarizers.memorycore.io"),
    ("patch", "sessionsummarizers.memorycore.io"),  # kopf's annotations; spec: see below
    ("patch", "sessionsummarizers.memorycore.io", "--subresource=status"),
    ("create", "events"),
    ("create", "kopfpeerings.kopf.dev"),
    ("patch", "kopfpeerings.kopf.dev/session-summary-operator"),
]
REFUSED = [
    ("get", "secret/unrelated"),
    ("list", "secrets"),
    ("watch", "secrets"),
    ("create", "secrets"),
    ("get", "configmaps"),
    ("list", "pods"),
    ("create", "deployments.apps"),
    ("create", "sessionsummarizers.memorycore.io"),
    ("delete", "sessionsummarizers.memorycore.io"),
    ("update", "sessionsummarizers.memorycore.io"),
    ("patch", "kopfpeerings.kopf.dev/someone-elses"),
    ("delete", "kopfpeerings.kopf.dev"),
    ("create", "roles.rbac.authorization.k8s.io"),
    ("patch", "clusterkopfpeerings.kopf.dev"),
    ("*", "*"),
]


def test_the_chart_service_account_is_refused_what_the_operator_does_not_need(
    chart_operator: ChartOperator,
) -> None:
    op, cp = chart_operator, chart_operator.cp
    answers = {" ".join(q): op.can_i(*q) for q in ALLOWED + REFUSED}
    print("\n".join(f"can-i {q}: {a}" for q, a in answers.items()))
    assert {q: a for q, a in answers.items() if a != "yes"} == {" ".join(q): "no" for q in REFUSED}
    assert (
        op.as_operator("auth", "can-i", "list", "sessionsummaries", "-n", "default").stdout.strip()
        == "no"
    )

    # Real calls, not only the authorizer's opinion: 403 from the apiserver.
    got = op.as_operator("-n", LP_NS, "get", "secret", "unrelated")
    assert got.returncode != 0
    assert got.stderr.strip() == (
        'Error from server (Forbidden): secrets "unrelated" is forbidden: User '
        f'"system:serviceaccount:{LP_NS}:{op.service_account}" cannot get resource "secrets" '
        f'in API group "" in the namespace "{LP_NS}"'
    )
    got = op.as_operator("-n", LP_NS, "create", "deployment", "x", "--image=busybox")
    assert got.returncode != 0
    assert 'cannot create resource "deployments" in API group "apps"' in got.stderr

    # patch on SessionSummarizers exists for kopf's annotations; the spec stays the user's.
    spec = op.as_operator(
        "-n", LP_NS, "patch", "ssumr", "default", "--type", "merge",
        "-p", '{"spec": {"sweep": {"enabled": false}}}',
    )  # fmt: skip
    print(spec.stderr)
    assert spec.returncode != 0
    assert "never its spec" in spec.stderr and "denied request" in spec.stderr, spec.stderr
    sweep = json.loads(cp.kubectl_run("-n", LP_NS, "get", "ssumr", "default", "-o", "json").stdout)
    assert sweep["spec"]["sweep"]["enabled"] is True
    note = op.as_operator("-n", LP_NS, "annotate", "--overwrite", "ssumr", "default", "test/note=1")
    assert note.returncode == 0, note.stderr


@pytest.mark.usefixtures("chart_crds")
def test_cluster_wide_rbac_reads_only_the_named_secrets_in_every_namespace(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    cp = control_plane
    ns, release = "chart-rbac-cw", "cw"
    ensure_namespace(cp, ns)
    helm(
        cp, "install", release, CHART, "-n", ns, "--set", "chroma.authSecret.name=chroma-token",
        "--set-json", 'networkPolicy.chromaTo=[{"ipBlock":{"cidr":"10.0.0.7/32"}}]',
    )  # fmt: skip
    try:
        sa = f"{release}-session-summary-operator"
        kubeconfig = cp.service_account_kubeconfig(ns, sa, tmp_path / "sa.kubeconfig")

        def can_i(*args: str) -> str:
            return kubectl(cp, "auth", "can-i", *args, kubeconfig=kubeconfig).stdout.strip()

        assert can_i("list", "sessionsummaries.memorycore.io", "--all-namespaces") == "yes"
        assert can_i("delete", "sessionsummaries.memorycore.io", "-n", "elsewhere") == "yes"
        assert can_i("patch", "clusterkopfpeerings.kopf.dev/session-summary-operator") == "yes"
        assert can_i("get", "secret/chroma-token", "-n", "elsewhere") == "yes"
        assert can_i("get", "secret/other", "-n", "elsewhere") == "no"
        assert can_i("list", "secrets", "--all-namespaces") == "no"
        assert can_i("list", "namespaces") == "no"  # kopf lists them only for a namespace list
        assert can_i("patch", "clusterkopfpeerings.kopf.dev/default") == "no"
        assert can_i("delete", "sessionsummarizers.memorycore.io", "-n", "elsewhere") == "no"
        assert can_i("create", "deployments.apps", "-n", ns) == "no"
    finally:
        helm(cp, "uninstall", release, "-n", ns, check=False)
