import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from controller.core.document import render_document
from controller.core.memories import Watermark
from controller.core.quoting import is_quoted, quote
from controller.core.summary import (
    CATEGORIES,
    HISTORY_SECTIONS,
    ITEM_MAX,
    SECTION_TITLES,
    LegacySummary,
    StructuredSummary,
    SummaryItem,
    SummaryValidationError,
    UnreadablePriorSummary,
    validate_summary,
)
from controller.core.summary_row import from_chroma_row, to_chroma_metadata

NEO_KEYS = {
    "sessionId",
    "timestamp",
    "memoryCount",
    "title",
    "category",
    "quality",
    "productivity",
    "impact",
    "complexity",
    "technologies",
    "participatingAgents",
    "models",
    "toolsUsed",
    "totalToolCalls",
}


T0 = 1_700_000_000_000  # memory times a clock could give (memories.trusted_time)
WRITTEN = T0 + 60_000  # the write, after them


def items(*texts: str) -> list[SummaryItem]:
    return [SummaryItem(text=t) for t in texts]


def full_summary() -> StructuredSummary:
    return StructuredSummary(
        session_id="s1",
        title="Retry the fetcher",
        category="feature",
        quality=90,
        productivity=70,
        impact=60,
        complexity=40,
        sections={
            "User Requests": items("Add retries to the fetcher.", "Add a CLI flag."),
            "Questions & Decisions": [
                SummaryItem(text="Use a fixed delay.", superseded_by="exponential backoff"),
                SummaryItem(text="We will use exponential backoff."),
            ],
            "Design Choices": items("The retry policy is a pydantic model."),
            "Corrections & Feedback": items("Don't sleep in the event loop."),
            "Current State": items("Retries are merged.", "3 memories so far."),
        },
        technologies=["kopf", "python"],
        participating_agents=["claude", "neo-1"],
        models=["opus"],
        tools_used=["Bash", "Edit"],
        total_tool_calls=12,
        memory_count=3,
        first_memory_at_ms=T0 + 1_000,
        last_memory_at_ms=T0 + 3_000,
        watermark=Watermark(timestamp_ms=T0 + 3_000, memory_id="m3"),
    )


def minimal_summary(**fields: object) -> StructuredSummary:
    values: dict[str, object] = {
        "session_id": "s1",
        "title": "Retry the fetcher",
        "sections": {"User Requests": items("Add retries.")},
        **fields,
    }
    return StructuredSummary.model_validate(values)


# -- the model ------------------------------------------------------------------------------


def test_every_section_but_current_state_is_append_only_history() -> None:
    assert [title for title in SECTION_TITLES if title not in HISTORY_SECTIONS] == ["Current State"]
    assert SECTION_TITLES[: len(HISTORY_SECTIONS)] == HISTORY_SECTIONS


def test_missing_sections_are_filled_with_empty_lists() -> None:
    s = minimal_summary()
    assert list(s.sections) == list(SECTION_TITLES)
    assert s.sections["Design Choices"] == []


def test_unknown_section_is_rejected() -> None:
    with pytest.raises(ValidationError, match="unknown sections"):
        minimal_summary(sections={"Random Thoughts": items("x")})


def test_item_text_is_stripped_and_must_be_short_and_non_empty() -> None:
    assert SummaryItem(text="  a fact \n").text == "a fact"
    with pytest.raises(ValidationError):
        SummaryItem(text="   ")
    with pytest.raises(ValidationError):
        SummaryItem(text="x" * 501)


@pytest.mark.parametrize("field", ["quality", "productivity", "impact", "complexity"])
def test_scores_are_bounded(field: str) -> None:
    with pytest.raises(ValidationError):
        minimal_summary(**{field: 101})
    with pytest.raises(ValidationError):
        minimal_summary(**{field: -1})


def test_title_must_fit_and_category_must_be_known() -> None:
    with pytest.raises(ValidationError):
        minimal_summary(title="")
    with pytest.raises(ValidationError):
        minimal_summary(title="t" * 121)
    with pytest.raises(ValidationError):
        minimal_summary(category="chores")


# -- the document ---------------------------------------------------------------------------


