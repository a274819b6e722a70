"""SessionSummary objects over months, on the real control plane and Chroma: retention of
every finished phase (also with sweeps off), sunset markers that make objects only for
sessions with memories besides them and at the stated rate, failed objects asked again when
their summarizer is fixed, a summary applied together with its new summarizer that never
finds none, and sweep patches that never overwrite a sunset that came after
the sweep read the object."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from controller.api import SessionSummarizerSpec, SessionSummarySpec
from controller.core.memories import SUNSET_MARKER_TYPE, render_interaction_document
from controller.core.naming import summary_object_name
from controller.core.sweep_plan import SweepPlan
from controller.handlers.session_summary import Failure, _summarizer
from controller.kube import client as kube
from controller.runtime import MarkerMemory
from controller.status.conditions import now_rfc3339
from controller.store.memory_store import MemoryStore
from controller.sweep import apply_plan, apply_retention, run_marker_scan
from devenv.processes import tail, wait_for
from tests.integration.harness import (
    Harness,
    conditions_of,
    interaction,
    load,
    own_operator,
    summaries_in,
)
from tests.support.fact_model import echo_facts
from tests.support.openai_server import running_openai_server

NS = "lifecycle"


def summarizer(name: str, url: str, memory: str, **spec: Any) -> str:
    body = {
        "apiVersion": "memorycore.io/v1alpha1",
        "kind": "SessionSummarizer",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "store": {"url": url, "memoryCollection": memory, "summaryCollection": f"{memory}-s"},
            # The reconciliation runs whatever the sweep says: off with it here.
            "reconcile": {"enabled": bool(spec.get("sweep", {}).get("enabled", True))},
            **spec,
        },
    }
    return json.dumps(body)


OPERATOR: list[subprocess.Popen[bytes]] = []  # the module's own operator (stacks on a timeout)


@pytest.fixture(scope="module")
def lifecycle(harness: Harness, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    """An operator of its own: a 1 s tick, one failure makes an object Failed, and its
    retries wait 5 minutes (so only a summarizer change can ask a failed object again)."""
    log = tmp_path_factory.mktemp("lifecycle") / "operator.log"
    with own_operator(
        harness.cp,
        NS,
        log,
        sweep_tick_seconds="1",
        failure_gate="1",
        retry_base_seconds="300",
        retry_max_seconds="600",
    ) as proc:
        OPERATOR[:] = [proc]
        yield Harness(harness.cp, harness.chroma, log)


def apply(h: Harness, manifest: str) -> None:
    h.cp.kubectl_run("apply", "-f", "-", input=manifest)


def phase_of(name: str) -> str | None:
    obj = kube.get_summary(NS, name) or {"metadata": {}}
    st = obj.get("status") or {}
    return (
        st.get("phase")
        if st.get("observedGeneration") == obj["metadata"].get("generation")
        else None
    )


def test_retention_gives_way_before_each_delete(harness: Harness) -> None:
    """Retention is background work (PassScheduler.background): it calls its pause before
    each delete, and deletes only what expired of the objects listed."""
    ns = "retention-pauses"
    harness.cp.kubectl_run("create", "namespace", ns)
    hour_ago = (dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    for sid, phase in [("old-a", "NotFound"), ("old-b", "Empty"), ("kept", "Pending")]:
        kube.request_summary(ns, sid, trigger="sweep")
        status = {"phase": phase, "observedGeneration": 1, "lastPhaseTransitionTime": hour_ago}
        harness.cp.kubectl_run(
            "-n", ns, "patch", "ssum", summary_object_name(sid), "--subresource=status",
            "--type=merge", "-p", json.dumps({"status": status}),
        )  # fmt: skip
    spec = SessionSummarizerSpec.model_validate(
        {"retention": {"emptyTTLSeconds": 60, "notFoundTTLSeconds": 60}}
    )
    paused: list[int] = []
    listed = kube.iter_summaries(ns)
    deleted = apply_retention(
        spec, listed, namespace=ns, summarizer="default", pause=lambda: paused.append(1)
    )
    assert deleted == 2 and len(paused) == 2
    assert [o["spec"]["sessionId"] for o in summaries_in(ns).values()] == ["kept"]


def test_every_finished_phase_is_deleted_after_its_ttl_also_with_sweeps_off(
    lifecycle: Harness,
) -> None:
    store = lifecycle.store("ret-memory", "ret-memory-s")
    now = int(time.time() * 1000)
    load(
        store,
        [
            interaction("ret-done", 0, now - 5000, "Add the retention test."),
            interaction("ret-empty", 0, now - 5000, "tick", type_="tick"),
        ],
    )
    # Long enough that each phase is seen before retention deletes its object: the wait
    # below lists them every 0.2 s and remembers each one seen.
    ttl = 10
    short = {"summarizedTTLSeconds": ttl, "emptyTTLSeconds": ttl, "notFoundTTLSeconds": ttl,
             "failedTTLSeconds": ttl}  # fmt: skip
    sweep_off = {"enabled": False, "intervalSeconds": 5}
    apply(lifecycle, summarizer("ret", lifecycle.chroma.url, "ret-memory",
                                sweep=sweep_off, retention=short))  # fmt: skip
    apply(lifecycle, summarizer("ret-broken", lifecycle.chroma.url, "ret-no-such-memory",
                                sweep=sweep_off, retention=short))  # fmt: skip
    apply(lifecycle, summarizer("ret-keep", lifecycle.chroma.url, "ret-memory", sweep=sweep_off,
                                retention={"emptyTTLSeconds": 0}))  # fmt: skip
    cases = {
        "ret-done": ("ret", "Summarized"),
        "ret-empty": ("ret", "Empty"),
        "ret-unknown": ("ret", "NotFound"),
        "ret-failing": ("ret-broken", "Failed"),
    }
    for session, (ref, _) in cases.items():
        kube.request_summary(NS, session, trigger="sunset", summarizer=ref)
    load(store, [interaction("ret-empty-kept", 0, now - 5000, "tick", type_="tick")])
    kept = kube.request_summary(NS, "ret-empty-kept", trigger="sunset", summarizer="ret-keep")[0]
    # Every object is watched at once: one that ends early is deleted ttl s later, maybe
    # while another (a first summary loading its embedding model: 27 s in CI) still runs.
    wanted = {summary_object_name(s): phase for s, (_, phase) in cases.items()}
    seen: set[str] = set()

    def all_seen() -> bool:
        for name, obj in summaries_in(NS).items():
            st = obj.get("status") or {}
            current = st.get("observedGeneration") == obj["metadata"].get("generation")
            if name in wanted and current and st.get("phase") == wanted[name]:
                seen.add(name)
        return seen == set(wanted)

    wait_for(all_seen, 90, 0.2, message=lambda: f"{set(wanted) - seen} in their phases",
             log=lifecycle.log)  # fmt: skip
    wait_for(lambda: phase_of(kept) == "Empty", 60, 0.2, message="kept Empty")
    # Each is deleted once its phase is older than ttl; the sweep never runs (enabled: false).
    gone = [summary_object_name(s) for s in cases]
    wait_for(
        lambda: not set(gone) & set(summaries_in(NS)),
        60,
        0.5,
        message=f"retention of {gone}",
        log=lifecycle.log,
    )
    assert phase_of(kept) == "Empty"  # emptyTTLSeconds 0: kept
    status = json.loads(lifecycle.cp.kubectl_run("-n", NS, "get", "ssumr", "ret", "-o",
                                                 "json").stdout)["status"]  # fmt: skip
    assert status["lastRetentionAt"] and "lastSweepAt" not in status


def test_a_fixed_summarizer_asks_its_failed_objects_again_at_once(lifecycle: Harness) -> None:
    store = lifecycle.store("fix-memory", "fix-memory-s")
    load(store, [interaction("fix-me", 0, int(time.time() * 1000) - 5000, "Fix the summarizer.")])
    load(store, [interaction("fix-url", 0, int(time.time() * 1000) - 5000, "Fix the URL.")])
    off = {"enabled": False}
    apply(lifecycle, summarizer("fixable", lifecycle.chroma.url, "fix-memory-typo", sweep=off))
    apply(lifecycle, summarizer("unreachable", "http://127.0.0.1:9", "fix-memory", sweep=off))
    broken = kube.request_summary(NS, "fix-me", trigger="sunset", summarizer="fixable")[0]
    no_store = kube.request_summary(NS, "fix-url", trigger="sunset", summarizer="unreachable")[0]
    waiting = kube.request_summary(NS, "fix-later", trigger="sunset", summarizer="later")[0]
    load(store, [interaction("fix-later", 0, int(time.time() * 1000) - 5000, "Later.")])
    for name, reason in ((broken, "MemoryCollectionNotFound"), (no_store, "StoreUnavailable")):
        wait_for(lambda n=name: phase_of(n) == "Failed", 60, 0.2, log=lifecycle.log)  # type: ignore[misc]
        reasons = conditions_of(kube.get_summary(NS, name) or {})
        assert reasons["Summarized"]["reason"] == reason
        assert reasons["Stalled"]["status"] == "True"
    wait_for(
        lambda: (
            conditions_of(kube.get_summary(NS, waiting) or {}).get("Summarized", {}).get("reason")
            == "SummarizerNotFound"
        ),
        60,
        0.2,
    )
    # Retries wait 5 minutes here: only the summarizer's change can bring these on now.
    fixed = time.monotonic()
    apply(lifecycle, summarizer("fixable", lifecycle.chroma.url, "fix-memory", sweep=off))
    apply(lifecycle, summarizer("later", lifecycle.chroma.url, "fix-memory", sweep=off))
    apply(lifecycle, summarizer("unreachable", lifecycle.chroma.url, "fix-memory", sweep=off))
    for name in (broken, no_store, waiting):
        wait_for(lambda n=name: phase_of(n) == "Summarized", 60, 0.2,  # type: ignore[misc]
                 message=f"{name}", log=lifecycle.log)  # fmt: skip
    assert time.monotonic() - fixed < 60
    events = events_of(lifecycle, "fixable")
    assert any(e["reason"] == "FailedSummariesRequeued" for e in events), events


def retry_due(obj: dict[str, Any]) -> dt.datetime:
    """When kopf would run the failed handler again: the `delayed` of its progress record."""
    records = [json.loads(v) for k, v in obj["metadata"]["annotations"].items()
               if k.startswith("memorycore.io/summarize")]  # fmt: skip
    (record,) = [r for r in records if r.get("delayed")]
    return dt.datetime.fromisoformat(record["delayed"])


def handled_status(summarizer: str) -> dict[str, Any]:
    return (kube.get_summarizer(NS, summarizer) or {}).get("status") or {}


def patch_spec(h: Harness, name: str, **spec: str) -> int:
    """Merge-patches the SessionSummary's spec; its new generation."""
    out = h.cp.kubectl_run("-n", NS, "patch", "ssum", name, "--type", "merge",
                           "-p", json.dumps({"spec": spec}), "-o", "json").stdout  # fmt: skip
    return int(json.loads(out)["metadata"]["generation"])


