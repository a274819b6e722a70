"""Forget and rebuild on the real control plane, a real Chroma and the operator process
(docs/privacy.md, "Forget and rebuild"): `summaryctl forget` and a `kubectl apply` asking
for spec.action Forget delete the row and the operator's state (a tombstone of ids and
counts stays), say who asked in an Event, and the sweep does not bring the session back
until a new memory arrives; a rebuild replaces the old text with one made from the living
memories alone."""

from __future__ import annotations

import contextlib
import json
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.api import SessionSummaryStatus
from controller.core.ledger import FORGOTTEN_BY_KEY, LAST_MEMORY_KEY, REMOVED_KEYS, REQUEST_KEY
from controller.core.naming import summary_object_name, summary_row_id
from controller.kube import client as kube
from devenv.operator import start_operator
from devenv.processes import stop, tail, wait_for
from tests.integration.harness import (
    NS,
    Harness,
    conditions_of,
    interaction,
    load,
    summarizer_yaml,
)
from tests.support.cli import summaryctl_here


def fact() -> str:
    return f"FACT{uuid.uuid4().hex[:10].upper()}"


def events(harness: Harness, sid: str, reason: str) -> list[dict[str, Any]]:
    out = harness.kubectl(
        "get", "events", "-o", "json", "--field-selector",
        f"involvedObject.name={summary_object_name(sid)},reason={reason}",
    )  # fmt: skip
    return list(json.loads(out)["items"])


def ledger_records(harness: Harness, summary: str, sid: str) -> list[tuple[str, dict[str, Any]]]:
    coll = harness.store().client.get_collection(f"{summary}-ledger")
    got = coll.get(where={"sessionId": sid}, include=["metadatas"])
    return list(zip(got["ids"], [dict(m or {}) for m in got["metadatas"] or []], strict=True))


def summary_row(harness: Harness, summary: str, sid: str) -> tuple[str, dict[str, Any]] | None:
    got = (
        harness.store()
        .client.get_collection(summary)
        .get(ids=[summary_row_id(sid)], include=["documents", "metadatas"])
    )
    if not got["ids"]:
        return None
    return (got["documents"] or [""])[0] or "", dict((got["metadatas"] or [{}])[0] or {})


