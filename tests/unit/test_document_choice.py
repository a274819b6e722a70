"""What the bounded document shows when the summary does not fit (choose_lines): the newest
item of each history section while they take at most half the space, then the lines of
every section carrying most facts, never a fact-free line in place of a fact of its
length, never more than the budget; the ledger (sectionsJson) keeps every item whatever
the document shows."""

from __future__ import annotations

import re

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from controller.core.document import fact_tokens, render_document
from controller.core.summary import LEGACY_HEADING, StructuredSummary, SummaryItem
from controller.core.summary_row import from_chroma_row, to_chroma_metadata

FACTS = ["port 8080", "config/app.yaml", "Business Administration", "$400,000", "7 May 2023"]
CHATTER = ["that sounds good", "thanks a lot", "sure thing", "happy to help", "great idea"]


def _summary(requests: list[str]) -> StructuredSummary:
    items = [SummaryItem(text=t) for t in requests]
    return StructuredSummary(session_id="s", title="T", sections={"User Requests": items})


def test_a_fact_survives_the_fold_where_chatter_of_its_length_does_not() -> None:
    chatter = [f"{w} and so on and so forth number" for w in CHATTER * 8]
    facts = ["We moved the exporter to port 9123 in deploy/values.yaml."]
    document = render_document(_summary(facts + chatter + ["Latest item."]), max_chars=700)
    assert len(document) <= 700
    assert "port 9123" in document and "Latest item." in document
    assert re.search(r"\(\d+ more lines not shown here: summaryctl ledger\)", document)


def test_a_repeated_item_is_not_shown_twice_when_space_is_short() -> None:
    texts = ["Business Administration in 2019.", "filler " * 30]
    texts += ["I graduated with a degree in Business Administration in 2019."]  # the newest
    document = render_document(_summary(texts), max_chars=330)
    assert document.count("Business Administration") == 1


sentence = st.builds(
    lambda words, fact: " ".join(words) + (f" {fact}" if fact else "") + ".",
    st.lists(st.sampled_from(["we", "then", "talked", "about", "it", "later"]), min_size=1),
    st.sampled_from([None, *FACTS]),
)


@given(texts=st.lists(sentence, min_size=1, max_size=60), budget=st.integers(300, 4000))
@settings(max_examples=150, deadline=None)
def test_the_document_keeps_its_budget_its_facts_first_and_the_ledger_keeps_all(
    texts: list[str], budget: int
) -> None:
    summary = _summary(texts)
    document = render_document(summary, max_chars=budget)
    assert len(document) <= budget
    shown = [line[2:] for line in document.splitlines() if line.startswith("- ")]
    words_shown = [set(t.lower().split()) for t in shown]
    for text in set(texts) - set(shown):
        if not fact_tokens(text) or any(set(text.lower().split()) <= w for w in words_shown):
            continue  # fact-free, or its words are all in an item shown
        # A fact left out: no fact-free item as long or longer took its place (but the
        # newest item, which is shown first: the latest state).
        chatter = [s for s in shown if not fact_tokens(s) and s != texts[-1]]
        assert not [s for s in chatter if len(s) >= len(text)]
    # Every item survives in the ledger, whatever the document shows.
    meta = to_chroma_metadata(summary, writer="w", trigger="t", summarized_at_ms=1)
    back = from_chroma_row("s", document, meta)
    assert isinstance(back, StructuredSummary)
    assert [i.text for i in back.sections["User Requests"]] == [
        i.text for i in summary.sections["User Requests"]
    ]


SECTION_NAMES = ["User Requests", "Questions & Decisions", "Corrections & Feedback"]
SECTION_NAMES += ["Current State"]


@given(
    sections=st.fixed_dictionaries(
        {name: st.lists(sentence, max_size=12) for name in SECTION_NAMES}
    ),
    references=st.lists(st.sampled_from(["src/app.py", "9f3c2a1", "docs/a.md", "make test"])),
    budget=st.integers(0, 700),
)
@settings(max_examples=200, deadline=None)
def test_a_small_budget_goes_to_the_lines_with_facts_not_to_the_first_lines(
    sections: dict[str, list[str]], references: list[str], budget: int
) -> None:
    """When nothing but a choice of lines fits (a small budget; a long Current State): the
    document keeps its budget, starts with the title, shows each line under its own heading,
    and never shows a fact-free line in place of a fact-bearing one as long or longer."""
    summary = StructuredSummary(
        session_id="s",
        title="A session about a port",
        sections={n: [SummaryItem(text=t) for t in texts] for n, texts in sections.items()},
        references=list(dict.fromkeys(references)),
    )
    document = render_document(summary, max_chars=budget)
    assert len(document) <= max(budget, 1)
    if budget >= 80:  # the title and the note fit
        assert document.startswith("# A session about")
    heading, shown = None, []
    for line in document.splitlines():
        if line.startswith("## "):
            heading = line[3:]
        elif line.startswith("- ") and heading in sections and "not shown here" not in line:
            assert line[2:] in sections[heading], (heading, line)
            shown.append(line[2:])
    words_shown = [set(t.lower().split()) for t in shown]
    for name, texts in sections.items():
        for text in set(texts) - set(shown):
            if not fact_tokens(text) or any(set(text.lower().split()) <= w for w in words_shown):
                continue
            # (the newest item of a history section may be shown first: the latest state)
            newest = {t[-1] for n, t in sections.items() if t and n != "Current State"}
            chatter = [s for s in shown if not fact_tokens(s) and s not in newest]
            # a section not shown yet costs its heading too
            heading_cost = 0 if f"## {name}" in document else len(name) + 5
            assert not [s for s in chatter if len(s) >= len(text) + heading_cost], (name, text)


