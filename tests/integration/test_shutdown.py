"""How an operator process stops and starts, on the real control plane and Chroma: on SIGTERM
a running pass writes a checkpoint and releases its claim within SSO_SHUTDOWN_SECONDS (one
that cannot is abandoned at that bound); the replica that led releases its finalizer, so a
SessionSummarizer can be deleted once no operator runs (and kopf's old finalizer name is
released at start); a replica that joins takes a peering priority below every live one, so
it never preempts a live leader."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controller.api import FINALIZER
from controller.core.summary import StructuredSummary
from controller.kube import client as kube
from controller.kube.peering import leader_of, live_peers
from devenv.operator import start_operator
from devenv.processes import stop, tail, wait_for
from tests.integration.harness import Harness, interaction, load, own_operator, summaries_in
from tests.support.openai_server import OpenAIServer, running_openai_server
from tests.support.waiting import PROMPT, REPLY

NS = "shutdown"
ROWS = 24


@pytest.fixture(scope="module")
def slow_model() -> Iterator[OpenAIServer]:
    with running_openai_server(default_reply=json.dumps(REPLY), latency_seconds=0.5) as server:
        yield server


def model_summarizer(name: str, h: Harness, server: OpenAIServer, memory: str) -> str:
    return textwrap.dedent(f"""
        apiVersion: memorycore.io/v1alpha1
        kind: SessionSummarizer
        metadata: {{name: {name}, namespace: {NS}}}
        spec:
          store: {{url: "{h.chroma.url}", memoryCollection: {memory},
                   summaryCollection: {memory}-s}}
          model: {{backend: openai, baseUrl: "{server.base_url}", model: test-chat,
                   timeoutSeconds: 60, maxRetries: 0, maxInputTokens: 256}}
          sweep: {{enabled: false}}
          reconcile: {{enabled: false}}
    """)


def long_session(h: Harness, memory: str, session: str) -> None:
    """ROWS memories of about 100 tokens each: a pass over them takes a dozen chunks."""
    base = int(time.time() * 1000) - 600_000
    padding = " Keep the exporter's port and batch size as they are." * 6
    load(h.store(memory, f"{memory}-s"),
         [interaction(session, i, base + i * 1000, f"{PROMPT}{padding} (step {i})")
          for i in range(ROWS)])  # fmt: skip


def sigterm(proc: subprocess.Popen[bytes], limit: float) -> float:
    """SIGTERM the operator; seconds until it exited (killed after `limit`: a failure)."""
    started = time.monotonic()
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(limit)
    except subprocess.TimeoutExpired:
        stop(proc, grace=1)
        raise AssertionError(f"still running {limit:.0f}s after SIGTERM") from None
    return time.monotonic() - started


def claims_of(session: str) -> list[dict[str, Any]]:
    listing = kube.custom().list_cluster_custom_object("memorycore.io", "v1alpha1", "sessionclaims")
    return [c for c in listing["items"] if c["spec"].get("sessionId") == session]


def test_sigterm_mid_pass_writes_a_checkpoint_releases_the_claim_and_the_next_start_finishes(
    harness: Harness, slow_model: OpenAIServer, tmp_path: Path
) -> None:
    harness.cp.kubectl_run("create", "namespace", NS, check=False)
    stopping = model_summarizer("stopping", harness, slow_model, "stop-memory")
    harness.cp.kubectl_run("apply", "-f", "-", input=stopping)
    long_session(harness, "stop-memory", "stop-session")
    env = dict(harness.cp.env(), SSO_REPLICA_ID="stopping-op", SSO_SHUTDOWN_SECONDS="15")
    log = tmp_path / "operator.log"
    proc = start_operator(log, env, "--standalone", "--namespace", NS)
    try:
        name, _ = kube.request_summary(NS, "stop-session", trigger="sunset", summarizer="stopping")
        served = len(slow_model.requests_to("/chat/completions"))
        wait_for(lambda: len(slow_model.requests_to("/chat/completions")) >= served + 3, 60, 0.1,
                 log=log)  # fmt: skip
        assert claims_of("stop-session"), "the pass holds the session's claim"
        took = sigterm(proc, 30)
    finally:
        stop(proc)
    text = log.read_text()
    # Within the bound with room for a loaded machine; "abandoned" tells a pass that stopped
    # from one given up on at the bound.
    assert took < 15 + 13, f"{took:.1f}s to stop\n{tail(log)}"
    assert "abandoned" not in text
    # The claim was released, and what the passes covered is in the store.
    assert claims_of("stop-session") == []
    prior = harness.store("stop-memory", "stop-memory-s").read_summary("stop-session")
    assert isinstance(prior, StructuredSummary) and prior.watermark is not None
    assert 0 < prior.memory_count < ROWS, prior.memory_count
    obj = kube.get_summary(NS, name) or {}
    assert obj["status"]["phase"] == "Summarizing"  # not done: the next start resumes it
    # The next start goes on from the checkpoint and finishes.
    with own_operator(harness.cp, NS, tmp_path / "again.log", replica="stopping-op-2"):
        wait_for(lambda: (kube.get_summary(NS, name) or {}).get("status", {}).get("phase")
                 == "Summarized", 120, 0.5, log=tmp_path / "again.log")  # fmt: skip
    done = harness.store("stop-memory", "stop-memory-s").read_summary("stop-session")
    assert isinstance(done, StructuredSummary) and done.memory_count == ROWS


def test_a_pass_that_cannot_stop_in_time_is_abandoned_at_the_bound(
    harness: Harness, tmp_path: Path
) -> None:
    with running_openai_server(default_reply=json.dumps(REPLY), latency_seconds=60) as hung:
        harness.cp.kubectl_run("create", "namespace", NS, check=False)
        harness.cp.kubectl_run("apply", "-f", "-",
                        input=model_summarizer("hung", harness, hung, "hung-memory"))  # fmt: skip
        long_session(harness, "hung-memory", "hung-session")
        env = dict(harness.cp.env(), SSO_REPLICA_ID="hung-op", SSO_SHUTDOWN_SECONDS="3")
        log = tmp_path / "operator.log"
        proc = start_operator(log, env, "--standalone", "--namespace", NS)
        try:
            kube.request_summary(NS, "hung-session", trigger="sunset", summarizer="hung")
            wait_for(lambda: hung.requests_to("/chat/completions"), 60, 0.1, log=log)
            took = sigterm(proc, 30)
        finally:
            stop(proc)
    # At the 3 s bound, not when the model answers (60 s); room for a loaded machine.
    assert took < 3 + 22, f"{took:.1f}s to stop\n{tail(log)}"
    assert "abandoned" in log.read_text()


def finalizers_of(h: Harness, name: str) -> list[str]:
    out = h.cp.kubectl_run("-n", NS, "get", "ssumr", name, "-o", "json").stdout
    return list(json.loads(out)["metadata"].get("finalizers") or [])


def test_the_leader_releases_its_finalizer_when_it_stops(harness: Harness, tmp_path: Path) -> None:
    harness.cp.kubectl_run("create", "namespace", NS, check=False)
    manifest = {
        "apiVersion": "memorycore.io/v1alpha1",
        "kind": "SessionSummarizer",
        "metadata": {"name": "final", "namespace": NS},
        "spec": {
            "store": {"url": harness.chroma.url},
            "sweep": {"enabled": False},
            "reconcile": {"enabled": False},
        },
    }
    harness.cp.kubectl_run("apply", "-f", "-", input=json.dumps(manifest))
    log = tmp_path / "operator.log"
    with own_operator(harness.cp, NS, log, replica="final-op"):
        wait_for(
            lambda: finalizers_of(harness, "final") == [FINALIZER],
            60,
            0.2,
            message=lambda: str(finalizers_of(harness, "final")),
            log=log,
        )
    # No operator runs now: nothing would release a finalizer, so none may be left.
    assert finalizers_of(harness, "final") == []
    assert "released the finalizer" in log.read_text()
    harness.cp.kubectl_run("-n", NS, "delete", "ssumr", "final", "--timeout=20s")
    assert "final" not in harness.cp.kubectl_run("-n", NS, "get", "ssumr", "-o", "name").stdout
    assert not [o for o in summaries_in(NS).values() if o["spec"]["summarizerRef"] == "final"]


# -- peering ------------------------------------------------------------------------------

PEERING_NS = "peering"


def peering(h: Harness) -> dict[str, int]:
    out = h.cp.kubectl_run("-n", PEERING_NS, "get", "kopfpeerings.kopf.dev",
                           "session-summary-operator", "-o", "json", check=False)  # fmt: skip
    if out.returncode != 0:
        return {}
    return live_peers(json.loads(out.stdout).get("status") or {}, dt.datetime.now(dt.UTC))


def test_a_replica_that_joins_never_preempts_the_live_leader(
    harness: Harness, tmp_path: Path
) -> None:
    harness.cp.kubectl_run("create", "namespace", PEERING_NS, check=False)
    harness.cp.kubectl_run("apply", "-f", "-", input=json.dumps({
        "apiVersion": "memorycore.io/v1alpha1", "kind": "SessionSummarizer",
        "metadata": {"name": "default", "namespace": PEERING_NS},
        "spec": {"store": {"url": harness.chroma.url}, "sweep": {"enabled": False},
                 "reconcile": {"enabled": False}},
    }))  # fmt: skip
    procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(replica: str) -> None:
        env = dict(harness.cp.env(), SSO_REPLICA_ID=replica, SSO_PEERING_LIFETIME="5")
        procs[replica] = start_operator(tmp_path / f"{replica}.log", env, "--namespace", PEERING_NS)
        wait_for(lambda: replica in peering(harness), 60, 0.2,
                 log=tmp_path / f"{replica}.log")  # fmt: skip

    leaders: list[str | None] = []
    try:
        start("old-a")
        start("old-b")
        assert leader_of(peering(harness)) == "old-a"
        # A rollout: a new replica joins, then an old one goes; the leader goes last.
        start("new-a")
        live = peering(harness)
        assert live["new-a"] < live["old-b"] < live["old-a"], live
        for _ in range(10):  # a while, with three live replicas: the leader stays
            leaders.append(leader_of(peering(harness)))
            time.sleep(0.5)
        assert set(leaders) == {"old-a"}, leaders
        stop(procs.pop("old-b"))
        start("new-b")
        assert leader_of(peering(harness)) == "old-a"
        stop(procs.pop("old-a"))  # the leader stops: the longest-running replica takes over
        wait_for(lambda: leader_of(peering(harness)) == "new-a", 30, 0.2,
                 message=lambda: str(peering(harness)))  # fmt: skip
    finally:
        for proc in procs.values():
            stop(proc)