def test_a_spec_change_is_acted_on_before_the_backoff_of_the_spec_it_replaced(
    lifecycle: Harness,
) -> None:
    """Retries wait 5 minutes here. A new spec is a new request: it runs at once, whatever
    the last spec's failure (no summarizer, a store error), whichever field changed, and
    whether the object never succeeded (kopf's create handler) or did (its update handler)."""
    store = lifecycle.store("respec-memory", "respec-memory-s")
    now = int(time.time() * 1000) - 5000
    load(store, [interaction(s, 0, now, f"Respec {s}.") for s in ("respec-a", "respec-b")])
    off = {"enabled": False}
    apply(lifecycle, summarizer("respec-good", lifecycle.chroma.url, "respec-memory", sweep=off))
    apply(lifecycle, summarizer("respec-typo", lifecycle.chroma.url, "respec-memry", sweep=off))
    for ref in ("respec-good", "respec-typo"):  # handled: they ask nothing again later
        wait_for(lambda r=ref: "lastHandledConfiguration" in handled_status(r), 60, 0.2)  # type: ignore[misc]
    never = kube.request_summary(NS, "respec-a", trigger="sunset", summarizer="respec-none")[0]
    once = kube.request_summary(NS, "respec-b", trigger="sunset", summarizer="respec-good")[0]
    wait_for(lambda: phase_of(once) == "Summarized", 60, 0.2, log=lifecycle.log)
    patch_spec(lifecycle, once, summarizerRef="respec-typo")
    failing = {never: "SummarizerNotFound", once: "MemoryCollectionNotFound"}
    for name, reason in failing.items():
        wait_for(lambda n=name: phase_of(n) == "Failed", 60, 0.2, log=lifecycle.log)  # type: ignore[misc]
        obj = kube.get_summary(NS, name) or {}
        assert conditions_of(obj)["Summarized"]["reason"] == reason
        assert "retrying in 300s" in obj["status"]["message"], obj["status"]
    due = {name: retry_due(kube.get_summary(NS, name) or {}) for name in failing}
    # A new request that does not fix it: run (and failed) again at once, for its generation.
    asked = patch_spec(lifecycle, once, requestedAt=now_rfc3339(precise=True))
    wait_for(lambda: phase_of(once) == "Failed", 60, 0.2, log=lifecycle.log)
    assert (kube.get_summary(NS, once) or {})["status"]["observedGeneration"] == asked
    # The fix: Summarized while the old spec's retry was still minutes away.
    for name in failing:
        patch_spec(lifecycle, name, summarizerRef="respec-good")
    for name in failing:
        wait_for(lambda n=name: phase_of(n) == "Summarized", 60, 0.2,  # type: ignore[misc]
                 message=name, log=lifecycle.log)  # fmt: skip
        done = conditions_of(kube.get_summary(NS, name) or {})["Summarized"]
        assert dt.datetime.fromisoformat(done["lastTransitionTime"]) < due[name]


