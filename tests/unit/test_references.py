"""The References section: identifiers extracted from the memories by code, verbatim,
de-duplicated, append-only, bounded but never silently; for every backend alike."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.core import references
from controller.core.document import render_document
from controller.core.memories import Memory
from controller.core.merge import PassUpdate, merge_pass
from controller.core.references import (
    REFERENCES_MAX,
    ReferenceOverflow,
    extract_references,
    merge_references,
)
from controller.core.summary import (
    LegacySummary,
    SummaryValidationError,
    validate_summary,
)
from controller.core.summary_row import from_chroma_row, to_chroma_metadata
from controller.core.text import PLACEHOLDER, Linear
from controller.summarizers.extractive import EXTRACTIVE

SID = "sess-refs"


def memory(i: int, prompt: str = "", response: str = "", **fields: Any) -> Memory:
    return Memory(
        id=f"m{i:04d}",
        session_id=SID,
        timestamp_ms=1_760_000_000_000 + 1_000 * i,
        prompt=prompt,
        response=response,
        **fields,
    )


def nothing_new() -> PassUpdate:
    return PassUpdate.model_validate(
        {
            "user_requests": ["Keep going."],
            "questions_and_decisions": [],
            "design_choices": [],
            "corrections_and_feedback": [],
            "current_state": None,
        }
    )


def through_the_store(summary: Any, collection: str = "neo-agent-memory") -> Any:
    meta = to_chroma_metadata(summary, writer="w", trigger="sweep", summarized_at_ms=1)
    return from_chroma_row(SID, render_document(summary, collection), meta)


TRACE = """Traceback (most recent call last):
  File "/srv/app/controller/pipeline.py", line 141, in run_pass
    summary = merge_pass(current, proposal.update, memories)
