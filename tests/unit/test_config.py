"""Operator settings from the environment (controller/config.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from controller.config import OperatorConfig

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
