"""Where a pass's time goes: each phase's own time (nested phases not counted twice) in
session_summary_pass_phase_seconds{phase}, and each phase an OpenTelemetry span under the
pass's, exported when OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT is set (docs/operations.md)."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping

from opentelemetry import trace as otel

from controller import metrics
from controller.core.destinations import shown
from controller.core.retention import parse_time

log = logging.getLogger(__name__)

SERVICE = "session-summary-operator"
DELIVERY_BOUND_NS = 600 * 10**9  # a requestedAt further from the handler's start is not timed
_ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


class PassTrace:
    """One attempt's phases, from the handler's start (or its spec.requestedAt: delivered) to
    the end of its `with` block, where each phase's own time is observed. Each phase calls
    give_way() first (the scheduler's: a wait for a first summary), timed as queued."""

    def __init__(
        self,
        traces: otel.TracerProvider,
        session_id: str,
        trigger: str,
        obj: str,
        requested_at: str | None,
        give_way: Callable[[], float] = lambda: 0.0,
    ) -> None:
        self.session_id, self._give_way = session_id, give_way
        self.begun_ns = self.start_ns = time.time_ns()  # the handler's start
        self.outcome = "retried"  # an Outcome kind, or failed; retried: tried again
        self.own: dict[str, int] = {}  # each phase's own time (ns) in the pass
        self._nested: list[int] = []  # for each open phase, innermost last: its inner time
        self._tracer = traces.get_tracer(__name__)
        self._attributes = {"session.id": session_id, "trigger": trigger, "object": obj}
        self._root: otel.Span | None = None  # the pass's span, from its first phase on
        if (requested := parse_time(requested_at)) is not None:
            # Only a recent requestedAt counts (one written by hand may say anything).
            since = self.begun_ns - int(requested.timestamp() * 1e9)
            if -DELIVERY_BOUND_NS < since < DELIVERY_BOUND_NS:
                self.start_ns -= max(0, since)
                self.add("delivered", self.start_ns, self.begun_ns)

    def add(self, phase: str, start_ns: int, end_ns: int, nested_ns: int = 0) -> None:
        """A phase's span; nested_ns: the time of the phases inside it."""
        end_ns = max(start_ns, end_ns)
        self.own[phase] = self.own.get(phase, 0) + end_ns - start_ns - nested_ns
        if self._nested:
            self._nested[-1] += end_ns - start_ns
        if self._root is None:
            self._root = self._tracer.start_span(
                "session-summary.pass", attributes=self._attributes, start_time=self.start_ns
            )
        parent = otel.set_span_in_context(self._root)
        span = self._tracer.start_span(phase, parent, start_time=start_ns)
        span.set_attribute("session.id", self.session_id)
        span.end(end_time=end_ns)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Times what runs inside as phase `name`, after give_way()."""
        began = time.time_ns()
        if self._give_way() > 0:
            self.add("queued", began, time.time_ns())
        start = time.time_ns()
        self._nested.append(0)
        try:
            yield
        finally:
            nested = self._nested.pop()
            self.add(name, start, time.time_ns(), nested)

    def __enter__(self) -> PassTrace:
        return self

    def __exit__(self, *exc: object) -> None:
        """However the attempt ends: its phases observed, its span ended (no phase, none)."""
        # A copy first: a cancelled handler ends the trace while its pass may still run,
        # and what that pass times after this is not sent.
        for name, ns in dict(self.own).items():
            metrics.PHASE_SECONDS.labels(name).observe(ns / 1e9)
        self._tracer = otel.NoOpTracer()
        if self._root is not None:
            self._root.set_attribute("outcome", self.outcome)
            self._root.end()


def tracer_provider(env: Mapping[str, str]) -> otel.TracerProvider:
    """The SDK's, exporting over OTLP/HTTP, when an endpoint is set; else the no-op one."""
    if not any(env.get(v) for v in _ENDPOINT_VARIABLES):
        return otel.NoOpTracerProvider()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create({"service.name": env.get("OTEL_SERVICE_NAME") or SERVICE})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    endpoint = next(env[v] for v in reversed(_ENDPOINT_VARIABLES) if env.get(v))
    log.info("pass traces are exported over OTLP/HTTP (%s)", shown(endpoint))
    return provider


def close(provider: otel.TracerProvider, timeout_s: float = 3.0) -> None:
    """Flushes and stops the SDK's exporter, waiting at most timeout_s (it may hang)."""
    if (shutdown := getattr(provider, "shutdown", None)) is not None:
        closing = threading.Thread(target=shutdown, daemon=True)
        closing.start()
        closing.join(timeout_s)