def test_document_renders_title_sections_in_order_and_superseded_items() -> None:
    assert render_document(full_summary()) == (
        "# Retry the fetcher\n"
        "\n## User Requests\n- Add retries to the fetcher.\n- Add a CLI flag.\n"
        "\n## Questions & Decisions\n"
        "- ~~Use a fixed delay.~~ (superseded: exponential backoff)\n"
        "- We will use exponential backoff.\n"
        "\n## Design Choices\n- The retry policy is a pydantic model.\n"
        "\n## Corrections & Feedback\n- Don't sleep in the event loop.\n"
        "\n## Current State\n- Retries are merged.\n- 3 memories so far.\n"
    )


def test_empty_sections_are_not_rendered() -> None:
    document = render_document(minimal_summary())
    assert "## User Requests" in document
    assert "## Design Choices" not in document


def test_an_item_with_line_breaks_stays_one_list_entry() -> None:
    s = minimal_summary(sections={"User Requests": items("first line\n## not a heading")})
    assert render_document(s).splitlines()[-1] == "- first line ## not a heading"


# -- the Chroma row -------------------------------------------------------------------------


def test_metadata_carries_every_neo_key_with_neo_types() -> None:
    meta = to_chroma_metadata(full_summary(), writer="w", trigger="sweep", summarized_at_ms=WRITTEN)
    assert set(meta) >= NEO_KEYS
    assert meta["timestamp"] == T0 + 3_000
    assert meta["memoryCount"] == 3
    assert meta["toolsUsed"] == "Bash,Edit"
    assert meta["participatingAgents"] == "claude,neo-1"
    assert "userId" not in meta  # untagged: every reader sees it (neo's team policy)
    assert (meta["writer"], meta["triggerSource"], meta["summarizedAt"]) == ("w", "sweep", WRITTEN)
    assert (meta["watermarkTimestamp"], meta["watermarkMemoryId"]) == (T0 + 3_000, "m3")
    assert meta["summaryFormat"] == "structured-v1"


def test_metadata_never_contains_none() -> None:
    bare = minimal_summary()  # no user, no watermark, no memory times
    meta = to_chroma_metadata(bare, writer="w", trigger="sunset", summarized_at_ms=1)
    assert None not in meta.values()
    assert all(isinstance(v, str | int | float | bool) for v in meta.values())
    for optional in ("userId", "watermarkTimestamp", "watermarkMemoryId"):
        assert optional not in meta
    # neo's reader fails its whole listing on a row without a numeric timestamp.
    assert (meta["timestamp"], meta["timestampSource"]) == (1, "fallback")


def test_sections_json_is_compact_sorted_and_keeps_superseded_markers() -> None:
    meta = to_chroma_metadata(full_summary(), writer="w", trigger="t", summarized_at_ms=1)
    text = str(meta["sectionsJson"])
    assert ", " not in text and ": " not in text.replace("superseded_by", "")
    sections = json.loads(text)
    assert list(sections) == sorted(sections)
    assert sections["Questions & Decisions"][0] == {
        "text": "Use a fixed delay.",
        "superseded_by": "exponential backoff",
    }


def test_round_trip_through_chroma_metadata_preserves_sections() -> None:
    original = full_summary()
    meta = to_chroma_metadata(original, writer="w", trigger="t", summarized_at_ms=WRITTEN)
    back = from_chroma_row("s1", render_document(original), meta)
    assert back == original.model_copy(update={"summarized_at_ms": WRITTEN})


def test_free_text_row_of_the_old_system_reads_as_legacy_summary() -> None:
    meta = {"sessionId": "s1", "timestamp": 5_000, "memoryCount": 40, "title": "Old title"}
    prior = from_chroma_row("s1", "  The user asked for retries. They were added.  ", meta)
    assert prior == LegacySummary(
        session_id="s1",
        text="The user asked for retries. They were added.",
        title="Old title",
    )


@pytest.mark.parametrize(("document", "meta"), [(None, None), ("", {}), ("   ", {"title": "x"})])
def test_row_without_text_gives_no_prior(document: str | None, meta: dict | None) -> None:
    assert from_chroma_row("s1", document, meta) is None


def test_unreadable_structured_row_falls_back_to_its_text() -> None:
    meta = {"summaryFormat": "structured-v1", "sectionsJson": "{not json", "memoryCount": 4}
    prior = from_chroma_row("s1", "# Title\n- a fact", meta)
    assert isinstance(prior, LegacySummary)
    assert prior.text == "# Title\n- a fact"


