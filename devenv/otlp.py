"""An OTLP/HTTP trace receiver on loopback: what a collector's otlp receiver does with
POST /v1/traces (protobuf, optionally gzip), keeping the spans for the caller to read.

The operator exports its pass traces to it (OTEL_EXPORTER_OTLP_ENDPOINT=<url>): the
tracing test reads them, and bench/sunset_latency.py takes each sunset's phases from them.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from devenv.serving import serving


@dataclass(frozen=True)
class Span:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    service: str

    @property
    def seconds(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def decode(body: bytes) -> list[Span]:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans = []
    for rs in request.resource_spans:
        resource = {a.key: _value(a.value) for a in rs.resource.attributes}
        for ss in rs.scope_spans:
            for s in ss.spans:
                spans.append(
                    Span(
                        name=s.name,
                        trace_id=s.trace_id.hex(),
                        span_id=s.span_id.hex(),
                        parent_id=s.parent_span_id.hex(),
                        start_ns=s.start_time_unix_nano,
                        end_ns=s.end_time_unix_nano,
                        attributes={a.key: _value(a.value) for a in s.attributes},
                        service=str(resource.get("service.name", "")),
                    )
                )
    return spans


@dataclass
class Receiver:
    url: str = ""
    spans: list[Span] = field(default_factory=list)
    requests: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, spans: list[Span]) -> None:
        with self._lock:
            self.spans.extend(spans)
            self.requests += 1

    def received(self) -> list[Span]:
        with self._lock:
            return list(self.spans)

    def passes(self) -> dict[str, tuple[Span, list[Span]]]:
        """Each pass's root span and its phase spans, by trace id."""
        roots: dict[str, Span] = {}
        children: dict[str, list[Span]] = {}
        for span in self.received():
            if span.parent_id:
                children.setdefault(span.trace_id, []).append(span)
            else:
                roots[span.trace_id] = span
        return {tid: (root, children.get(tid, [])) for tid, root in roots.items()}

    def phases_ms(self, since_ns: dict[str, int]) -> dict[str, dict[str, float]]:
        """For each session of since_ns, its passes that began at or after its time there
        (a retried attempt's too): each phase's time in ms, summed over them."""
        out: dict[str, dict[str, float]] = {sid: {} for sid in since_ns}
        for root, phases in self.passes().values():
            sid = str(root.attributes.get("session.id"))
            if sid not in since_ns or root.start_ns < since_ns[sid]:
                continue
            for span in phases:
                out[sid][span.name] = out[sid].get(span.name, 0.0) + span.seconds * 1000
        return out


@contextmanager
def running_receiver() -> Iterator[Receiver]:
    receiver = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path != "/v1/traces":
                self.send_error(404)
                return
            try:
                receiver.add(decode(body))
            except Exception as exc:
                self.send_error(400, str(exc)[:200])
                return
            out = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}"
    with serving(server):
        yield receiver
