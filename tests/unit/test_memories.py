import datetime as dt
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.core.memories import (
    DEFAULT_EXCLUDED_TYPES,
    JS_SAFE_INTEGER,
    UNIT_LIMITS,
    Memory,
    Watermark,
    is_excluded,
    memory_from_row,
    memory_sort_key,
    parse_timestamp_ms,
    render_interaction_document,
)
from controller.core.summary import StructuredSummary
from controller.core.summary_row import to_chroma_metadata

T0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z in epoch milliseconds
# The times a JavaScript Date holds (years -271821 to 275760): neo's readers render every
# summary's time with new Date(timestamp).toISOString(), which throws past it.
JS_DATE_MAX_MS = 8_640_000_000_000_000


def row(**meta: object) -> dict[str, object]:
    return {"sessionId": "s1", "timestamp": T0, **meta}


def memory(memory_id: str, timestamp_ms: int, **fields: object) -> Memory:
    return Memory(
        id=memory_id,
        session_id="s1",
        timestamp_ms=timestamp_ms,
        document="",
        **fields,
    )


def test_interaction_document_has_the_neo_layout() -> None:
    assert render_interaction_document("p", "t", "r") == (
        "User Prompt: p\nAgent Thought: t\nAgent Response: r"
    )


def test_null_document_is_rebuilt_from_metadata() -> None:
    meta = row(type="agent-interaction", prompt="Add retries", thought="hmm", response="Done")
    m = memory_from_row("m1", None, meta)
    assert m is not None
    assert m.document == "User Prompt: Add retries\nAgent Thought: hmm\nAgent Response: Done"
    assert (m.prompt, m.thought, m.response) == ("Add retries", "hmm", "Done")


def test_stored_document_is_kept_as_written() -> None:
    m = memory_from_row("m1", "the original text", row(prompt="p", response="r"))
    assert m is not None and m.document == "the original text"


def test_row_without_type_but_with_a_prompt_is_an_interaction() -> None:
    m = memory_from_row("m1", None, row(prompt="Fix the sweep", response="Fixed"))
    assert m is not None
    assert m.type == "agent-interaction"
    assert m.document.startswith("User Prompt: Fix the sweep\n")


def test_document_is_not_invented_for_other_memory_types() -> None:
    m = memory_from_row("m1", None, row(type="implementation_plan", prompt="plan"))
    assert m is not None
    assert m.type == "implementation_plan"
    assert m.document == ""


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2023-11-14T22:13:20Z", T0),
        ("2023-11-14T22:13:20.001Z", T0 + 1),
        ("2023-11-15T00:13:20+02:00", T0),
        ("2023-11-14T22:13:20", T0),  # naive means UTC
        ("2023-11-14 22:13:20.5", T0 + 500),
    ],
)
def test_iso_string_timestamps_are_accepted(value: str, expected: int) -> None:
    assert parse_timestamp_ms(value) == expected
    m = memory_from_row("m1", "doc", row(timestamp=value))
    assert m is not None and m.timestamp_ms == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (T0, T0),
        (float(T0) + 0.7, T0),
        (1_700_000_000, T0),  # epoch seconds
        (1_700_000_000.123, T0 + 123),
        (str(T0), T0),
        ("1700000000", T0),
        (" 1700000000.5 ", T0 + 500),
    ],
)
def test_numbers_and_digit_strings_are_epoch_milliseconds_or_seconds(
    value: object, expected: int
) -> None:
    assert parse_timestamp_ms(value) == expected


@pytest.mark.parametrize(
    "value", [None, True, "", "yesterday", "12:00", math.nan, math.inf, [T0], {"t": T0}]
)
def test_unusable_timestamps_are_none(value: object) -> None:
    assert parse_timestamp_ms(value) is None


@pytest.mark.parametrize(
    "meta",
    [
        None,
        {},
        {"timestamp": T0},
        {"sessionId": "", "timestamp": T0},
        {"sessionId": 7, "timestamp": T0},
        {"sessionId": "s1"},
        {"sessionId": "s1", "timestamp": "not a time"},
    ],
)
def test_row_without_session_or_usable_timestamp_is_skipped(meta: dict | None) -> None:
    assert memory_from_row("m1", "doc", meta) is None


@pytest.mark.parametrize(
    ("stored", "expected"),
    [
        ('["Edit", "Bash"]', ("Edit", "Bash")),
        (
            '[{"name": "Edit"}, {"toolAction": "Bash"}, {"other": 1}]',
            ("Edit", "Bash", "unknown_tool"),
        ),
        ('["{\\"name\\": \\"Grep\\"}", "Read"]', ("Grep", "Read")),
        ("Edit,Bash, Read", ("Edit", "Bash", "Read")),
        # not JSON: one name as neo reads it, split on commas as its readers split the key
        ("[Edit, Bash]", ("[Edit", "Bash]")),
        ("Edit,Edit,,Bash", ("Edit", "Bash")),
        ("x" * 60, ("x" * 50,)),
        ("", ()),
        (None, ()),
        (["Edit", "Bash"], ()),  # Chroma metadata holds no lists
        (5, ("5",)),
    ],
)
def test_tools_used_may_be_json_text_a_comma_list_or_absent(
    stored: object, expected: tuple[str, ...]
) -> None:
    m = memory_from_row("m1", "doc", row(toolsUsed=stored))
    assert m is not None and m.tools_used == expected