def test_stored_values_out_of_range_do_not_lose_the_structured_prior() -> None:
    meta = to_chroma_metadata(full_summary(), writer="w", trigger="t", summarized_at_ms=1)
    meta.update(category="chores", quality=250, impact=-3, title="")
    prior = from_chroma_row("s1", "doc", meta)
    assert isinstance(prior, StructuredSummary)
    assert (prior.category, prior.quality, prior.impact) == ("other", 100, 0)
    assert prior.title == "Session s1"
    assert prior.sections == full_summary().sections


# -- the guard ------------------------------------------------------------------------------


def test_validation_accepts_a_superset_of_the_prior() -> None:
    prior = full_summary()
    grown = prior.model_copy(deep=True)
    grown.sections["User Requests"].append(SummaryItem(text="Add metrics."))
    grown.sections["Current State"] = items("Something else entirely.")
    validate_summary(grown, prior)


def test_validation_rejects_summary_that_drops_a_prior_item() -> None:
    prior = full_summary()
    lossy = prior.model_copy(deep=True)
    del lossy.sections["Design Choices"][0]
    with pytest.raises(SummaryValidationError, match="Design Choices"):
        validate_summary(lossy, prior)


def test_validation_rejects_a_prior_item_moved_to_another_section() -> None:
    prior = full_summary()
    moved = prior.model_copy(deep=True)
    item = moved.sections["User Requests"].pop()
    moved.sections["Design Choices"].append(item)
    with pytest.raises(SummaryValidationError, match="User Requests"):
        validate_summary(moved, prior)


def test_validation_accepts_prior_items_marked_superseded_or_respaced() -> None:
    prior = full_summary()
    marked = prior.model_copy(deep=True)
    marked.sections["User Requests"][0] = SummaryItem(
        text="add retries  to the fetcher.", superseded_by="done differently"
    )
    validate_summary(marked, prior)


@pytest.mark.parametrize(
    "title",
    [
        "Error: the model returned status 500",
        "ERROR 429 rate limited",
        "An error occurred while summarizing",
        "I'm sorry, but I cannot summarize this session",
        "As an AI language model, I cannot",
        "Traceback (most recent call last):",
        "Summary failed. Traceback (most recent call last): File x",
        "Untitled",
        "Summary",
        "N/A",
    ],
)
def test_error_text_is_not_accepted_as_a_title(title: str) -> None:
    with pytest.raises(SummaryValidationError, match="title"):
        validate_summary(minimal_summary(title=title), None)


@pytest.mark.parametrize(
    "title",
    ["Error handling cleanup in the sweeper", "Fix the crash on empty sessions", "Sorry page UX"],
)
def test_ordinary_titles_about_errors_are_accepted(title: str) -> None:
    validate_summary(minimal_summary(title=title), None)


def test_empty_summary_is_not_accepted() -> None:
    with pytest.raises(SummaryValidationError, match="no items"):
        validate_summary(minimal_summary(sections={}), None)


def test_summary_of_another_session_is_not_accepted() -> None:
    prior = full_summary()
    other = prior.model_copy(update={"session_id": "s2"})
    with pytest.raises(SummaryValidationError, match="session"):
        validate_summary(other, prior)


def test_legacy_prior_imposes_no_item_check_but_must_be_carried_verbatim() -> None:
    legacy = LegacySummary(session_id="s1", text="Everything that happened.")
    validate_summary(minimal_summary(legacy_text="Everything that happened."), legacy)
    with pytest.raises(SummaryValidationError, match="drops the earlier summary"):
        validate_summary(minimal_summary(), legacy)
    with pytest.raises(SummaryValidationError, match="alters the earlier summary"):
        validate_summary(minimal_summary(legacy_text="Everything that happened"), legacy)


# -- added: neo types, round trips, guard edge cases ----------------------------------------

SCORE_KEYS = ("quality", "productivity", "impact", "complexity")
INT_KEYS = ("timestamp", "memoryCount", "totalToolCalls", *SCORE_KEYS)
LIST_KEYS = ("technologies", "participatingAgents", "models", "toolsUsed")


@pytest.mark.parametrize("summary", [full_summary(), minimal_summary(last_memory_at_ms=7)])
def test_metadata_values_have_the_types_neo_readers_expect(summary: StructuredSummary) -> None:
    meta = to_chroma_metadata(summary, writer="w", trigger="t", summarized_at_ms=1)
    assert set(meta) >= NEO_KEYS - {"userId"}
    for key in INT_KEYS:
        assert type(meta[key]) is int, key
    for key in SCORE_KEYS:
        assert 0 <= int(meta[key]) <= 100, key
    for key in LIST_KEYS:
        assert isinstance(meta[key], str), key
        assert ", " not in str(meta[key]), key
    assert meta["category"] in CATEGORIES
    assert isinstance(meta["sessionId"], str) and isinstance(meta["title"], str)


