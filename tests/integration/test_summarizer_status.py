"""A SessionSummarizer's status on the real apiserver: every condition has one owner and
no writer's status patch drops another's (health probes, the sweep, the peering reporter
all write the same object)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.kube import client as kube
from devenv.controlplane import REPO_ROOT, ControlPlane, running_control_plane
from devenv.processes import wait_for
from tests.integration.harness import NS, Harness, summarizer_yaml

OWNED = {
    "SpecValid",
    "SecretsAllowed",
    "StoreReachable",
    "ModelReady",
    "EmbeddingReady",
    "Swept",
    "ReplicaActive",
}
# Written once a reconciliation walk of the store has ended (at start, then hourly).
LATER = {"MemoryRowsUsable"}


def status(harness: Harness, name: str) -> dict[str, Any]:
    return dict(json.loads(harness.kubectl("get", "ssumr", name, "-o", "json")).get("status") or {})


def harness_generation(harness: Harness, name: str) -> int:
    return int(
        json.loads(harness.kubectl("get", "ssumr", name, "-o", "json"))["metadata"]["generation"]
    )


def conditions(harness: Harness, name: str) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status(harness, name).get("conditions") or []}


def test_several_summarizers_each_keep_every_condition_across_sweeps(harness: Harness) -> None:
    # An existing (empty) memory collection: sweeps run and find nothing to do.
    harness.store().client.get_or_create_collection("status-memory")
    names = [f"status-{i}" for i in range(4)]
    for name in names:
        harness.kubectl(
            "apply",
            "-f",
            "-",
            input=summarizer_yaml(
                name,
                harness.chroma.url,
                memory="status-memory",
                summary="status-sessions",
                sweep="enabled: true, intervalSeconds: 5",
            ),
        )
    first: dict[str, str] = {}

    def swept_twice_with_all_conditions() -> bool:
        for name in names:
            st = status(harness, name)
            at = st.get("lastSweepAt")
            if not at:
                return False
            first.setdefault(name, at)
            if at == first[name] or set(conditions(harness, name)) - LATER != OWNED | {"Ready"}:
                return False
        return True

    wait_for(
        swept_twice_with_all_conditions,
        90,
        0.5,
        message="two sweeps per summarizer with all seven conditions",
        log=harness.log,
    )
    for name in names:
        conds = conditions(harness, name)
        assert {t: c["status"] for t, c in conds.items() if t not in LATER} == dict.fromkeys(
            OWNED | {"Ready"}, "True"
        ), name
        assert all(conds[t]["status"] == "True" for t in LATER & set(conds)), conds
        assert conds["Swept"]["reason"] == "SweepOK"
        assert conds["Ready"]["reason"] == "Healthy"
        generation = harness_generation(harness, name)
        assert all(c["observedGeneration"] == generation for c in conds.values()), conds


def test_a_memory_collection_typo_fails_the_sweep_with_a_condition_naming_it(
    harness: Harness,
) -> None:
    harness.kubectl(
        "apply",
        "-f",
        "-",
        input=summarizer_yaml(
            "status-typo",
            harness.chroma.url,
            memory="neo-agnet-memory",
            summary="status-typo-sessions",
            sweep="enabled: true, intervalSeconds: 5",
        ),
    )

    def swept() -> dict[str, Any] | None:
        return conditions(harness, "status-typo").get("Swept")

    cond = wait_for(swept, 60, 0.5, message="Swept on status-typo", log=harness.log)
    assert (cond["status"], cond["reason"]) == ("False", "MemoryCollectionNotFound")
    assert "neo-agnet-memory" in cond["message"]
    assert conditions(harness, "status-typo")["StoreReachable"]["status"] == "True"
    names = [c.name for c in harness.store().client.list_collections()]
    assert "neo-agnet-memory" not in names  # the sweep read it; nothing created it
    events = json.loads(
        harness.kubectl(
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=status-typo,reason=MemoryCollectionNotFound",
            "-o",
            "json",
        )
    )["items"]
    assert events and events[0]["type"] == "Warning"
    assert events[0]["metadata"]["namespace"] == NS


@pytest.fixture
def without_status_subresource(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ControlPlane]:
    """A control plane of its own (a CRD is cluster-wide: the shared one's operator needs
    the status subresource) whose SessionSummarizer CRD has none, as an edited or very old
    CRD would; the in-process API client aims at it until the test ends."""
    crd = yaml.safe_load((REPO_ROOT / "crds/sessionsummarizers.memorycore.io.yaml").read_text())
    for version in crd["spec"]["versions"]:
        version.pop("subresources")
    with running_control_plane(tmp_path / "cp") as cp:
        cp.kubectl_run("apply", "-f", "-", input=json.dumps(crd))
        cp.kubectl_run("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        cp.kubectl_run("create", "namespace", NS)
        monkeypatch.setenv("KUBECONFIG", str(cp.kubeconfig))
        kube.api_client.cache_clear()
        try:
            yield cp
        finally:
            kube.api_client.cache_clear()  # the monkeypatch puts the shared one back


def test_a_crd_without_the_status_subresource_is_named_when_a_status_write_fails(
    without_status_subresource: ControlPlane,
) -> None:
    cp = without_status_subresource
    cp.kubectl_run("apply", "-f", "-", input=summarizer_yaml("no-status", "http://chroma:8000"))

    def said(st: Any) -> Any:
        return st.model_copy(update={"message": "measured"})

    with pytest.raises(RuntimeError) as caught:
        kube.update_summarizer_status(NS, "no-status", said)
    message = str(caught.value)
    assert "no status subresource" in message and "kept changing" not in message, message
    assert "crds/sessionsummarizers.memorycore.io.yaml again" in message, message
    # A summarizer that is gone is still None, not an error.
    assert kube.update_summarizer_status(NS, "never-made", said) is None
