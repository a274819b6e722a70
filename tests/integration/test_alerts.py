"""The chart's alerts and dashboard, checked with the real tools: the PrometheusRule the chart
renders passes `promtool check rules`, and `promtool test rules` (tests/alerts/rules_test.yaml)
with one test per alert that fires and one that stays quiet; the Grafana dashboard's queries
parse (promtool) and, like the alerts, read only metrics the operator exports."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from devenv.controlplane import REPO_ROOT, tools_bin_dir
from tests.integration.harness import CHART_OFFLINE
from tests.support.promql import exported_names, grafana_to_promql, metric_names

CHART = REPO_ROOT / "charts" / "session-summary-operator"
RULE_TESTS = REPO_ROOT / "tests" / "alerts" / "rules_test.yaml"
DASHBOARD = CHART / "dashboards" / "session-summary-operator.json"


def tool(name: str) -> Path:
    return tools_bin_dir() / name


def run(*argv: Any, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=180, cwd=cwd, check=False
    )


def render(*values: str, show: str) -> dict[str, Any]:
    res = run(
        tool("helm"), "template", "sso", CHART, "-n", "agents", *CHART_OFFLINE, *values,
        "--show-only", show,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    return dict(yaml.safe_load(res.stdout))


@pytest.fixture(scope="module")
def rules(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The chart's PrometheusRule (release sso in agents, default thresholds) as a rule file,
    with the unit tests beside it."""
    rule = render("--set", "prometheusRule.enabled=true", show="templates/prometheusrule.yaml")
    assert rule["kind"] == "PrometheusRule" and rule["metadata"]["namespace"] == "agents"
    where = tmp_path_factory.mktemp("alerts")
    (where / "rules.yaml").write_text(yaml.safe_dump(rule["spec"]))
    shutil.copy(RULE_TESTS, where / "rules_test.yaml")
    return where


def alerts(rules: Path) -> dict[str, dict[str, Any]]:
    groups = yaml.safe_load((rules / "rules.yaml").read_text())["groups"]
    return {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}


def test_the_alert_rules_pass_promtool_check_and_their_unit_tests(rules: Path) -> None:
    checked = run(tool("promtool"), "check", "rules", "rules.yaml", cwd=rules)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alerts(rules))} rules found" in checked.stdout
    tested = run(tool("promtool"), "test", "rules", "rules_test.yaml", cwd=rules)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_every_alert_has_a_unit_test_that_fires_and_one_that_stays_quiet(rules: Path) -> None:
    fires: set[str] = set()
    quiet: set[str] = set()
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for check in case.get("alert_rule_test") or []:
            (fires if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = set(alerts(rules))
    assert names == set(docs_alerts()), "docs/operations.md and the chart list other alerts"
    assert not names - fires, f"no firing test: {sorted(names - fires)}"
    assert not names - quiet, f"no quiet test: {sorted(names - quiet)}"


def docs_alerts() -> list[str]:
    text = (REPO_ROOT / "docs" / "operations.md").read_text()
    section = text.split("### Alerts", 1)[1].split("\n## ", 1)[0]
    return [line.split("`")[1] for line in section.splitlines() if line.startswith("| `Session")]


def test_alerts_can_be_left_out_and_scoped_to_another_selector() -> None:
    rule = render(
        "--set", "prometheusRule.enabled=true",
        "--set", "prometheusRule.disabled={SessionSummarySweepStalled}",
        "--set", 'prometheusRule.selector=service="mine"',
        show="templates/prometheusrule.yaml",
    )  # fmt: skip
    found = {r["alert"]: r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]}
    assert "SessionSummarySweepStalled" not in found and len(found) == 9
    assert all('service="mine"' in expr and "job=" not in expr for expr in found.values())


def dashboard_queries() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    for var in board["templating"]["list"]:
        query = var.get("query")
        if isinstance(query, dict) and query.get("query", "").startswith("label_values("):
            inner = query["query"][len("label_values(") : -1].rsplit(",", 1)[0]
            queries.append(inner)
    return queries


def test_the_dashboard_and_the_alerts_read_only_metrics_the_operator_exports(rules: Path) -> None:
    exported = exported_names()
    used = {name: "dashboard" for q in dashboard_queries() for name in metric_names(q)}
    used |= {
        name: f"alert {a}" for a, r in alerts(rules).items() for name in metric_names(r["expr"])
    }
    unknown = {name: where for name, where in used.items() if name not in exported}
    assert not unknown, f"not exported by the operator: {unknown}"
    # The check sees what the queries read: every family of ours is on the dashboard.
    ours = {n for n in used if n.startswith("session_summary_")}
    assert len(ours) >= 15, sorted(ours)


def test_every_dashboard_query_is_valid_promql(tmp_path: Path) -> None:
    recording = [
        {"record": f"dashboard:query_{i}", "expr": grafana_to_promql(q)}
        for i, q in enumerate(dashboard_queries())
    ]
    (tmp_path / "queries.yaml").write_text(
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": recording}]})
    )
    checked = run(tool("promtool"), "check", "rules", "queries.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_dashboard_configmap_carries_the_grafana_sidecar_label() -> None:
    cm = render(
        "--set", "grafanaDashboard.enabled=true",
        "--set", "grafanaDashboard.annotations.grafana_folder=AI",
        show="templates/grafana-dashboard.yaml",
    )  # fmt: skip
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "AI"}
    board = json.loads(cm["data"]["session-summary-operator.json"])
    assert board == json.loads(DASHBOARD.read_text())


def test_the_metric_name_reader_finds_metrics_not_functions_or_labels() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, class) (rate(x_seconds_bucket{a="b{c}", d=~"$v"}'
        "[$__rate_interval]))) / on() group_left sum(y_total offset 5m) > 1e6 and up"
    )
    assert metric_names(expr) == {"x_seconds_bucket", "y_total", "up"}


THRESHOLDS = {
    name: prop
    for name, prop in json.loads((CHART / "values.schema.json").read_text())["properties"][
        "prometheusRule"
    ]["properties"].items()
    if prop.get("type") in ("integer", "number")
}


def _threshold(prop: dict[str, Any]) -> st.SearchStrategy[Any]:
    low = prop.get("minimum", prop.get("exclusiveMinimum", 0))
    high = prop.get("maximum", 10**12)
    ints = st.integers(math.ceil(low), math.floor(high)).filter(
        lambda n: n != prop.get("exclusiveMinimum")
    )
    if prop["type"] == "integer":
        return ints
    floats = st.floats(low, high, exclude_min="exclusiveMinimum" in prop, allow_nan=False)
    return st.one_of(ints, floats)


@settings(max_examples=25, deadline=None)
@given(st.fixed_dictionaries({k: _threshold(p) for k, p in THRESHOLDS.items()}))
def test_every_threshold_the_schema_accepts_renders_rules_promtool_loads(
    thresholds: dict[str, Any],
) -> None:
    """Helm reads a values file's numbers as floats and prints a million or more as 1e+06: a
    duration like [1e+06m] would make the whole PrometheusRule unloadable."""
    values = {"prometheusRule": {"enabled": True, **thresholds}}
    res = subprocess.run(
        [str(tool("helm")), "template", "sso", str(CHART), "-n", "agents", *CHART_OFFLINE,
         "-f", "-", "--show-only", "templates/prometheusrule.yaml"],
        input=yaml.safe_dump(values), capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    with tempfile.TemporaryDirectory() as where:
        path = Path(where) / "rules.yaml"
        path.write_text(yaml.safe_dump(yaml.safe_load(res.stdout)["spec"]))
        checked = run(tool("promtool"), "check", "rules", path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
