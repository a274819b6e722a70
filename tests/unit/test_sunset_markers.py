"""Sunset markers: the decisions of the marker scan (controller.core.sweep_plan), the marker's
exclusion from summaries, and what the scan reports on the SessionSummarizer."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.api import Condition, SessionSummarizerStatus, SessionSummarySpec
from controller.core.memories import SUNSET_MARKER_TYPE, Memory, is_excluded, memory_from_row
from controller.core.sweep_plan import (
    StoredSummaryState,
    SunsetMarker,
    collect_activity,
    collect_markers,
    covered_by_summary,
    is_stale,
    marker_action,
    not_acted_on,
)
from controller.status.conditions import sunset_markers, with_conditions

REPO = Path(__file__).resolve().parents[2]
T = 1_760_000_000_123  # a marker's timestamp (ms)


def summary_object(in_flight: bool, last_memory_at_ms: int | None) -> dict[str, Any]:
    """The session's SessionSummary as the marker scan reads it: a pass asked for (Pending)
    or done, and status.lastMemoryAt (RFC 3339, whole seconds as the status writes it)."""
    status: dict[str, Any] = {"phase": "Pending" if in_flight else "Summarized"}
    if last_memory_at_ms is not None:
        at = dt.datetime.fromtimestamp(last_memory_at_ms // 1000, dt.UTC)
        status["lastMemoryAt"] = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"metadata": {"generation": 1}, "status": {**status, "observedGeneration": 1}}


def marker_memory(**meta: object) -> Memory:
    row = {"sessionId": "s", "timestamp": T, "type": SUNSET_MARKER_TYPE, **meta}
    memory = memory_from_row("sunset-s", "session sunset", row)
    assert memory is not None
    return memory


@pytest.mark.parametrize("excluded", [(), ("heartbeat",), ("context-refresh", "tick")])
def test_a_sunset_marker_is_never_summarized_whatever_the_excluded_types_say(
    excluded: tuple[str, ...],
) -> None:
    memory = marker_memory(prompt="Summarize me: this text must not reach the summary")
    assert is_excluded(memory, excluded)


def test_the_newest_marker_of_each_session_counts_and_markers_without_a_session_are_listed() -> (
    None
):
    markers, invalid = collect_markers(
        [
            ("m1", "a", 10),
            ("m2", "a", 30),
            ("m3", "b", 20),
            ("m4", "a", 5),
            ("bad-missing", None, 40),
            ("bad-blank", "   ", 41),
            ("bad-long", "x" * 1025, 42),
            ("bad-number", 7, 43),
        ]
    )
    assert markers == {"a": SunsetMarker("a", 30), "b": SunsetMarker("b", 20)}
    assert invalid == {
        "bad-blank": "has a blank sessionId",
        "bad-long": "has a sessionId longer than 1024 characters",
        "bad-missing": "has no sessionId (metadata sessionId must be the session's id)",
        "bad-number": "has a sessionId that is a number, not text",
    }


def test_a_marker_already_acted_on_is_not_acted_on_again_but_a_newer_one_is() -> None:
    markers = {
        "done": SunsetMarker("done", 100),
        "again": SunsetMarker("again", 300),
        "new-late": SunsetMarker("new-late", 250),
        "new-early": SunsetMarker("new-early", 50),
    }
    acted = {"done": 100, "again": 200}
    # Oldest first: under the cap, the longest-waiting markers go first.
    assert [m.session_id for m in not_acted_on(markers, acted)] == [
        "new-early",
        "new-late",
        "again",
    ]


def test_a_summary_written_after_a_pass_that_read_the_marker_covers_it() -> None:
    marker = SunsetMarker("s", T)
    assert covered_by_summary(marker, StoredSummaryState(memory_count=7, timestamp_ms=T))
    assert not covered_by_summary(marker, StoredSummaryState(memory_count=6, timestamp_ms=T - 1))
    assert not covered_by_summary(marker, StoredSummaryState(memory_count=6, timestamp_ms=None))
    assert not covered_by_summary(marker, None)


def test_a_summarized_marker_never_reads_as_stale_so_it_causes_no_resummary() -> None:
    """The pass that read the marker stores memoryCount = every row of the session (the
    marker included) and timestamp = the newest row (the marker): the sweep's staleness
    check, which compares both with the store, then finds nothing to do."""
    rows_with_marker = 7
    stored = StoredSummaryState(memory_count=rows_with_marker, timestamp_ms=T)
    assert not is_stale(T, stored, rows_with_marker)


def test_a_marker_asks_for_a_pass_unless_one_is_under_way_or_already_saw_it() -> None:
    marker = SunsetMarker("s", T)
    assert marker_action(marker, None) == "request"
    assert marker_action(marker, summary_object(True, None)) == "wait"
    assert marker_action(marker, summary_object(True, T + 5000)) == "wait"
    # The last finished pass saw rows up to before the marker: ask again.
    assert marker_action(marker, summary_object(False, T - 2000)) == "request"
    assert marker_action(marker, summary_object(False, None)) == "request"
    # It saw the marker (lastMemoryAt has whole seconds) and wrote no summary: an empty or
    # unknown session. Asking again would only repeat that.
    assert marker_action(marker, summary_object(False, T - T % 1000)) == "done"
    assert marker_action(marker, summary_object(False, T + 60_000)) == "done"


def test_the_sunset_marker_trigger_is_accepted_by_the_model_and_both_crd_copies() -> None:
    spec = SessionSummarySpec(session_id="s", trigger="sunset-marker")
    assert spec.to_api()["trigger"] == "sunset-marker"
    for crd in (
        REPO / "crds" / "sessionsummaries.memorycore.io.yaml",
        REPO
        / "charts"
        / "session-summary-operator"
        / "crds"
        / "sessionsummaries.memorycore.io.yaml",
    ):
        doc = yaml.safe_load(crd.read_text())
        props = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
        assert "sunset-marker" in props["spec"]["properties"]["trigger"]["enum"], crd


def test_a_marker_scan_that_did_nothing_writes_nothing() -> None:
    assert sunset_markers([], []) is None


def test_requested_summaries_show_as_sunset_markers_true_naming_the_sessions() -> None:
    cond = sunset_markers(["agent-1", "agent-2"], [])
    assert cond is not None
    status = with_conditions(SessionSummarizerStatus(), [cond])
    [cond] = status.conditions or []
    assert (cond.type, cond.status, cond.reason) == ("SunsetMarkers", "True", "SummaryRequested")
    assert cond.message == (
        "requested summaries of 2 session(s) with a sunset marker: 'agent-1', 'agent-2'"
    )


def test_a_marker_without_a_session_turns_sunset_markers_false_and_says_which_memory() -> None:
    many = [f"s{i}" for i in range(7)]
    cond = sunset_markers(many, ["memory 'm-9' has a blank sessionId"])
    assert cond is not None
    assert (cond.status, cond.reason) == ("False", "InvalidSunsetMarker")
    assert cond.message.startswith(
        "ignored 1 sunset marker(s) that name no session: memory 'm-9' has a blank sessionId; "
        "requested summaries of 7 session(s)"
    )
    assert cond.message.endswith("'s4' and 2 more")


def test_the_marker_condition_keeps_the_other_owners_conditions() -> None:
    swept = Condition(type="Swept", status="True", reason="SweepOK", message="ok")
    before = SessionSummarizerStatus(conditions=[swept], watermark=5)
    cond = sunset_markers(["a"], [])
    assert cond is not None
    after = with_conditions(before, [cond])
    assert {c.type for c in after.conditions or []} == {"Swept", "SunsetMarkers"}
    assert after.watermark == 5


def test_rows_whose_session_id_cannot_name_an_object_are_left_out_of_the_sweep() -> None:
    """The CRD refuses a blank or over-long sessionId: the sweep would fail creating it."""
    rows = [("ok", 5), ("", 6), ("   ", 7), ("x" * 1025, 8), ("x" * 1024, 9)]
    assert sorted(collect_activity(rows, now_ms=10**12)) == ["ok", "x" * 1024]