def test_a_summary_applied_with_its_new_summarizer_never_finds_none(lifecycle: Harness) -> None:
    """One manifest with a new SessionSummarizer and then a SessionSummary naming it (what
    `summaryctl sunset --summarizer` also does, after it checked the summarizer exists): the
    operator's index of summarizers follows a watch and may not hold it yet, so a miss is
    looked up in the API, and the object never says SummarizerNotFound (here one failure
    makes it Failed, and its retry would wait 5 minutes)."""
    store = lifecycle.store("pair-memory", "pair-memory-s")
    now = int(time.time() * 1000)
    sessions = [f"pair-{i}" for i in range(8)]
    load(store, [interaction(s, 0, now - 5000, f"Pair {s}.") for s in sessions])
    names = [summary_object_name(s) for s in sessions]
    for session, name in zip(sessions, names, strict=True):
        summary = {
            "apiVersion": "memorycore.io/v1alpha1",
            "kind": "SessionSummary",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"sessionId": session, "summarizerRef": session, "trigger": "manual"},
        }
        pair = summarizer(session, lifecycle.chroma.url, "pair-memory", sweep={"enabled": False})
        apply(lifecycle, f"{pair}\n---\n{json.dumps(summary)}")
    for name in names:
        wait_for(lambda n=name: phase_of(n) == "Summarized", 60, 0.2,  # type: ignore[misc]
                 message=f"{name}", log=lifecycle.log)  # fmt: skip
    out = lifecycle.cp.kubectl_run("-n", NS, "get", "events", "-o", "json").stdout
    events = json.loads(out)["items"]
    missed = [
        e["involvedObject"]["name"]
        for e in events
        if e["reason"] == "SummarizerNotFound" and e["involvedObject"]["name"] in names
    ]
    assert missed == []
    # The race itself, without waiting for it: an index that has no entry yet.
    spec = SessionSummarySpec.model_validate({"sessionId": "pair-0", "summarizerRef": "pair-0"})
    assert _summarizer(NS, spec, None).store.memory_collection == "pair-memory"
    absent = spec.model_copy(update={"summarizer_ref": "pair-none"})
    with pytest.raises(Failure) as failure:
        _summarizer(NS, absent, None)
    assert failure.value.reason == "SummarizerNotFound" and "pair-none" in failure.value.message


