"""Memory rows the operator cannot act on are counted by the walk and reported, never
dropped unseen: a sessionId that is not text (or blank, or too long), a sunset marker whose
timestamp is not a number. A number said (prompt, thought, response) is read as text."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.api import SessionSummarizerStatus
from controller.core.chunking import memory_text
from controller.core.memories import SUNSET_MARKER_TYPE, memory_from_row
from controller.core.sweep_plan import (
    IGNORED_IDS_SHOWN,
    IgnoredRows,
    ReconcileCycle,
    row_problem,
)
from controller.core.visibility import (
    SessionSources,
    VisibilityRules,
    row_visibility,
    union_agents,
)
from controller.status.conditions import memory_rows, with_conditions

NOW = 2_000_000_000_000
# What Chroma stores as a metadata value besides text.
NOT_TEXT = st.one_of(
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
)
SESSION_IDS = st.text(st.characters(codec="utf-8"), min_size=1, max_size=40).filter(str.strip)
TIMES = st.one_of(st.integers(10**12, 2 * 10**12), st.floats(1e12, 2e12))
TEXT_TIMES = st.one_of(
    st.datetimes().map(lambda d: d.isoformat()), st.integers(10**12, 2 * 10**12).map(str)
)
TYPES = st.sampled_from(["agent-interaction", "implementation_plan", SUNSET_MARKER_TYPE])


def kind(value: object) -> str:
    return "a boolean" if isinstance(value, bool) else "a number"


def walk(metas: list[dict[str, Any]]) -> ReconcileCycle:
    """The walk over these rows, as MemoryStore.rows_from hands them to it."""
    cycle = ReconcileCycle(0)
    rows = [
        (m.get("sessionId") if isinstance(m.get("sessionId"), str) else None, NOW, f"r{i}")
        for i, m in enumerate(metas)
    ]
    cycle.fold([(*row, row_problem(m)) for row, m in zip(rows, metas, strict=True)], NOW)
    return cycle


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(SESSION_IDS, TIMES, TYPES), max_size=12),
    st.lists(st.tuples(NOT_TEXT, TIMES, TYPES), min_size=1, max_size=12),
)
def test_every_row_whose_session_id_is_not_text_is_counted_with_its_kind_and_reported(
    good: list[tuple[str, Any, str]], bad: list[tuple[Any, Any, str]]
) -> None:
    metas = [{"sessionId": s, "timestamp": t, "type": k} for s, t, k in good + bad]
    cycle = walk(metas)
    assert sum(cycle.counts.values()) == len(good)
    found = {p: r.count for p, r in cycle.ignored.items()}
    expected: dict[str, int] = {}
    for value, _, _ in bad:
        problem = f"has a sessionId that is {kind(value)}, not text, so never summarized"
        expected[problem] = expected.get(problem, 0) + 1
    assert found == expected
    cond = memory_rows(cycle.ignored, len(metas))
    assert (cond.status, cond.reason) == ("False", "IgnoredMemoryRows")
    assert cond.message.startswith(f"ignored {len(bad)} of {len(metas)} memory rows: ")
    for problem, count in expected.items():
        assert f"{count} where the row {problem} (memory ids " in cond.message
    assert all(len(r.ids) == min(r.count, IGNORED_IDS_SHOWN) for r in cycle.ignored.values())


@settings(max_examples=300, deadline=None)
@given(SESSION_IDS, st.one_of(TEXT_TIMES, st.booleans(), st.none()))
def test_a_sunset_marker_whose_timestamp_is_not_a_number_is_reported(
    session_id: str, stamp: object
) -> None:
    meta = {"sessionId": session_id, "type": SUNSET_MARKER_TYPE}
    if stamp is not None:
        meta["timestamp"] = stamp
    problem = row_problem(meta)
    assert problem is not None and "sunset marker whose timestamp is not a number" in problem
    # The same row as a memory is summarized: its time is read whatever its shape.
    assert row_problem({**meta, "type": "agent-interaction"}) is None


@settings(max_examples=300, deadline=None)
@given(SESSION_IDS, TIMES, TYPES)
def test_a_usable_row_is_not_reported_and_a_clean_walk_says_so(
    session_id: str, stamp: object, type_: str
) -> None:
    cycle = walk([{"sessionId": session_id, "timestamp": stamp, "type": type_}])
    assert cycle.ignored == {}
    cond = memory_rows({}, 1)
    assert (cond.status, cond.reason) == ("True", "AllRowsUsable")


def test_a_walk_that_no_longer_finds_ignored_rows_clears_the_condition() -> None:
    bad = memory_rows({"has a blank sessionId, so never summarized": IgnoredRows(1, ["r0"])}, 3)
    assert bad.message == (
        "ignored 1 of 3 memory rows: 1 where the row has a blank sessionId, so never "
        "summarized (memory ids 'r0')"
    )
    status = with_conditions(SessionSummarizerStatus(), [bad])
    status = with_conditions(status, [memory_rows({}, 2)])
    [cond] = [c for c in status.conditions or [] if c.type == "MemoryRowsUsable"]
    assert (cond.status, cond.reason) == ("True", "AllRowsUsable")


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(["prompt", "thought", "response"]),
    st.one_of(st.booleans(), st.integers(-(2**53), 2**53)),
)
def test_a_number_or_boolean_said_is_summarized_as_neo_renders_it(key: str, value: object) -> None:
    """neo's document renders each part as `${value}`: a number or boolean part is text."""
    meta: dict[str, Any] = {"sessionId": "s", "timestamp": NOW, "prompt": "Count them."}
    meta[key] = value
    memory = memory_from_row("m", None, meta)
    assert memory is not None
    shown = ("true" if value else "false") if isinstance(value, bool) else str(value)
    assert getattr(memory, key) == shown
    assert f": {shown}" in memory_text(memory)


