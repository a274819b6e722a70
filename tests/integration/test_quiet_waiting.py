"""An object that waits a whole minute for another writer's claim stays quiet: counted on
the real apiserver's audit log, it looks a handful of times (backing off 1, 2, 4 ... 30 s),
writes its status once and posts one Event, then runs once the other writer is done.
The minute runs 8 times faster: the operator backs off from 0.125 s to at most 3.75 s and
7.5 s are counted, the same looks (the backoff doubles alike at any pace).
bench/waiting.py runs the same scenario and prints the figures (and, with --before-src,
those of another checkout in the same run)."""

from __future__ import annotations

from pathlib import Path

from devenv.controlplane import REPO_ROOT
from tests.integration.harness import Harness
from tests.support.waiting import looks_within, measure_waiting

WAIT_S = 60
# docs/operations.md, "Waiting for another writer": per waiting minute at most 6 looks
# (each: a claim create refused, a read of the claim, and kopf's two records of the retry:
# its progress annotation and the touch that wakes it), one status write and one Event.
MAX_LOOKS = looks_within(WAIT_S, first_s=1, max_s=30) + 1  # + the first try
MAX_CALLS = 4 * MAX_LOOKS + 2
SPEEDUP = 8
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
