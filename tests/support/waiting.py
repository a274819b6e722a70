"""An object that waits for another writer, measured on the apiserver's audit log: the
scenario of tests/integration/test_quiet_waiting.py and bench/waiting.py.

Two SessionSummaries name one session: A (hand-named) starts first and holds the session's
claim while its model call takes `model_latency_s`; B (the derived name) is created once
A's claim exists and waits. The operator runs as a ServiceAccount of its own, so every
request it makes is attributed to it; in the `wait_s` after B was created, its requests are
counted by verb and resource (all of them, and those the wait costs: on B, its Events and
on claims), and the Events it created or counted about B.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller.core.waiting import wait_delay
from controller.kube import client as kube
from controller.store.connection import StoreLocation, connect
from controller.store.memory_store import MemoryStore
from devenv.audit import ON_A_CLOCK, by_call, requests
from devenv.controlplane import ControlPlane
from devenv.operator import LOOPBACK_MODELS
from devenv.processes import spawn, stop, wait_for
from tests.support.openai_server import running_openai_server

SESSION = "waiting-session"
OWNER = "waiting-owner"
# What the scripted reply summarizes (the pass's validation checks that it does).
PROMPT = "Make the exporter listen on port 7103 and write batches of 500 rows."
REPLY = {
    "title": "Exporter hardening",
    "category": "feature",
    "user_requests": ["Make the exporter listen on port 7103."],
    "questions_and_decisions": ["Decided on batches of 500 rows."],
    "design_choices": [],
    "corrections_and_feedback": [],
    "current_state": ["The exporter runs on 7103."],
    "technologies": ["python"],
}


@dataclass
class WaitingFigures:
    seconds: float
    calls: Counter[tuple[str, str]]  # (verb, resource), lists and watches left out
    on_clock: Counter[tuple[str, str]]  # lists and watches
    # The calls the wait itself costs: on the waiting object (and its Events) and on claims.
    waiting_calls: Counter[tuple[str, str]]
    claim_looks: int  # claim creates (each look tries one)
    # The Events about the waiting object (read from the Event objects, whoever named
    # them): reason -> its count; one Event counted twice is 2, two Events of count 1 too.
    event_counts: dict[str, int] = field(default_factory=dict)
    event_objects: int = 0
    waiter_done: str | None = None  # the waiting object's phase once it ran, if asked to

    def per_minute(self, n: float) -> float:
        return n * 60 / self.seconds

    @property
    def total(self) -> int:
        return sum(self.calls.values())

    @property
    def waiting_total(self) -> int:
        return sum(self.waiting_calls.values())

    @property
    def events(self) -> int:
        return sum(self.event_counts.values())


def measure_waiting(
    cp: ControlPlane,
    chroma_url: str,
    workdir: Path,
    *,
    namespace: str,
    wait_s: float,
    model_latency_s: float,
    operator_src: Path,
    finish: bool = False,
    claim_retry: dict[str, str] | None = None,
) -> WaitingFigures:
    """claim_retry: SSO_CLAIM_RETRY_SECONDS and SSO_CLAIM_RETRY_MAX_SECONDS for the
    operator, if not its defaults (1 s and 30 s)."""
    sa = f"{namespace}-operator"
    cp.kubectl_run("create", "namespace", namespace)
    cp.kubectl_run("-n", namespace, "create", "serviceaccount", sa)
    cp.kubectl_run("create", "clusterrolebinding", sa, "--clusterrole=cluster-admin",
                   f"--serviceaccount={namespace}:{sa}")  # fmt: skip
    memory, summaries = f"{namespace}-memory", f"{namespace}-sessions"
    location = StoreLocation(url=chroma_url, memory_collection=memory,
                             summary_collection=summaries)  # fmt: skip
    store = MemoryStore(connect(location), location)
    doc = f"User Prompt: {PROMPT}\nAgent Thought: thinking\nAgent Response: Done."
    meta = {"sessionId": SESSION, "timestamp": int(time.time() * 1000) - 60_000,
            "type": "agent-interaction", "prompt": PROMPT, "response": "Done."}  # fmt: skip
    store.add_memories([f"{SESSION}-0"], [doc], [meta], create=True)
    user = f"system:serviceaccount:{namespace}:{sa}"
    with running_openai_server(
        default_reply=json.dumps(REPLY), latency_seconds=model_latency_s
    ) as model:
        summarizer = {
            "apiVersion": "memorycore.io/v1alpha1",
            "kind": "SessionSummarizer",
            "metadata": {"name": "default", "namespace": namespace},
            "spec": {
                "store": {"url": chroma_url, "memoryCollection": memory,
                          "summaryCollection": summaries},
                "model": {"backend": "openai", "baseUrl": model.base_url, "model": "test-chat",
                          "timeoutSeconds": model_latency_s + 60, "maxRetries": 0},
                "sweep": {"enabled": False},
                "reconcile": {"enabled": False},
                "retention": {"summarizedTTLSeconds": 0, "emptyTTLSeconds": 0,
                              "notFoundTTLSeconds": 0, "failedTTLSeconds": 0},
            },
        }  # fmt: skip
        cp.kubectl_run("apply", "-f", "-", input=json.dumps(summarizer))
        config = cp.service_account_kubeconfig(namespace, sa, workdir / f"{sa}.kubeconfig")
        # The scripted model is on loopback: the install's list allows it (docs/security.md).
        env = dict(
            cp.env(),
            KUBECONFIG=str(config),
            SSO_REPLICA_ID=sa,
            SSO_ALLOWED_MODEL_URLS=LOOPBACK_MODELS,
            **(claim_retry or {}),
        )
        log = workdir / f"{namespace}-operator.log"
        operator = spawn(
            [sys.executable, "-m", "controller", "run", "--standalone", "--namespace", namespace],
            log,
            env=env,
            cwd=operator_src,
        )
        try:
            owner = {
                "apiVersion": "memorycore.io/v1alpha1",
                "kind": "SessionSummary",
                "metadata": {"name": OWNER, "namespace": namespace},
                "spec": {"sessionId": SESSION, "trigger": "sunset"},
            }
            cp.kubectl_run("apply", "-f", "-", input=json.dumps(owner))
            wait_for(lambda: _claimed(cp), 120, 0.2, message="A's claim", log=log)
            start = int(time.time() * 1000)
            waiter, _ = kube.request_summary(namespace, SESSION, trigger="sunset")
            time.sleep(max(0.0, start / 1000 + wait_s - time.time()))
            end = int(time.time() * 1000)
            time.sleep(1.5)  # the audit log is written behind the requests
            seen = requests(cp.audit_log, user, start, end)
            events = _events(cp, namespace, waiter)
            done = None
            if finish:
                done = wait_for(lambda: _done(namespace, waiter), model_latency_s + 120, 0.5,
                                message="B after A", log=log)  # fmt: skip
        finally:
            stop(operator, grace=30)
    # Events are named after their object by our recorder (kopf named its own otherwise).
    about_waiter = [r for r in seen if r.resource == "events" and r.name.startswith(waiter)]
    waiting = [
        r
        for r in seen
        if r.verb not in ON_A_CLOCK
        and (
            # The holder's renewals (updates of its own claim, every third of its duration)
            # are the pass's, not the wait's: the waiter only tries a create and reads.
            (r.resource == "sessionclaims" and r.verb != "update")
            or (r.resource.startswith("sessionsummaries") and r.name == waiter)
            or r in about_waiter
        )
    ]
    return WaitingFigures(
        seconds=(end - start) / 1000,
        calls=by_call(r for r in seen if r.verb not in ON_A_CLOCK),
        on_clock=by_call(r for r in seen if r.verb in ON_A_CLOCK),
        waiting_calls=by_call(waiting),
        claim_looks=sum(1 for r in seen if r.what == ("create", "sessionclaims")),
        event_counts=_counts(events),
        event_objects=len(events),
        waiter_done=done,
    )


def _claimed(cp: ControlPlane) -> bool:
    out = cp.kubectl_run("get", "sessionclaims", "-o", "json").stdout
    return any(c["spec"].get("sessionId") == SESSION for c in json.loads(out)["items"])


def _events(cp: ControlPlane, namespace: str, name: str) -> list[dict[str, Any]]:
    out = cp.kubectl_run("-n", namespace, "get", "events", "--field-selector",
                         f"involvedObject.name={name}", "-o", "json").stdout  # fmt: skip
    return list(json.loads(out)["items"])


def _counts(events: list[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for event in events:
        counts[event["reason"]] = counts.get(event["reason"], 0) + int(event.get("count") or 1)
    return counts


def _done(namespace: str, name: str) -> str | None:
    obj = kube.get_summary(namespace, name) or {}
    status = obj.get("status") or {}
    if status.get("phase") in ("Summarized", "Empty", "NotFound", "Failed"):
        return str(status["phase"])
    return None


def looks_within(seconds: float, *, first_s: float, max_s: float) -> int:
    """How many looks a wait of `seconds` takes at most (every draw of jitter 0): what the
    docs state and the tests hold the operator to."""
    looks, elapsed, attempt = 0, 0.0, 0
    while True:
        elapsed += wait_delay(attempt, first_s=first_s, max_s=max_s, jitter=0.0, rand=0.0)
        if elapsed > seconds:
            return looks
        looks, attempt = looks + 1, attempt + 1
