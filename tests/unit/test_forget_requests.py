"""Who asked for a forget or a rebuild (session_summary.asked_by), what another namespace's object
is told of a forget (session_summary.forgotten_by_another), and summaryctl's refusal to
delete memories unconfirmed (cli/commands.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.api import REQUESTED_BY
from controller.cli.args import CliError
from controller.cli.main import build_parser
from controller.core.ledger import FORGOTTEN_BY_KEY, FORGOTTEN_KEY
from controller.core.text import one_line
from controller.handlers.session_summary import asked_by, forgotten_by_another

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


OWNER = {
    "metadata": {"namespace": "ops", "name": "ssum-s1", "generation": 2},
    "spec": {"sessionId": "s1"},
    "status": {"phase": "Summarized", "observedGeneration": 2, "memoryCount": 3, "title": "T"},
}
# Any value a Chroma metadata field (or the JSON of another writer) can hold.
SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text()
METADATA_VALUES = SCALARS | st.lists(SCALARS, max_size=3)


@given(METADATA_VALUES, METADATA_VALUES | st.just("SessionSummary b/ssum-s1"))
def test_any_tombstone_tells_the_owner_in_one_line_naming_no_unreadable_field(
    forgotten_at: object, forgotten_by: object
) -> None:
    tombstone = {"sessionId": "s1", FORGOTTEN_KEY: forgotten_at, FORGOTTEN_BY_KEY: forgotten_by}
    status = forgotten_by_another(OWNER, tombstone)  # never an error: the sweep timer runs it
    message = status["message"]
    assert status["phase"] == "Forgotten" and status["memoryCount"] is None
    assert message == one_line(message) and message.isprintable(), message
    if type(forgotten_at) is not int:
        assert "forgotten at an unknown time through" in message, message
    named = forgotten_by == "SessionSummary b/ssum-s1"
    assert f"through {forgotten_by};" in message if named else "another SessionSummary;" in message


@given(st.text(min_size=1))
def test_who_asked_never_reaches_another_namespaces_object(annotation: str) -> None:
    """A forget's tombstone names its object, not the requested-by annotation; a tombstone
    written with an annotation in it (another writer) is not quoted either."""
    asked = f"{annotation}, through SessionSummary b/ssum-s1"
    tombstone = {FORGOTTEN_KEY: 1_770_000_000_000, FORGOTTEN_BY_KEY: asked}
    message = forgotten_by_another(OWNER, tombstone)["message"]
    assert message == (
        "session 's1' was forgotten at 2026-02-02T02:40:00Z through another SessionSummary; "
        "a sunset here summarizes it again if memories remain"
    )
    said = asked_by({"metadata": {"annotations": {REQUESTED_BY: annotation}}})
    assert said == one_line(said) and len(said) <= 200
