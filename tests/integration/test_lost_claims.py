"""A claim the API server refuses, on the real apiserver with a ValidatingAdmissionPolicy on
sessionclaims: a refused create and a refused renewal each show on the SessionSummary as
`Summarized=False ClaimLost` naming the policy's answer, with one Warning Event counted on
each retry, and count toward the failure gate like any other failed pass."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from controller.api import CLAIM_PLURAL, GROUP, VERSION
from controller.core.naming import summary_object_name
from controller.kube import client as kube
from devenv.processes import wait_for
from tests.integration.harness import (
    Harness,
    conditions_of,
    load,
    own_operator,
    stored_summary_ids,
)
from tests.support.fact_model import echo_facts, fact_memory
from tests.support.openai_server import OpenAIServer, running_openai_server

NS = "lost-claims"
POLICY = "refuse-test-claims"
REFUSED = "this test's policy refuses the claims of sessions refused-*"
BASE_MS = 1_770_000_000_000
# Claims of refused-create-* may not be made, those of refused-renew-* not renewed.
RULE = (
    "!(request.operation == 'CREATE' && object.spec.sessionId.startsWith('refused-create')) &&"
    " !(request.operation == 'UPDATE' && object.spec.sessionId.startsWith('refused-renew'))"
)


def policy_docs() -> list[dict[str, Any]]:
    rules = {"apiGroups": [GROUP], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"],
             "resources": [CLAIM_PLURAL]}  # fmt: skip
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": POLICY},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [rules]},
                "validations": [{"expression": RULE, "message": REFUSED, "reason": "Forbidden"}],
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": POLICY},
            "spec": {"policyName": POLICY, "validationActions": ["Deny"]},
        },
    ]


@pytest.fixture
def refusing_policy(harness: Harness) -> Iterator[None]:
    """The policy applied (and enforced) for the test, deleted after it."""
    policy = policy_docs()
    harness.cp.kubectl_run("apply", "-f", "-", input=yaml.safe_dump_all(policy))

    def enforced() -> bool:  # the policy reaches the API server's admission a moment later
        probe = {"sessionId": "refused-create-probe", "collectionId": "x", "holder": "x",
                 "ownerUid": "x", "leaseDurationSeconds": 1}  # fmt: skip
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "SessionClaim",
                "metadata": {"name": "refused-create-probe"}, "spec": probe}  # fmt: skip
        try:
            kube.custom().create_cluster_custom_object(GROUP, VERSION, CLAIM_PLURAL, body)
        except ApiException as exc:
            return exc.status == 403 and REFUSED in (exc.body or "")
        kube.custom().delete_cluster_custom_object(
            GROUP, VERSION, CLAIM_PLURAL, body["metadata"]["name"]
        )
        return False

    try:
        wait_for(enforced, 30, 0.3, message="the test's policy enforced", log=harness.log)
        yield
    finally:
        for doc in policy:
            harness.cp.kubectl_run("delete", doc["kind"], POLICY, check=False)


@pytest.fixture
def slow_model() -> Iterator[OpenAIServer]:
    # Each pass outlasts two renew periods: its renewal is tried, and refused, before it writes.
    with running_openai_server(responder=echo_facts, latency_seconds=3) as server:
        yield server


def summarizer(harness: Harness, model: OpenAIServer) -> str:
    return json.dumps({
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "SessionSummarizer",
        "metadata": {"name": "default", "namespace": NS},
        "spec": {
            "store": {"url": harness.chroma.url, "memoryCollection": f"{NS}-memory",
                      "summaryCollection": f"{NS}-sessions"},
            "model": {"backend": "openai", "baseUrl": model.base_url, "model": "test-chat",
                      "timeoutSeconds": 30},
            "sweep": {"enabled": False}, "reconcile": {"enabled": False},
        },
    })  # fmt: skip


def test_a_refused_claim_shows_on_the_object_and_counts_toward_the_failure_gate(
    harness: Harness, refusing_policy: None, slow_model: OpenAIServer, tmp_path: Path
) -> None:
    sessions = {"refused-create-1": "could not take", "refused-renew-1": "was not renewed"}
    store = harness.store(f"{NS}-memory", f"{NS}-sessions")
    load(store, [fact_memory(sid, 0, BASE_MS) for sid in sessions])
    log = tmp_path / "operator.log"
    with own_operator(
        harness.cp, NS, log, claim_ttl_seconds="3", claim_margin_seconds="1",
        claim_renew_seconds="1", retry_base_seconds="0.5", retry_max_seconds="1",
        failure_gate="3",
    ):  # fmt: skip
        harness.cp.kubectl_run("apply", "-f", "-", input=summarizer(harness, slow_model))
        for sid in sessions:
            kube.request_summary(NS, sid, trigger="sunset")

        def failed(sid: str) -> dict[str, Any] | None:
            obj = kube.get_summary(NS, summary_object_name(sid)) or {}
            return obj if (obj.get("status") or {}).get("phase") == "Failed" else None

        for sid, said in sessions.items():
            obj = wait_for(lambda sid=sid: failed(sid), 120, 0.5, message=f"{sid} Failed", log=log)
            cond = conditions_of(obj)["Summarized"]
            assert (cond["status"], cond["reason"]) == ("False", "ClaimLost"), cond
            assert said in cond["message"] and REFUSED in cond["message"], cond
            assert obj["status"]["consecutiveFailures"] >= 3, obj["status"]

            def counted(sid: str = sid) -> list[dict[str, Any]] | None:
                name = summary_object_name(sid)
                events = (
                    kube.core()
                    .list_namespaced_event(NS, field_selector=f"involvedObject.name={name}")
                    .items
                )
                lost = [e for e in events if e.reason == "ClaimLost"]
                return lost if lost and (lost[0].count or 0) >= 2 else None

            events = wait_for(counted, 30, 0.5, message=f"{sid}'s Event counted", log=log)
            assert len(events) == 1 and events[0].type == "Warning", events
            assert REFUSED in events[0].message, events[0].message
    assert stored_summary_ids(store, list(sessions)) == []  # nothing written
