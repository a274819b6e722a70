"""A SessionSummarizer's status on the real apiserver: every condition has one owner and
no writer's status patch drops another's (health probes, the sweep, the peering reporter
all write the same object)."""

from __future__ import annotations

import json
from typing import Any

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