# -- sunset markers -------------------------------------------------------------------------

MARKER_ONLY = 1000
WITH_MEMORIES = 60
RATE = 30  # markerRequestsPerMinute


def marker(session: str, ts: int, i: int) -> tuple[str, str, dict[str, Any]]:
    return (f"marker-{i:05d}", "sunset", {"sessionId": session, "timestamp": ts,
                                          "type": SUNSET_MARKER_TYPE})  # fmt: skip


def load_fast(store: MemoryStore, rows: list[tuple[str, str, dict[str, Any]]]) -> None:
    """Rows with one constant vector each (the operator reads markers by metadata only)."""
    coll = store.create_memory_collection()
    for start in range(0, len(rows), 500):
        part = rows[start : start + 500]
        coll.upsert(
            ids=[r[0] for r in part],
            documents=[r[1] for r in part],
            metadatas=[r[2] for r in part],
            embeddings=np.full((len(part), 384), 1 / np.sqrt(384), dtype=np.float32),
        )


def events_of(h: Harness, name: str) -> list[dict[str, Any]]:
    """The Events on the object `name` of the test namespace."""
    return json.loads(h.cp.kubectl_run(
        "-n", NS, "get", "events", "--field-selector", f"involvedObject.name={name}", "-o", "json"
    ).stdout)["items"]  # fmt: skip


