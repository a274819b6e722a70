"""Scheduling on the real control plane and Chroma: a session that just ended is not stuck
behind a queue of re-summaries queued before it, and the queue still drains.

One operator process with a single worker thread (SSO_WORKERS=1), so its queue is long and
the order it serves is visible in its write journal (devenv.journal): first come, first
served would write the new session last.
"""

from __future__ import annotations

import json
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from controller.kube import client as kube
from devenv.operator import start_operator
from devenv.processes import stop, tail, wait_for
from tests.integration.harness import Harness, interaction, load

NS = "sched"
AGAIN = [f"sched-again-{i:02d}" for i in range(40)]
FIRST = "sched-first"


def _summarizer(url: str) -> str:
    return textwrap.dedent(f"""
        apiVersion: memorycore.io/v1alpha1
        kind: SessionSummarizer
        metadata: {{name: default, namespace: {NS}}}
        spec:
          store: {{url: "{url}", memoryCollection: sched-memory, summaryCollection: sched-sessions}}
          sweep: {{enabled: false}}
          reconcile: {{enabled: false}}
    """)


def _summarized(sessions: list[str]) -> bool:
    done = {
        o["spec"]["sessionId"]
        for o in kube.iter_summaries(NS)
        if (o.get("status") or {}).get("phase") == "Summarized"
        and o["status"].get("observedGeneration") == o["metadata"]["generation"]
    }
    return done.issuperset(sessions)


def _request_all(sessions: list[str]) -> None:
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda s: kube.request_summary(NS, s, trigger="sunset"), sessions))


def test_a_session_that_just_ended_goes_ahead_of_queued_re_summaries(
    harness: Harness, tmp_path: Path
) -> None:
    cp = harness.cp
    cp.kubectl_run("create", "namespace", NS, check=False)
    cp.kubectl_run("apply", "-f", "-", input=_summarizer(harness.chroma.url))
    store = harness.store("sched-memory", "sched-sessions")
    base = 1_770_000_000_000
    load(
        store,
        [interaction(s, k, base + k, f"Step {k} of {s}.") for s in AGAIN for k in (0, 1)]
        + [interaction(FIRST, k, base + k, f"Step {k} of the new one.") for k in (0, 1)],
    )
    journal = tmp_path / "writes.jsonl"
    log = tmp_path / "operator.log"
    env = dict(cp.env(), SSO_REPLICA_ID="sched-op", SSO_WORKERS="1", SSO_WRITE_JOURNAL=str(journal))
    proc = start_operator(log, env, "--standalone", "--namespace", NS)
    try:
        # Every AGAIN session has a summary: its next sunset is a re-summary.
        _request_all(AGAIN)
        wait_for(lambda: _summarized(AGAIN), 120, 0.3, message=f"first round\n{tail(log)}")
        load(store, [interaction(s, 2, base + 2, f"Step 2 of {s}.") for s in AGAIN])
        written_before = len(journal.read_text().splitlines())
        _request_all(AGAIN)  # 40 re-summaries queued for the one worker ...
        kube.request_summary(NS, FIRST, trigger="sunset")  # ... then a session ends
        wait_for(
            lambda: _summarized([*AGAIN, FIRST]), 120, 0.3, message=f"second round\n{tail(log)}"
        )
    finally:
        stop(proc)
    records = [json.loads(line) for line in journal.read_text().splitlines()[written_before:]]
    order = [r["session"] for r in records if r["event"] == "begin"]
    # Nothing starved: every re-summary was written too, each once.
    assert sorted(order) == sorted([*AGAIN, FIRST]), order
    ahead = order.index(FIRST)
    # First come, first served would write it 41st. Re-summaries the worker took before the
    # new session's request reached the operator may go first; most of the queue may not.
    assert ahead < len(AGAIN) // 2, f"written after {ahead} re-summaries: {order}"
