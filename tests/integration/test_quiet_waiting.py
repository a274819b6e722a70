"""An object that waits a whole minute for another writer's claim stays quiet: counted on
the real apiserver's audit log, it looks a handful of times (backing off 1, 2, 4 ... 30 s),
writes its status once and posts one Event, then runs once the other writer is done.
The minute runs 8 times faster: the operator backs off from 0.125 s to at most 3.75 s and
7.5 s are counted, the same looks (the backoff doubles alike at any pace).
bench/waiting.py runs the same scenario and prints the figures (and, with --before-src,
those of another checkout in the same run).
The operator's log stays quiet too: a sunset, two objects waiting for one session and a
sweep leave no ERROR or WARNING line in it."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from controller.core.claim_rules import Claim, Writer
from controller.core.naming import summary_object_name
from controller.kube import client as kube
from controller.kube.claims import SessionClaimHandle
from devenv.controlplane import REPO_ROOT
from devenv.processes import wait_for
from tests.integration.harness import Harness, interaction, load, own_operator
from tests.support.waiting import looks_within, measure_waiting

WAIT_S = 60
# docs/operations.md, "Waiting for another writer": per waiting minute at most 6 looks
# (each: a claim create refused, a read of the claim, and kopf's two records of the retry:
# its progress annotation and the touch that wakes it), one status write and one Event.
MAX_LOOKS = looks_within(WAIT_S, first_s=1, max_s=30) + 1  # + the first try
MAX_CALLS = 4 * MAX_LOOKS + 2
SPEEDUP = 8
NOT_QUIET = re.compile(r"^\S+ \S+ (ERROR|WARNING|CRITICAL) |inconsistencies", re.MULTILINE)
CLAIM_RETRY = {
    "SSO_CLAIM_RETRY_SECONDS": str(1 / SPEEDUP),
    "SSO_CLAIM_RETRY_MAX_SECONDS": str(30 / SPEEDUP),
}


def test_a_minute_of_waiting_costs_a_few_calls_and_one_event(
    harness: Harness, tmp_path: Path
) -> None:
    assert looks_within(WAIT_S / SPEEDUP, first_s=1 / SPEEDUP, max_s=30 / SPEEDUP) == (
        MAX_LOOKS - 1
    )
    figures = measure_waiting(
        harness.cp,
        harness.chroma.url,
        tmp_path,
        namespace="waiting",
        wait_s=WAIT_S / SPEEDUP,
        model_latency_s=WAIT_S / SPEEDUP + 5,
        operator_src=REPO_ROOT,
        finish=True,
        claim_retry=CLAIM_RETRY,
    )
    shown = f"{dict(figures.waiting_calls)}; all {dict(figures.calls)}; {figures.event_counts}"
    assert 1 <= figures.claim_looks <= MAX_LOOKS, shown
    assert figures.waiting_total <= MAX_CALLS, shown
    assert figures.event_objects == 1 and figures.event_counts == {"SessionClaimed": 1}, shown
    # Its status was written once for the wait, not once per look.
    assert figures.waiting_calls[("patch", "sessionsummaries/status")] <= 1, shown
    # And the wait ends: once the other writer is done, it runs.
    assert figures.waiter_done == "Summarized"
    # Its log says so at INFO, and has no line per model call.
    text = (tmp_path / "waiting-operator.log").read_text()
    assert "looking again in" in text and "HTTP Request" not in text, text
    assert not NOT_QUIET.search(text), text


LOG_NS = "quiet-log"


def quiet_log_summarizer(url: str, sweep: bool) -> str:
    return json.dumps({
        "apiVersion": "memorycore.io/v1alpha1",
        "kind": "SessionSummarizer",
        "metadata": {"name": "default", "namespace": LOG_NS},
        "spec": {
            "store": {"url": url, "memoryCollection": f"{LOG_NS}-memory",
                      "summaryCollection": f"{LOG_NS}-sessions"},
            "sweep": {"enabled": sweep, "intervalSeconds": 5, "idleSeconds": 600},
            "reconcile": {"enabled": False},
        },
    })  # fmt: skip


def test_a_sunset_two_writers_and_a_sweep_log_no_error_or_warning(
    harness: Harness, tmp_path: Path
) -> None:
    cp, log = harness.cp, tmp_path / "operator.log"
    store = harness.store(f"{LOG_NS}-memory", f"{LOG_NS}-sessions")
    base = int(time.time() * 1000) - 3_600_000  # idle an hour, within the sweep's lookback
    load(store, [interaction(s, 0, base, f"Fact of {s}.") for s in ("ql-sunset", "ql-shared")])

    def phase(name: str) -> str | None:
        obj = kube.get_summary(LOG_NS, name) or {}
        return (obj.get("status") or {}).get("phase")

    def summarized(*names: str) -> bool:
        return all(phase(n) == "Summarized" for n in names)

    with own_operator(
        cp, LOG_NS, log, sweep_tick_seconds="1", retry_base_seconds="0.5",
        claim_retry_seconds="0.25", claim_retry_max_seconds="1",
    ):  # fmt: skip
        cp.kubectl_run("apply", "-f", "-", input=quiet_log_summarizer(harness.chroma.url, False))
        # A sunset.
        kube.request_summary(LOG_NS, "ql-sunset", trigger="sunset")
        wait_for(lambda: summarized(summary_object_name("ql-sunset")), 60, 0.2, log=log)
        # Two objects name one session while another writer holds its claim: both wait for
        # it, then for each other.
        other = SessionClaimHandle(
            Claim(
                session_id="ql-shared", collection_id=store.location.row_scope, collection="test",
                writer=Writer("another-replica", "uid-of-another-object", "elsewhere/ql-shared"),
                duration_s=30,
            ),
            margin_s=1, renew_s=1,
        )  # fmt: skip
        other.acquire()
        try:
            shared = [summary_object_name("ql-shared"), "ql-shared-by-hand"]
            kube.request_summary(LOG_NS, "ql-shared", trigger="manual")
            by_hand: dict[str, Any] = {
                "apiVersion": "memorycore.io/v1alpha1", "kind": "SessionSummary",
                "metadata": {"name": shared[1], "namespace": LOG_NS},
                "spec": {"sessionId": "ql-shared", "trigger": "manual"},
            }  # fmt: skip
            cp.kubectl_run("create", "-f", "-", input=json.dumps(by_hand))
            wait_for(
                lambda: log.read_text().count("is being summarized by SessionSummary") >= 4,
                60, 0.2, message="both objects to look at the held claim twice", log=log,
            )  # fmt: skip
        finally:
            other.release()
        wait_for(lambda: summarized(*shared), 60, 0.2, message="both passes", log=log)
        # A sweep finds a session nobody asked for.
        load(store, [interaction("ql-swept", 0, base, "Fact of ql-swept.")])
        cp.kubectl_run("apply", "-f", "-", input=quiet_log_summarizer(harness.chroma.url, True))
        swept = summary_object_name("ql-swept")
        wait_for(lambda: summarized(swept), 60, 0.2, message="the swept session", log=log)
        text = log.read_text()  # before the operator stops
    assert "looking again in" in text and "sweep by" in text, text
    assert NOT_QUIET.findall(text) == [], "\n".join(
        line for line in text.splitlines() if NOT_QUIET.search(line)
    )