def test_metadata_timestamp_is_the_last_memory_in_milliseconds() -> None:
    summary = minimal_summary(
        first_memory_at_ms=1_700_000_000_000, last_memory_at_ms=1_700_000_123_456
    )
    meta = to_chroma_metadata(summary, writer="w", trigger="t", summarized_at_ms=2_000_000_000_000)
    assert meta["timestamp"] == 1_700_000_123_456
    assert meta["firstMemoryAt"] == 1_700_000_000_000


def test_empty_lists_are_empty_strings_never_none() -> None:
    meta = to_chroma_metadata(minimal_summary(), writer="w", trigger="t", summarized_at_ms=1)
    for key in LIST_KEYS:
        assert meta[key] == ""


def test_a_comma_inside_a_listed_value_is_the_names_it_lists_as_the_row_reads_back() -> None:
    summary = minimal_summary(technologies=["python", "a,b", " b "], last_memory_at_ms=1)
    assert summary.technologies == ["python", "a", "b"]
    # a summary copied with raw names (the pass's final counts) is written the same way
    copied = summary.model_copy(update={"models": ["x, y", "y"]})
    meta = to_chroma_metadata(copied, writer="w", trigger="t", summarized_at_ms=1)
    assert (meta["technologies"], meta["models"]) == ("python,a,b", "x,y")
    back = from_chroma_row("s1", "doc", meta)
    assert isinstance(back, StructuredSummary)
    assert (back.technologies, back.models) == (["python", "a", "b"], ["x", "y"])


def test_round_trip_keeps_superseded_markers_and_the_watermark() -> None:
    original = full_summary()
    meta = to_chroma_metadata(original, writer="w", trigger="t", summarized_at_ms=1)
    back = from_chroma_row("s1", None, meta)  # the document is not needed to read it back
    assert isinstance(back, StructuredSummary)
    assert back.sections["Questions & Decisions"][0].superseded_by == "exponential backoff"
    assert back.watermark == Watermark(timestamp_ms=T0 + 3_000, memory_id="m3")
    assert render_document(back) == render_document(original)


def test_round_trip_of_a_summary_without_optional_fields_is_exact() -> None:
    original = minimal_summary()
    meta = to_chroma_metadata(original, writer="w", trigger="t", summarized_at_ms=WRITTEN)
    back = from_chroma_row("s1", render_document(original), meta)
    assert back == original.model_copy(update={"summarized_at_ms": WRITTEN})


def test_old_row_without_summary_format_is_legacy_even_with_neo_keys() -> None:
    meta = {
        "sessionId": "s1",
        "timestamp": 5_000,
        "memoryCount": 12,
        "title": "Old",
        "category": "feature",
        "quality": 80,
        "technologies": "python",
    }
    prior = from_chroma_row("s1", "Free text written by the old system.", meta)
    assert isinstance(prior, LegacySummary)
    assert prior.text == "Free text written by the old system."
    assert prior.title == "Old"


def test_old_row_with_metadata_but_an_empty_document_gives_no_prior() -> None:
    meta = {"sessionId": "s1", "timestamp": 5_000, "memoryCount": 12, "title": "Old"}
    assert from_chroma_row("s1", "", meta) is None
    assert from_chroma_row("s1", None, meta) is None


@pytest.mark.parametrize(
    "title",
    [
        "I\u2019m sorry, but I can\u2019t summarize this session",
        "I can\u2019t help with that",
        "As an AI, I do not have access to the session",
        "ValueError: invalid literal for int() with base 10: 'x'",
        "openai.APIError: upstream returned 500",
        'Traceback (most recent call last):\n  File "run.py", line 3, in <module>',
    ],
)
def test_typographic_apologies_and_traceback_lines_are_not_accepted_as_titles(
    title: str,
) -> None:
    with pytest.raises(SummaryValidationError, match="error text"):
        validate_summary(minimal_summary(title=title), None)


@pytest.mark.parametrize(
    "title",
    [
        "KeyError handling in the sweeper",
        "Fix the ValueError: ints from strings",
        "Terror: a review",
    ],
)
def test_titles_that_mention_an_exception_are_accepted(title: str) -> None:
    validate_summary(minimal_summary(title=title), None)


