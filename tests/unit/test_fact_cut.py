"""A sentence too long for an item keeps the clauses that carry facts, not its head alone
(controller/summarizers/extractive.py: cut_keeping_facts); and counts in words are
facts (controller/core/document.py: fact_tokens). Pure, generated inputs."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.core.document import fact_tokens
from controller.summarizers.extractive import _CLAUSE_END, cut_keeping_facts, sentences

FACTS = ["$400,000", "port 8080", "config/app.yaml", "Wells Fargo", "four", "25:50", "v3.11"]
WORDS = ("and", "so", "it", "was", "very", "nice", "really", "well")
chatter = st.lists(st.sampled_from(WORDS), min_size=1)
clause = st.builds(" ".join, chatter)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=600), st.integers(min_value=20, max_value=300))
def test_the_cut_never_exceeds_its_limit_and_leaves_a_short_text_alone(
    text: str, limit: int
) -> None:
    cut = cut_keeping_facts(text, limit)
    assert len(cut) <= limit
    if len(text) <= limit:
        assert cut == text


@settings(max_examples=300, deadline=None)
@given(
    st.lists(clause, min_size=2, max_size=12),
    st.sampled_from(FACTS),
    st.data(),
)
def test_a_fact_anywhere_in_a_long_sentence_survives_its_cut(
    clauses: list[str], fact: str, data: st.DataObject
) -> None:
    """Wherever the one fact-bearing clause sits (often past the cut the head alone would
    make), the fact is in the item when its clause fits."""
    at = data.draw(st.integers(min_value=0, max_value=len(clauses)))
    holder = f"the user said {fact} then"
    parts = [*clauses[:at], holder, *clauses[at:]]
    joined = ", ".join(parts)
    sentence = joined[0].upper() + joined[1:] + "."
    limit = data.draw(st.integers(min_value=len(holder) + 4, max_value=len(sentence) + 5))
    cut = cut_keeping_facts(sentence, limit)
    assert len(cut) <= limit
    assert fact.lower() in cut.lower(), (sentence, limit, cut)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(clause, st.sampled_from(FACTS).map(lambda f: f"at {f} ok")), min_size=2))
def test_a_fact_bearing_clause_is_never_dropped_for_a_fact_free_one_as_long(
    parts: list[str],
) -> None:
    sentence = ", ".join(parts) + "."
    limit = max(20, len(sentence) // 2)
    cut = cut_keeping_facts(sentence, limit)
    clauses = [c for c in _CLAUSE_END.split(sentence) if c]
    kept = [c for c in clauses if c.strip(" ,.") and c.rstrip(",.") in cut]
    dropped = [c for c in clauses if c not in kept]
    for lost in (c for c in dropped if len(fact_tokens(c))):
        for other in (c for c in kept if not len(fact_tokens(c))):
            assert len(lost) > len(other) - 6, (sentence, cut)


# One fact of each kind controller.core.document.fact_tokens finds, each as its whole token.
FACT_TOKENS = [
    *(f for f in FACTS if f != "port 8080"),
    *("8080", "2023/05/20", "retry_count", "maxBytes", "--dry-run", "`make test`", '"Blue Moon"'),
]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=120),
    st.lists(clause, max_size=4),
    st.sampled_from(FACT_TOKENS),
    st.data(),
)
def test_a_fact_in_a_clause_longer_than_the_limit_survives_its_cut(
    words: list[str], others: list[str], fact: str, data: st.DataObject
) -> None:
    """The one fact of a sentence sits in a clause too long to keep whole (no comma for
    hundreds of characters, or a sentence of one clause): the cut keeps it whenever the
    limit leaves room for it and its gap marks."""
    at = data.draw(st.integers(min_value=0, max_value=len(words)))
    long = " ".join([*words[:at], "the user said", fact, "then", *words[at:]])
    parts = [*others, long]
    place = data.draw(st.integers(min_value=0, max_value=len(others)))
    parts.insert(place, parts.pop())
    joined = ", ".join(parts)
    sentence = joined[0].upper() + joined[1:] + "."
    limit = data.draw(st.integers(min_value=len(fact) + 4, max_value=max(len(fact) + 4, 300)))
    if len(long) + 1 <= limit:  # the clause fits: the test above covers it
        return
    cut = cut_keeping_facts(sentence, limit)
    assert len(cut) <= limit
    assert fact.lower() in cut.lower(), (sentence, limit, cut)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(WORDS), min_size=40, max_size=120), st.sampled_from(FACT_TOKENS))
def test_the_only_fact_of_a_long_sentence_reaches_its_item(words: list[str], fact: str) -> None:
    at = len(words) * 3 // 4
    said = " ".join(["I", *words[:at], "and then the user said", fact, "to", *words[at:]]) + "."
    (item,) = sentences(said)
    assert fact.lower() in item.lower() and len(item) <= 200, (said, item)


def test_the_head_of_an_aside_is_not_what_is_kept_when_the_amount_is_at_its_end() -> None:
    said = (
        "By the way, I'm really looking forward to finally owning a home, it's been a long "
        "process, but it'll be worth it to have a backyard like the one I'll have - remember "
        "when I got pre-approved for $400,000 from Wells Fargo?"
    )
    (item,) = sentences(said)
    assert "$400,000 from Wells Fargo?" in item and "…" in item and len(item) <= 200


def test_counts_in_words_are_facts_but_one_is_not() -> None:
    assert len(fact_tokens("I've tried four different ones so far")) == 1
    assert len(fact_tokens("we went there twice, with a dozen friends")) == 2
    assert len(fact_tokens("the one I liked")) == 0


# The facts pattern as Python's re ran it alone, in time quadratic in a run of letters, dots
# or dashes without a slash after it (16 KB of `a` took 8 s).
BACKTRACKING_FACT = re.compile(
    r"(?P<number>[$€£]?\d[\d,.:/%-]*\w*)"
    r"|(?P<count>\b(?i:two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty"
    r"|thirty|forty|fifty|sixty|seventy|eighty|ninety|hundred|thousand|million|dozen|twice"
    r"|thrice|half)\b)"
    r"|(?P<path>[\w.~-]*[/\\][\w./\\-]+|\b\w+\.(?:py|ts|js|go|rs|md|json|ya?ml|toml|sh)\b)"
    r"|(?P<ident>\b[A-Za-z]+_[\w]+\b|\b[a-z]+[A-Z]\w*\b|--[a-z][\w-]+|`[^`]+`)"
    r"|(?P<name>(?<=[\w,;:)] )[A-Z][\w'&.-]*(?: [A-Z][\w'&.-]*)*)"
)
FACT_PIECES = ["a", "A", "1", "2.", "_", ".", "-", "~", "/", "\\", " ", ", ", "two", "Two",
               "am", "x.py", "é", "`", "--a", "$", "%", ":", ")", "I", "fooBar", "a_b",
               "10am-noon/x", "a/b~c/d", "\n", "\"Title\""]  # fmt: skip


@settings(max_examples=5000, deadline=None)
@given(st.lists(st.sampled_from(FACT_PIECES), max_size=16).map("".join))
def test_the_facts_are_those_the_backtracking_pattern_found(text: str) -> None:
    old = [m.group().lower() for m in BACKTRACKING_FACT.finditer(text) if m.group() != "I"]
    assert fact_tokens(text)[: len(old)] == old, text


@pytest.mark.timeout(120)
@pytest.mark.parametrize("unit", ["a", "-a", "a.", "_", "1a.", "two-", "~", "a/~"])
def test_the_facts_of_any_long_text_are_found_in_time_linear_in_it(unit: str) -> None:
    """Before, 16 KB of `a` took 8 s and 256 KB half an hour (the summarizer's callers cut
    what they ask about first; document lines and clauses are short)."""
    assert len(fact_tokens(unit * (262_144 // len(unit)))) <= 262_144