chromadb.errors.InvalidCollectionException: Collection neo-agent-sessions does not exist."""


def test_paths_urls_issues_hashes_and_error_names_are_extracted_verbatim() -> None:
    text = (
        "Fixed the crash in controller/core/merge.py:212, see "
        "https://github.com/acme/sso/issues/42 (and #17, acme/sso#18, PR-9, JIRA-1234). "
        "Reverted 3f9a2c1d on branch feature/refresh-by-size; ECONNREFUSED from "
        "SSO_SWEEP_TICK_SECONDS, `origin/main`, ./hack/test.sh and values.schema.json.\n" + TRACE
    )
    assert extract_references(text) == [
        "controller/core/merge.py:212",
        "https://github.com/acme/sso/issues/42",
        "#17",
        "acme/sso#18",
        "PR-9",
        "JIRA-1234",
        "3f9a2c1d",
        "feature/refresh-by-size",
        "ECONNREFUSED",
        "SSO_SWEEP_TICK_SECONDS",
        "origin/main",
        "./hack/test.sh",
        "values.schema.json",
        "/srv/app/controller/pipeline.py",
        "chromadb.errors.InvalidCollectionException",
    ]


def test_prose_punctuation_plain_words_and_builtin_exceptions_are_not_references() -> None:
    text = (
        "Use and/or TCP/IP, e.g. half 1/2 of it; version 1.5.9 is fine. Numbers 1234567 too. "
        "KeyError: 'token' and a ValueError, unlike BatchTooLargeError."
    )
    assert extract_references(text) == ["BatchTooLargeError"]


def test_a_url_ending_a_sentence_or_in_parentheses_keeps_only_its_own_characters() -> None:
    text = "See (https://example.org/a_(b)) and https://example.org/x?y=1."
    assert extract_references(text) == ["https://example.org/a_(b)", "https://example.org/x?y=1"]


def test_fenced_code_gives_places_but_not_the_names_in_the_code() -> None:
    text = "Run it:\n```python\nraise ValueError('x')  # see src/app/util.py\n```\n"
    assert extract_references(text) == ["src/app/util.py"]


def test_every_pass_adds_the_new_references_after_the_old_ones_once_each() -> None:
    first = merge_pass(None, nothing_new(), [memory(1, "Fix src/a.py, see #12.")])
    second = merge_pass(
        first, nothing_new(), [memory(2, "Now src/b.py; #12 again and src/a.py too.")]
    )
    assert first.references == ["src/a.py", "#12"]
    assert second.references == ["src/a.py", "#12", "src/b.py"]
    validate_summary(second, first)


def test_references_come_from_the_memories_whatever_the_summarizer_proposes() -> None:
    memories = [memory(1, "Look at https://ci.example.org/runs/991 and deadbeef42.")]
    empty_update = nothing_new()
    summary = merge_pass(None, empty_update, memories)
    assert summary.references == ["https://ci.example.org/runs/991", "deadbeef42"]
    assert "- `https://ci.example.org/runs/991`" in render_document(summary)


def test_a_summary_that_drops_a_prior_reference_is_refused() -> None:
    first = merge_pass(None, nothing_new(), [memory(1, "Edit src/a.py and src/b.py.")])
    second = merge_pass(first, nothing_new(), [memory(2, "More.")])
    lossy = second.model_copy(update={"references": ["src/a.py"]})
    with pytest.raises(SummaryValidationError, match="reference"):
        validate_summary(lossy, first)


def test_references_survive_the_store_round_trip_and_a_legacy_row_has_none() -> None:
    summary = merge_pass(None, nothing_new(), [memory(1, "Edit src/a.py per #3.")])
    back = through_the_store(summary)
    assert back.references == ["src/a.py", "#3"]
    legacy_meta = to_chroma_metadata(summary, writer="w", trigger="sweep", summarized_at_ms=1)
    del legacy_meta["referencesJson"]
    old = from_chroma_row(SID, render_document(summary), legacy_meta)
    assert old is not None and not isinstance(old, LegacySummary) and old.references == []
    # A later pass over the old row keeps every item and starts the section.
    later = merge_pass(old, nothing_new(), [memory(2, "Then src/c.py.")])
    validate_summary(later, old)
    assert later.references == ["src/c.py"]


def test_a_full_section_counts_what_it_leaves_out_and_says_where_to_find_it() -> None:
    prior = [f"src/f{i}.py" for i in range(REFERENCES_MAX)]
    listed, over = merge_references(
        prior, ReferenceOverflow(), [("src/new.py", 5_000), ("src/f1.py", 6_000)]
    )
    assert listed == prior and over.count == 1 and over.first_ms == over.last_ms == 5_000
    # The same reference left out again is not counted twice.
    listed, over = merge_references(listed, over, [("src/new.py", 7_000), ("#9", 9_000)])
    assert over.count == 2 and (over.first_ms, over.last_ms) == (5_000, 9_000)

    many = " ".join(f"lib/m{i}.py" for i in range(REFERENCES_MAX + 3))
    summary = merge_pass(None, nothing_new(), [memory(1, many)])
    document = render_document(summary, "team-memory")
    assert len(summary.references) == REFERENCES_MAX
    assert summary.references_overflow.count == 3
    note = document.split("## References\n")[1].splitlines()[-1]
    assert "3 more references are not listed" in note
    assert "collection `team-memory`" in note and f"sessionId `{SID}`" in note
    assert "2025-10-09T08:53:21Z" in note  # the time range of the memories they came from
    assert through_the_store(summary).references_overflow == summary.references_overflow


def test_the_extractive_and_any_other_summarizer_get_the_same_references() -> None:
    memories = [memory(1, "Fix the bug in pkg/io/reader.go:88 (GH-311).")]
    proposal = EXTRACTIVE.propose(SID, memories, None)
    summary = merge_pass(None, proposal.update, memories)
    assert summary.references == ["pkg/io/reader.go:88", "GH-311"]


# The two patterns RE2 runs (core.text.Linear), as Python's re wrote them before.
BACKTRACKING = {
    "place": r"(?<![\w#&])(?:[\w.-]+/[\w.-]+)?#\d+\b",
    "error": r"\b(?:[a-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Warning)\b",
}
REFERENCE_PIECES = ["a", "Z", "_", "9", "٣", "é", "K", ".", "-", "/", "#", "&", " ", "\n", "12",
                    "#7", "owner/repo#", "app.models.", "Error", "Exception", "Warning",
                    "ValueError", "x", "\ud800", "\udc80"]  # fmt: skip
reference_text = st.lists(st.sampled_from(REFERENCE_PIECES), max_size=30).map("".join)


@settings(max_examples=5000, deadline=None)
@given(reference_text)
def test_the_linear_patterns_find_what_the_backtracking_ones_found(text: str) -> None:
    linear = {kind: p for kind, p in references._PATTERNS if isinstance(p, Linear)}
    assert linear.keys() == BACKTRACKING.keys()
    for kind, old in BACKTRACKING.items():
        expected = [m.span() for m in re.finditer(old, text)]
        assert list(linear[kind].spans(text)) == expected, (kind, text)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("unit", ["a.", ".a", "-a", "1.", "Aa.", "a.A", "-", "a/", "#1a"])
def test_references_of_any_long_text_take_time_linear_in_it(unit: str) -> None:
    """Before RE2, 16 KB of `a.` took 4 s, quadratic in the length, holding every thread."""
    assert len(extract_references(unit * (262_144 // len(unit)))) <= 262_144  # it ends


# A masked secret's placeholder beside text that spells what the extraction put in its place.
MASKED_PIECES = ["[redacted: password]", "[redacted: api-key]", "Redacted0X", "Redacted1X",
                 "Redacted", "0", "1", "X", "x", "https://h/", "/", ".", ":", "@", " ", "`",
                 "_TOKEN", "Error", "a.b."]  # fmt: skip
masked_text = st.lists(st.sampled_from(MASKED_PIECES), max_size=12).map("".join)


@settings(max_examples=3000, deadline=None)
@given(masked_text, st.sampled_from(["[redacted: password]", "[redacted: api-key]"]))
def test_a_masked_secret_elsewhere_changes_no_reference_of_the_text(
    text: str, placeholder: str
) -> None:
    """Each reference is the text's own, and a placeholder on another line changes none: a
    memory that spells `Redacted0X` keeps it (no placeholder appears in its place)."""
    refs = extract_references(text)
    assert all(ref in text for ref in refs), (text, refs)
    assert not any("[redacted" in PLACEHOLDER.sub("", ref) for ref in refs), refs  # no half
    assert extract_references(f"{text}\n{placeholder}") == refs, text
