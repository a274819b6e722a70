"""The lease at its exact margin (controller/core/claim_rules.py), in exact arithmetic.

One holder renews a claim every renew period on its own clock and then stops (a crash, a
partition); a contender sees each change some lag after it was applied and looks again
whenever hypothesis likes, and at the last instant the holder may still write. Durations,
margins, renew periods, lags and clock rates are generated around their boundaries (rates
exactly at the documented drift bound, lag 0, the renewal just before the holder's
deadline), so the property fails for a takeover even one millisecond early."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction as F

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from controller.core.claim_rules import (
    Claim,
    Sighting,
    Writer,
    held_for_s,
    holder_may_write,
    sighted,
)

HOLDER, CONTENDER = Writer("replica-a", "uid-1", "a/s"), Writer("replica-b", "uid-1", "a/s")
Rule = Callable[[Claim | None, Sighting, Writer, float], float]


def drift_bound(duration: F, margin: F) -> F:
    """How far each clock's rate may stray from real time (docs/architecture.md)."""
    return margin / (2 * duration - margin)


@dataclass(frozen=True)
class Case:
    duration: F
    margin: F
    renew: F  # the holder's renew period, on its clock
    renewals: int  # how many renewals it makes before it stops
    lag: F  # how long after a change the contender sees it
    holder_rate: F
    contender_rate: F
    polls: tuple[F, ...]  # real times the contender looks besides the critical instant


def overlaps(case: Case, rule: Rule = held_for_s) -> list[F]:
    """The real times at which both may write (the holder by holder_may_write, the
    contender once `rule` let it take the claim)."""
    d, m = case.duration, case.margin
    claim = Claim("s", "coll", HOLDER, d)  # type: ignore[arg-type]
    holder_clock = lambda t: 1000 + case.holder_rate * t  # noqa: E731 (no shared origin)
    contender_clock = lambda t: -7 + case.contender_rate * t  # noqa: E731
    renewed_at = [F(0)]  # real times the holder's writes were applied
    while len(renewed_at) <= case.renewals:
        due = renewed_at[-1] + case.renew / case.holder_rate
        if not holder_may_write(holder_clock(renewed_at[-1]), holder_clock(due), d, m):
            break  # the holder gives up before its deadline: nothing more to renew
        renewed_at.append(due)
    last = renewed_at[-1]
    holder_stops = last + (d - m) / case.holder_rate  # the first instant it may not write
    critical = holder_stops - F(1, 10**9)
    looks = sorted({*(t + case.lag for t in renewed_at), *case.polls, critical})
    sighting, took, found = None, False, []
    for t in looks:
        version = str(sum(1 for r in renewed_at if r <= t))  # a GET sees the latest
        sighting = sighted(sighting, "c", version, contender_clock(t))  # type: ignore[arg-type]
        took = took or rule(claim, sighting, CONTENDER, contender_clock(t)) == 0  # type: ignore[arg-type]
        last_seen = max(r for r in renewed_at if r <= t)
        if took and holder_may_write(holder_clock(last_seen), holder_clock(t), d, m):  # type: ignore[arg-type]
            found.append(t)
    return found


def early(by_s: float) -> Rule:
    """A contender that takes over `by_s` seconds before the duration has passed."""

    def rule(existing: Claim | None, sighting: Sighting, me: Writer, now_s: float) -> float:
        shorter = existing and Claim(
            existing.session_id, existing.collection_id, existing.writer,
            existing.duration_s - F(by_s).limit_denominator(1000),  # type: ignore[arg-type]
        )  # fmt: skip
        return held_for_s(shorter or existing, sighting, me, now_s)

    return rule


def at_the_margin(duration: F = F(60), margin: F = F(5), lag: F = F(0)) -> Case:
    """The tightest case the rules allow: each clock at the drift bound, the slow one the
    holder's, the contender seeing the last renewal the instant it was applied."""
    bound = drift_bound(duration, margin)
    return Case(duration, margin, duration / 3, 2, lag, 1 - bound, 1 + bound, ())


EARLY = [0.001, 1.0, 5.0, 10.0]


@pytest.mark.parametrize("by_s", EARLY)
def test_a_takeover_early_by_any_amount_lets_two_writers_write(by_s: float) -> None:
    assert overlaps(at_the_margin()) == []
    assert overlaps(at_the_margin(), early(by_s)) != []


@pytest.mark.parametrize("by_s", EARLY)
def test_the_margin_examples_hold_for_short_and_long_leases(by_s: float) -> None:
    for duration in (F(15), F(137, 10), F(300)):
        case = at_the_margin(duration, F(5) if duration > 10 else F(1))
        assert overlaps(case) == []
        assert overlaps(case, early(by_s)) != [], duration


def boundary_fractions(low: F, high: F) -> st.SearchStrategy[F]:
    """Fractions in [low, high], the two ends as often as anything between."""
    between = st.fractions(low, high, max_denominator=max(10**6, low.denominator, high.denominator))
    return st.one_of(st.just(low), st.just(high), between)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    duration = draw(boundary_fractions(F(1), F(600)))
    margin = draw(boundary_fractions(F(1, 1000), duration / 2))
    bound = drift_bound(duration, margin)
    renew = draw(boundary_fractions(F(1, 1000), duration - margin))
    rates = boundary_fractions(1 - bound, 1 + bound)
    polls = st.lists(boundary_fractions(F(0), 4 * duration), max_size=8)
    return Case(
        duration, margin, renew, draw(st.integers(0, 5)),
        draw(st.one_of(st.just(F(0)), boundary_fractions(F(0), duration))),
        draw(rates), draw(rates), tuple(draw(polls)),
    )  # fmt: skip


@settings(max_examples=600, deadline=None)
@given(cases())
@example(at_the_margin())
@example(at_the_margin(F(15), F(1)))
@example(at_the_margin(F(1), F(1, 2)))
def test_no_two_writers_at_the_exact_margin_whatever_the_durations_rates_and_lags(
    case: Case,
) -> None:
    assert overlaps(case) == []


@pytest.mark.parametrize("by_s", EARLY)
def test_generated_cases_find_every_early_takeover(by_s: float) -> None:
    """The generated property itself (not only the hand-made margin case) fails for each
    early takeover: hypothesis finds a case."""

    @settings(max_examples=300, deadline=None, database=None)
    @given(cases())
    def prop(case: Case) -> None:
        assert overlaps(case, early(by_s)) == []

    with pytest.raises(AssertionError):
        prop()