@pytest.mark.parametrize(
    ("stored", "expected"),
    [(3, 3), (3.0, 3), ("4", 4), ("4.0", 4), ("many", 0), (None, 0), (-2, 0), (math.nan, 0)],
)
def test_tool_call_count_may_be_int_float_or_text(stored: object, expected: int) -> None:
    m = memory_from_row("m1", "doc", row(amountToolCalls=stored))
    assert m is not None and m.tool_calls == expected


def test_missing_optional_fields_are_empty() -> None:
    m = memory_from_row("m1", "doc", row())
    assert m is not None
    assert (m.agent, m.model, m.agent_identity) == (None, None, None)
    assert (m.prompt, m.thought, m.response, m.tool_calls, m.tools_used) == ("", "", "", 0, ())


def test_optional_fields_are_read() -> None:
    meta = row(agent="claude", model="opus", userId="u1", agentIdentity="neo-1", amountToolCalls=2)
    m = memory_from_row("m1", "doc", meta)
    assert m is not None
    assert (m.agent, m.model, m.agent_identity) == ("claude", "opus", "neo-1")


def test_memories_are_ordered_by_time_then_id() -> None:
    a, b, c = memory("b", 5), memory("a", 5), memory("z", 4)
    assert sorted([a, b, c], key=memory_sort_key) == [c, b, a]


def test_watermark_covers_everything_up_to_and_including_its_memory() -> None:
    mark = Watermark.of(memory("m5", 100))
    assert (mark.timestamp_ms, mark.memory_id) == (100, "m5")
    assert not mark.after(memory("m5", 100))
    assert not mark.after(memory("m4", 100))
    assert not mark.after(memory("zz", 99))
    assert mark.after(memory("m6", 100))  # same millisecond, later id
    assert mark.after(memory("a", 101))


@pytest.mark.parametrize("kind", sorted(DEFAULT_EXCLUDED_TYPES))
def test_default_excluded_types_are_left_out(kind: str) -> None:
    assert is_excluded(memory("m", 1, type=kind), DEFAULT_EXCLUDED_TYPES)


def test_configured_types_replace_the_defaults() -> None:
    assert is_excluded(memory("m", 1, type="implementation_plan"), {"implementation_plan"})
    assert not is_excluded(memory("m", 1, type="tick"), {"implementation_plan"})


@pytest.mark.parametrize(
    "prompt",
    ["<system-reminder>Remember the rules", "  <SYSTEM-REMINDER> x", "[Context Refresh] summary"],
)
def test_injected_context_is_left_out(prompt: str) -> None:
    assert is_excluded(memory("m", 1, prompt=prompt), ())


def test_user_who_mentions_a_marker_is_still_summarized() -> None:
    prompt = "Why does the harness add <system-reminder> blocks?"
    assert not is_excluded(memory("m", 1, prompt=prompt), DEFAULT_EXCLUDED_TYPES)
    assert not is_excluded(memory("m", 1, prompt="Add retries"), DEFAULT_EXCLUDED_TYPES)


def test_interaction_with_only_some_fields_still_gets_the_full_layout() -> None:
    m = memory_from_row("m1", None, row(type="agent-interaction", prompt="Only a prompt"))
    assert m is not None
    assert m.document == "User Prompt: Only a prompt\nAgent Thought: \nAgent Response: "


def test_empty_document_is_rebuilt_like_a_null_one() -> None:
    meta = row(type="agent-interaction", prompt="Add retries", response="Done")
    from_empty, from_null = memory_from_row("m1", "", meta), memory_from_row("m1", None, meta)
    assert from_empty is not None and from_null is not None
    assert from_empty.document == from_null.document
    assert from_empty.document.startswith("User Prompt: Add retries\n")


def test_epoch_seconds_and_milliseconds_rows_are_the_same_moment() -> None:
    in_seconds = memory_from_row("m1", "doc", row(timestamp=1_700_000_000))
    in_millis = memory_from_row("m1", "doc", row(timestamp=T0))
    in_iso = memory_from_row("m1", "doc", row(timestamp="2023-11-14T22:13:20Z"))
    assert in_seconds is not None and in_millis is not None and in_iso is not None
    assert in_seconds.timestamp_ms == in_millis.timestamp_ms == in_iso.timestamp_ms == T0


def test_seconds_and_milliseconds_are_told_apart_at_the_documented_limit() -> None:
    # Below 10^11 a number is seconds (up to the year 5138), from 10^11 on milliseconds (1973+).
    assert parse_timestamp_ms(99_999_999_999) == 99_999_999_999_000
    assert parse_timestamp_ms(100_000_000_000) == 100_000_000_000