def test_validation_accepts_a_replaced_current_state() -> None:
    prior = full_summary()
    moved_on = prior.model_copy(deep=True)
    moved_on.sections["Current State"] = items("Deployed to staging.")
    validate_summary(moved_on, prior)
    moved_on.sections["Current State"] = []
    validate_summary(moved_on, prior)


def test_validation_rejects_dropping_an_item_the_prior_had_marked_superseded() -> None:
    prior = full_summary()
    lossy = prior.model_copy(deep=True)
    del lossy.sections["Questions & Decisions"][0]  # the superseded "Use a fixed delay."
    with pytest.raises(SummaryValidationError, match="Use a fixed delay"):
        validate_summary(lossy, prior)


def test_validation_counts_every_lost_item() -> None:
    prior = full_summary()
    only_state = prior.model_copy(deep=True)
    for title in HISTORY_SECTIONS:
        only_state.sections[title] = []
    with pytest.raises(SummaryValidationError, match=r"^6 item"):
        validate_summary(only_state, prior)


def test_sections_given_in_any_order_render_in_the_fixed_order() -> None:
    scrambled = minimal_summary(
        sections={
            "Current State": items("Done."),
            "Corrections & Feedback": items("Not like that."),
            "User Requests": items("Add retries."),
            "Design Choices": items("A policy object."),
            "Questions & Decisions": items("Why retry?"),
        }
    )
    headings = [line for line in render_document(scrambled).splitlines() if line.startswith("## ")]
    assert headings == [f"## {title}" for title in SECTION_TITLES]


def test_superseded_item_is_struck_through_and_names_its_replacement() -> None:
    marked = minimal_summary(
        sections={
            "Design Choices": [
                SummaryItem(text="Store items as CSV.", superseded_by="JSON text"),
                SummaryItem(text="Store items as JSON text."),
            ]
        }
    )
    lines = render_document(marked).splitlines()
    assert "- ~~Store items as CSV.~~ (superseded: JSON text)" in lines
    assert "- Store items as JSON text." in lines


# -- legacy text carried verbatim; rows that cannot be read ---------------------------------

LEGACY_TEXT = (
    "Error: the first attempt failed.\n\n## Notes\n- The user pasted this:\n"
    '```python\nTraceback (most recent call last):\n  File "a.py", line 1\n'
    "ValueError: bad\n```\n~~~~\ntilde fence\n~~~~\nAnd ````four```` backticks."
)


def test_a_carried_legacy_text_ends_the_document_verbatim_inside_a_longer_fence() -> None:
    document = render_document(minimal_summary(legacy_text=LEGACY_TEXT))
    assert LEGACY_TEXT in document
    heading = "## Earlier summary text (not written by this operator, kept verbatim)"
    assert document.endswith(f"{heading}\n\n`````\n{LEGACY_TEXT}\n`````\n")
    # everything before the legacy section is the summary's own structure
    assert document.index("## User Requests") < document.index(heading)


def test_a_legacy_text_is_stored_in_the_row_and_read_back_exactly() -> None:
    original = minimal_summary(legacy_text=LEGACY_TEXT + "\n  trailing spaces  ")
    meta = to_chroma_metadata(original, writer="w", trigger="t", summarized_at_ms=1)
    assert meta["legacySummary"] == original.legacy_text
    back = from_chroma_row("s1", render_document(original), meta)
    assert isinstance(back, StructuredSummary)
    assert back.legacy_text == original.legacy_text
    assert "legacySummary" not in to_chroma_metadata(
        minimal_summary(), writer="w", trigger="t", summarized_at_ms=1
    )


def test_the_time_a_row_was_written_is_read_back() -> None:
    meta = to_chroma_metadata(minimal_summary(), writer="w", trigger="t", summarized_at_ms=1234)
    back = from_chroma_row("s1", None, meta)
    assert isinstance(back, StructuredSummary) and back.summarized_at_ms == 1234


def test_a_stored_item_too_long_to_read_carries_the_whole_document_instead_of_cutting() -> None:
    meta = to_chroma_metadata(minimal_summary(), writer="w", trigger="t", summarized_at_ms=1)
    long_item = "x" * 600 + " the end"
    meta["sectionsJson"] = json.dumps({"User Requests": [{"text": long_item}]})
    document = f"# Retry the fetcher\n\n## User Requests\n- {long_item}\n"
    prior = from_chroma_row("s1", document, meta)
    assert isinstance(prior, LegacySummary)
    assert prior.text == document.strip()
    assert long_item in prior.text


