"""Exactly one writer: several operator processes on the real control plane and a real
Chroma server, the active replica SIGKILLed repeatedly, every store write journaled."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import random
import subprocess
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from controller.api import SessionSummarizerSpec
from controller.core.claim_rules import Claim, Writer
from controller.core.naming import summary_object_name
from controller.core.sweep_plan import SweepPlan
from controller.kube import client as kube
from controller.kube.claims import SessionClaimHandle
from controller.kube.peering import leader_of, live_peers
from controller.store.memory_store import MemoryStore
from controller.sweep import Applied, apply_plan, plan_from_store
from devenv.controlplane import ControlPlane
from devenv.operator import start_operator
from devenv.processes import kill, stop, tail, wait_for
from tests.integration.harness import Harness, interaction, load, stored_summary_ids


@dataclass
class Replicas:
    """Operator processes watching one namespace, all journaling their store writes."""

    cp: ControlPlane
    namespace: str
    workdir: Path
    env: dict[str, str]
    standalone: bool = False
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    counter: Iterator[int] = field(default_factory=itertools.count)
    killed_at: dict[str, int] = field(default_factory=dict)

    @property
    def journal(self) -> Path:
        return self.workdir / "writes.jsonl"

    def start(self, priority: int | None = None) -> str:
        replica = f"{self.namespace}-r{next(self.counter)}"
        env = dict(self.env, SSO_REPLICA_ID=replica, SSO_WRITE_JOURNAL=str(self.journal))
        if priority is not None:
            env["SSO_PEERING_PRIORITY"] = str(priority)
        args = ["--namespace", self.namespace] + (["--standalone"] if self.standalone else [])
        self.procs[replica] = start_operator(self.workdir / f"{replica}.log", env, *args)
        return replica

    def leader(self) -> str | None:
        out = self.cp.kubectl_run(
            "-n",
            self.namespace,
            "get",
            "kopfpeerings.kopf.dev",
            "session-summary-operator",
            "-o",
            "json",
            check=False,
        )
        if out.returncode != 0:
            return None
        status = json.loads(out.stdout).get("status") or {}
        leader = leader_of(live_peers(status, dt.datetime.now(dt.UTC)))
        return leader if leader in self.procs and self.procs[leader].poll() is None else None

    def stop_all(self) -> None:
        for proc in self.procs.values():
            stop(proc)

    def logs(self) -> str:
        return "\n".join(f"--- {r}\n{tail(self.workdir / f'{r}.log', 15)}" for r in self.procs)

    def writes(self) -> list[dict[str, Any]]:
        """Write intervals from the journal. A write begun by a replica that was then
        SIGKILLed has no end line: it cannot have lasted past the kill."""
        if not self.journal.exists():
            return []
        records = [json.loads(line) for line in self.journal.read_text().splitlines() if line]
        ends = {
            (r["holder"], r.get("object", ""), r["session"], r["began"]): r["t"]
            for r in records
            if r["event"] == "end"
        }
        writes = []
        for r in records:
            if r["event"] != "begin":
                continue
            end = ends.get((r["holder"], r.get("object", ""), r["session"], r["t"]))
            if end is None:
                end = self.killed_at.get(r["holder"], 2**62)  # still running: open-ended
            writes.append(
                {
                    "session": r["session"],
                    "holder": r["holder"],
                    "object": r.get("object", ""),
                    "start": r["t"],
                    "end": end,
                }
            )
        return writes

    def writing_leader(self) -> str | None:
        """The leader, once it has begun a write: killing a leader before it wrote anything
        (a slow start on a loaded machine) would test no failover of a writer."""
        leader = self.leader()
        return leader if leader in {w["holder"] for w in self.writes()} else None

    def kill(self, replica: str) -> None:
        kill(self.procs[replica])  # SIGKILL: no shutdown, its claims stay until expiry
        self.killed_at[replica] = int(time.time() * 1000)


def overlapping_writes(writes: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Pairs of writes to one session by different writers whose intervals overlap. A writer
    is a replica serving one object: one replica serving two objects is two writers."""
    by_session: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for w in writes:
        by_session[w["session"]].append(w)
    overlaps = []
    for items in by_session.values():
        items.sort(key=lambda w: w["start"])
        for i, a in enumerate(items):
            for b in items[i + 1 :]:
                writer_a, writer_b = (a["holder"], a["object"]), (b["holder"], b["object"])
                if writer_a != writer_b and b["start"] < a["end"]:
                    overlaps.append((a, b))
    return overlaps


