"""Issue 37: every pass's phases, as spans at a real OTLP/HTTP receiver (devenv/otlp.py,
protobuf over HTTP as a collector receives them) and as the phase histogram of /metrics."""

from __future__ import annotations

import time
import urllib.request
import uuid

from controller.tracing import PHASES
from devenv.otlp import Span
from devenv.processes import wait_for
from tests.integration.harness import NS, Harness, interaction, load


def pass_of(harness: Harness, sid: str) -> tuple[Span, list[Span]] | None:
    assert harness.otlp is not None
    for root, phases in harness.otlp.passes().values():
        if root.attributes.get("session.id") == sid and root.attributes["outcome"] != "retried":
            return root, phases
    return None


def test_a_sunset_s_pass_arrives_at_the_collector_with_one_span_per_phase(
    harness: Harness,
) -> None:
    sid = f"traced-{uuid.uuid4().hex[:8]}"
    now = int(time.time() * 1000)
    load(harness.store(), [interaction(sid, i, now - 60_000 + i, f"Step {i}.") for i in range(3)])
    res = harness.summaryctl("sunset", sid, "-n", NS, "--wait", "60")
    assert res.returncode == 0, res.stderr + res.stdout

    root, phases = wait_for(lambda: pass_of(harness, sid), 30, 0.2, message=f"{sid}'s trace")
    assert root.name == "session-summary.pass" and root.service == "session-summary-operator"
    assert root.attributes["outcome"] == "summarized"
    assert root.attributes["trigger"] == "sunset"
    assert root.attributes["object"].startswith(f"{NS}/")
    # Every phase of the pass, each at least once, and nothing else.
    assert {s.name for s in phases} == set(PHASES)
    for span in phases:  # inside the pass, each a child of its root
        assert span.parent_id == root.span_id and span.trace_id == root.trace_id
        assert root.start_ns <= span.start_ns <= span.end_ns <= root.end_ns
        assert span.attributes["session.id"] == sid
    first = {name: min(s.start_ns for s in phases if s.name == name) for name in PHASES}
    assert sorted(PHASES, key=lambda n: first[n]) == list(PHASES)  # in the pass's order
    # The request's time (spec.requestedAt) starts the pass: its delivery is the first span.
    assert first["delivered"] == root.start_ns

    # The same phases in the metrics' histogram.
    text = urllib.request.urlopen(harness.metrics_url, timeout=5).read().decode()
    counts = {
        line.split('phase="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("session_summary_pass_phase_seconds_count{")
    }
    assert set(PHASES) <= set(counts) and all(counts[p] >= 1 for p in PHASES), counts


def test_an_up_to_date_pass_has_no_write_phases(harness: Harness) -> None:
    """A sunset with nothing new reads and reports; its trace says so (no embedded, no
    written span): what a pass did is in its trace, not only how long it took."""
    sid = f"traced-again-{uuid.uuid4().hex[:8]}"
    now = int(time.time() * 1000)
    load(harness.store(), [interaction(sid, 0, now - 60_000, "Only step.")])
    assert harness.summaryctl("sunset", sid, "-n", NS, "--wait", "60").returncode == 0
    wait_for(lambda: pass_of(harness, sid), 30, 0.2, message=f"{sid}'s first trace")
    assert harness.summaryctl("sunset", sid, "-n", NS, "--wait", "60").returncode == 0

    def second() -> list[tuple[Span, list[Span]]] | None:
        assert harness.otlp is not None
        found = [
            p
            for p in harness.otlp.passes().values()
            if p[0].attributes.get("session.id") == sid
            and p[0].attributes["outcome"] == "up-to-date"
        ]
        return found or None

    (_root, phases), *_ = wait_for(second, 30, 0.2, message=f"{sid}'s up-to-date trace")
    names = {s.name for s in phases}
    assert {"claimed", "read", "status"} <= names
    assert not names & {"summarized", "embedded", "written"}
