"""Every cut of text that may hold a masked secret keeps its placeholder `[redacted: KIND]`
(controller/redaction.py) whole or drops it whole: a reader of a summary, a status message or
an Event never sees a `[redacted` or a `dacted: x]` they cannot tell from broken text; and
every cut keeps its limit. Pure, generated inputs."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.core import document, merge, quoting, text
from controller.core.summary import StructuredSummary, SummaryItem, title_problem
from controller.store.errors import _clip
from controller.summarizers import extractive
from controller.summarizers.chat_model import _show

WORDS = ("fix", "the", "port 8080,", "config/app.yaml;", "v3.11:", "Wells Fargo", "-", "—", "a")
KINDS = ("api-key", "basic-auth-credentials", "x")
token = st.one_of(
    st.sampled_from(WORDS),
    st.text("abc 12,:;.", min_size=1, max_size=12),
    st.sampled_from(KINDS).map(lambda kind: f"[redacted: {kind}]"),
)
masked_text = st.lists(token, min_size=1, max_size=60).map(" ".join)
PLACEHOLDER = re.compile(r"\[redacted: [a-z0-9-]+\]")


def assert_no_partial_placeholder(cut: str) -> None:
    rest = PLACEHOLDER.sub("", cut)
    assert "[" not in rest and "]" not in rest and "redacted" not in rest, cut


# (name, the cut of (text, limit), the most characters it may return)
CUTS: list[tuple[str, Callable[[str, int], str], Callable[[int], int]]] = [
    ("text.cut", text.cut, lambda n: n),
    ("text.cut at a word", lambda t, n: text.cut(t, n, word_from=n // 2), lambda n: n),
    ("one_line", text.one_line, lambda n: n),
    ("one_line with a mark", lambda t, n: text.one_line(t, n, "…"), lambda n: n),
    ("quoting.fit", quoting.fit, lambda n: n),
    ("quoting.quote", lambda t, n: quoting.quote(t, "error", n + 60), lambda n: n + 60),
    ("extractive.shorten", extractive.shorten, lambda n: n),
    ("cut_keeping_facts", extractive.cut_keeping_facts, lambda n: n),
    ("store error message", _clip, lambda n: n),
    ("status quote", lambda t, n: _show(t)[1:-1], lambda n: 60),
    ("derived title", lambda t, n: merge.derived_title(t, "s1"), lambda n: 80),
    (
        "summary title",
        # An item has text: a blank one (the strategy can draw " ") is not an item to title.
        lambda t, n: extractive._title(
            [SummaryItem(text=text.cut(t, 500, "").strip() or "x")], "s1"
        ),
        lambda n: 80,
    ),
    ("title message", lambda t, n: title_problem("Traceback " + t) or "", lambda n: 200),
]


@pytest.mark.parametrize(("name", "cut", "most"), CUTS, ids=[c[0] for c in CUTS])
@settings(max_examples=200, deadline=None)
@given(masked_text, st.integers(min_value=20, max_value=200))
def test_a_cut_keeps_a_placeholder_whole_or_drops_it(
    name: str, cut: Callable[[str, int], str], most: Callable[[int], int], masked: str, limit: int
) -> None:
    result = cut(masked, limit)
    assert len(result) <= most(limit)
    assert_no_partial_placeholder(result)


@settings(max_examples=200, deadline=None)
@given(masked_text, st.integers(min_value=20, max_value=300))
def test_a_folded_document_keeps_a_placeholder_in_its_title_whole(
    title: str, max_chars: int
) -> None:
    summary = StructuredSummary(
        session_id="s1",
        title=text.cut(title, 120, "").strip() or "x",  # a title has text (" " is drawn)
        category="other",
        sections={"User Requests": [SummaryItem(text="port 8080 " * 20)]},
    )
    assert_no_partial_placeholder(document.choose_lines(summary, None, max_chars))


def test_the_title_of_a_long_request_does_not_end_in_half_a_placeholder() -> None:
    request = "Rotate the key for the deploy pipeline of the payments service " + (
        "[redacted: api-key] then redeploy"
    )
    title = extractive._title([SummaryItem(text=request)], "s1")
    assert title == "Rotate the key for the deploy pipeline of the payments service"