def test_a_forgotten_session_is_gone_audited_and_not_swept_back_until_it_changes(
    harness: Harness,
) -> None:
    memory, summary = "erase-memory", "erase-sessions"
    sweep = "enabled: true, intervalSeconds: 5, idleSeconds: 1, lookbackDays: 3"
    harness.kubectl(
        "apply", "-f", "-",
        input=summarizer_yaml("erase", harness.chroma.url, memory=memory, summary=summary,
                              sweep=sweep),
    )  # fmt: skip
    store = harness.store(memory, summary)
    sid, address = f"forget-{uuid.uuid4().hex[:6]}", "Keep 221B Baker Street as the address."
    now = int(time.time() * 1000) - 60_000
    load(store, [interaction(sid, 0, now, address), interaction(sid, 1, now + 1, "Ship it.")])
    res = summaryctl_here("sunset", sid, "-n", NS, "--summarizer", "erase", "--wait", "60")
    assert res.returncode == 0, res.stdout + res.stderr
    row = summary_row(harness, summary, sid)
    assert row is not None and "Baker Street" in row[0]

    res = summaryctl_here("forget", sid, "-n", NS, "--summarizer", "erase", "--wait", "60")
    assert res.returncode == 0, res.stdout + res.stderr
    print(f"$ summaryctl forget {sid} -n {NS} --summarizer erase --wait 60\n{res.stdout}")
    assert "Forgotten" in res.stdout
    assert summary_row(harness, summary, sid) is None
    # Only the tombstone: ids' digest, counts, the fence and the time; no text.
    records = ledger_records(harness, summary, sid)
    assert [i for i, _ in records] == [summary_row_id(sid)], records
    tombstone = records[0][1]
    assert tombstone["memoryCount"] == 2 and "forgottenAt" in tombstone
    # ... and nothing of the head it replaced (Chroma's upsert merges metadata).
    kept = {"sessionId", "ledgerFormat", "forgottenAt", "rowsDigest", "memoryCount"}
    # The forget request and what it removed (uid/generation, counts) stay for its retry.
    kept |= {REQUEST_KEY, FORGOTTEN_BY_KEY, *REMOVED_KEYS}
    kept |= {LAST_MEMORY_KEY}  # the newest memory time it covers, in the agent's clock
    assert tombstone[LAST_MEMORY_KEY] == now + 1, tombstone
    assert set(tombstone) <= {*kept, "fence", "fenceAuthority"}, tombstone
    assert "Baker" not in json.dumps(tombstone)
    assert store.stored_summary(sid) is None
    said = wait_for(lambda: events(harness, sid, "Forgotten"), 30, 0.3, message="Forgotten Event")
    assert "via summaryctl" in said[0]["message"] and "the summary row" in said[0]["message"]
    print(f"Event Forgotten: {said[0]['message']}")
    # The object describes no summary any more (`kubectl get ssum`: no SUMMARIZED, no
    # TITLE, no MEMORIES: the count a summary covers), nor the pass that wrote it (writer,
    # passes, tokens, redactions): the forgotten summary's title was the session's own text.
    # Every status field the model has is looked at, so a new one is decided here too.
    status = harness.obj(sid)["status"]
    still_true = {"phase", "lastPhaseTransitionTime", "observedGeneration", "triggerSource",
                  "consecutiveFailures", "message", "conditions"}  # fmt: skip
    described = {f.alias for f in SessionSummaryStatus.model_fields.values()} - still_true
    assert not described & status.keys(), status
    said_by_pass = {"SingleWriter", "MemoryTimesReadable"}  # the summary row; its memories
    assert not said_by_pass & {c["type"] for c in status["conditions"]}, status
    assert "2 memories of it remain" in status["message"], status
    assert "Baker" not in json.dumps(status)
    # `summaryctl ledger` shows what stays, the tombstone (it said "no ledger entry").
    res = summaryctl_here("ledger", sid, "-n", NS, "--summarizer", "erase")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "was forgotten at" in res.stdout and "tombstone" in res.stdout, res.stdout
    assert "Baker" not in res.stdout

    # Sweeps (every 5 s) come and go: the session is idle, has memories and no row, and
    # stays forgotten. Two whole sweeps are waited for, not a time a slow machine may fill
    # with none.
    def swept() -> str | None:
        out = harness.kubectl("get", "ssumr", "erase", "-o", "json")
        return (json.loads(out).get("status") or {}).get("lastSweepAt")

    sweeps = [swept()]

    def two_more() -> bool:
        if (at := swept()) != sweeps[-1]:
            sweeps.append(at)
        return len(sweeps) >= 3

    wait_for(two_more, 120, 0.5, message="two sweeps after the forget", log=harness.log)
    assert summary_row(harness, summary, sid) is None, tail(harness.log)
    obj = harness.obj(sid)
    assert obj["status"]["phase"] == "Forgotten", obj["status"]

    # A new memory is news: the sweep summarizes the session again, from its memories.
    load(store, [interaction(sid, 2, int(time.time() * 1000) - 5_000, "Add the retry flag.")])
    wait_for(lambda: summary_row(harness, summary, sid), 60, 0.5, message="the sweep's new summary")
    row = summary_row(harness, summary, sid)
    assert row is not None and "retry flag" in row[0]
    # The new entry is a summary's, no longer the tombstone: the next pass reads it and only
    # what is new (a head that kept forgottenAt made every later pass read all memories).
    [head] = [m for i, m in ledger_records(harness, summary, sid) if i == summary_row_id(sid)]
    assert "forgottenAt" not in head and head["summarizedAt"] > tombstone["forgottenAt"], head
    assert LAST_MEMORY_KEY not in head, head
    load(store, [interaction(sid, 3, int(time.time() * 1000) - 4_000, "Log each retry.")])
    res = summaryctl_here("sunset", sid, "-n", NS, "--summarizer", "erase", "--wait", "60")
    assert res.returncode == 0 and "summarized 1 new of 4 memories" in res.stdout, res.stdout