def ignored_sessions(h: Harness, name: str = "markers") -> int:
    """Sessions the marker scan reported as having no memories besides markers (summed over
    its Events, each of which names the sessions of one scan)."""
    total = 0
    for e in events_of(h, name):
        if e["reason"] == "MarkerWithoutMemories":
            part = e["message"].split("sunset markers of ", 1)[1]
            total += int(part.split(" ", 1)[0])
    return total


def requested_per_scan(h: Harness, name: str = "markers") -> list[int]:
    """How many sessions each marker scan asked a summary for, oldest scan first (one
    SummaryRequested Event per scan: the message names its sessions)."""
    scans = sorted(
        (e["firstTimestamp"] or e["eventTime"], e["message"])
        for e in events_of(h, name)
        if e["reason"] == "SummaryRequested"
    )
    return [int(m.split("requested summaries of ", 1)[1].split(" ", 1)[0]) for _, m in scans]


def marker_report(h: Harness) -> str:
    """What a timed-out wait shows: the count, the summarizer's Events and status."""
    out = h.cp.kubectl_run("-n", NS, "get", "events", "-o", "json").stdout
    events = [f"{e['involvedObject']['name']} {e['reason']} x{e.get('count')}: "
              f"{e['message'][:160]}" for e in json.loads(out)["items"]]  # fmt: skip
    status = kube.get_summarizer(NS, "markers") or {}
    for proc in OPERATOR:  # every thread's stack into its log (controller/operator.py)
        os.kill(proc.pid, signal.SIGUSR1)
    time.sleep(2)
    said = json.dumps(status.get("status"))[:3000]
    return (f"{ignored_sessions(h)} reported\nevents:\n" + "\n".join(events)
            + f"\nstatus: {said}\n" + tail(h.log, 400))  # fmt: skip