# Every class of input the parser reads a time from, at the edges of each magnitude band
# (a band's largest number is its largest time) and of ISO-8601 (years 1 to 9999, offsets
# just under a day): no parsed time can be one neo's readers fail on.
_EDGES = [
    edge
    for limit, _ in UNIT_LIMITS
    for largest in (limit - 1, math.nextafter(float(limit), 0))  # a decimal string reads as float
    for edge in (largest, -largest, *(f"{sign}{limit - 1}" for sign in ("", "-", " +")))
]
_OFFSETS = [
    dt.timezone(dt.timedelta(hours=h, minutes=59 * sign)) for h, sign in ((23, 1), (-24, 1))
]
_ISO_EDGES = [
    when.replace(tzinfo=tz).isoformat()
    for when in (dt.datetime.min, dt.datetime.max)
    for tz in (None, dt.UTC, *_OFFSETS)
]
_TIMES = (
    st.integers()
    | st.floats()
    | st.integers(-(10**31), 10**31).map(str)
    | st.decimals(allow_nan=False, allow_infinity=False).map(str)
    | st.datetimes().map(dt.datetime.isoformat)
    | st.datetimes(timezones=st.sampled_from([dt.UTC, *_OFFSETS])).map(dt.datetime.isoformat)
    | st.sampled_from(_EDGES + _ISO_EDGES)
)


@settings(max_examples=2000, deadline=None)
@given(_TIMES)
def test_every_time_read_is_one_a_javascript_date_holds(value: object) -> None:
    parsed = parse_timestamp_ms(value)
    assert parsed is None or abs(parsed) <= JS_DATE_MAX_MS, value


def test_the_edges_of_each_band_and_of_iso_8601_are_read() -> None:
    """The edges the property test relies on are times the parser reads, not refusals."""
    assert all(parse_timestamp_ms(edge) is not None for edge in _EDGES + _ISO_EDGES)


def test_rows_with_unusable_timestamps_of_other_kinds_are_skipped() -> None:
    for timestamp in (None, "", "soon", True, math.nan, [T0]):
        assert memory_from_row("m1", "doc", row(timestamp=timestamp)) is None


@pytest.mark.parametrize("kind", ["context-refresh", "context-injection"])
def test_excluded_rows_are_left_out_with_the_default_configuration(kind: str) -> None:
    m = memory_from_row("m1", "doc", row(type=kind, prompt="Refreshed context"))
    assert m is not None
    assert is_excluded(m)


def test_injected_context_prompt_in_a_row_is_left_out_with_the_default_configuration() -> None:
    meta = row(type="agent-interaction", prompt="<context-refresh>Here is what you know")
    m = memory_from_row("m1", None, meta)
    assert m is not None
    assert is_excluded(m)


def test_watermark_splits_a_session_with_many_equal_timestamps_exactly_once() -> None:
    # Three memories share each millisecond; ids break the tie, whatever order they came in.
    session = [memory(f"m{i:02d}", 100 + i // 3) for i in range(12)]
    ordered = sorted(reversed(session), key=memory_sort_key)
    assert ordered == session
    for cut, covered_last in enumerate(ordered):
        mark = Watermark.of(covered_last)
        after = [m for m in reversed(session) if mark.after(m)]
        assert sorted(after, key=memory_sort_key) == ordered[cut + 1 :]


# Any client of the store may write any value: a count or a time of thousands of digits (past
# Python's int() digit limit), a huge float, JSON nested past Python's recursion limit. A row
# is read or left out, never an exception that stops the pass or the sweep; a count stays one
# neo and Chroma can hold.
_DIGITS = st.integers(1, 6000).map(lambda n: "9" * n)
_DEEP = st.sampled_from([1, 900, 1500, 100_000])  # arrays nested past Python's stack
_ANY = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | st.text(max_size=40)
    | _DIGITS
    | _DIGITS.map(lambda d: f"-{d}")
    | _DIGITS.map(lambda d: f" {d} calls")
    | _DIGITS.map(lambda d: f"{d}.5")
    | _DEEP.map(lambda n: "[" * n + "]" * n)
    | _DEEP.map(lambda n: '["' + "[" * n)
)


@settings(max_examples=300, deadline=None)
@given(timestamp=st.just(T0) | _ANY, calls=_ANY, tools=_ANY)
def test_any_stored_count_or_time_is_read_or_left_out(
    timestamp: object, calls: object, tools: object
) -> None:
    meta = row(timestamp=timestamp, amountToolCalls=calls, toolsUsed=tools)
    parsed = parse_timestamp_ms(timestamp)
    assert parsed is None or abs(parsed) <= JS_DATE_MAX_MS
    found = memory_from_row("m1", "doc", meta)
    assert (found is None) == (parsed is None)
    if found is not None:
        assert 0 <= found.tool_calls <= JS_SAFE_INTEGER
        summary = StructuredSummary(
            session_id="s1", title="t", total_tool_calls=found.tool_calls * 5000
        )
        stored = to_chroma_metadata(summary, writer="w", trigger="t", summarized_at_ms=T0)
        assert 0 <= int(stored["totalToolCalls"]) <= JS_SAFE_INTEGER  # Chroma's int64 too
