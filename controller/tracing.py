"""Where a pass's time goes: each phase observed in session_summary_pass_phase_seconds{phase}
and, with OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT set, sent as OpenTelemetry spans (a span per
pass, a child per phase). The phases are described in docs/operations.md ("Tracing"):
delivered, queued, claimed, read, summarized, embedded, written, status. A phase entered
inside another is not counted in the outer one too.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from controller import metrics
from controller.core.retention import parse_time

log = logging.getLogger(__name__)

PHASES = ("delivered", "queued", "claimed", "read", "summarized", "embedded", "written", "status")
SERVICE = "session-summary-operator"
DELIVERY_BOUND_NS = 600 * 10**9  # a requestedAt further from the handler's start is not timed
_ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


@dataclass
class _Open:
    started_ns: int
    nested_ns: int = 0  # the time of the phases entered inside this one


@dataclass
class PassTrace:
    """One pass's phases on the wall clock (ns), in the order they began."""

    session_id: str
    attributes: dict[str, str] = field(default_factory=dict)
    begun_ns: int = field(default_factory=time.time_ns)  # the handler's start
    outcome: str = "retried"  # an Outcome kind, or failed; retried: the attempt is tried again
    spans: list[tuple[str, int, int]] = field(default_factory=list)
    # Each phase's own time (ns): a nested phase's time is taken out of the one around it.
    own: dict[str, int] = field(default_factory=dict)
    _open: list[_Open] = field(default_factory=list)  # the phases entered, innermost last

    def add(self, phase: str, start_ns: int, end_ns: int) -> None:
        """A phase timed elsewhere (its start before the trace existed, e.g. delivered)."""
        end_ns = max(start_ns, end_ns)
        self.spans.append((phase, start_ns, end_ns))
        self.own[phase] = self.own.get(phase, 0) + end_ns - start_ns
        if self._open:
            self._open[-1].nested_ns += end_ns - start_ns

    def giving_way(
        self, give_way: Callable[[], float]
    ) -> Callable[[str], contextlib.AbstractContextManager[None]]:
        """This trace's phase(), calling give_way() first; a wait counts as queued."""

        def phase(name: str) -> contextlib.AbstractContextManager[None]:
            began = time.time_ns()
            if give_way() > 0:
                self.add("queued", began, time.time_ns())
            return self.phase(name)

        return phase

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Times what runs inside as phase `name` (nested phases: see the module's doc)."""
        frame = _Open(time.time_ns())
        self._open.append(frame)
        try:
            yield
        finally:
            self._open.pop()
            end = time.time_ns()
            total = end - frame.started_ns
            if self._open:
                self._open[-1].nested_ns += total
            self.spans.append((name, frame.started_ns, end))
            self.own[name] = self.own.get(name, 0) + total - frame.nested_ns

    def seconds(self) -> dict[str, float]:
        # A copy first: a cancelled handler ends the trace while its pass may still run.
        return {name: ns / 1e9 for name, ns in dict(self.own).items()}


class Tracer:
    """Ends the runtime's pass traces: histograms always, spans when configured."""

    def __init__(self, provider: Any | None = None) -> None:
        self._provider = provider
        self._tracer = provider.get_tracer("controller.tracing") if provider else None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Tracer:
        if not any(env.get(v) for v in _ENDPOINT_VARIABLES):
            return cls()
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        resource = Resource.create({"service.name": env.get("OTEL_SERVICE_NAME") or SERVICE})
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        log.info("pass traces are exported over OTLP/HTTP (%s)", _endpoint(env))
        return cls(provider)

    def begin(self, session_id: str, trigger: str, obj: str, requested_at: str | None) -> PassTrace:
        """A pass's trace from the handler's start; requested_at adds the delivery phase."""
        trace = PassTrace(session_id, {"trigger": trigger, "object": obj})
        requested = parse_time(requested_at)
        if requested is not None:
            # Only a recent requestedAt counts (one written by hand may say anything).
            since = trace.begun_ns - int(requested.timestamp() * 1e9)
            if -DELIVERY_BOUND_NS < since < DELIVERY_BOUND_NS:
                trace.add("delivered", trace.begun_ns - max(0, since), trace.begun_ns)
        return trace

    @property
    def exporting(self) -> bool:
        return self._tracer is not None

    @contextlib.contextmanager
    def ending(self, trace: PassTrace) -> Iterator[PassTrace]:
        """Finishes the trace when the block ends, however it ends."""
        try:
            yield trace
        finally:
            self.finish(trace)

    def finish(self, trace: PassTrace) -> None:
        """Observes the trace's phases, and exports it as spans when configured."""
        for name, seconds in trace.seconds().items():
            metrics.observe_phase(name, seconds)
        spans = list(trace.spans)
        if self._tracer is None or not spans:
            return
        from opentelemetry import trace as otel

        attributes = {"session.id": trace.session_id, "outcome": trace.outcome, **trace.attributes}
        start = min(s for _, s, _ in spans)
        end = max(e for _, _, e in spans)
        root = self._tracer.start_span("session-summary.pass", start_time=start)
        root.set_attributes(attributes)
        parent = otel.set_span_in_context(root)
        for name, s, e in spans:
            child = self._tracer.start_span(name, context=parent, start_time=s)
            child.set_attribute("session.id", trace.session_id)
            child.end(end_time=e)
        root.end(end_time=end)

    def close(self, timeout_s: float = 3.0) -> None:
        """Flushes and stops the exporter, waiting at most timeout_s (the SDK may hang)."""
        if self._provider is None:
            return
        closing = threading.Thread(target=self._provider.shutdown, daemon=True)
        closing.start()
        closing.join(timeout_s)


def _endpoint(env: Mapping[str, str]) -> str:
    return next((env[v] for v in reversed(_ENDPOINT_VARIABLES) if env.get(v)), "")