def test_a_current_state_longer_than_the_budget_leaves_room_for_the_references() -> None:
    state = [SummaryItem(text=f"Step {w} went fine and everyone was happy.") for w in CHATTER * 6]
    summary = StructuredSummary(
        session_id="s",
        title="Exporter work",
        sections={"Current State": state},
        references=["deploy/values.yaml", "4f9e2c1"],
    )
    document = render_document(summary, max_chars=500)
    assert len(document) <= 500
    assert "`deploy/values.yaml`" in document and "`4f9e2c1`" in document
    assert re.search(r"\(\d+ more lines not shown here: summaryctl ledger\)\n$", document)


@given(
    budget=st.integers(100, 9000),
    # any length up to 20k characters (st.text alone rarely passes a few hundred)
    legacy=st.builds(
        lambda n, t: (t * (n // len(t) + 1))[:n].strip() or "x",
        st.integers(0, 20000),
        st.text(min_size=1, max_size=60),
    ),
    items=st.integers(0, 120),
)
@settings(max_examples=80, deadline=None)
def test_a_carried_earlier_text_is_shown_whole_last_and_the_budget_bounds_the_rest(
    budget: int, legacy: str, items: int
) -> None:
    """Another writer's text (neo's own summary, an earlier system's) is read by readers
    that cannot read the ledger: it is shown whole, byte for byte, after the operator's
    own part, which alone keeps the budget."""
    lines = [
        SummaryItem(text=f"Moved port {8000 + n} to deploy/values.yaml.") for n in range(items)
    ]
    summary = StructuredSummary(
        session_id="s", title="T", sections={"User Requests": lines}, legacy_text=legacy
    )
    document = render_document(summary, max_chars=budget)
    own, heading, carried = document.partition(f"\n{LEGACY_HEADING}\n")
    assert heading and len(own) <= budget
    assert legacy in carried and "## " not in carried.replace(legacy, "")
    alone = summary.model_copy(update={"legacy_text": None})
    assert own == render_document(alone, max_chars=budget)


NAMES = ["Alder", "Birch", "Cedar", "Dogwd", "Elmwd", "Firss", "Gumtr"]  # one length


@given(pairs=st.lists(st.tuples(st.sampled_from(NAMES), st.sampled_from(NAMES)), min_size=3))
@settings(max_examples=200, deadline=None)
def test_of_lines_that_repeat_facts_the_one_that_adds_a_rarer_fact_is_shown(
    pairs: list[tuple[str, str]],
) -> None:
    """Lines of one length, two facts each, room for one: a line holding a fact no other
    line holds is shown before any whose facts all recur (the rarer fact is kept)."""
    lines = list(dict.fromkeys(f"We met {a} and {b} there." for a, b in pairs if a != b))
    assume(len(lines) >= 3)  # the whole does not fit
    held = [{w for w in line.split() if w in NAMES} for line in lines]
    unique = [
        n for n, names in enumerate(held) if any(sum(x in h for h in held) == 1 for x in names)
    ]
    summary = StructuredSummary(
        session_id="s", title="T", sections={"Current State": [SummaryItem(text=t) for t in lines]}
    )
    budget = len(f"# T\n\n## Current State\n- {lines[0]}\n\n") + len(
        f"({len(lines)} more lines not shown here: summaryctl ledger)\n"
    )
    shown = [line[2:] for line in render_document(summary, max_chars=budget).splitlines()]
    shown = [t for t in shown if t in lines]
    assert len(shown) == 1
    if unique:
        assert lines.index(shown[0]) in unique, (lines, shown)


@given(
    texts=st.lists(sentence, min_size=1, max_size=80),
    budget=st.integers(300, 3000),
)
@settings(max_examples=150, deadline=None)
def test_the_document_uses_its_space_before_it_leaves_a_fact_out(
    texts: list[str], budget: int
) -> None:
    """A fact-bearing line is left out only when it no longer fits in what the budget has
    left (or says nothing a shown line does not)."""
    document = render_document(_summary(texts), max_chars=budget)
    shown = [line[2:] for line in document.splitlines() if line.startswith("- ")]
    words_shown = [set(t.lower().split()) for t in shown]
    for text in set(texts) - set(shown):
        if not fact_tokens(text) or any(set(text.lower().split()) <= w for w in words_shown):
            continue
        slack = 8  # the note's count shrinks as lines are shown
        assert len(document) + len(text) + 3 > budget - slack, (len(document), text)