def test_forget_with_memories_deletes_them_and_needs_a_confirmation(harness: Harness) -> None:
    memory, summary = "erase2-memory", "erase2-sessions"
    harness.kubectl(
        "apply", "-f", "-",
        input=summarizer_yaml("erase2", harness.chroma.url, memory=memory, summary=summary),
    )  # fmt: skip
    store = harness.store(memory, summary)
    sid = f"forget-all-{uuid.uuid4().hex[:6]}"
    load(store, [interaction(sid, i, 1_770_000_000_000 + i, f"Step {i}.") for i in range(3)])
    refused = summaryctl_here("forget", sid, "-n", NS, "--summarizer", "erase2", "--memories")
    assert refused.returncode == 2 and "--yes" in refused.stderr
    print(f"$ summaryctl forget {sid} ... --memories\n{refused.stderr}")
    assert len(store.session_ids(sid)) == 3
    res = summaryctl_here(
        "forget", sid, "-n", NS, "--summarizer", "erase2", "--memories", "--yes", "--wait", "60"
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert len(store.session_ids(sid)) == 0
    assert "3 memories of the session" in harness.obj(sid)["status"]["message"]


def _summarized_in_two_namespaces(
    harness: Harness, name: str, prefix: str
) -> tuple[str, str, str, Any]:
    """A session summarized by SessionSummarizer `name` in NS (its retention looks every 5 s),
    and summarizer `b` on the same store in another namespace: (session, summary collection,
    the other namespace, the store)."""
    memory, summary, cp = f"{name}-memory", f"{name}-sessions", harness.cp
    harness.kubectl(
        "apply", "-f", "-",
        input=summarizer_yaml(name, harness.chroma.url, memory=memory, summary=summary,
                              sweep="enabled: false, intervalSeconds: 5"),
    )  # fmt: skip
    other = f"{prefix}-b-{uuid.uuid4().hex[:5]}"
    cp.kubectl_run("create", "namespace", other)
    b_summarizer = summarizer_yaml("b", harness.chroma.url, memory=memory, summary=summary)
    cp.kubectl_run(
        "apply", "-f", "-", input=b_summarizer.replace(f"namespace: {NS}", f"namespace: {other}")
    )
    sid, store = f"{prefix}-{uuid.uuid4().hex[:6]}", harness.store(memory, summary)
    load(store, [interaction(sid, 0, 1_770_000_000_000, "Use Rust.")])
    res = summaryctl_here("sunset", sid, "-n", NS, "--summarizer", name, "--wait", "60")
    assert res.returncode == 0, res.stdout + res.stderr
    return sid, summary, other, store


@contextlib.contextmanager
def _forgotten_in(harness: Harness, sid: str, other: str) -> Iterator[Path]:
    """The other namespace's operator (replica b) runs while the block does, and its
    summarizer `b` has forgotten the session: its log."""
    log = harness.log.with_name(f"{other}.log")
    proc = start_operator(
        log, dict(harness.cp.env(), SSO_REPLICA_ID="b"), "--standalone", "--namespace", other
    )
    try:
        # Served once the operator reports on `b` (summaryctl refuses a namespace none serves).
        wait_for(lambda: conditions_of(kube.get_summarizer(other, "b") or {}).get(
            "ReplicaActive"), 120, 0.3, message=f"{other}'s operator report", log=log)  # fmt: skip
        res = summaryctl_here("forget", sid, "-n", other, "--summarizer", "b", "--wait", "90")
        assert res.returncode == 0, res.stdout + res.stderr + tail(log)
        yield log
    finally:
        stop(proc)


def test_a_forget_in_another_namespace_turns_the_owners_summary_forgotten_until_summarized_again(
    harness: Harness,
) -> None:
    """The owner's `kubectl get ssum` no longer says Summarized once another namespace's
    object (another operator, the same store) forgot the session: its retention tick reads
    the tombstone and says when and by whom. Once another namespace's pass summarizes the
    session again, a Forgotten object (told so, or forgotten by its own request) says
    Summarized again, with no pass asked of it."""
    sid, summary, other, store = _summarized_in_two_namespaces(harness, "owner", "owned")
    with _forgotten_in(harness, sid, other) as log:
        owner = harness.wait_phase(sid, "Forgotten", timeout=60)
        status = owner["status"]
        print(f"owner: {status['message']}")
        cond = conditions_of(owner)["Summarized"]
        assert (cond["status"], cond["reason"]) == ("False", "Forgotten"), cond
        # The tombstone (every agent reads the store) and the owner name the object, no person.
        forgetter = f"SessionSummary {other}/{summary_object_name(sid)}"
        assert ledger_records(harness, summary, sid)[0][1][FORGOTTEN_BY_KEY] == forgetter
        assert "was forgotten at 20" in status["message"], status
        assert f"through {forgetter};" in status["message"], status
        assert "summaryctl" not in status["message"], status
        # `kubectl get ssum`: no MEMORIES, SUMMARIZED, TITLE of a summary that is gone.
        assert not {"memoryCount", "summarizedAt", "title"} & status.keys(), status
        said = wait_for(
            lambda: events(harness, sid, "Forgotten"), 30, 0.3, message="Forgotten Event"
        )
        assert said[0]["message"] == status["message"]
        # The other namespace summarizes it again (a new memory): the owner, told Forgotten,
        # then the owner forgetting it itself, each says Summarized again with the new count.
        for count, prompt in [(2, "Use Go."), (3, "Use Zig.")]:
            load(store, [interaction(sid, count, 1_770_000_000_000 + count, prompt)])
            res = summaryctl_here("sunset", sid, "-n", other, "--summarizer", "b", "--wait", "60")
            assert res.returncode == 0, res.stdout + res.stderr + tail(log)
            status = harness.wait_phase(sid, "Summarized", timeout=60)["status"]
            assert status["memoryCount"] == count and status["title"], status
            if count == 2:
                res = summaryctl_here(
                    "forget", sid, "-n", NS, "--summarizer", "owner", "--wait", "60"
                )
                assert res.returncode == 0 and "Forgotten" in res.stdout, res.stdout


def test_with_two_objects_of_one_session_a_forget_in_another_namespace_turns_both_forgotten(
    harness: Harness,
) -> None:
    """A SessionSummary named by hand beside the derived one (allowed) puts the session
    twice into the retention's read of the ledger heads: each object is still told."""
    sid, _, other, _ = _summarized_in_two_namespaces(harness, "twice", "twice")
    mine = f"mine-{uuid.uuid4().hex[:6]}"
    harness.kubectl(
        "apply", "-f", "-",
        input=textwrap.dedent(f"""
            apiVersion: memorycore.io/v1alpha1
            kind: SessionSummary
            metadata: {{name: {mine}, namespace: {NS}}}
            spec: {{sessionId: {sid}, summarizerRef: twice}}
        """),
    )  # fmt: skip

    def phase_of(name: str, phase: str) -> bool:
        obj = json.loads(harness.kubectl("get", "ssum", name, "-o", "json"))
        st = obj.get("status") or {}
        return (
            st.get("phase") == phase
            and st.get("observedGeneration") == obj["metadata"]["generation"]
        )

    wait_for(lambda: phase_of(mine, "Summarized"), 60, 0.3, message=mine, log=harness.log)
    with _forgotten_in(harness, sid, other):
        harness.wait_phase(sid, "Forgotten", timeout=60)
        wait_for(lambda: phase_of(mine, "Forgotten"), 30, 0.3, message=mine, log=harness.log)


def test_a_tombstone_with_an_unreadable_time_and_author_still_turns_the_owner_forgotten(
    harness: Harness,
) -> None:
    """Anyone with the store token can write a ledger head: one that is no number nor
    object's name is told as such, and the summarizer's timer keeps running."""
    memory, summary = "tomb-memory", "tomb-sessions"
    harness.kubectl(
        "apply", "-f", "-",
        input=summarizer_yaml("tomb", harness.chroma.url, memory=memory, summary=summary,
                              sweep="enabled: false, intervalSeconds: 5"),
    )  # fmt: skip
    sid = f"tomb-{uuid.uuid4().hex[:6]}"
    load(harness.store(memory, summary), [interaction(sid, 0, 1_770_000_000_000, "Use Go.")])
    res = summaryctl_here("sunset", sid, "-n", NS, "--summarizer", "tomb", "--wait", "60")
    assert res.returncode == 0, res.stdout + res.stderr
    spoof = {"forgottenAt": "yesterday", FORGOTTEN_BY_KEY: "ana\nvia summaryctl (user ana)"}
    ledger = harness.store().client.get_collection(f"{summary}-ledger")
    ledger.update(ids=[summary_row_id(sid)], metadatas=[spoof])
    status = harness.wait_phase(sid, "Forgotten", timeout=60)["status"]
    assert status["message"] == (
        f"session {sid!r} was forgotten at an unknown time through another SessionSummary; "
        "a sunset here summarizes it again if memories remain"
    ), status


def test_forgetting_a_session_that_never_existed_says_nothing_was_found(harness: Harness) -> None:
    harness.kubectl(
        "apply", "-f", "-",
        input=summarizer_yaml("never", harness.chroma.url, memory="never-memory",
                              summary="never-sessions"),
    )  # fmt: skip
    other = f"other-{uuid.uuid4().hex[:6]}"  # the memory collection exists; this id has none
    load(
        harness.store("never-memory", "never-sessions"),
        [interaction(other, 0, 1_770_000_000_000, "Hi.")],
    )
    sid = f"never-{uuid.uuid4().hex[:6]}"
    res = summaryctl_here("forget", sid, "-n", NS, "--summarizer", "never", "--wait", "60")
    assert res.returncode == 0, res.stdout + res.stderr
    print(f"$ summaryctl forget {sid} -n {NS} --summarizer never --wait 60\n{res.stdout}")
    assert "removed nothing: no summary row or ledger entry of it was found" in res.stdout
    assert "record(s)" not in res.stdout and "0 memories of it remain" in res.stdout


def test_a_rebuild_applied_with_kubectl_replaces_the_text_of_deleted_memories(
    harness: Harness,
) -> None:
    memory, summary = "rebuild-memory", "rebuild-sessions"
    harness.kubectl(
        "apply", "-f", "-",
        input=summarizer_yaml("rebuild", harness.chroma.url, memory=memory, summary=summary),
    )  # fmt: skip
    store = harness.store(memory, summary)
    sid = f"rebuild-{uuid.uuid4().hex[:6]}"
    gone, kept = fact(), fact()
    rows = [
        interaction(sid, 0, 1_770_000_000_000, f"Keep {gone} in the notes."),
        interaction(sid, 1, 1_770_000_001_000, f"Keep {kept} in the notes."),
    ]
    load(store, rows)
    res = summaryctl_here("sunset", sid, "-n", NS, "--summarizer", "rebuild", "--wait", "60")
    assert res.returncode == 0, res.stdout + res.stderr
    assert gone in json.dumps(store.stored_summary(sid))
    store.memories().delete(ids=[rows[0][0]])
    # The superset rule keeps an item whose memory is gone; a rebuild, asked declaratively,
    # does not.
    manifest = textwrap.dedent(f"""
        apiVersion: memorycore.io/v1alpha1
        kind: SessionSummary
        metadata: {{name: {summary_object_name(sid)}, namespace: {NS}}}
        spec:
          sessionId: {sid}
          summarizerRef: rebuild
          action: Rebuild
          requestedAt: "2026-11-26T23:00:00.000Z"
    """)
    harness.kubectl("apply", "-f", "-", input=manifest)
    rebuilt = wait_for(
        lambda: events(harness, sid, "Rebuilt"), 60, 0.3, message="Rebuilt", log=harness.log
    )
    assert "field manager kubectl" in rebuilt[0]["message"], rebuilt[0]["message"]
    print(f"Event Rebuilt: {rebuilt[0]['message']}")
    stored = json.dumps(store.stored_summary(sid))
    assert gone not in stored and kept in stored
    assert harness.obj(sid)["status"]["memoryCount"] == 1


def test_rebuild_all_with_secrets_finds_the_rows_an_earlier_release_stored_them_in(
    harness: Harness,
) -> None:
    memory, summary = "secrets-memory", "secrets-sessions"
    harness.kubectl(
        "apply", "-f", "-",
        input=summarizer_yaml("secrets", harness.chroma.url, memory=memory, summary=summary),
    )  # fmt: skip
    store = harness.store(memory, summary)
    leaky, clean = f"leaky-{uuid.uuid4().hex[:6]}", f"clean-{uuid.uuid4().hex[:6]}"
    key = "AKIA" + uuid.uuid4().hex[:16].upper()
    load(
        store,
        [
            interaction(leaky, 0, 1_770_000_000_000, "Rotate the deploy credentials."),
            interaction(clean, 0, 1_770_000_000_000, "Rename the billing module."),
        ],
    )
    # Rows as an earlier release (or neo) left them: free text, one with a key in it.
    store.client.get_or_create_collection(summary).upsert(
        ids=[summary_row_id(leaky), summary_row_id(clean)],
        documents=[f"Deployed with {key} as the access key.", "Renamed the billing module."],
        metadatas=[
            {"sessionId": sid, "timestamp": 1_770_000_000_000, "memoryCount": 1}
            for sid in (leaky, clean)
        ],
        embeddings=[[0.1] * 384, [0.2] * 384],
    )
    res = summaryctl_here("rebuild", "--all-with-secrets", "--summarizer", "secrets", "-n", NS)
    assert res.returncode == 0, res.stdout + res.stderr
    print(f"$ summaryctl rebuild --all-with-secrets --summarizer secrets -n {NS}\n{res.stdout}")
    assert f"rebuild asked: {leaky}" in res.stdout and clean not in res.stdout, res.stdout
    wait_for(lambda: events(harness, leaky, "Rebuilt"), 60, 0.3, message="Rebuilt")
    row = summary_row(harness, summary, leaky)
    assert row is not None and key not in json.dumps(store.stored_summary(leaky))
    assert "deploy credentials" in row[0]
    # The clean row was not touched.
    untouched = summary_row(harness, summary, clean)
    assert untouched is not None and untouched[0] == "Renamed the billing module."


DELETIONS = st.integers(3, 10).flatmap(
    lambda n: st.tuples(
        st.lists(st.integers(0, n - 1), min_size=n, max_size=n),  # the fact each memory says
        st.sets(st.integers(0, n - 1), min_size=1, max_size=n - 1),  # deleted after a pass
        st.booleans(),  # a new memory arrives with the deletion
    )
)


@given(case=DELETIONS)
@settings(
    max_examples=6,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_after_a_deletion_the_next_sunset_keeps_exactly_the_facts_of_living_memories(
    harness: Harness, case: tuple[list[int], set[int], bool]
) -> None:
    says, deleted, arrival = case
    memory, summary = "gone-memory", "gone-sessions"
    harness.kubectl(
        "apply", "-f", "-",
        input=summarizer_yaml("gone", harness.chroma.url, memory=memory, summary=summary),
    )  # fmt: skip
    store = harness.store(memory, summary)
    sid = f"gone-{uuid.uuid4().hex[:6]}"
    facts = [fact() for _ in says]
    rows = [
        interaction(sid, i, 1_770_000_000_000 + i * 1000, f"Keep {facts[k]} in the notes.")
        for i, k in enumerate(says)
    ]
    load(store, rows)
    res = summaryctl_here("sunset", sid, "-n", NS, "--summarizer", "gone", "--wait", "60")
    assert res.returncode == 0, res.stdout + res.stderr
    store.memories().delete(ids=[rows[i][0] for i in deleted])
    if arrival:
        load(store, [interaction(sid, 99, 1_770_000_100_000, "Add the retry flag.")])
    res = summaryctl_here("sunset", sid, "-n", NS, "--summarizer", "gone", "--wait", "60")
    assert res.returncode == 0, res.stdout + res.stderr
    stored = json.dumps(store.stored_summary(sid))
    living = {says[i] for i in range(len(says)) if i not in deleted}
    for k in set(says):
        assert (facts[k] in stored) == (k in living), (k, says, deleted, stored[:2000])
    assert ("retry flag" in stored) == arrival


def test_with_no_sunset_the_reconciliation_drops_the_facts_of_deleted_memories(
    harness: Harness,
) -> None:
    """Sunsets off: a deletion alone (no new memory) is found by the reconciliation's next
    walk (reconcileIntervalSeconds, at least 60 s), whose pass drops what only the deleted
    memories said."""
    memory, summary = "recon-gone-memory", "recon-gone-sessions"
    sweep = "enabled: true, intervalSeconds: 5, idleSeconds: 1, reconcileIntervalSeconds: 60"
    harness.kubectl(
        "apply", "-f", "-",
        input=summarizer_yaml("recon-gone", harness.chroma.url, memory=memory, summary=summary,
                              sweep=sweep),
    )  # fmt: skip
    store = harness.store(memory, summary)
    sid = f"recon-gone-{uuid.uuid4().hex[:6]}"
    gone, kept = fact(), fact()
    now = int(time.time() * 1000) - 60_000
    rows = [
        interaction(sid, 0, now, f"Keep {gone} in the notes."),
        interaction(sid, 1, now + 1000, f"Keep {kept} in the notes."),
    ]
    load(store, rows)

    def stored() -> str:
        return json.dumps(store.stored_summary(sid))

    wait_for(lambda: kept in stored(), 60, 0.5, message="the sweep's summary", log=harness.log)
    assert gone in stored()
    store.memories().delete(ids=[rows[0][0]])
    # The next walk starts at most 60 s after the last one ended, reads 2 rows, and asks for
    # a pass: within 60 s + a few sweep ticks + the pass.
    wait_for(lambda: gone not in stored(), 100, 1, message="the walk's pass", log=harness.log)
    assert kept in stored()