def summarizer(namespace: str, url: str, memory: str, summary: str) -> str:
    return json.dumps(
        {
            "apiVersion": "memorycore.io/v1alpha1",
            "kind": "SessionSummarizer",
            "metadata": {"name": "default", "namespace": namespace},
            "spec": {
                "store": {"url": url, "memoryCollection": memory, "summaryCollection": summary},
                "sweep": {"enabled": False},
                "reconcile": {"enabled": False},
            },
        }
    )


@pytest.fixture
def replicas_factory(harness: Harness, tmp_path: Path) -> Iterator[Any]:
    made: list[Replicas] = []

    def make(namespace: str, standalone: bool = False, **env: str) -> tuple[Replicas, MemoryStore]:
        cp = harness.cp
        cp.kubectl_run("create", "namespace", namespace, check=False)
        memory, summary = f"{namespace}-memory", f"{namespace}-sessions"
        cp.kubectl_run(
            "apply", "-f", "-", input=summarizer(namespace, harness.chroma.url, memory, summary)
        )
        base_env = {
            **cp.env(),
            "SSO_PEERING_LIFETIME": "5",
            "SSO_CLAIM_TTL_SECONDS": "8",
            "SSO_CLAIM_MARGIN_SECONDS": "2",
            "SSO_RETRY_BASE_SECONDS": "0.5",
            "SSO_RETRY_MAX_SECONDS": "2",
            "SSO_SWEEP_TICK_SECONDS": "1",
            **env,  # a test's own settings over these
        }
        workdir = tmp_path / namespace
        workdir.mkdir()
        reps = Replicas(cp, namespace, workdir, base_env, standalone=standalone)
        made.append(reps)
        return reps, harness.store(memory, summary)

    try:
        yield make
    finally:
        for reps in made:
            reps.stop_all()


def phases(cp: ControlPlane, namespace: str) -> dict[str, dict[str, Any]]:
    out = cp.kubectl_run("-n", namespace, "get", "ssum", "-o", "json").stdout
    return {o["spec"]["sessionId"]: o for o in json.loads(out)["items"]}


def all_covered(cp: ControlPlane, namespace: str, expected: dict[str, int]) -> bool:
    objs = phases(cp, namespace)
    for sid, count in expected.items():
        st = (objs.get(sid) or {}).get("status") or {}
        gen = (objs.get(sid) or {}).get("metadata", {}).get("generation")
        if st.get("phase") != "Summarized" or st.get("memoryCount") != count:
            return False
        if st.get("observedGeneration") != gen:
            return False
    return True


