"""The operator end to end on the real control plane with a real Chroma server."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import kopf
import pytest

from controller.core.naming import summary_object_name
from controller.core.summary_row import READER_ROW_KEYS
from controller.kube import client as kube
from controller.operator import status_diffbase
from controller.store.connection import StoreLocation, connect
from controller.store.memory_store import MemoryStore
from devenv.demo_data import SAMPLE_SESSIONS, memory_rows
from devenv.processes import wait_for
from tests.integration.harness import (
    NS,
    Harness,
    interaction,
    load,
    own_operator,
    summarizer_yaml,
)


def test_sunset_writes_the_summary_row_readers_expect(harness: Harness) -> None:
    session = SAMPLE_SESSIONS[0]
    rows = memory_rows(session, start_ms=1_750_000_000_000)
    load(harness.store(), rows)
    res = harness.summaryctl("sunset", session.session_id, "-n", NS, "--wait", "60")
    assert res.returncode == 0, res.stderr + res.stdout
    obj = harness.wait_phase(session.session_id, "Summarized")
    status = obj["status"]
    assert status["memoryCount"] == len(rows)
    assert status["triggerSource"] == "sunset"
    assert status["writer"] == "it-operator"
    cond = {c["type"]: c for c in status["conditions"]}["Summarized"]
    assert cond["status"] == "True" and cond["reason"] == "Summarized"

    got = (
        harness.store()
        .summaries()
        .get(
            ids=[f"summary_{session.session_id}"], include=["documents", "metadatas", "embeddings"]
        )
    )
    assert got["ids"] == [f"summary_{session.session_id}"]
    meta, doc = got["metadatas"][0], got["documents"][0]
    assert meta["sessionId"] == session.session_id
    assert meta["timestamp"] == max(r[2]["timestamp"] for r in rows)
    assert meta["memoryCount"] == len(rows)
    assert meta["category"] in {
        "bugfix",
        "feature",
        "refactoring",
        "documentation",
        "new-app",
        "analysis",
        "other",
    }
    for key in (
        "title",
        "quality",
        "productivity",
        "impact",
        "complexity",
        "technologies",
        "participatingAgents",
        "models",
        "toolsUsed",
        "totalToolCalls",
    ):
        assert key in meta, key
    assert set(meta) <= READER_ROW_KEYS, sorted(set(meta) - READER_ROW_KEYS)  # nothing more
    stored = harness.store().stored_summary(session.session_id)
    assert stored is not None and stored[1]["writer"] == "it-operator"  # in the ledger
    assert meta["participatingAgents"] == "claude-code"
    assert meta["totalToolCalls"] == sum(r[2]["amountToolCalls"] for r in rows)
    assert "login crash" in doc.lower()
    assert len(got["embeddings"][0]) == 384
    reasons = [e["reason"] for e in harness.events(session.session_id)]
    assert "Summarized" in reasons


def test_new_memories_and_a_patch_give_a_summary_that_covers_them(harness: Harness) -> None:
    sid = "it-resummary-1"
    store = harness.store()
    load(
        store,
        [
            interaction(sid, i, 1_760_000_000_000 + i, f"Implement part {i} of the exporter.")
            for i in range(3)
        ],
    )
    assert harness.summaryctl("sunset", sid, "-n", NS, "--wait", "60").returncode == 0
    first = store.summaries().get(ids=[f"summary_{sid}"], include=["documents", "metadatas"])
    assert first["metadatas"][0]["memoryCount"] == 3
    load(
        store,
        [
            interaction(
                sid, 10, 1_760_000_100_000, "Add retries with exponential backoff to the exporter."
            )
        ],
    )
    assert harness.summaryctl("sunset", sid, "-n", NS, "--wait", "60").returncode == 0
    second = store.summaries().get(ids=[f"summary_{sid}"], include=["documents", "metadatas"])
    meta, doc = second["metadatas"][0], second["documents"][0]
    assert meta["memoryCount"] == 4
    assert meta["timestamp"] == 1_760_000_100_000
    assert "exponential backoff" in doc
    for i in range(3):  # nothing of the first pass is lost
        assert f"part {i}" in doc
    assert harness.obj(sid)["status"]["memoryCount"] == 4


def test_unknown_session_is_reported_and_nothing_is_written(harness: Harness) -> None:
    sid = "it-no-such-session"
    harness.summaryctl("sunset", sid, "-n", NS)
    obj = harness.wait_phase(sid, "NotFound")
    cond = {c["type"]: c for c in obj["status"]["conditions"]}["Summarized"]
    assert cond["status"] == "False" and cond["reason"] == "SessionNotFound"
    assert harness.store().summaries().get(ids=[f"summary_{sid}"])["ids"] == []
    assert "SessionNotFound" in [e["reason"] for e in harness.events(sid)]


def test_objects_an_earlier_release_handled_start_no_pass_until_their_spec_changes(
    harness: Harness, tmp_path: Path
) -> None:
    """Release 0.1.0 kept kopf's record of the handled spec in the status, as this one does.
    After the upgrade (an operator started over objects the old one handled), a handled
    object is not summarized again; a change of its spec is, and its record moves on."""
    ns = "upgraded"
    sid, other = "it-handled-before-upgrade", "it-new-after-upgrade"
    harness.cp.kubectl_run("create", "namespace", ns)
    harness.cp.kubectl_run(
        "apply", "-f", "-", input=summarizer_yaml("default", harness.chroma.url).replace(NS, ns)
    )
    manifest: dict[str, Any] = {
        "apiVersion": "memorycore.io/v1alpha1",
        "kind": "SessionSummary",
        "metadata": {"name": summary_object_name(sid), "namespace": ns},
        "spec": {"sessionId": sid, "trigger": "manual"},
    }
    # What the earlier release left: the object as stored (the CRD's defaults in), and the
    # status of its pass with kopf's record of the spec it handled.
    dry = harness.cp.kubectl_run(
        "create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(manifest)
    ).stdout
    storage = status_diffbase()
    body = kopf.Body(json.loads(dry))
    recorded = kopf.Patch()
    storage.store(body=body, patch=recorded, essence=storage.build(body=body))
    harness.cp.kubectl_run("create", "-f", "-", input=json.dumps(manifest))
    done = {
        "phase": "NotFound",
        "observedGeneration": 1,
        "message": "before the upgrade",
        **dict(recorded["status"]),
    }
    harness.cp.kubectl_run(
        "-n", ns, "patch", "ssum", summary_object_name(sid), "--subresource=status",
        "--type=merge", "-p", json.dumps({"status": done}),
    )  # fmt: skip
    load(harness.store(), [interaction(s, 0, 1_750_000_000_000, "Go.") for s in (sid, other)])

    with own_operator(harness.cp, ns, tmp_path / "operator.log"):
        # The operator has listed the namespace: an object sunset after its start is done.
        assert harness.summaryctl("sunset", other, "-n", ns, "--wait", "60").returncode == 0
        time.sleep(2)
        obj = kube.get_summary(ns, summary_object_name(sid)) or {}
        assert obj["status"] == done, "an object handled before the upgrade was summarized again"

        res = harness.summaryctl("sunset", sid, "-n", ns, "--wait", "60")  # a new spec
        assert res.returncode == 0, res.stdout + res.stderr
        obj = kube.get_summary(ns, summary_object_name(sid)) or {}
        assert obj["status"]["observedGeneration"] == 2 == obj["metadata"]["generation"]
        assert json.loads(obj["status"]["lastHandledConfiguration"])["spec"] == obj["spec"]


def test_session_with_only_excluded_memories_is_empty_and_nothing_is_written(
    harness: Harness,
) -> None:
    sid = "it-only-ticks"
    load(
        harness.store(),
        [interaction(sid, i, 1_760_000_000_000 + i, "tick", type_="tick") for i in range(2)],
    )
    harness.summaryctl("sunset", sid, "-n", NS)
    obj = harness.wait_phase(sid, "Empty")
    cond = {c["type"]: c for c in obj["status"]["conditions"]}["Summarized"]
    assert cond["reason"] == "NoSummarizableMemories"
    assert obj["status"]["memoryCount"] == 2
    assert harness.store().summaries().get(ids=[f"summary_{sid}"])["ids"] == []


@pytest.mark.parametrize(
    ("manifest", "expected"),
    [
        ({"spec": {}}, "spec.sessionId: Required value"),
        ({"spec": {"sessionId": 42}}, 'spec.sessionId: Invalid value: "integer"'),
        ({"spec": {"sessionId": "x", "trigger": "whenever"}}, "spec.trigger: Unsupported value"),
        ({"spec": {"sessionId": ""}}, "spec.sessionId: Invalid value"),
        ({"spec": {"sessionId": "x", "summarizerRef": "."}}, "spec.summarizerRef: Invalid value"),
        (
            {"spec": {"sessionId": "x", "summarizerRef": "a..b"}},
            "spec.summarizerRef: Invalid value",
        ),
        (
            {"spec": {"sessionId": "x", "summarizerRef": "a.-b"}},
            "spec.summarizerRef: Invalid value",
        ),
    ],
)
def test_invalid_objects_are_rejected_by_the_apiserver(
    harness: Harness, manifest: dict[str, Any], expected: str
) -> None:
    body = {
        "apiVersion": "memorycore.io/v1alpha1",
        "kind": "SessionSummary",
        "metadata": {"name": "invalid-one", "namespace": NS},
        **manifest,
    }
    res = harness.cp.kubectl_run("apply", "-f", "-", input=json.dumps(body), check=False)
    assert res.returncode != 0
    assert expected in res.stderr


def test_session_id_cannot_be_changed(harness: Harness) -> None:
    harness.summaryctl("sunset", "it-immutable", "-n", NS)
    name = summary_object_name("it-immutable")
    res = harness.cp.kubectl_run(
        "-n",
        NS,
        "patch",
        "ssum",
        name,
        "--type=merge",
        "-p",
        '{"spec":{"sessionId":"someone-else"}}',
        check=False,
    )
    assert res.returncode != 0
    assert "sessionId is immutable" in res.stderr


def test_printer_columns_show_phase_ready_session_and_memories(harness: Harness) -> None:
    session = SAMPLE_SESSIONS[0]
    harness.wait_phase(session.session_id, "Summarized")
    for resource in ("sessionsummaries", "ssum", "memorycore"):
        out = harness.kubectl("get", resource)
        header = out.splitlines()[0].split()
        expected = ["NAME", "PHASE", "READY", "SESSION", "MEMORIES", "SUMMARIZED", "AGE"]
        assert header[:7] == expected, resource
        line = next(ln for ln in out.splitlines() if session.session_id in ln)
        assert "Summarized True" in " ".join(line.split()) and f" {len(session.turns)} " in line


def test_sweep_finds_unsummarized_and_stale_sessions_and_respects_idle_and_cap(
    harness: Harness,
) -> None:
    now = int(time.time() * 1000)
    hour = 3_600_000
    store = harness.store("sweep-memory", "sweep-sessions")
    # fresh: summarized by a sunset before the sweep exists; must be left alone
    load(store, [interaction("sw-fresh", 0, now - 5 * hour, "Explain the retry policy.")])
    harness.kubectl(
        "apply",
        "-f",
        "-",
        input=summarizer_yaml(
            "sweeper-off", harness.chroma.url, memory="sweep-memory", summary="sweep-sessions"
        ),
    )
    harness.summaryctl(
        "sunset", "sw-fresh", "-n", NS, "--summarizer", "sweeper-off", "--wait", "60"
    )
    fresh_rv = harness.obj("sw-fresh")["metadata"]["resourceVersion"]
    # stale: summarized, then a new memory arrived (idle now)
    load(store, [interaction("sw-stale", 0, now - 4 * hour, "Add a metrics endpoint.")])
    harness.summaryctl(
        "sunset", "sw-stale", "-n", NS, "--summarizer", "sweeper-off", "--wait", "60"
    )
    load(store, [interaction("sw-stale", 1, now - 3 * hour, "Also export the queue depth gauge.")])
    # never summarized, idle: three of them, newest first under a cap of 2
    for k, age in (("a", 2), ("b", 2.5), ("c", 6)):
        load(store, [interaction(f"sw-missing-{k}", 0, now - int(age * hour), f"Task {k}.")])
    # active: newest memory a minute old, idle threshold 10 minutes
    load(store, [interaction("sw-active", 0, now - 60_000, "Still typing...")])

    harness.kubectl(
        "apply",
        "-f",
        "-",
        input=summarizer_yaml(
            "sweeper",
            harness.chroma.url,
            memory="sweep-memory",
            summary="sweep-sessions",
            sweep="enabled: true, intervalSeconds: 5, idleSeconds: 600, maxSessionsPerSweep: 2",
        ),
    )

    def swept() -> dict[str, Any] | None:
        st = (
            json.loads(harness.kubectl("get", "ssumr", "sweeper", "-o", "json")).get("status") or {}
        )
        return st if st.get("lastSweepAt") else None

    status = wait_for(swept, 60, 0.5, message="first sweep", log=harness.log)
    assert status["candidatesFound"] == 4  # stale + 3 missing
    assert status["deferred"] == 2
    # activeReplica is the peering reporter's, written within a couple of seconds.
    wait_for(
        lambda: (swept() or {}).get("activeReplica") == "it-operator",
        30,
        0.3,
        message="activeReplica on the summarizer",
    )
    # Newest first under the cap: missing-a (2 h old) and missing-b (2.5 h).
    harness.wait_phase("sw-missing-a", "Summarized")
    harness.wait_phase("sw-missing-b", "Summarized")

    # The next sweeps pick up the deferred ones: the stale session (3 h) and missing-c (6 h).
    def resummarized_by_sweep() -> dict[str, Any] | None:
        obj = harness.obj("sw-stale")
        # observedGeneration is the pass's own from its start (phase Summarizing): done is
        # the phase it ends in.
        done = (
            obj["status"].get("observedGeneration") == obj["metadata"]["generation"]
            and obj["status"].get("phase") == "Summarized"
        )
        return obj if done and obj["spec"]["trigger"] == "sweep" else None

    stale = wait_for(resummarized_by_sweep, 90, 0.3, message="sweep to re-summarize sw-stale")
    assert stale["status"]["phase"] == "Summarized" and stale["status"]["memoryCount"] == 2
    harness.wait_phase("sw-missing-c", "Summarized", timeout=90)
    assert harness.kubectl("get", "ssum", summary_object_name("sw-active"), check=False) == ""
    assert harness.obj("sw-fresh")["metadata"]["resourceVersion"] == fresh_rv
    final = swept()
    assert final is not None and final["watermark"] <= now - 600_000 + 60_000 * 10


def test_chroma_outage_shows_on_the_object_and_recovers_without_intervention(
    harness: Harness, tmp_path: Path
) -> None:
    from devenv.chroma import ChromaServer
    from devenv.controlplane import free_port

    server = ChromaServer(
        port=free_port(), path=tmp_path / "data", log=tmp_path / "chroma.log"
    ).start()
    try:
        url = server.url
        loc = StoreLocation(url=url)
        load(
            MemoryStore(connect(loc), loc),
            [interaction("it-outage", 0, 1_760_000_000_000, "Ship the release notes.")],
        )
        harness.kubectl("apply", "-f", "-", input=summarizer_yaml("flaky", url))
        server.stop()
        harness.summaryctl("sunset", "it-outage", "-n", NS, "--summarizer", "flaky")

        def unavailable() -> dict[str, Any] | None:
            st = harness.obj("it-outage").get("status") or {}
            conds = {c["type"]: c for c in st.get("conditions") or []}
            return st if conds.get("Summarized", {}).get("reason") == "StoreUnavailable" else None

        st = wait_for(unavailable, 60, 0.3, message="StoreUnavailable condition", log=harness.log)
        assert "StoreUnavailable" in [e["reason"] for e in harness.events("it-outage")]
        # Retrying (Pending) until the gate's third failure, read in one status (a loaded
        # machine's poll may first see it after that third failure).
        assert st["phase"] == ("Pending" if st["consecutiveFailures"] < 3 else "Failed"), st

        def gated() -> dict[str, Any] | None:
            st = harness.obj("it-outage").get("status") or {}
            return st if st.get("phase") == "Failed" else None

        # After SSO_FAILURE_GATE (3 here) consecutive failures the gate trips: phase Failed.
        status = wait_for(gated, 60, 0.3, message="the failure gate", log=harness.log)
        assert status["consecutiveFailures"] >= 3
        assert "consecutive failures, retrying in" in status["message"]
        # A spec change (a new sunset) resets the gate.
        harness.summaryctl("sunset", "it-outage", "-n", NS, "--summarizer", "flaky")

        def reset() -> bool:
            o = harness.obj("it-outage")
            st = o.get("status") or {}
            return st.get("observedGeneration") == o["metadata"]["generation"] and st.get(
                "consecutiveFailures"
            ) in (1, 2)

        wait_for(reset, 60, 0.1, message="the gate to reset on a spec change")
        server.start()  # same port, same data: the operator retries by itself
        obj = harness.wait_phase("it-outage", "Summarized", timeout=90)
        assert obj["status"]["memoryCount"] == 1
        got = (
            MemoryStore(connect(loc), loc)
            .summaries()
            .get(ids=["summary_it-outage"], include=["metadatas"])
        )
        assert got["metadatas"][0]["memoryCount"] == 1
    finally:
        server.stop()


def test_metrics_count_summaries_sweeps_and_the_active_replica(harness: Harness) -> None:
    import urllib.request

    harness.wait_phase(SAMPLE_SESSIONS[0].session_id, "Summarized")
    text = urllib.request.urlopen(harness.metrics_url, timeout=5).read().decode()
    samples = {
        line.split(" ")[0]: float(line.split(" ")[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }
    assert samples['session_summary_summaries_total{result="summarized"}'] >= 1
    assert samples["session_summary_summarize_duration_seconds_count"] >= 1
    assert samples['session_summary_active_replica{replica="it-operator"}'] == 1
    assert "session_summary_claim_conflicts_total" in samples


def test_retention_deletes_old_summarized_objects_and_keeps_the_summary(harness: Harness) -> None:
    store = harness.store("retain-memory", "retain-sessions")
    load(store, [interaction("ret-1", 0, 1_760_000_000_000, "Archive the logs.")])
    harness.kubectl(
        "apply",
        "-f",
        "-",
        input=summarizer_yaml(
            "retainer",
            harness.chroma.url,
            memory="retain-memory",
            summary="retain-sessions",
            sweep="enabled: true, intervalSeconds: 5, idleSeconds: 0",
        ),
    )
    harness.kubectl(
        "patch",
        "ssumr",
        "retainer",
        "--type=merge",
        "-p",
        '{"spec":{"retention":{"summarizedTTLSeconds":2}}}',
    )
    harness.summaryctl("sunset", "ret-1", "-n", NS, "--summarizer", "retainer", "--wait", "60")
    harness.summaryctl("sunset", "ret-unknown", "-n", NS, "--summarizer", "retainer")
    name = summary_object_name("ret-1")

    def gone() -> bool:
        res = harness.cp.kubectl_run("-n", NS, "get", "ssum", name, check=False)
        return res.returncode != 0 and "NotFound" in res.stderr

    wait_for(gone, 60, 0.5, message="retention to delete the Summarized object", log=harness.log)
    assert store.summaries().get(ids=["summary_ret-1"])["ids"] == ["summary_ret-1"]
    assert harness.obj("ret-unknown")["status"]["phase"] == "NotFound"  # not Summarized: kept
    status = json.loads(harness.kubectl("get", "ssumr", "retainer", "-o", "json"))["status"]
    assert "deletedByRetention" in status


def test_summaries_are_listed_a_page_at_a_time_and_none_is_missed(harness: Harness) -> None:
    """Retention reads every object through pages; the continue token must be followed."""
    harness.summaryctl("sunset", "page-a", "-n", NS)
    harness.summaryctl("sunset", "page-b", "-n", NS)
    harness.summaryctl("sunset", "page-c", "-n", NS)

    def names() -> set[str]:
        out = harness.kubectl("get", "ssum", "-o", "jsonpath={.items[*].metadata.name}")
        return set(out.split())

    before = names()
    paged = [obj["metadata"]["name"] for obj in kube.iter_summaries(NS, page_size=2)]
    after = names()
    assert len(before & after) >= 3
    # The operator may create or delete objects meanwhile; every object present throughout
    # must be in the pages, and nothing twice.
    assert before & after <= set(paged) <= before | after
    assert len(paged) == len(set(paged))
