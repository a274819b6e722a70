"""The masking skips a rule when a cheap test says no match can come of it (redaction.py,
`Redaction._gates`): a linear rule the one RE2 set over them finds no match of, another rule
whose literal the text lacks. A wrong skip would show a secret, so: for every rule and any
text its own pattern matches in, the gate lets the rule run; and over texts mixing every
rule's matches, ordinary text and generated credentials, the masking finds exactly what it
finds with no gate."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.redaction import DEFAULT_REDACTION, Redaction, Rule
from tests.support.credentials import generated

RULES = list(enumerate(DEFAULT_REDACTION.rules))
_SLOW = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large]


class _EveryRule:
    """In place of the RE2 set: every linear rule may match (the masking with no gate)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def Match(self, text: str) -> list[int]:  # RE2's spelling
        return list(range(self.n))


def _ungated(redaction: Redaction) -> Redaction:
    plain = Redaction(redaction.extra)
    plain.__dict__["_gates"] = (_EveryRule(len(plain.rules)), (None,) * len(plain.rules))
    return plain


def _matching(rule: Rule) -> st.SearchStrategy[str]:
    """Texts that the rule's own pattern (its linear form's, for a linear rule) matches in."""
    pattern = rule.pattern
    flags = pattern.flags if isinstance(pattern, re.Pattern) else 0
    return st.from_regex(re.compile(rule.linear.source if rule.linear else pattern.pattern, flags))


def _runs(redaction: Redaction, n: int, text: str) -> bool:
    scan, literals = redaction._gates
    if redaction.rules[n].linear and n not in (scan.Match(text) or ()):
        return False
    return literals[n] is None or literals[n] in text


@pytest.mark.parametrize(("n", "rule"), RULES, ids=[f"{n}-{r.kind}" for n, r in RULES])
@settings(max_examples=25, suppress_health_check=_SLOW)
@given(data=st.data())
def test_the_gate_lets_a_rule_run_on_any_text_its_pattern_matches_in(
    n: int, rule: Rule, data: Any
) -> None:
    text = data.draw(_matching(rule))
    found = (rule.linear.pattern if rule.linear else rule.pattern).search(text)
    assert found is not None
    assert _runs(DEFAULT_REDACTION, n, text), (rule.kind, text)


_PIECE = st.one_of(
    st.sampled_from([rule for _, rule in RULES]).flatmap(_matching),
    st.text(max_size=30),
    st.integers(0, 10**6).map(lambda seed: list(generated(seed).values())[seed % 7][1]),
)
_MIXED = st.lists(_PIECE, min_size=1, max_size=5).flatmap(
    lambda pieces: st.sampled_from([" ", "\n", "", "=", '"']).map(lambda sep: sep.join(pieces))
)
_UNGATED = _ungated(DEFAULT_REDACTION)


@settings(max_examples=300, suppress_health_check=_SLOW)
@given(_MIXED)
def test_with_the_gates_the_masking_finds_what_it_finds_without_them(text: str) -> None:
    assert DEFAULT_REDACTION.spans(text) == _UNGATED.spans(text)
    assert DEFAULT_REDACTION.text(text) == _UNGATED.text(text)


@settings(max_examples=100, suppress_health_check=_SLOW)
@given(_MIXED, st.sampled_from([r"tok-([a-z0-9]{12})", r"(?i)acme_[0-9]{6}", r"x{3}\d+y"]))
def test_a_summarizers_own_patterns_find_the_same_with_the_gates(text: str, own: str) -> None:
    redaction = Redaction((("acme", own),))
    assert redaction.spans(text + " tok-abcdef123456") == _ungated(redaction).spans(
        text + " tok-abcdef123456"
    )