def test_chaos_every_session_summarized_once_at_a_time_while_leaders_die(
    harness: Harness, replicas_factory: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    ns = "chaos"
    # A SIGKILLed leader's claims lapse after 4 s (not 8): each failover's wait for them.
    reps, store = replicas_factory(ns, SSO_CLAIM_TTL_SECONDS="4", SSO_CLAIM_MARGIN_SECONDS="1")
    sessions = [f"chaos-{i:03d}" for i in range(200)]
    resunset = set(sessions[::5])  # 40 sessions get new memories and a second sunset
    base = 1_770_000_000_000
    rows = [
        interaction(sid, k, base + i * 10 + k, f"Fact {sid}-{k}: implement step {k}.")
        for i, sid in enumerate(sessions)
        for k in range(3)
    ]
    load(store, rows)
    expected = dict.fromkeys(sessions, 3)
    for _ in range(3):
        reps.start()
    wait_for(reps.leader, 60, 0.5, message="a leader among 3 replicas\n" + reps.logs())

    kills = 0
    sunsets = 0
    random.seed(7)
    next_kill = time.monotonic() + 4
    queue = list(sessions) + sorted(resunset)
    added: set[str] = set()
    for n, sid in enumerate(queue):
        if n >= len(sessions) and sid not in added:
            load(
                store,
                [
                    interaction(sid, k, base + 5_000_000 + k, f"Fact {sid}-{k}: follow-up {k}.")
                    for k in (3, 4)
                ],
            )
            expected[sid] = 5
            added.add(sid)
        kube.request_summary(ns, sid, trigger="sunset")
        sunsets += 1
        if time.monotonic() >= next_kill and kills < 4:
            leader = reps.writing_leader()
            if leader is not None:
                reps.kill(leader)
                kills += 1
                reps.start()
                next_kill = time.monotonic() + 8
        time.sleep(0.08)
    while kills < 4:  # keep killing writing leaders until four failovers happened
        # A late memory and a sunset give the new leader a write to do, whatever is left.
        late = sessions[kills]
        k = expected[late]
        load(store, [interaction(late, k, base + 6_000_000 + k, f"Fact {late}-{k}: late {k}.")])
        expected[late] = k + 1
        kube.request_summary(ns, late, trigger="sunset")
        sunsets += 1
        leader = wait_for(
            reps.writing_leader, 120, 0.5, message="a new leader writing\n" + reps.logs()
        )
        reps.kill(leader)
        kills += 1
        reps.start()

    wait_for(
        lambda: all_covered(harness.cp, ns, expected),
        240,
        1.0,
        message="every session Summarized covering all its memories\n" + reps.logs(),
    )

    got = store.summaries().get(
        ids=[f"summary_{s}" for s in sessions], include=["documents", "metadatas"]
    )
    assert len(got["ids"]) == len(sessions)
    for doc, meta in zip(got["documents"], got["metadatas"], strict=True):
        sid = meta["sessionId"]
        assert meta["memoryCount"] == expected[sid]
        for k in range(expected[sid]):  # no summary ever lost an item it had
            assert f"Fact {sid}-{k}" in doc, (sid, k)
    writes = reps.writes()
    overlaps = overlapping_writes(writes)
    assert overlaps == []
    assert {w["session"] for w in writes} == set(sessions)
    writers = {w["holder"] for w in writes}
    with capsys.disabled():
        print(
            f"\nchaos: sessions={len(sessions)} sunsets={sunsets} kills={kills} "
            f"writes={len(writes)} writers={len(writers)} overlaps={len(overlaps)}"
        )
    assert kills == 4 and len(writers) >= 2


def _summarizer_status(cp: ControlPlane, namespace: str) -> dict[str, Any]:
    out = cp.kubectl_run("-n", namespace, "get", "ssumr", "default", "-o", "json").stdout
    return dict(json.loads(out).get("status") or {})


def _replica_condition(cp: ControlPlane, namespace: str) -> dict[str, Any]:
    conds = _summarizer_status(cp, namespace).get("conditions") or []
    return next((c for c in conds if c["type"] == "ReplicaActive"), {})


def test_two_replicas_with_equal_priority_both_pause_and_say_so_on_the_summarizer(
    harness: Harness, replicas_factory: Any
) -> None:
    reps, store = replicas_factory("tie")
    load(store, [interaction("tie-1", 0, 1_770_000_000_000, "Fix the flaky test.")])
    first = reps.start(priority=100)
    wait_for(
        lambda: _summarizer_status(harness.cp, "tie").get("activeReplica") == first,
        60,
        0.5,
        message="the first replica shown active\n" + reps.logs(),
    )
    assert _replica_condition(harness.cp, "tie")["reason"] == "Elected"
    second = reps.start(priority=100)

    def both_paused() -> bool:
        return all(
            "conflicting operators with the same priority"
            in (reps.workdir / f"{r}.log").read_text()
            for r in (first, second)
        )

    # kopf pauses every peer that shares the top priority.
    wait_for(both_paused, 60, 0.5, message="both replicas to pause\n" + reps.logs())
    # The second replica said at start that its configured priority was taken.
    assert (
        f"also the priority of live replica(s) {first}"
        in (reps.workdir / f"{second}.log").read_text()
    )
    # Every SessionSummarizer says so, and no longer shows the old leader.
    cond = wait_for(
        lambda: (
            (c := _replica_condition(harness.cp, "tie")).get("reason") == "PeeringPriorityTie" and c
        ),
        30,
        0.5,
        message="ReplicaActive PeeringPriorityTie\n" + reps.logs(),
    )
    assert cond["status"] == "False"
    assert first in cond["message"] and second in cond["message"] and "100" in cond["message"]
    assert "activeReplica" not in _summarizer_status(harness.cp, "tie")
    events = json.loads(
        harness.cp.kubectl_run(
            "-n",
            "tie",
            "get",
            "events",
            "--field-selector",
            "reason=PeeringPriorityTie",
            "-o",
            "json",
        ).stdout
    )["items"]
    assert events and events[0]["type"] == "Warning"
    # A SessionSummarizer created while both are paused says so within seconds (no
    # handler runs to nudge the reporter; its resync is a minute).
    late = json.loads(summarizer("tie", harness.chroma.url, "tie-memory", "tie-late-sessions"))
    late["metadata"]["name"] = "late"
    harness.cp.kubectl_run("apply", "-f", "-", input=json.dumps(late))
    created = time.monotonic()

    def late_condition() -> dict[str, Any]:
        out = harness.cp.kubectl_run("-n", "tie", "get", "ssumr", "late", "-o", "json").stdout
        conds = (json.loads(out).get("status") or {}).get("conditions") or []
        return next((c for c in conds if c["type"] == "ReplicaActive"), {})

    wait_for(
        lambda: late_condition().get("reason") == "PeeringPriorityTie",
        30,  # the reporter's nudge, well under the resync's minute even on a loaded machine
        0.25,
        message="the new summarizer's ReplicaActive\n" + reps.logs(),
    )
    assert late_condition()["status"] == "False" and time.monotonic() - created < 30
    kube.request_summary("tie", "tie-1", trigger="sunset")
    time.sleep(8)  # ample time to misbehave
    assert reps.writes() == []
    # Nothing wrote: not even the summary collection was created.
    assert "tie-sessions" not in [c.name for c in store.client.list_collections()]
    assert "no active replica" in (reps.workdir / f"{first}.log").read_text()


def test_two_active_replicas_never_write_one_session_concurrently(
    harness: Harness, replicas_factory: Any
) -> None:
    # Peering entirely wrong: both replicas standalone, both handle every object.
    reps, store = replicas_factory("split", standalone=True)
    sessions = [f"split-{i:02d}" for i in range(30)]
    load(
        store,
        [
            interaction(s, k, 1_770_000_000_000 + k, f"Fact {s}-{k}.")
            for s in sessions
            for k in range(2)
        ],
    )
    reps.start()
    reps.start()
    time.sleep(2)
    for sid in sessions:
        kube.request_summary("split", sid, trigger="sunset")
    wait_for(
        lambda: all_covered(harness.cp, "split", dict.fromkeys(sessions, 2)),
        120,
        1.0,
        message="all Summarized\n" + reps.logs(),
    )
    writes = reps.writes()
    assert overlapping_writes(writes) == []
    assert {w["session"] for w in writes} == set(sessions)
    logs = reps.logs() + "".join((reps.workdir / f"{r}.log").read_text() for r in reps.procs)
    assert "is being summarized by" in logs  # the claim, not peering, kept them apart


def test_a_replica_without_the_claim_cannot_write(harness: Harness, replicas_factory: Any) -> None:
    # As a paused replica whose timer still ticks would: it runs, but the claim is elsewhere.
    reps, store = replicas_factory("held", standalone=True)
    load(store, [interaction("held-1", 0, 1_770_000_000_000, "Bump the version.")])
    kube.request_summary("held", "held-1", trigger="manual")  # created before any replica runs
    other = SessionClaimHandle(
        Claim(
            session_id="held-1",
            collection_id=store.location.row_scope,
            writer=Writer("some-other-replica", "uid-of-another-object", "elsewhere/held-1"),
            duration_s=4,
            collection="test",
        ),
        margin_s=1,
        renew_s=1,
    )
    other.acquire()
    reps.start()
    log = reps.workdir / "held-r0.log"
    # The replica's pass found the claim held (however long a loaded machine took to start it).
    wait_for(
        lambda: "on replica some-other-replica" in log.read_text(),
        60,
        0.2,
        message="the pass to find the claim held",
        log=log,
    )

    def summarized() -> dict[str, Any] | None:
        conditions = phases(harness.cp, "held")["held-1"]["status"].get("conditions") or []
        claimed = [c for c in conditions if c["reason"] == "SessionClaimed"]
        return next((c for c in claimed if c["type"] == "Summarized"), None)

    # The object says which object owns the session for now, and why it waits.
    cond = wait_for(summarized, 30, 0.2, message="Summarized SessionClaimed", log=log)
    assert "elsewhere/held-1" in cond["message"]
    assert stored_summary_ids(store, ["summary_held-1"]) == []
    assert reps.writes() == []
    other.release()
    wait_for(
        lambda: all_covered(harness.cp, "held", {"held-1": 1}),
        60,
        0.5,
        message="written once the claim is released\n" + reps.logs(),
    )
    assert [w["holder"] for w in reps.writes()] == ["held-r0"]


def _swept(
    store: MemoryStore,
    spec: SessionSummarizerSpec,
    ns: str,
    pause: Callable[[], object] = lambda: None,
) -> tuple[SweepPlan, Applied]:
    """A sweep from no watermark (the handler's _sweep without the status): (plan, applied)."""
    now = int(time.time() * 1000)
    plan = plan_from_store(store, spec, watermark_ms=None, now_ms=now, pause=pause).plan
    return plan, apply_plan(plan, namespace=ns, summarizer_name="default", pause=pause)


def test_overlapping_sweeps_create_each_object_once(harness: Harness) -> None:
    from concurrent.futures import ThreadPoolExecutor

    ns = "sweeps"
    harness.cp.kubectl_run("create", "namespace", ns, check=False)
    store = harness.store("sweeps-memory", "sweeps-sessions")
    now = int(time.time() * 1000)
    sessions = [f"sweeps-{i}" for i in range(12)]
    load(
        store,
        [interaction(s, 0, now - 3_600_000 - i, f"Task {s}.") for i, s in enumerate(sessions)],
    )
    spec = SessionSummarizerSpec.model_validate(
        {"sweep": {"idleSeconds": 60, "maxSessionsPerSweep": 50}}
    )

    with ThreadPoolExecutor(2) as pool:  # two replicas sweeping at the same moment
        results = list(pool.map(lambda _: _swept(store, spec, ns), range(2)))
    assert all(plan.found == len(sessions) for plan, _ in results)
    assert sum(a.created for _, a in results) == len(sessions)  # each object created once
    assert sum(a.patched for _, a in results) == 0  # and the losing sweep patched nothing
    objs = phases(harness.cp, ns)
    assert sorted(objs) == sorted(sessions)
    # A third sweep while nothing was summarized yet patches nothing: the work is in flight.
    # It gives way (the scheduler's give_way) before each of its three reads (the rows
    # appended, the rows since the watermark, the summaries) and each session's lookup.
    paused: list[int] = []
    _, again = _swept(store, spec, ns, lambda: paused.append(1))
    assert again.created == 0 and again.patched == 0
    assert len(paused) == 3 + len(sessions)
    assert all(o["spec"]["trigger"] == "sweep" for o in objs.values())


def test_sessions_in_flight_do_not_starve_an_older_backlog(harness: Harness) -> None:
    ns = "starve"
    harness.cp.kubectl_run("create", "namespace", ns, check=False)
    store = harness.store("starve-memory", "starve-sessions")
    now = int(time.time() * 1000)
    sessions = [f"starve-{i}" for i in range(6)]  # starve-0 is the newest
    load(
        store,
        [
            interaction(s, 0, now - 3_600_000 - 1000 * i, f"Task {s}.")
            for i, s in enumerate(sessions)
        ],
    )
    spec = SessionSummarizerSpec.model_validate(
        {"sweep": {"idleSeconds": 60, "maxSessionsPerSweep": 2}}
    )
    acted = []
    for _ in range(3):  # no operator runs here: whatever a sweep creates stays in flight
        _, applied = _swept(store, spec, ns)
        acted.append((applied.created, applied.in_flight, applied.left))
    assert acted == [(2, 0, 4), (2, 2, 2), (2, 4, 0)]
    assert sorted(phases(harness.cp, ns)) == sorted(sessions)


def _hand_named(namespace: str, name: str, session_id: str) -> str:
    return json.dumps(
        {
            "apiVersion": "memorycore.io/v1alpha1",
            "kind": "SessionSummary",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"sessionId": session_id, "trigger": "sunset"},
        }
    )


