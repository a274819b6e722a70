"""Who asked for a forget or a rebuild (status/requests.py), and summaryctl's refusal to
delete memories unconfirmed (cli/commands.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.cli.args import CliError
from controller.cli.main import build_parser
from controller.status.requests import REQUESTED_BY, asked_by

MANAGERS = st.sampled_from(["kubectl-client-side-apply", "kubectl-edit", "summaryctl", "kopf"])
TIMES = st.integers(0, 10**6).map(lambda s: f"2026-11-{1 + s % 28:02d}T{s % 24:02d}:00:00Z")


@given(st.lists(st.tuples(MANAGERS, TIMES, st.booleans()), max_size=6))
def test_the_last_manager_of_the_spec_is_the_one_named(
    entries: list[tuple[str, str, bool]],
) -> None:
    fields = [
        {"manager": m, "time": t, "fieldsV1": {"f:spec": {}} if spec else {"f:status": {}}}
        for m, t, spec in entries
    ]
    body = {"metadata": {"managedFields": fields}}
    spec_changes = sorted((t, m) for m, t, spec in entries if spec)
    said = asked_by(body)
    if not spec_changes:
        assert said == "unknown"
    else:
        last_time = spec_changes[-1][0]
        assert said in {f"field manager {m}" for t, m in spec_changes if t == last_time}


def test_summaryctls_annotation_wins_over_the_field_managers() -> None:
    body = {
        "metadata": {
            "annotations": {REQUESTED_BY: "ana via summaryctl (kubeconfig user ana)"},
            "managedFields": [{"manager": "kopf", "time": "2026-11-26T00:00:00Z",
                               "fieldsV1": {"f:spec": {}}}],
        }
    }  # fmt: skip
    assert asked_by(body) == "ana via summaryctl (kubeconfig user ana)"


def test_forget_with_memories_needs_a_confirmation_before_any_request() -> None:
    args = build_parser().parse_args(["forget", "s1", "--memories"])
    with pytest.raises(CliError, match="--yes"):
        args.func(args)  # refused before any API call: no cluster is reachable here
