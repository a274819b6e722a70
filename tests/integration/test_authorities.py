"""Two clusters over one store (core/ledger.py, "authority"): real operator processes on two
real control planes (two etcd + kube-apiserver pairs), one real Chroma server.

Each cluster's operator renews its cluster's record in the store's ledger. A row written by
a cluster whose operator still renews it is refused, named on the object (both clusters),
never alternated with; a row of a cluster that stopped (its record unchanged for its lease
on the reader's own clock), or that an admin retired (`summaryctl handover`), is history
and taken over; and an etcd restored from a backup takes its own rows over at once.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from controller.core.naming import summary_object_name
from controller.store.memory_store import MemoryStore
from devenv.controlplane import REPO_ROOT, ControlPlane, running_control_plane, tools_bin_dir
from devenv.operator import start_operator
from devenv.processes import kill, stop, tail, wait_for
from tests.integration.harness import Harness, conditions_of, interaction, load, summaryctl_on
from tests.support.write_journal import read_writes

BASE = 1_770_000_000_000


@dataclass
class Cluster:
    """One control plane with its own operator process serving one namespace."""

    cp: ControlPlane
    name: str
    workdir: Path
    settings: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def namespace(self) -> str:
        return f"{self.name}-ns"

    @property
    def log(self) -> Path:
        return self.workdir / f"{self.name}-operator.log"

    @property
    def uid(self) -> str:
        got = self.cp.kubectl_run("get", "namespace", "kube-system", "-o", "json").stdout
        return str(json.loads(got)["metadata"]["uid"])

    def kubectl(self, *args: str, input: str | None = None) -> str:
        return self.cp.kubectl_run("-n", self.namespace, *args, input=input).stdout

    def prepare(self, summarizer: dict[str, Any]) -> None:
        self.cp.kubectl_run("apply", "-f", str(REPO_ROOT / "crds"))
        self.cp.kubectl_run("wait", "--for=condition=Established", "crd", "--all")
        self.cp.kubectl_run("create", "namespace", self.namespace, check=False)
        manifest = {**summarizer, "metadata": {"name": "shared", "namespace": self.namespace}}
        self.kubectl("apply", "-f", "-", input=json.dumps(manifest))

    def start(self, journal: Path) -> None:
        self.launch(journal)
        self.wait_served()

    def launch(self, journal: Path) -> None:
        """Starts the operator process. Not from a pool's thread: a process spawned by
        devenv.processes.spawn dies with the thread that started it (PR_SET_PDEATHSIG)."""
        env = dict(
            self.cp.env(),
            SSO_REPLICA_ID=f"{self.name}-operator",
            SSO_METRICS_PORT="0",
            SSO_SWEEP_TICK_SECONDS="1",
            SSO_RETRY_BASE_SECONDS="0.5",
            SSO_RETRY_MAX_SECONDS="2",
            SSO_WRITE_JOURNAL=str(journal),
            **self.settings,
        )
        self.proc = start_operator(self.log, env, "--standalone", "--namespace", self.namespace)

    def wait_served(self) -> None:
        def reported() -> bool:  # served: summaryctl's requests check that first
            got = json.loads(self.kubectl("get", "sessionsummarizer", "shared", "-o", "json"))
            conds = (got.get("status") or {}).get("conditions") or []
            return any(c.get("type") == "ReplicaActive" for c in conds)

        wait_for(reported, 120, 0.5, message=f"{self.name}'s operator report", log=self.log)

    def stop(self, *, crash: bool = False) -> None:
        if self.proc is not None:
            kill(self.proc) if crash else stop(self.proc, grace=30)
            self.proc = None

    def summaryctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return summaryctl_on(self.cp, *args)

    def sunset(self, sid: str) -> None:
        res = self.summaryctl("sunset", sid, "-n", self.namespace, "--summarizer", "shared")
        assert res.returncode == 0, res.stdout + res.stderr

    def obj(self, sid: str) -> dict[str, Any]:
        return dict(json.loads(self.kubectl("get", "ssum", summary_object_name(sid), "-o", "json")))

    def summarized(self, sid: str) -> dict[str, Any]:
        return conditions_of(self.obj(sid)).get("Summarized") or {}

    def wait_reason(self, sid: str, *reasons: str, timeout: float = 90) -> dict[str, Any]:
        """Waits until the object answers its current request with one of these reasons."""

        def answered() -> dict[str, Any] | None:
            obj = self.obj(sid)
            cond = conditions_of(obj).get("Summarized") or {}
            current = cond.get("observedGeneration") == obj["metadata"]["generation"]
            return cond if current and cond.get("reason") in reasons else None

        return wait_for(answered, timeout, 0.2, message=lambda: f"{self.name} {sid} -> {reasons}\n"
                        + tail(self.log, 30))  # fmt: skip

    def done(self, sid: str, timeout: float = 90) -> None:
        """Written, or found up to date (a second handler of the same request after it)."""
        self.wait_reason(sid, "Summarized", "UpToDate", timeout=timeout)

    def event_messages(self, reason: str) -> list[str]:
        items = json.loads(self.kubectl("get", "events", "-o", "json"))["items"]
        return [e["message"] for e in items if e["reason"] == reason]


def summarizer(url: str, memory: str, summary: str) -> dict[str, Any]:
    return {
        "apiVersion": "memorycore.io/v1alpha1",
        "kind": "SessionSummarizer",
        "spec": {
            "store": {"url": url, "memoryCollection": memory, "summaryCollection": summary},
            "sweep": {"enabled": False},
            "reconcile": {"enabled": False},
        },
    }


@pytest.fixture
def two_clusters(
    harness: Harness, tmp_path: Path
) -> Iterator[tuple[Cluster, Callable[[], Cluster]]]:
    """Cluster a: the harness's control plane (its operator's claims last 9 s, so its
    record lapses soon after it stops); cluster b: a control plane of its own (the default
    60 s), started when the test calls for it (so cluster a's operator can start meanwhile).
    Both serve one SessionSummarizer, `shared`, over the same collections."""
    a = Cluster(
        harness.cp,
        "cluster-a",
        tmp_path,
        {"SSO_CLAIM_TTL_SECONDS": "9", "SSO_CLAIM_MARGIN_SECONDS": "2"},
    )
    clusters = [a]
    with contextlib.ExitStack() as planes:

        def cluster_b() -> Cluster:
            other = planes.enter_context(running_control_plane(tmp_path / "cluster-b"))
            clusters.append(Cluster(other, "cluster-b", tmp_path))
            return clusters[-1]

        try:
            yield a, cluster_b
        finally:
            for c in clusters:
                c.stop()
            for c in clusters:
                print(f"{c.name} log tail:\n{tail(c.log, 60)}")


def written_by(journal: Path, sid: str, since: int = 0) -> list[str]:
    """The replicas that wrote the session's row, in order, from journal line `since`."""
    return [
        w.holder
        for w in read_writes(journal)
        if w.session == sid and w.outcome == "written" and w.begun >= since
    ]


def journal_length(journal: Path) -> int:
    return len(journal.read_text().splitlines()) if journal.exists() else 0


def test_two_live_clusters_over_one_store_never_alternate_and_a_retired_ones_rows_are_taken(
    harness: Harness, two_clusters: tuple[Cluster, Callable[[], Cluster]], tmp_path: Path
) -> None:
    a, cluster_b = two_clusters
    tag = uuid.uuid4().hex[:6]
    memory, summary = f"auth-memory-{tag}", f"auth-sessions-{tag}"
    store = harness.store(memory, summary)
    s1, s2 = f"auth-{tag}-1", f"auth-{tag}-2"

    def add(sid: str, k: int) -> None:  # a memory a pass must write
        load(store, [interaction(sid, k, BASE + k, f"{sid}: fact {k}")])

    for k in range(2):
        add(s1, k)
        add(s2, k)
    journal = tmp_path / "writes.jsonl"
    # The two operators start side by side, a's while b's control plane starts.
    a.prepare(summarizer(harness.chroma.url, memory, summary))
    a.launch(journal)
    b = cluster_b()
    b.prepare(summarizer(harness.chroma.url, memory, summary))
    b.launch(journal)
    for cluster in (a, b):
        cluster.wait_served()
    uid_a, uid_b = a.uid, b.uid
    assert uid_a != uid_b

    # Both live: each session is written by the cluster that wrote it first; the other
    # writes nothing over it and names both clusters (a pass with nothing to write is just
    # up to date).
    a.sunset(s1)
    a.done(s1)
    b.sunset(s2)
    b.done(s2)
    add(s1, 2)
    add(s2, 2)
    b.sunset(s1)
    a.sunset(s2)
    for cluster, sid in ((b, s1), (a, s2)):
        cond = cluster.wait_reason(sid, "AuthorityConflict")
        assert uid_a in cond["message"] and uid_b in cond["message"], cond
        assert "summaryctl handover" in cond["message"]
        events = cluster.event_messages("AuthorityConflict")
        assert any(uid_a in m and uid_b in m for m in events), events
    # Longer than a's lease and b's renew period, new memories and requests on both sides:
    # no row changes hands.
    for k in range(3, 5):
        add(s1, k)
        add(s2, k)
        for cluster in (b, a):
            for sid in (s1, s2):
                cluster.sunset(sid)
        time.sleep(6)
    a.done(s1)
    b.done(s2)
    assert set(written_by(journal, s1)) == {"cluster-a-operator"}
    assert set(written_by(journal, s2)) == {"cluster-b-operator"}
    assert fence_authority(store, s1) == uid_a and fence_authority(store, s2) == uid_b

    # Cluster a's operator dies: once its record has not changed for its lease (9 s) on b's
    # own clock, b takes a's rows over, and says so.
    a.stop(crash=True)
    add(s1, 5)
    b.sunset(s1)
    b.done(s1, timeout=120)
    assert fence_authority(store, s1) == uid_b
    assert any(uid_a in m for m in b.event_messages("HistoryFromOtherAuthority"))

    # a comes back (a retired cluster started again): b is live, so a takes nothing back.
    since = journal_length(journal)
    a.start(journal)
    add(s1, 6)
    a.sunset(s1)
    cond = a.wait_reason(s1, "AuthorityConflict")
    assert uid_b in cond["message"]
    time.sleep(6)
    assert written_by(journal, s1, since) == []

    # The admin hands the store to a: b's operator stopped, `summaryctl handover` run in a.
    # a takes b's rows over at once, not after b's 60 s lease.
    b.stop()
    res = a.summaryctl("handover", "--summarizer", "shared", "-n", a.namespace)
    assert res.returncode == 0, res.stdout + res.stderr
    handed = time.monotonic()
    assert f"removed cluster {uid_b}" in res.stdout
    assert store.read_authority(uid_b) is None and store.read_authority(uid_a) is not None
    add(s2, 5)
    a.sunset(s2)
    a.done(s2, timeout=60)
    a.done(s1, timeout=60)
    assert time.monotonic() - handed < 45, "taken over only once b's lease lapsed"
    assert sum(uid_b in m for m in a.event_messages("HistoryFromOtherAuthority")) >= 2
    for sid, facts in ((s1, 7), (s2, 6)):
        assert fence_authority(store, sid) == uid_a
        kept = json.dumps(store.stored_summary(sid))
        assert all(f"{sid}: fact {k}" in kept for k in range(facts)), sid


def fence_authority(store: MemoryStore, sid: str) -> str | None:
    fence = store.read_row_state(sid).fence
    return fence.authority if fence is not None else None


def test_an_etcd_restored_from_a_backup_takes_its_own_rows_over_at_once(
    harness: Harness, tmp_path: Path
) -> None:
    """The cluster's etcd goes back to a backup: its claims' numbers go back below the
    fence its later writes recorded. Same cluster (the same kube-system UID), so its own
    record is live: the row is its own history, taken over at the first write, and said so."""
    tag = uuid.uuid4().hex[:6]
    memory, summary, sid = f"restore-memory-{tag}", f"restore-sessions-{tag}", f"restore-{tag}"
    store: MemoryStore = harness.store(memory, summary)
    load(store, [interaction(sid, 0, BASE, f"{sid}: fact 0")])
    journal = tmp_path / "writes.jsonl"
    backup = tmp_path / "etcd-backup"
    with running_control_plane(tmp_path / "before") as cp:
        cluster = Cluster(cp, "restored", tmp_path)
        cluster.prepare(summarizer(harness.chroma.url, memory, summary))
        uid = cluster.uid
        cp.stop()  # a cold backup: etcd's data directory, stopped
        shutil.copytree(cp.workdir / "etcd-data", backup)
        cp.start()
        cluster.start(journal)
        try:
            # Revisions move on past the backup's (40 creates, one kubectl), then the row
            # records a fence beyond it.
            bumps = [
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"bump-{n}"}}
                for n in range(40)
            ]
            cluster.kubectl(
                "create",
                "-f",
                "-",
                input=json.dumps({"apiVersion": "v1", "kind": "List", "items": bumps}),
            )
            cluster.sunset(sid)
            cluster.done(sid)
        finally:
            cluster.stop()
    ahead = store.read_row_state(sid).fence
    assert ahead is not None and ahead.authority == uid

    restored_dir = tmp_path / "after"
    restored_dir.mkdir()
    shutil.copytree(backup, restored_dir / "etcd-data")
    restored = ControlPlane(workdir=restored_dir, bin_dir=tools_bin_dir())
    try:
        restored.start()
        cluster = Cluster(restored, "restored", tmp_path)
        assert cluster.uid == uid
        load(store, [interaction(sid, 1, BASE + 1, f"{sid}: fact 1")])
        cluster.start(journal)
        cluster.sunset(sid)
        started = time.monotonic()
        cluster.done(sid)
        assert time.monotonic() - started < 45
        said = cluster.event_messages("HistoryFromOtherAuthority")
        assert any("etcd restored" in m for m in said), said
    finally:
        cluster.stop()
        restored.stop()
    after = store.read_row_state(sid).fence
    assert after is not None and after.authority == uid and after.number < ahead.number
    kept = store.stored_summary(sid)
    assert kept is not None and f"{sid}: fact 0" in json.dumps(kept)
    assert f"{sid}: fact 1" in json.dumps(kept)