def test_a_float_said_reads_as_javascript_writes_it() -> None:
    for value, shown in ((1.5, "1.5"), (2.0, "2"), (1e21, "1e+21"), (-0.25, "-0.25")):
        memory = memory_from_row("m", None, {"sessionId": "s", "timestamp": NOW, "response": value})
        assert memory is not None and memory.response == shown


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.booleans(), st.integers(-(2**53), 2**53)))
def test_a_number_user_id_tags_a_private_summary_as_neo_reads_it(user: object) -> None:
    """neo's normalizeUserId is String(userId): a row of user 42 is user "42"'s, and under
    `private` its summary must not go untagged (visible to every user)."""
    sources = SessionSources()
    sources.add("m1", {"sessionId": "s", "userId": user}, NOW)
    shown = ("true" if user else "false") if isinstance(user, bool) else str(user)
    private = VisibilityRules(memory_sharing="private")
    assert row_visibility(sources, private)["userId"] == shown


# Every value JSON (so a Chroma metadata value) can hold.
SCALARS = st.one_of(st.none(), st.text(max_size=12), NOT_TEXT)


def as_neo_lists(value: object) -> str | None:
    """A row's agent or model as neo's summary writer lists it: `if (m.agent)
    extractedAgents.add(m.agent)`, joined with "," (String(value)); ours stripped."""
    if value in (None, False, 0, ""):
        return None
    said = memory_from_row("m", None, {"sessionId": "s", "timestamp": NOW, "response": value})
    assert said is not None  # String(value), as the parts are read (checked above)
    return said.response.strip() or None


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(["agent", "model", "agentIdentity"]), SCALARS)
def test_a_rows_agent_model_and_identity_are_read_as_neo_reads_them(
    key: str, value: object
) -> None:
    """A number or boolean agent or model is a participant or model as neo lists it; an
    agentIdentity counts only as text (neo: typeof agentIdentity === 'string'), so a number
    there is an anonymous row, the stricter (unclassified) tier."""
    meta: dict[str, Any] = {"sessionId": "s", "timestamp": NOW, key: value}
    memory = memory_from_row("m", "doc", meta)
    sources = SessionSources()
    sources.add("m", meta, NOW)
    assert memory is not None
    identity = value if isinstance(value, str) and value else None
    if key == "agentIdentity":
        assert sources.identities == ({identity: 1} if identity else {})
        assert sources.anonymous == (0 if identity else 1)
        shown = identity.strip() or None if identity else None
        assert memory.agent_identity == shown
        assert list(sources.names) == ([shown] if shown else [])
        return
    shown = as_neo_lists(value)
    assert getattr(memory, key) == shown
    assert list(sources.names if key == "agent" else sources.models) == ([shown] if shown else [])
    if key == "agent" and shown and not isinstance(value, str):
        assert union_agents([], sources.names) == [shown]