@pytest.mark.parametrize(
    "broken",
    [
        {"sectionsJson": "{not json"},
        {"sectionsJson": json.dumps({"Random Thoughts": ["x"]})},
        {"sectionsJson": json.dumps({"User Requests": ["y" * 501]})},
        {"legacySummary": 42},
    ],
)
@pytest.mark.parametrize("document", [None, "", "   "])
def test_an_unreadable_row_of_ours_without_a_document_is_not_taken_for_no_summary(
    broken: dict[str, object], document: str | None
) -> None:
    meta: dict[str, object] = {
        **to_chroma_metadata(full_summary(), writer="w", trigger="t", summarized_at_ms=1),
        **broken,
    }
    with pytest.raises(UnreadablePriorSummary, match="cannot be read") as caught:
        from_chroma_row("s1", document, meta)
    assert "\n" not in str(caught.value)


def test_an_unreadable_row_of_ours_with_a_document_carries_it() -> None:
    meta: dict[str, object] = {
        **to_chroma_metadata(full_summary(), writer="w", trigger="t", summarized_at_ms=1),
        "legacySummary": 42,
    }
    prior = from_chroma_row("s1", render_document(full_summary()), meta)
    assert isinstance(prior, LegacySummary)
    assert prior.text == render_document(full_summary()).strip()


def test_a_summary_with_only_a_carried_legacy_text_is_not_empty() -> None:
    only_legacy = minimal_summary(sections={}, legacy_text="The old summary.")
    validate_summary(only_legacy, LegacySummary(session_id="s1", text="The old summary."))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.text(alphabet="ab c", min_size=1, max_size=6).filter(str.strip), min_size=1, max_size=8
    ),
    st.lists(st.text(alphabet="xyz", min_size=1, max_size=4), max_size=3),
    st.data(),
)
def test_the_superset_check_sees_the_same_loss_whether_items_are_carried_or_copied(
    texts: list[str], added: list[str], data: st.DataObject
) -> None:
    """The check skips a section whose items start with the prior's own objects; one made
    of copies (a masked or reread prior), or missing any item, is compared by text."""
    prior_items = [SummaryItem(text=t) for t in texts]
    prior = StructuredSummary(session_id="s", title="t", sections={"Design Choices": prior_items})
    copied = data.draw(st.booleans())
    kept = [SummaryItem(text=i.text) if copied else i for i in prior_items]
    dropped = data.draw(st.sampled_from([None, *range(len(kept))]))
    if dropped is not None:
        kept = [i for n, i in enumerate(kept) if n != dropped]
    after = prior.model_copy(
        update={"sections": {"Design Choices": [*kept, *(SummaryItem(text=t) for t in added)]}}
    )
    lost = dropped is not None and all(
        " ".join(texts[dropped].lower().split()) != " ".join(t.lower().split())
        for t in [i.text for i in kept] + added
    )
    if lost:
        with pytest.raises(SummaryValidationError):
            validate_summary(after, prior)
    else:
        validate_summary(after, prior)


_REASON = st.builds(str.__mul__, st.text(min_size=1, max_size=30), st.integers(1, 80))


@settings(max_examples=200, deadline=None)
@given(
    reason=_REASON
    | st.builds(quote, _REASON, st.sampled_from(["error", "instruction"]), st.just(10**6))
)
def test_a_stored_supersede_reason_reads_back_bounded_and_as_written_within_the_bound(
    reason: str,
) -> None:
    # Another writer's row (or one written with store access) with a reason of megabytes:
    # every later pass carried it, rendered it and masked it again. The merge writes reasons
    # of at most ITEM_MAX characters: those read back as written.
    meta = to_chroma_metadata(full_summary(), writer="w", trigger="t", summarized_at_ms=1)
    sections = json.loads(str(meta["sectionsJson"]))
    sections["Questions & Decisions"][0]["superseded_by"] = reason
    back = from_chroma_row("s1", "a document", {**meta, "sectionsJson": json.dumps(sections)})
    assert isinstance(back, StructuredSummary)
    read = back.sections["Questions & Decisions"][0].superseded_by
    assert read is None or len(read) <= ITEM_MAX
    if len(reason.strip()) <= ITEM_MAX:
        assert read == (reason.strip() or None)
    elif is_quoted(reason):
        assert read is not None and is_quoted(read)
