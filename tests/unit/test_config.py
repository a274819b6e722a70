"""Operator settings from the environment (controller/config.py)."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from unittest import mock

import pytest
import yaml
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from controller.api import SessionSummarizerSpec
from controller.backends import check_endpoint, check_memory_destinations
from controller.config import OperatorConfig, load
from controller.core.destinations import DestinationRefused

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def settings(monkeypatch: pytest.MonkeyPatch, **env: str) -> OperatorConfig:
    for key in [k for k in os.environ if k.startswith("SSO_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return OperatorConfig()


def test_defaults_and_an_empty_variable_counts_as_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = settings(monkeypatch, SSO_WORKERS="", SSO_REPLICA_ID="")
    assert cfg.workers == 32 and cfg.claim_ttl_seconds == 60 and cfg.namespaces == ()
    assert cfg.replica_id  # hostname-pid
    assert cfg.peering_priority is None  # chosen at start: kube/peering.py:joining_priority
    assert cfg.claim_retry_max_seconds == 30 and cfg.shutdown_seconds == 20


def test_namespaces_are_comma_separated(monkeypatch: pytest.MonkeyPatch) -> None:
    assert settings(monkeypatch, SSO_NAMESPACES=" agents, ops ,").namespaces == ("agents", "ops")


def test_a_pinned_priority_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    assert settings(monkeypatch, SSO_PEERING_PRIORITY="7").peering_priority == 7


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"SSO_WORKERS": "many"}, "SSO_WORKERS='many'"),
        ({"SSO_PEERING_LIFETIME": "0"}, "SSO_PEERING_LIFETIME='0'"),
        ({"SSO_CLAIM_TTL_SECONDS": "-1"}, "SSO_CLAIM_TTL_SECONDS='-1'"),
        ({"SSO_METRICS_PORT": "70000"}, "SSO_METRICS_PORT='70000'"),
        ({"SSO_CPU_SLOTS": "-1"}, "SSO_CPU_SLOTS='-1'"),
        ({"SSO_STORE_WRITE_SLOTS": "0"}, "SSO_STORE_WRITE_SLOTS='0'"),
        ({"SSO_NAMESPACES": "Bad NS,,@@"}, "SSO_NAMESPACES='Bad NS,,@@'"),
        ({"SSO_REPLICA_ID": "a\nb"}, "SSO_REPLICA_ID='a\\nb'"),
        ({"SSO_METRICS_ADDRESS": "not an address!"}, "SSO_METRICS_ADDRESS='not an address!'"),
        ({"SSO_ANNOTATION_PREFIX": "Bad Prefix/x"}, "SSO_ANNOTATION_PREFIX='Bad Prefix/x'"),
    ],
)
def test_an_invalid_variable_stops_the_operator_in_one_line_naming_it(
    env: dict[str, str], named: str
) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "controller", "run", "--help"],
        env={**os.environ, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1
    assert "Traceback" not in run.stderr
    assert run.stderr.strip().startswith("session-summary-operator: invalid settings:")
    assert named in run.stderr and len(run.stderr.strip().splitlines()) == 1


def test_a_claim_is_renewed_three_times_per_duration_unless_told(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert settings(monkeypatch, SSO_CLAIM_TTL_SECONDS="30").claim_renew_period == 10
    cfg = settings(monkeypatch, SSO_CLAIM_TTL_SECONDS="30", SSO_CLAIM_RENEW_SECONDS="4")
    assert cfg.claim_renew_period == 4


def test_a_renew_period_a_pass_cannot_keep_its_claim_with_stops_the_operator() -> None:
    env = {"SSO_CLAIM_TTL_SECONDS": "10", "SSO_CLAIM_RENEW_SECONDS": "8"}
    run = subprocess.run(
        [sys.executable, "-m", "controller", "run", "--help"],
        env={**os.environ, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1
    assert "claim renew period (8s) must be shorter than" in run.stderr
    assert "Traceback" not in run.stderr


def test_every_setting_has_a_row_in_the_configuration_docs() -> None:
    """docs/configuration.md is where a user looks a variable up: a setting without a row
    there is one nobody can find (SSO_ANNOTATION_PREFIX went without one)."""
    with open(os.path.join(ROOT, "docs", "configuration.md")) as f:
        rows = [line for line in f if line.startswith("| `SSO_")]
    documented = {
        name for row in rows for name in re.findall(r"`(SSO_[A-Z0-9_]+)`", row.split("|")[1])
    }
    settings_ = {f"SSO_{name.upper()}" for name in OperatorConfig.model_fields}
    assert sorted(settings_ - documented) == []


@pytest.mark.parametrize("field", ["allowed_model_urls", "allowed_endpoints"])
@pytest.mark.parametrize("kubeconfig", [None, "/home/me/.kube/config"])
def test_a_refusal_names_the_setting_where_the_operator_runs(
    monkeypatch: pytest.MonkeyPatch, field: str, kubeconfig: str | None
) -> None:
    """In a Pod (its service account): the chart value, which the chart turns into the
    variable; a local process (a kubeconfig, in a Pod or not): the variable itself."""
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    if kubeconfig is None:
        monkeypatch.delenv("KUBECONFIG", raising=False)
    else:
        monkeypatch.setenv("KUBECONFIG", kubeconfig)
    cfg = settings(monkeypatch, SSO_ALLOWED_ENDPOINTS="http://chroma:8000")
    said = cfg.setting(field)
    variable = f"SSO_{field.upper()}"
    if kubeconfig is None:
        value = said.removeprefix("the chart value operator.")
        chart = os.path.join(ROOT, "charts", "session-summary-operator")
        with open(os.path.join(chart, "values.yaml")) as fh:
            assert value in yaml.safe_load(fh)["operator"], said
        with open(os.path.join(chart, "templates", "deployment.yaml")) as fh:
            template = fh.read()
        assert f".Values.operator.{value} }}}}\n            - name: {variable}" in template
    else:
        assert said == f"{variable} in the operator process's environment"
    monkeypatch.setattr("controller.backends.CONFIG", cfg)
    spec = {"store": {"url": "http://chroma:8000"}, "model": {"backend": "openai",
            "baseUrl": "http://model:1/v1", "model": "m"}}  # fmt: skip
    with pytest.raises(DestinationRefused) as refused:
        if field == "allowed_endpoints":
            check_endpoint("model.baseUrl", "http://model:1/v1")
        else:
            check_memory_destinations(SessionSummarizerSpec.model_validate(spec), "agents")
    assert said in str(refused.value)
    assert ("chart value" in str(refused.value)) == (kubeconfig is None)


# Kubernetes' rules, stated here apart from controller/config.py: what each string setting
# becomes (a watch, annotation keys, kopf's identity and Events' reportingInstance, a socket).
def _label(s: str, limit: int = 63) -> bool:
    return (
        0 < len(s) <= limit
        and set(s) <= set("abcdefghijklmnopqrstuvwxyz0123456789-")
        and (s[0] != "-" and s[-1] != "-")
    )


def _subdomain(s: str) -> bool:
    return len(s) <= 253 and all(_label(part, 253) for part in s.split("."))


def _host(s: str) -> bool:
    try:
        ipaddress.ip_address(s)
        return True
    except ValueError:
        return _subdomain(s.lower())


RULES: tuple[tuple[str, Callable[[str], bool]], ...] = (
    ("SSO_NAMESPACES", lambda s: all(_label(n.strip()) for n in s.split(",") if n.strip())),
    ("SSO_ANNOTATION_PREFIX", _subdomain),
    ("SSO_REPLICA_ID", lambda s: 0 < len(s) <= 128 and all("!" <= c <= "~" for c in s)),
    ("SSO_METRICS_ADDRESS", _host),
)
_CHARS = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
_NEAR = st.sampled_from("az09-.:,A _@/%\n\t\x7fé") | _CHARS
_VALUES = st.one_of(
    st.text(_NEAR, min_size=1, max_size=20),
    st.from_regex(r"\A[a-z0-9]([-a-z0-9.]{0,300}[a-z0-9])?\Z", fullmatch=True),
    st.builds(lambda c, n: c * n, st.sampled_from(["a", "a.", "A", "1-"]), st.integers(1, 140)),
    st.ip_addresses().map(str),
    st.lists(st.from_regex(r"\A[a-z0-9]{1,3}\Z", fullmatch=True) | _NEAR, max_size=4).map(",".join),
)


def _loads(env: dict[str, str]) -> bool:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SSO_")}
    with mock.patch.dict(os.environ, {**clean, **env}, clear=True):
        try:
            load()
            return True
        except SystemExit as exc:  # one line, naming only this variable, the rule in words
            line = str(exc)
            assert line.count(" SSO_") == 1 and f" {next(iter(env))}=" in line, line
            assert "should match pattern" not in line and "Value error" not in line, line
            return False


def env_name(env: dict[str, str]) -> str:
    return next(iter(env)).removeprefix("SSO_")


@hsettings(max_examples=400, deadline=None)
@given(rule=st.sampled_from(RULES), value=_VALUES)
def test_a_string_setting_loads_exactly_when_kubernetes_would_take_it(
    rule: tuple[str, Callable[[str], bool]], value: str
) -> None:
    """A value the apiserver or the socket would refuse stops the operator at start, naming
    the variable; any value they take loads (SSO_NAMESPACES='Bad NS,,@@' became watches)."""
    name, kube_accepts = rule
    assert _loads({name: value}) == (value == "" or kube_accepts(value)), (name, value)


def test_the_defaults_and_the_charts_values_load() -> None:
    """The chart sets SSO_NAMESPACES from watchNamespaces (its schema: DNS-1123 labels, the
    same rule), SSO_REPLICA_ID from the Pod's name, SSO_METRICS_ADDRESS from its IP."""
    chart = os.path.join(ROOT, "charts", "session-summary-operator")
    with open(os.path.join(chart, "values.schema.json")) as fh:
        item = json.load(fh)["properties"]["watchNamespaces"]["items"]
    assert item["maxLength"] == 63 and item["pattern"] == "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
    for values in ("values.yaml", "values-kind.yaml", "values-neo.yaml"):
        with open(os.path.join(chart, values)) as fh:
            watched = (yaml.safe_load(fh) or {}).get("watchNamespaces") or []
        assert _loads({"SSO_NAMESPACES": ",".join(watched)}), values
    pod = "session-summary-operator-7d9f8b6c5d-x2k4q"
    assert _loads({"SSO_REPLICA_ID": pod, "SSO_METRICS_ADDRESS": "10.244.0.7"})
    assert _loads(
        {"SSO_METRICS_ADDRESS": "fd00:10:244::7", "SSO_ANNOTATION_PREFIX": "memorycore.io"}
    )
