"""controller/tracing.py: each phase's own time, whatever the nesting; delivery bounds."""

from __future__ import annotations

import datetime as dt
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.tracing import DELIVERY_BOUND_NS, PassTrace, Tracer

# A tree of phases: (name, children), entered depth first.
names = st.sampled_from(["read", "summarized", "embedded", "written"])
trees = st.recursive(
    st.tuples(names, st.just(())),
    lambda kids: st.tuples(names, st.lists(kids, max_size=3).map(tuple)),
    max_leaves=8,
)


def run(trace: PassTrace, tree: tuple[str, tuple]) -> None:
    name, children = tree
    with trace.phase(name):
        time.sleep(0.0005)
        for child in children:
            run(trace, child)


@settings(max_examples=60, deadline=None)
@given(st.lists(trees, min_size=1, max_size=3))
def test_own_times_add_up_to_the_outermost_phases(forest: list[tuple[str, tuple]]) -> None:
    """However phases nest, each one's own time excludes those inside it: the own times add
    up to the time of the outermost ones, and none is negative."""
    trace = PassTrace("s")
    for tree in forest:
        run(trace, tree)
    total_top = 0
    # The outermost spans are those no other span contains.
    for i, (_, s, e) in enumerate(trace.spans):
        inside = any(
            j != i and s2 <= s and e <= e2 and (s2, e2) != (s, e)
            for j, (_, s2, e2) in enumerate(trace.spans)
        )
        total_top += 0 if inside else e - s
    assert all(v >= 0 for v in trace.own.values())
    assert sum(trace.own.values()) == total_top


def test_a_phase_that_raises_is_still_timed() -> None:
    trace = PassTrace("s")
    try:
        with trace.phase("claimed"):
            raise RuntimeError("held")
    except RuntimeError:
        pass
    assert [name for name, _, _ in trace.spans] == ["claimed"]


def at(ns: int) -> str:
    return dt.datetime.fromtimestamp(ns / 1e9, dt.UTC).isoformat()


def test_delivery_is_timed_only_for_a_recent_request() -> None:
    tracer = Tracer()
    now = time.time_ns()
    recent = tracer.begin("s", "sunset", "ns/o", at(now - 2 * 10**9))
    assert 1.5 < recent.seconds()["delivered"] < 60
    ahead = tracer.begin("s", "sunset", "ns/o", at(now + 2 * 10**9))  # a clock ahead: no wait
    assert ahead.seconds()["delivered"] == 0
    for far in (now - 2 * DELIVERY_BOUND_NS, now + 2 * DELIVERY_BOUND_NS):
        assert "delivered" not in tracer.begin("s", "sunset", "ns/o", at(far)).own
    for unreadable in (None, "", "yesterday", "2026-13-40T00:00:00Z"):
        assert "delivered" not in tracer.begin("s", "sunset", "ns/o", unreadable).own


def test_without_an_endpoint_nothing_is_exported() -> None:
    assert not Tracer.from_env({}).exporting
    tracer = Tracer.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"})
    try:
        assert tracer.exporting
    finally:
        tracer.close()


def test_a_wait_to_give_way_is_queued_time_and_not_the_phase_around_it() -> None:
    """phase() after giving_way: a step's wait for a first summary is its own queued span,
    taken out of the phase it happened inside; no wait, no span."""
    trace = PassTrace("s")
    waits = iter([0.0, 0.05])

    def give_way() -> float:
        wait = next(waits)
        time.sleep(wait)
        return wait

    phase = trace.giving_way(give_way)
    # embedded gives way for 50 ms first, inside summarized
    with phase("summarized"), phase("embedded"):
        pass
    names = [name for name, _, _ in trace.spans]
    assert names.count("queued") == 1 and sorted(names) == ["embedded", "queued", "summarized"]
    assert trace.own["queued"] >= 50 * 10**6
    assert trace.own["summarized"] < 50 * 10**6  # the wait is not counted twice
