"""Health a GitOps tool and a person can read, on the real control plane: `kubectl wait
--for=condition=Ready` on both kinds, observedGeneration on every condition, phase
Summarizing while a pass runs, `summaryctl sunset --wait` failing as soon as the pass fails
(with its reason), and a failure that repeats counted on one Event, as client-go does."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from typing import Any

import pytest

from controller.kube import client as kube
from devenv.controlplane import REPO_ROOT
from devenv.processes import wait_for
from tests.integration.harness import NS, Harness, conditions_of, interaction, load
from tests.integration.test_model_backend import FIRST
from tests.support.openai_server import OpenAIServer, running_openai_server


def kubectl_wait(h: Harness, what: str, condition: str, timeout: str = "60s") -> str:
    return h.kubectl("wait", f"--for=condition={condition}", what, f"--timeout={timeout}")


def test_kubectl_wait_for_ready_works_on_both_kinds(harness: Harness) -> None:
    store = harness.store()
    load(store, [interaction("health-ready", 0, int(time.time() * 1000) - 5000, "Be ready.")])
    name, _ = kube.request_summary(NS, "health-ready", trigger="sunset")
    out = kubectl_wait(harness, f"sessionsummary/{name}", "Ready")
    assert "condition met" in out
    assert "condition met" in kubectl_wait(harness, "sessionsummarizer/default", "Ready")
    obj = harness.obj("health-ready")
    found = conditions_of(obj)
    assert found["Ready"]["reason"] in ("Summarized", "UpToDate")
    assert "Reconciling" not in found and "Stalled" not in found
    summarizer = json.loads(harness.kubectl("get", "ssumr", "default", "-o", "json"))
    for kind in (obj, summarizer):
        generation = kind["metadata"]["generation"]
        assert kind["status"]["observedGeneration"] == generation
        for cond in conditions_of(kind).values():
            assert cond["observedGeneration"] == generation, cond


def missing_collection_summarizer(name: str, url: str) -> str:
    return textwrap.dedent(f"""
        apiVersion: memorycore.io/v1alpha1
        kind: SessionSummarizer
        metadata: {{name: {name}, namespace: {NS}}}
        spec:
          store: {{url: "{url}", memoryCollection: no-such-memory, summaryCollection: x-sessions}}
          sweep: {{enabled: false}}
          reconcile: {{enabled: false}}
    """)


def test_sunset_wait_says_why_as_soon_as_the_pass_fails(harness: Harness) -> None:
    typo = missing_collection_summarizer("health-typo", harness.chroma.url)
    harness.kubectl("apply", "-f", "-", input=typo)
    started = time.monotonic()
    res = harness.summaryctl(
        "sunset", "health-typo-session", "-n", NS, "--summarizer", "health-typo", "--wait", "300"
    )
    took = time.monotonic() - started
    assert res.returncode == 1, res.stdout + res.stderr
    assert "MemoryCollectionNotFound" in res.stderr and "no-such-memory" in res.stderr
    assert "retries it with backoff" in res.stderr
    assert took < 150, f"{took:.1f}s: it waited instead of saying the pass failed"
    # The object says the same, kstatus-style: not Ready and still reconciling (retrying).
    found = conditions_of(harness.obj("health-typo-session"))
    assert found["Ready"]["status"] == "False"
    assert found["Ready"]["reason"] == "MemoryCollectionNotFound"


def events_of(h: Harness, name: str) -> list[dict[str, Any]]:
    out = h.kubectl("get", "events", "--field-selector", f"involvedObject.name={name}", "-o",
                    "json")  # fmt: skip
    return list(json.loads(out)["items"])


def test_a_failure_that_repeats_is_counted_on_one_event(harness: Harness) -> None:
    typo = missing_collection_summarizer("health-events", harness.chroma.url)
    harness.kubectl("apply", "-f", "-", input=typo)
    name, _ = kube.request_summary(NS, "health-events-session", trigger="sunset",
                                   summarizer="health-events")  # fmt: skip

    def failures() -> list[dict[str, Any]]:
        return [e for e in events_of(harness, name) if e["reason"] == "MemoryCollectionNotFound"]

    def counted() -> bool:  # the Event and the status are two writes: either may be first
        status = harness.obj("health-events-session").get("status") or {}
        return (
            sum(e.get("count", 1) for e in failures()) >= 4
            and status.get("consecutiveFailures", 0) >= 3
        )

    # The harness retries every 0.5 .. 2 s: several failures within seconds.
    wait_for(counted, 60, 0.5, message=lambda: str(failures()), log=harness.log)
    found = failures()
    assert len(found) == 1, [(e["metadata"]["name"], e.get("count")) for e in found]
    event = found[0]
    assert event["count"] >= 4 and event["type"] == "Warning"
    assert event["firstTimestamp"] < event["lastTimestamp"]
    assert event["source"]["component"] == "session-summary-operator"
    # The object's own status counts the failures; the Event's message stays the failure's.
    status = harness.obj("health-events-session")["status"]
    assert status["consecutiveFailures"] >= 3 and status["phase"] == "Failed"
    assert "consecutive" not in event["message"]


@pytest.fixture(scope="module")
def slow_model() -> Iterator[OpenAIServer]:
    with running_openai_server(default_reply=json.dumps(FIRST), latency_seconds=4.0) as server:
        yield server


def test_a_pass_shows_summarizing_while_it_runs(harness: Harness, slow_model: OpenAIServer) -> None:
    manifest = textwrap.dedent(f"""
        apiVersion: memorycore.io/v1alpha1
        kind: SessionSummarizer
        metadata: {{name: health-slow, namespace: {NS}}}
        spec:
          store: {{url: "{harness.chroma.url}", memoryCollection: slow-memory,
                   summaryCollection: slow-sessions}}
          model: {{backend: openai, baseUrl: "{slow_model.base_url}", model: test-chat,
                   timeoutSeconds: 30, maxRetries: 0}}
          sweep: {{enabled: false}}
          reconcile: {{enabled: false}}
    """)
    harness.kubectl("apply", "-f", "-", input=manifest)
    store = harness.store("slow-memory", "slow-sessions")
    # What the scripted reply (FIRST) summarizes: the pass's validation checks it.
    prompt = "Make the exporter listen on port 7103 and write batches of 500 rows."
    load(store, [interaction("health-slow", 0, int(time.time() * 1000) - 5000, prompt)])
    name, _ = kube.request_summary(NS, "health-slow", trigger="sunset", summarizer="health-slow")
    seen: list[dict[str, Any]] = []

    def summarizing() -> bool:
        obj = kube.get_summary(NS, name) or {}
        if (obj.get("status") or {}).get("phase") == "Summarizing":
            seen.append(obj)
            return True
        return False

    wait_for(summarizing, 30, 0.1, log=harness.log)
    obj = seen[0]
    found = conditions_of(obj)
    assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]
    assert (found["Ready"]["status"], found["Ready"]["reason"]) == ("False", "Summarizing")
    assert found["Reconciling"]["status"] == "True"
    assert "condition met" in kubectl_wait(harness, f"sessionsummary/{name}", "Ready", "60s")
    done = harness.obj("health-slow")
    assert done["status"]["phase"] == "Summarized" and "Reconciling" not in conditions_of(done)


def test_summaryctl_check_and_kubectl_get_show_ready(harness: Harness) -> None:
    down = textwrap.dedent(f"""
        apiVersion: memorycore.io/v1alpha1
        kind: SessionSummarizer
        metadata: {{name: health-down, namespace: {NS}}}
        spec:
          store: {{url: "http://127.0.0.1:9", timeoutSeconds: 1}}
          sweep: {{enabled: false}}
          reconcile: {{enabled: false}}
    """)
    harness.kubectl("apply", "-f", "-", input=down)
    wait_for(
        lambda: conditions_of(json.loads(harness.kubectl("get", "ssumr", "health-down", "-o",
                                                         "json"))).get("Ready"),
        60,
        0.5,
    )  # fmt: skip
    res = subprocess.run(
        [sys.executable, "-m", "controller", "check", "-n", NS, "--summarizer", "default"],
        env=harness.cp.env(),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Ready=True Healthy" in res.stdout and "StoreReachable=True" in res.stdout
    typo = subprocess.run(
        [sys.executable, "-m", "controller", "check", "-n", NS, "--summarizer", "health-down"],
        env=harness.cp.env(),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert typo.returncode == 1 and "not Ready" in typo.stderr, typo.stdout + typo.stderr
    assert "Ready=False StoreUnavailable" in typo.stdout and "Stalled=True" in typo.stdout
    header = harness.kubectl("get", "ssumr").splitlines()[0].split()
    assert header[:3] == ["NAME", "READY", "STORE"]
    assert harness.kubectl("get", "ssum").splitlines()[0].split()[:3] == ["NAME", "PHASE", "READY"]