def test_objects_in_several_namespaces_naming_one_session_never_write_it_at_once(
    harness: Harness, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two objects per namespace (the derived name and a hand-named one) in three
    namespaces whose summarizers reach one Chroma by two different addresses, one of them
    reading another memory collection (a copy of the same rows) into the same summary
    collection, served by two replicas that both think they are active: one writer per
    summary row at any moment (the claim is the row's, not the memory collection's)."""
    from concurrent.futures import ThreadPoolExecutor

    from controller.api import GROUP, SUMMARY_PLURAL, VERSION
    from controller.status.conditions import now_rfc3339

    cp, sid = harness.cp, "multi-1"
    namespaces = ["multi-a", "multi-b", "multi-c"]
    port = harness.chroma.url.rsplit(":", 1)[1]
    addresses = [f"http://127.0.0.1:{port}", f"http://localhost:{port}"]
    memories = ["multi-memory", "multi-memory", "multi-memory-copy"]
    for i, ns in enumerate(namespaces):
        cp.kubectl_run("create", "namespace", ns, check=False)
        cp.kubectl_run(
            "apply",
            "-f",
            "-",
            input=summarizer(ns, addresses[i % 2], memories[i], "multi-sessions"),
        )
    store = harness.store("multi-memory", "multi-sessions")
    stores = [store, harness.store("multi-memory-copy", "multi-sessions")]
    base = 1_770_000_000_000
    for each in stores:
        load(
            each,
            [interaction(sid, k, base + k, f"Fact {sid}-{k}: implement step {k}.") for k in (0, 1)],
        )
    journal = tmp_path / "writes.jsonl"
    reps = Replicas(
        cp,
        "multi",
        tmp_path,
        dict(
            cp.env(),
            SSO_CLAIM_TTL_SECONDS="8",
            SSO_CLAIM_MARGIN_SECONDS="2",
            SSO_RETRY_BASE_SECONDS="0.5",
            SSO_RETRY_MAX_SECONDS="2",
        ),
        standalone=True,
    )
    args = ["--standalone"]
    for ns in namespaces:
        args += ["--namespace", ns]
    for r in ("multi-r0", "multi-r1"):
        env = dict(reps.env, SSO_REPLICA_ID=r, SSO_WRITE_JOURNAL=str(journal))
        reps.procs[r] = start_operator(tmp_path / f"{r}.log", env, *args)
    objects = [(ns, summary_object_name(sid)) for ns in namespaces] + [
        (ns, "by-hand") for ns in namespaces
    ]
    try:
        for ns in namespaces:
            kube.request_summary(ns, sid, trigger="sunset")
            cp.kubectl_run("apply", "-f", "-", input=_hand_named(ns, "by-hand", sid))
        expected = 2

        def all_done() -> bool:
            # The stored row covers the round's memories. (Not every object's status: with
            # two kopf instances serving one object, peering deliberately wrong, kopf's own
            # progress annotations can conflict and leave one object's status behind; the
            # write journal below is what this test is about.)
            got = store.client.get_or_create_collection("multi-sessions").get(
                ids=[f"summary_{sid}"], include=["metadatas"]
            )
            metas = got["metadatas"] or []
            return bool(metas) and metas[0].get("memoryCount") == expected

        wait_for(all_done, 90, 0.5, message="first round Summarized\n" + reps.logs())
        rounds = 5
        for r in range(rounds):
            k0 = 2 + 2 * r
            for each in stores:
                load(
                    each,
                    [
                        interaction(
                            sid, k, base + 1000 * (r + 1) + k, f"Fact {sid}-{k}: follow-up {k}."
                        )
                        for k in (k0, k0 + 1)
                    ],
                )
            expected = k0 + 2
            stamp = now_rfc3339(precise=True)

            def sunset(target: tuple[str, str], stamp: str = stamp) -> None:
                kube.custom().patch_namespaced_custom_object(
                    GROUP,
                    VERSION,
                    target[0],
                    SUMMARY_PLURAL,
                    target[1],
                    {"spec": {"requestedAt": stamp, "trigger": "sunset"}},
                )

            with ThreadPoolExecutor(len(objects)) as pool:  # all six at the same moment
                list(pool.map(sunset, objects))
            wait_for(all_done, 90, 0.5, message=f"round {r} Summarized", log=reps.logs)
    finally:
        reps.stop_all()

    writes = reps.writes()
    overlaps = overlapping_writes(writes)
    assert overlaps == [], overlaps[:3]
    assert writes, "nothing was journaled"
    doc = store.summaries().get(ids=[f"summary_{sid}"], include=["documents"])["documents"][0]
    for k in range(expected):  # every round's facts, none lost to a concurrent writer
        assert f"Fact {sid}-{k}" in doc, k
    claimed = [
        e
        for ns in namespaces
        for e in json.loads(cp.kubectl_run("-n", ns, "get", "events", "-o", "json").stdout)["items"]
        if e["reason"] == "SessionClaimed"
    ]
    assert claimed, "no object was ever told another one owned the session"
    assert all(" is writing session 'multi-1'" in e["message"] for e in claimed)
    writers = {(w["holder"], w["object"]) for w in writes}
    with capsys.disabled():
        print(
            f"\nmulti-object: objects={len(objects)} rounds={rounds + 1} writes={len(writes)} "
            f"writers={len(writers)} overlaps={len(overlaps)} waits={len(claimed)}"
        )
