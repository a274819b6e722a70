"""controller/tracing.py: each phase's own time, whatever the nesting; the spans; delivery
bounds."""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry import trace as otel
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from controller import tracing
from controller.tracing import DELIVERY_BOUND_NS, PassTrace

# A tree of phases: (name, children), entered depth first.
names = st.sampled_from(["read", "summarized", "embedded", "written"])
trees = st.recursive(
    st.tuples(names, st.just(())),
    lambda kids: st.tuples(names, st.lists(kids, max_size=3).map(tuple)),
    max_leaves=8,
)


def traced(give_way: Callable[[], float] = lambda: 0.0) -> tuple[PassTrace, InMemorySpanExporter]:
    """A pass's trace whose spans are kept in memory."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return PassTrace(provider, "s", "sunset", "ns/o", None, give_way), exporter


def phases(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.parent is not None]


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
    trace, exporter = traced()
    for tree in forest:
        run(trace, tree)
    spans = [(s.start_time or 0, s.end_time or 0) for s in phases(exporter)]
    total_top = 0
    # The outermost spans are those no other span contains.
    for i, (s, e) in enumerate(spans):
        inside = any(
            j != i and s2 <= s and e <= e2 and (s2, e2) != (s, e)
            for j, (s2, e2) in enumerate(spans)
        )
        total_top += 0 if inside else e - s
    assert all(v >= 0 for v in trace.own.values())
    assert sum(trace.own.values()) == total_top


def test_a_phase_that_raises_is_still_timed() -> None:
    trace, exporter = traced()
    try:
        with trace.phase("claimed"):
            raise RuntimeError("held")
    except RuntimeError:
        pass
    assert [s.name for s in phases(exporter)] == ["claimed"] and "claimed" in trace.own


def test_a_pass_is_a_span_with_a_child_per_phase() -> None:
    """The pass's span, from its first phase's start to the trace's end, with its
    attributes; each phase a child of it; nothing sent before a phase, or after the end."""
    trace, exporter = traced()
    with trace:
        assert exporter.get_finished_spans() == ()
        trace.add("queued", trace.begun_ns, time.time_ns())
        with trace.phase("read"):
            pass
        trace.outcome = "summarized"
    trace.add("written", time.time_ns(), time.time_ns())  # a cancelled handler's pass
    *children, root = exporter.get_finished_spans()
    assert root.name == "session-summary.pass" and root.parent is None
    assert dict(root.attributes or {}) == {
        "session.id": "s", "trigger": "sunset", "object": "ns/o", "outcome": "summarized"
    }  # fmt: skip
    assert [s.name for s in children] == ["queued", "read"]
    assert root.start_time == trace.begun_ns
    for span in children:
        assert span.parent is not None and span.parent.span_id == root.context.span_id
        assert span.context.trace_id == root.context.trace_id
        assert dict(span.attributes or {}) == {"session.id": "s"}
        assert (root.start_time or 0) <= (span.start_time or 0) <= (span.end_time or 0)
        assert (span.end_time or 0) <= (root.end_time or 0)
    empty, exporter = traced()
    with empty:
        pass
    assert exporter.get_finished_spans() == ()


def at(ns: int) -> str:
    return dt.datetime.fromtimestamp(ns / 1e9, dt.UTC).isoformat()


def test_delivery_is_timed_only_for_a_recent_request() -> None:
    def begin(requested_at: str | None) -> PassTrace:
        return PassTrace(otel.NoOpTracerProvider(), "s", "sunset", "ns/o", requested_at)

    now = time.time_ns()
    recent = begin(at(now - 2 * 10**9))
    assert 1.5 < recent.own["delivered"] / 1e9 < 60
    assert recent.start_ns == recent.begun_ns - recent.own["delivered"]  # the pass's start
    ahead = begin(at(now + 2 * 10**9))  # a clock ahead: no wait
    assert ahead.own["delivered"] == 0
    for far in (now - 2 * DELIVERY_BOUND_NS, now + 2 * DELIVERY_BOUND_NS):
        assert "delivered" not in begin(at(far)).own
    for unreadable in (None, "", "yesterday", "2026-13-40T00:00:00Z"):
        assert "delivered" not in begin(unreadable).own


def test_without_an_endpoint_nothing_is_exported() -> None:
    assert isinstance(tracing.tracer_provider({}), otel.NoOpTracerProvider)
    provider = tracing.tracer_provider({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"})
    try:
        assert isinstance(provider, TracerProvider)
    finally:
        tracing.close(provider)


def test_a_wait_to_give_way_is_queued_time_and_not_the_phase_around_it() -> None:
    """phase() gives way first: a step's wait for a first summary is its own queued span,
    taken out of the phase it happened inside; no wait, no span."""
    waits = iter([0.0, 0.05])

    def give_way() -> float:
        wait = next(waits)
        time.sleep(wait)
        return wait

    trace, exporter = traced(give_way)
    # embedded gives way for 50 ms first, inside summarized
    with trace.phase("summarized"), trace.phase("embedded"):
        pass
    names = [s.name for s in phases(exporter)]
    assert names.count("queued") == 1 and sorted(names) == ["embedded", "queued", "summarized"]
    assert trace.own["queued"] >= 50 * 10**6
    assert trace.own["summarized"] < 50 * 10**6  # the wait is not counted twice


secrets = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", min_size=12
)


@settings(max_examples=30, deadline=None)
@given(
    secrets,
    secrets,
    st.sampled_from(["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]),
)
def test_the_endpoint_is_logged_without_its_credentials(
    password: str, token: str, variable: str
) -> None:
    """tracing.otlpEndpoint may carry a password or a token in its query: the start log line
    names the collector, never them."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    tracing.log.addHandler(handler)
    level = tracing.log.level
    tracing.log.setLevel(logging.INFO)
    endpoint = (
        f"https://otel:{password}@collector.observability:4318/v1/traces?token={token}#{token}"
    )
    try:
        provider = tracing.tracer_provider({variable: endpoint})
        tracing.close(provider)
    finally:
        tracing.log.removeHandler(handler)
        tracing.log.setLevel(level)
    logged = " ".join(r.getMessage() for r in records)
    assert "collector.observability:4318/v1/traces" in logged
    assert password not in logged and token not in logged