def test_markers_alone_make_no_object_and_markers_with_memories_at_most_the_stated_rate(
    lifecycle: Harness,
) -> None:
    store = lifecycle.store("mark-memory", "mark-memory-s")
    now = int(time.time() * 1000)
    load(store, [interaction("mark-seed", 0, now - 60_000, "seed")])
    sweep = {"enabled": True, "intervalSeconds": 5, "idleSeconds": 3600,
             "markerRequestsPerMinute": RATE}  # fmt: skip
    apply(lifecycle, summarizer("markers", lifecycle.chroma.url, "mark-memory", sweep=sweep))
    # The marker scan starts once the first sweep has a watermark.
    wait_for(lambda: sweeps_done(lifecycle), 60, 0.5, log=lifecycle.log)
    ts = int(time.time() * 1000)
    rows = [marker(f"only-markers-{i:04d}", ts + i, i) for i in range(MARKER_ONLY)]
    load_fast(store, rows)
    # 1,000 lookups of a session's other memories, 200 a tick: 10 s here; a bound, not a speed.
    wait_for(lambda: ignored_sessions(lifecycle) >= MARKER_ONLY, 300, 1,
             message=lambda: marker_report(lifecycle))  # fmt: skip
    assert ignored_sessions(lifecycle) == MARKER_ONLY
    made = [o for o in summaries_in(NS).values() if o["spec"]["summarizerRef"] == "markers"]
    assert made == [], [o["metadata"]["name"] for o in made]

    # Sessions with memories besides their marker: objects at most RATE a minute (a burst
    # of RATE, then one every 60/RATE s).
    ts = int(time.time() * 1000)
    sessions = [f"with-memories-{i:03d}" for i in range(WITH_MEMORIES)]
    load_fast(store, [interaction(s, 0, ts, f"Work of {s}.") for s in sessions])
    started = dt.datetime.now(dt.UTC)
    load_fast(store, [marker(s, ts + 10 + i, MARKER_ONLY + i) for i, s in enumerate(sessions)])

    def made_now() -> list[dict[str, Any]]:
        return [o for o in summaries_in(NS).values() if o["spec"]["sessionId"] in sessions]

    # However slow the scan on a loaded machine (CI: a 40 s scan), the burst's RATE come.
    wait_for(lambda: len(made_now()) >= RATE, 180, 1, message=lambda: marker_report(lifecycle))
    made = made_now()
    created = sorted(
        dt.datetime.fromisoformat(o["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
        for o in made
    )
    # The burst: the first scan that found them asked for at least RATE at once (the steady
    # rate alone grants one, then one every 60/RATE s). Read from the scan's own Event, not
    # from creation times: on a loaded machine (CI) each session's lookups took seconds, and
    # the first RATE objects were made over 70 s while the bucket held grants for all of them.
    first_scan = wait_for(lambda: requested_per_scan(lifecycle)[:1], 60, 1)[0]
    assert first_scan >= RATE, f"the first scan asked for {first_scan}: the burst was not used"
    for i, first in enumerate(created):
        for j in range(i, len(created)):
            window = (created[j] - first).total_seconds() + 1  # whole seconds
            assert j - i + 1 <= RATE + RATE * window / 60 + 1, (i, j, window)
    elapsed = (dt.datetime.now(dt.UTC) - started).total_seconds()
    assert len(created) <= RATE + RATE * elapsed / 60 + 1
    assert all(o["spec"]["trigger"] == "sunset-marker" for o in made)


def sweeps_done(h: Harness, name: str = "markers") -> bool:
    out = h.cp.kubectl_run("-n", NS, "get", "ssumr", name, "-o", "json").stdout
    return (json.loads(out).get("status") or {}).get("watermark") is not None


def test_sunset_markers_are_not_held_back_by_a_sweep_that_gives_way_to_a_long_first_summary(
    lifecycle: Harness,
) -> None:
    """While a first summary runs, the sweep gives way before each session it measures (up
    to 1 s each: PassScheduler.give_way), so with a model that takes minutes to answer a
    sweep over 200 active sessions takes minutes. The marker scan has a timer of its own and
    goes on every tick: 1,000 marker-only sessions (200 a scan) are reported in seconds. With
    the scan in the sweep's timer, the rest waited for that sweep (CI: 300 s, too few)."""
    with running_openai_server(responder=echo_facts, latency_seconds=480) as model:
        slow = lifecycle.store("slow-memory", "slow-memory-s")
        now = int(time.time() * 1000)
        load(slow, [interaction("slow-first", 0, now - 60_000, "A long first summary.")])
        llm = {"backend": "openai", "baseUrl": model.base_url, "model": "test-chat",
               "timeoutSeconds": 600}  # fmt: skip
        apply(lifecycle, summarizer("slow", lifecycle.chroma.url, "slow-memory",
                                    sweep={"enabled": False}, model=llm))  # fmt: skip
        kube.request_summary(NS, "slow-first", trigger="sunset", summarizer="slow")
        wait_for(lambda: model.requests_to("/chat/completions"), 60, 0.2, log=lifecycle.log)

        store = lifecycle.store("held-memory", "held-memory-s")
        load(store, [interaction("held-seed", 0, now - 60_000, "seed")])
        sweep = {"enabled": True, "intervalSeconds": 5, "idleSeconds": 3600}
        apply(lifecycle, summarizer("held", lifecycle.chroma.url, "held-memory", sweep=sweep))
        wait_for(lambda: sweeps_done(lifecycle, "held"), 60, 0.5, log=lifecycle.log)
        ts = int(time.time() * 1000)
        load_fast(store, [marker(f"held-{i:04d}", ts + i, i) for i in range(1000)])
        # A bound, not a speed: a sweep that holds the scan back takes ~1,000 s per pass.
        wait_for(lambda: ignored_sessions(lifecycle, "held") >= 1000, 240, 1,
                 message=lambda: f"{ignored_sessions(lifecycle, 'held')} reported",
                 log=lifecycle.log)  # fmt: skip
        # The first summary was running all along (so the sweep was giving way).
        assert phase_of(summary_object_name("slow-first")) != "Summarized"


# -- the sweep's and the marker scan's patches -------------------------------------------

RACE = "sweep-race"  # no operator watches it: only this test changes its objects


def _done_object(session: str, last_memory_at: str) -> str:
    """A SessionSummary whose last pass is finished (what the sweep may patch)."""
    name, _ = kube.request_summary(RACE, session, trigger="sweep")
    obj = kube.get_summary(RACE, name)
    assert obj is not None
    status = {"phase": "Summarized", "observedGeneration": obj["metadata"]["generation"],
              "lastMemoryAt": last_memory_at}  # fmt: skip
    assert kube.patch_summary_status(RACE, name, status)
    return name


def _sunset_between_read_and_patch(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The sweep's read of the object returns what it read, but a sunset lands right after."""
    read = kube.get_summary
    landed: list[str] = []

    def racing(namespace: str, name: str) -> dict[str, Any] | None:
        obj = read(namespace, name)
        if obj is not None:
            with pytest.MonkeyPatch.context() as sunset:  # its own read is a plain one
                sunset.setattr(kube, "get_summary", read)
                kube.request_summary(namespace, obj["spec"]["sessionId"], trigger="sunset")
            landed.append(name)
        return obj

    monkeypatch.setattr(kube, "get_summary", racing)
    return landed


def test_a_sweep_never_overwrites_a_sunset_that_came_after_its_read(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness.cp.kubectl_run("create", "namespace", RACE, check=False)
    stale = _done_object("race-stale", "2020-01-01T00:00:00Z")
    refresh = _done_object("race-refresh", "2020-01-01T00:00:00Z")
    landed = _sunset_between_read_and_patch(monkeypatch)
    plan = SweepPlan(candidates=["race-stale"], refresh=["race-refresh"])
    applied = apply_plan(plan, namespace=RACE, summarizer_name="default")
    assert landed == [stale, refresh]
    assert (applied.created, applied.patched, applied.refreshed) == (0, 0, 0)
    assert applied.in_flight == 2
    for name in (stale, refresh):
        spec = (kube.get_summary(RACE, name) or {})["spec"]
        assert spec["trigger"] == "sunset", spec


def test_a_marker_scan_never_overwrites_a_sunset_that_came_after_its_read(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness.cp.kubectl_run("create", "namespace", RACE, check=False)
    store = harness.store("race-memory", "race-memory-s")
    ts = int(time.time() * 1000)
    doc = render_interaction_document("Work.", "thinking", "Done.")
    load(store, [("race-mem-0", doc, {"sessionId": "race-marker", "timestamp": ts - 1000,
                                      "type": "agent-interaction", "prompt": "Work."}),
                 marker("race-marker", ts, 99_999)])  # fmt: skip
    name = _done_object("race-marker", "2020-01-01T00:00:00Z")
    landed = _sunset_between_read_and_patch(monkeypatch)
    spec = SessionSummarizerSpec.model_validate({"sweep": {"markerRequestsPerMinute": 10}})
    result = run_marker_scan(store, spec, namespace=RACE, summarizer_name="race",
                             watermark_ms=ts - 60_000, memory=MarkerMemory())  # fmt: skip
    assert landed == [name] and result.requested == []
    assert ", 1 waiting for a pass under way, 0 left" in result.figures
    assert (kube.get_summary(RACE, name) or {})["spec"]["trigger"] == "sunset"
