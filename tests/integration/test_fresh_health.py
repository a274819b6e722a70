"""A SessionSummarizer's health is current, or says how old it is: `summaryctl check` asks
the operator to measure anew and waits for the answer; a pass that saw the store otherwise
than the status says has the probes and the sweep run again at once; every condition says
when it was measured. Real control plane, real Chroma servers (one stopped mid-test)."""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import Any

from controller.core.naming import summary_object_name
from controller.store.connection import StoreLocation, connect
from controller.store.memory_store import MemoryStore
from devenv.chroma import running_chroma
from devenv.processes import tail, wait_for
from tests.integration.harness import (
    NS,
    Harness,
    conditions_of,
    interaction,
    load,
    summarizer_yaml,
)

# The sweep's own interval: what a status waited for before, 5 minutes.
SLOW_SWEEP = "enabled: true, intervalSeconds: 300, idleSeconds: 3600"
MEASURED = re.compile(r"^  (\w+)=(True|False|Unknown) .*\(measured (\S+)\)$", re.M)


def summarizer(harness: Harness, name: str) -> dict[str, Any]:
    return dict(json.loads(harness.kubectl("get", "ssumr", name, "-o", "json")))


def test_check_measures_anew_a_store_stopped_after_the_last_sweep(harness: Harness) -> None:
    name = f"fresh-{uuid.uuid4().hex[:6]}"
    with running_chroma() as chroma:
        # A memory, so its sweep succeeds: a failed one runs again within seconds and would
        # find the store gone before check is asked.
        where = StoreLocation(url=chroma.url)
        load(
            MemoryStore(connect(where), where),
            [interaction(f"{name}-s", 0, int(time.time() * 1000), "Go.")],
        )
        harness.kubectl(
            "apply", "-f", "-", input=summarizer_yaml(name, chroma.url, sweep=SLOW_SWEEP)
        )
        first = harness.summaryctl("check", "-n", NS, "--summarizer", name, "--wait", "60")
        assert "StoreReachable=True" in first.stdout, first.stdout + first.stderr
        shown = {kind: at for kind, _, at in MEASURED.findall(first.stdout)}
        assert {"Ready", "StoreReachable", "ModelReady", "EmbeddingReady"} <= set(shown), shown
        assert "unknown" not in shown.values(), first.stdout
    # Chroma is gone; the sweep is not due for minutes, and nothing has probed since.
    stale = conditions_of(summarizer(harness, name))
    assert stale["StoreReachable"]["status"] == "True"
    started = time.monotonic()
    res = harness.summaryctl("check", "-n", NS, "--summarizer", name)
    took = time.monotonic() - started
    assert res.returncode == 1, res.stdout + res.stderr
    assert "StoreReachable=False StoreUnavailable" in res.stdout, res.stdout + tail(harness.log)
    assert "Ready=False StoreUnavailable" in res.stdout
    assert took < 120, f"{took:.0f}s"  # a bound for a loaded machine; the probe time tells
    after = summarizer(harness, name)
    measured = conditions_of(after)["StoreReachable"]["lastProbeTime"]
    assert measured > stale["StoreReachable"]["lastProbeTime"]
    assert after["status"]["lastHandledProbeRequest"]  # what check waited for
    # The timer answered it, ticking every second: none of its runs is a line of the log.
    assert "Timer 'sweep' succeeded" not in harness.log.read_text()
    harness.kubectl("delete", "ssumr", name, "--timeout=60s")


def test_a_pass_that_reads_the_memories_clears_a_stale_missing_collection(
    harness: Harness,
) -> None:
    """The sweep found no memory collection (an empty Chroma); an agent then wrote its first
    memory and a sunset summarized it: the summarizer is Ready within seconds, not at its
    next sweep five minutes later, with nobody asking."""
    name = f"fresh-pass-{uuid.uuid4().hex[:6]}"
    memory, sessions = f"{name}-memory", f"{name}-sessions"
    harness.kubectl(
        "apply", "-f", "-",
        input=summarizer_yaml(name, harness.chroma.url, memory=memory, summary=sessions,
                              sweep=SLOW_SWEEP),
    )  # fmt: skip

    def swept() -> dict[str, Any] | None:
        return conditions_of(summarizer(harness, name)).get("Swept")

    missing = wait_for(swept, 60, 0.5, message="the first sweep", log=harness.log)
    assert (missing["status"], missing["reason"]) == ("False", "MemoryCollectionNotFound")
    sid = f"{name}-session"
    load(harness.store(memory, sessions), [interaction(sid, 0, int(time.time() * 1000), "Go.")])
    done = harness.summaryctl("sunset", sid, "-n", NS, "--summarizer", name, "--wait", "60")
    assert done.returncode == 0, done.stdout + done.stderr
    started = time.monotonic()
    wait_for(
        lambda: conditions_of(summarizer(harness, name))["Ready"]["status"] == "True",
        30, 0.5, message=lambda: str(conditions_of(summarizer(harness, name))), log=harness.log,
    )  # fmt: skip
    assert time.monotonic() - started < 30
    assert swept()["status"] == "True"  # type: ignore[index]
    harness.kubectl("delete", "ssum", summary_object_name(sid), "--ignore-not-found")
    harness.kubectl("delete", "ssumr", name, "--timeout=60s")
