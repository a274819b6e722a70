"""How an agent gets its session summarized (docs/agents.md), on the real control plane and
Chroma: the chart's sunset and view roles bound to a ServiceAccount (what they allow, and
real 403s for the rest), and the sunset marker, a memory written by a process that holds no
Kubernetes credentials at all."""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from controller.api import GROUP, SUMMARY_PLURAL, VERSION
from controller.core.memories import SUNSET_MARKER_TYPE
from controller.core.naming import summary_object_name
from controller.core.retention import kept_request
from controller.kube import client as kube
from controller.store.memory_store import MemoryStore
from devenv.controlplane import REPO_ROOT
from devenv.processes import tail, wait_for
from tests.integration.harness import CHART_OFFLINE, NS, Harness, interaction, load, summarizer_yaml
from tests.support.cli import summaryctl_here

CHART = REPO_ROOT / "charts" / "session-summary-operator"
RELEASE = "agents-it"


def now_ms() -> int:
    return int(time.time() * 1000)


def uid() -> str:
    return uuid.uuid4().hex[:8]


# --- the roles ------------------------------------------------------------------------------


PREFIX = f"{RELEASE}-session-summary-operator-{NS}-"


def render(h: Harness, *sets: str) -> list[dict[str, Any]]:
    args = [str(h.cp.helm), "template", RELEASE, str(CHART), "-n", NS, *CHART_OFFLINE]
    for s in sets:
        args += ["--set", s]
    out = subprocess.run(args, env=h.cp.env(), capture_output=True, text=True, check=True)
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def render_roles(h: Harness, *sets: str) -> dict[str, dict[str, Any]]:
    """The chart's agent roles as `helm template` renders them, by role (sunset, forget, view)."""
    return {
        d["metadata"]["name"].removeprefix(PREFIX): d
        for d in render(h, *sets)
        if d["kind"] == "ClusterRole"
        and d["metadata"]["name"].endswith(("-sunset", "-forget", "-view"))
    }


def documented_rolebinding() -> dict[str, Any]:
    """The RoleBinding docs/agents.md tells users to apply."""
    text = (REPO_ROOT / "docs" / "agents.md").read_text()
    for block in re.findall(r"^```yaml\n(.*?)^```", text, re.S | re.M):
        for doc in yaml.safe_load_all(block):
            if doc and doc.get("kind") == "RoleBinding":
                return dict(doc)
    raise AssertionError("docs/agents.md has no RoleBinding example")


def bind(h: Harness, role: str, service_account: str) -> None:
    """A ServiceAccount bound to a ClusterRole in NS with the documented RoleBinding."""
    h.kubectl("create", "serviceaccount", service_account, check=False)
    binding = documented_rolebinding()
    binding["metadata"] = {"name": service_account, "namespace": NS}
    binding["roleRef"]["name"] = role
    binding["subjects"] = [{"kind": "ServiceAccount", "name": service_account, "namespace": NS}]
    h.kubectl("apply", "-f", "-", input=json.dumps(binding))


@pytest.fixture(scope="module")
def roles(harness: Harness) -> Iterator[dict[str, str]]:
    """The chart's sunset and view ClusterRoles, applied; their names by role."""
    rendered = render_roles(harness)
    assert sorted(rendered) == ["forget", "sunset", "view"]
    harness.cp.kubectl_run("apply", "-f", "-", input=yaml.safe_dump_all(rendered.values()))
    yield {role: doc["metadata"]["name"] for role, doc in rendered.items()}
    for doc in rendered.values():
        harness.cp.kubectl_run("delete", "clusterrole", doc["metadata"]["name"], check=False)


def as_identity(h: Harness, kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return h.cp.kubectl_run(*args, check=False, kubeconfig=kubeconfig)


def summaryctl_as(h: Harness, kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "controller", *args],
        env=dict(h.cp.env(), KUBECONFIG=str(kubeconfig)),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


SUNSET_ALLOWED = [
    ("create", "sessionsummaries.memorycore.io"),
    ("patch", "sessionsummaries.memorycore.io"),
    ("get", "sessionsummaries.memorycore.io"),
]
SUNSET_REFUSED = [
    ("list", "sessionsummaries.memorycore.io"),
    ("watch", "sessionsummaries.memorycore.io"),
    ("update", "sessionsummaries.memorycore.io"),
    ("delete", "sessionsummaries.memorycore.io"),
    ("patch", "sessionsummaries.memorycore.io", "--subresource=status"),
    ("get", "sessionsummarizers.memorycore.io"),
    ("patch", "sessionsummarizers.memorycore.io"),
    ("create", "sessionsummarizers.memorycore.io"),
    ("create", "sessionclaims.memorycore.io"),
    ("get", "secrets"),
    ("list", "pods"),
    ("create", "events"),
    ("*", "*"),
]


def test_a_service_account_bound_to_the_sunset_role_sunsets_a_session_and_nothing_more(
    harness: Harness, roles: dict[str, str], tmp_path: Path
) -> None:
    h, sa = harness, f"agent-sunset-{uid()}"
    bind(h, roles["sunset"], sa)
    kubeconfig = h.cp.service_account_kubeconfig(NS, sa, tmp_path / "agent.kubeconfig")
    sid = f"agent-rbac-{uid()}"
    now = now_ms()
    load(h.store(), [interaction(sid, i, now - 60_000 + i, f"Role step {i}") for i in range(3)])

    # The agent's sunset step, with nothing but the role: a create, then a patch.
    first = summaryctl_as(h, kubeconfig, "sunset", sid, "-n", NS, "--wait", "60")
    assert first.returncode == 0, first.stdout + first.stderr + tail(h.log)
    assert "created" in first.stdout and "Summarized:" in first.stdout
    again = summaryctl_as(h, kubeconfig, "sunset", sid, "-n", NS, "--wait", "60")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "patched" in again.stdout
    obj = h.wait_phase(sid, "Summarized")
    assert obj["spec"]["trigger"] == "sunset" and obj["status"]["memoryCount"] == 3

    def can_i(*q: str) -> str:
        return as_identity(h, kubeconfig, "auth", "can-i", *q, "-n", NS).stdout.strip()

    answers = {" ".join(q): can_i(*q) for q in SUNSET_ALLOWED + SUNSET_REFUSED}
    print("\n".join(f"can-i {q}: {a}" for q, a in answers.items()))
    assert answers == {" ".join(q): "yes" for q in SUNSET_ALLOWED} | {
        " ".join(q): "no" for q in SUNSET_REFUSED
    }
    elsewhere = as_identity(
        h, kubeconfig, "auth", "can-i", "create", "sessionsummaries.memorycore.io", "-n", "default"
    )
    assert elsewhere.stdout.strip() == "no"  # a RoleBinding grants it in its namespace only

    # Real calls, refused by the apiserver.
    user = f"system:serviceaccount:{NS}:{sa}"
    name = summary_object_name(sid)
    # fmt: off
    refused = {
        "list": as_identity(h, kubeconfig, "-n", NS, "get", "ssum"),
        "delete": as_identity(h, kubeconfig, "-n", NS, "delete", "ssum", name),
        "status": as_identity(
            h, kubeconfig, "-n", NS, "patch", "ssum", name, "--subresource=status",
            "--type", "merge", "-p", '{"status": {"phase": "Summarized"}}',
        ),
        "summarizer": as_identity(h, kubeconfig, "-n", NS, "get", "ssumr", "default"),
        "secrets": as_identity(h, kubeconfig, "-n", NS, "get", "secrets"),
    }
    # fmt: on
    for what, res in refused.items():
        assert res.returncode != 0, what
        assert "Error from server (Forbidden)" in res.stderr and user in res.stderr, res.stderr
    assert 'cannot list resource "sessionsummaries"' in refused["list"].stderr
    assert 'cannot delete resource "sessionsummaries"' in refused["delete"].stderr
    # kubectl reads the status before it patches it: refused already.
    assert 'cannot get resource "sessionsummaries/status"' in refused["status"].stderr
    other = summaryctl_as(h, kubeconfig, "sunset", sid, "-n", "default")
    assert other.returncode == 2
    assert other.stderr.startswith("summaryctl: error: forbidden: ") and user in other.stderr
    assert h.obj(sid)["metadata"]["generation"] == obj["metadata"]["generation"]


def test_the_view_role_reads_summaries_and_summarizers_and_cannot_sunset(
    harness: Harness, roles: dict[str, str], tmp_path: Path
) -> None:
    h, sa = harness, f"agent-reader-{uid()}"
    bind(h, roles["view"], sa)
    kubeconfig = h.cp.service_account_kubeconfig(NS, sa, tmp_path / "reader.kubeconfig")
    listed = as_identity(h, kubeconfig, "-n", NS, "get", "ssum,ssumr", "-o", "name")
    assert listed.returncode == 0, listed.stderr
    assert "sessionsummarizer.memorycore.io/default" in listed.stdout.split()
    watch = as_identity(h, kubeconfig, "auth", "can-i", "watch", "sessionsummaries", "-n", NS)
    assert watch.stdout.strip() == "yes"
    sunset = summaryctl_as(h, kubeconfig, "sunset", f"reader-{uid()}", "-n", NS)
    assert sunset.returncode == 2
    assert sunset.stderr.startswith("summaryctl: error: forbidden: ")
    assert 'cannot create resource "sessionsummaries"' in sunset.stderr
    for verb in ("create", "patch", "delete"):
        for resource in ("sessionsummaries", "sessionsummarizers"):
            answer = as_identity(h, kubeconfig, "auth", "can-i", verb, resource, "-n", NS)
            assert answer.stdout.strip() == "no", (verb, resource)


def _selected_by(role: dict[str, Any], builtin: dict[str, Any]) -> bool:
    labels = role["metadata"].get("labels") or {}
    selectors = (builtin.get("aggregationRule") or {}).get("clusterRoleSelectors") or []
    return any(
        all(labels.get(k) == v for k, v in (sel.get("matchLabels") or {}).items())
        for sel in selectors
    )


def test_the_agent_roles_join_the_built_in_edit_and_view_roles_only_when_asked(
    harness: Harness,
) -> None:
    """Aggregation itself is kube-controller-manager's work (not part of this control
    plane); what is checked is that the real built-in roles select our labels."""
    builtin = {
        name: json.loads(harness.cp.kubectl_run("get", "clusterrole", name, "-o", "json").stdout)
        for name in ("admin", "edit", "view")
    }

    def joined(*sets: str) -> dict[str, list[str]]:
        rendered = render_roles(harness, *sets)
        return {
            role: sorted(n for n, b in builtin.items() if _selected_by(doc, b))
            for role, doc in rendered.items()
        }

    assert joined() == {"sunset": [], "forget": [], "view": []}
    assert joined("rbac.agentRoles.aggregateToEdit=true") == {
        "sunset": ["admin", "edit"],
        "forget": ["admin"],
        "view": [],
    }
    assert joined(
        "rbac.agentRoles.aggregateToEdit=true", "rbac.agentRoles.aggregateToView=true"
    ) == {"sunset": ["admin", "edit"], "forget": ["admin"], "view": ["admin", "edit", "view"]}
    assert render_roles(harness, "rbac.agentRoles.create=false") == {}


# --- forget and rebuild: the forget role, asked by the chart's admission policy -----------

GATE_NS = "forget-gate"  # no summarizer: the operator leaves these objects' specs alone


@pytest.fixture(scope="module")
def forget_gate(harness: Harness, roles: dict[str, str]) -> Iterator[dict[str, str]]:
    """The chart's forget policy applied; ServiceAccounts in GATE_NS bound to the sunset role
    only and to sunset + forget; their usernames by name."""
    h = harness
    docs = [d for d in render(h) if d["metadata"]["name"] == PREFIX + "forget"]
    assert sorted(d["kind"] for d in docs) == [
        "ClusterRole", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
    ]  # fmt: skip
    policy = [d for d in docs if d["kind"] != "ClusterRole"]
    h.cp.kubectl_run("create", "namespace", GATE_NS, check=False)
    users = {}
    for sa, bound in {"sunset-only": ["sunset"], "forgetter": ["sunset", "forget"]}.items():
        h.cp.kubectl_run("-n", GATE_NS, "create", "serviceaccount", sa, check=False)
        for role in bound:
            h.cp.kubectl_run(
                "-n", GATE_NS, "create", "rolebinding", f"{sa}-{role}",
                f"--clusterrole={roles[role]}", f"--serviceaccount={GATE_NS}:{sa}", check=False,
            )  # fmt: skip
        users[sa] = f"system:serviceaccount:{GATE_NS}:{sa}"
    h.cp.kubectl_run("apply", "-f", "-", input=yaml.safe_dump_all(policy))

    def enforced() -> bool:  # the policy reaches the API server's admission a moment later
        res = gate_request(h, users["sunset-only"], None, {"action": "Forget"})
        return res.returncode != 0 and "Forbidden" in res.stderr

    wait_for(enforced, 30, 0.3, message="the forget policy enforced", log=h.log)
    yield users
    for d in policy:
        h.cp.kubectl_run("delete", d["kind"], d["metadata"]["name"], check=False)


def gate_request(
    h: Harness,
    user: str,
    before: dict[str, Any] | None,
    asked: dict[str, Any],
    status: dict[str, Any] | None = None,
) -> subprocess.CompletedProcess[str]:
    """As `user`: a create of a SessionSummary with spec `asked` (before None), or a patch of
    `asked` into one the admin created with spec `before` (and `status`). Server-side dry
    run: admission runs, nothing is stored. API calls in this process (what `kubectl --as`
    sends, without a kubectl process per call: the property test below makes ~400); the
    apiserver's refusal is the stderr, as kubectl prints it."""
    name = f"gate-{uid()}"
    spec = {"sessionId": name, "summarizerRef": "default"}
    body = {"apiVersion": "memorycore.io/v1alpha1", "kind": "SessionSummary",
            "metadata": {"name": name, "namespace": GATE_NS}, "spec": spec | asked}  # fmt: skip
    where = (GROUP, VERSION, GATE_NS, SUMMARY_PLURAL)
    if before is None:
        return as_user(user, as_api(user).create_namespaced_custom_object, *where, body,
                       dry_run="All")  # fmt: skip
    admin = kube.custom()
    admin.create_namespaced_custom_object(*where, body | {"spec": spec | before})
    try:
        if status is not None:
            admin.patch_namespaced_custom_object_status(*where, name, {"status": status})
        return as_user(user, as_api(user).patch_namespaced_custom_object, *where, name,
                       {"spec": asked}, dry_run="All")  # fmt: skip
    finally:
        kube.unless((404,), admin.delete_namespaced_custom_object, *where, name)


@functools.cache
def as_api(user: str) -> k8s.CustomObjectsApi:
    """The custom objects API impersonating `user` (kubectl's --as)."""
    api = k8s.ApiClient(kube.api_client().configuration)
    api.set_default_header("Impersonate-User", user)
    return k8s.CustomObjectsApi(api)


def as_user(user: str, call: Any, *args: Any, **kw: Any) -> subprocess.CompletedProcess[str]:
    """The call's outcome as `kubectl --as user` reports it: exit 0, or 1 and the
    apiserver's refusal."""
    try:
        call(*args, **kw)
    except ApiException as exc:
        said = f"Error from server ({exc.reason}): {kube.api_message(exc)}"
        return subprocess.CompletedProcess(["--as", user], 1, "", said)
    return subprocess.CompletedProcess(["--as", user], 0, "", "")


def optional(values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | values


SPEC_FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "action": st.sampled_from(["Summarize", "Rebuild", "Forget"]),
        "forgetMemories": st.booleans(),
        "requestedAt": st.sampled_from(["2026-01-01T00:00:00Z", "2026-02-02T00:00:00Z"]),
    },
)


# An object asking a Forget or Rebuild, that a request asking less would cancel.
HELD = st.fixed_dictionaries(
    {"action": st.sampled_from(["Rebuild", "Forget"])}, optional={"forgetMemories": st.booleans()}
)
# What a sunset asks (summaryctl sunset, the sweep).
SUNSET = st.fixed_dictionaries(
    {"action": st.just("Summarize"), "forgetMemories": st.just(False)},
    optional={"requestedAt": st.just("2026-03-03T00:00:00Z")},
)
# The object's status as the operator leaves it: its pass (generation 1) done or not.
STATUS = st.fixed_dictionaries(
    {
        "phase": st.sampled_from(
            ["Pending", "Summarizing", "Summarized", "Empty", "NotFound", "Failed", "Forgotten"]
        ),
        "observedGeneration": st.sampled_from([1, 0]),
    }
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(before=st.none() | SPEC_FIELDS | HELD, asked=SPEC_FIELDS | SUNSET, status=optional(STATUS))
def test_only_the_forget_role_newly_asks_or_cancels_a_forget_or_rebuild(
    harness: Harness,
    forget_gate: dict[str, str],
    before: dict[str, Any] | None,
    asked: dict[str, Any],
    status: dict[str, Any] | None,
) -> None:
    """The same request by the sunset role alone and with the forget role: denied exactly
    when it asks a new Forget/Rebuild pass (a create, or a spec change that leaves action
    Forget/Rebuild: any spec change runs a pass) or sets forgetMemories newly true, or asks
    less than an unfinished Forget/Rebuild (summaryctl's own rule, retention.kept_request),
    and the requester lacks the forget role."""
    defaults = {"action": "Summarize", "forgetMemories": False}
    old = None if before is None else defaults | before
    new = defaults | (old or {}) | asked
    new_pass = old is None or new != old
    forget = (new_pass and new["action"] == "Forget") or (
        new["forgetMemories"] and not (old or {}).get("forgetMemories")
    )
    rebuild = new_pass and new["action"] == "Rebuild"
    held = {"spec": old, "status": status, "metadata": {"generation": 1}}
    cancels = old is not None and kept_request(held, new)
    status = None if before is None else status
    allowed = gate_request(harness, forget_gate["forgetter"], before, asked, status)
    assert allowed.returncode == 0, allowed.stderr
    res = gate_request(harness, forget_gate["sunset-only"], before, asked, status)
    if not (forget or rebuild or cancels):
        assert res.returncode == 0, res.stderr
        return
    assert res.returncode != 0, (before, asked, status)
    assert forget_gate["sunset-only"] in res.stderr
    if forget or rebuild:  # the API server names the first validation that fails
        sub = "forget" if forget else "rebuild"
        assert f"create on sessionsummaries/{sub} (group memorycore.io)" in res.stderr
        assert PREFIX + "forget" in res.stderr
    else:
        assert f"the {cancels} this SessionSummary asks is not finished" in res.stderr
        assert f"needs create on sessionsummaries/{str(cancels).lower()} " in res.stderr


def test_summaryctl_forget_and_rebuild_need_the_forget_role_and_sunset_still_works(
    harness: Harness, roles: dict[str, str], forget_gate: dict[str, str], tmp_path: Path
) -> None:
    """The defect: the sunset role alone forgot a session's memories. Now summaryctl says
    which permission is missing; with the forget role it forgets, and a sunset after a
    forget (the sweep's action Summarize) needs no more than the sunset role."""
    h, u = harness, uid()
    sunsetter, forgetter = f"agent-sunset-{u}", f"agent-forget-{u}"
    bind(h, roles["sunset"], sunsetter)
    bind(h, roles["sunset"], forgetter)
    h.kubectl("create", "rolebinding", f"{forgetter}-forget", f"--clusterrole={roles['forget']}",
              f"--serviceaccount={NS}:{forgetter}")  # fmt: skip
    weak = h.cp.service_account_kubeconfig(NS, sunsetter, tmp_path / "weak.kubeconfig")
    strong = h.cp.service_account_kubeconfig(NS, forgetter, tmp_path / "strong.kubeconfig")
    sid, store = f"forget-gate-{u}", h.store()
    load(store, [interaction(sid, i, now_ms() - 60_000 + i, f"Gate step {i}") for i in range(3)])
    done = summaryctl_as(h, weak, "sunset", sid, "-n", NS, "--wait", "60")
    assert done.returncode == 0, done.stdout + done.stderr

    for argv in (["forget", sid, "--memories", "--yes"], ["forget", sid], ["rebuild", sid]):
        refused = summaryctl_as(h, weak, *argv, "-n", NS)
        print(f"$ summaryctl {' '.join(argv)}  # sunset role only\n{refused.stderr}")
        assert refused.returncode == 2, refused.stdout + refused.stderr
        sub = argv[0]
        assert refused.stderr.startswith("summaryctl: error: ")
        assert f"create on sessionsummaries/{sub} (group memorycore.io)" in refused.stderr
    assert len(store.session_ids(sid)) == 3
    assert h.obj(sid)["spec"]["action"] == "Summarize"

    rebuilt = summaryctl_as(h, strong, "rebuild", sid, "-n", NS, "--wait", "60")
    assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
    forgot = summaryctl_as(h, strong, "forget", sid, "-n", NS, "--memories", "--yes", "--wait=60")
    assert forgot.returncode == 0, forgot.stdout + forgot.stderr
    assert len(store.session_ids(sid)) == 0
    load(store, [interaction(sid, 9, now_ms(), "After the forget")])
    again = summaryctl_as(h, weak, "sunset", sid, "-n", NS, "--wait", "60")
    assert again.returncode == 0, again.stdout + again.stderr
    assert h.wait_phase(sid, "Summarized")["spec"]["forgetMemories"] is False


@pytest.mark.parametrize(
    ("ask", "done"),
    [(("forget", "--memories", "--yes"), "Forgotten"), (("rebuild",), "Summarized")],
)
def test_a_sunset_while_a_forget_or_rebuild_waits_leaves_it_to_finish(
    harness: Harness,
    roles: dict[str, str],
    forget_gate: dict[str, str],
    tmp_path: Path,
    ask: tuple[str, ...],
    done: str,
) -> None:
    """The defect: a forget (or a rebuild dropping a secret) waits for the session's claim,
    held by another writer; the agent's sunset (summaryctl, or kubectl with the sunset role)
    patched it to action Summarize, and the session ended Summarized with its memories. Now
    summaryctl leaves it as it is, the API server refuses the patch, and the request ends."""
    from controller.api import API_VERSION, CLAIM_KIND, CLAIM_PLURAL
    from controller.core.claim_rules import Claim, Writer
    from controller.core.naming import claim_name

    h, u = harness, uid()
    memory, summary = f"held-memory-{u}", f"held-sessions-{u}"
    h.kubectl("apply", "-f", "-", input=summarizer_yaml(f"held-{u}", h.chroma.url,
                                                      memory=memory, summary=summary))  # fmt: skip
    store, sid, agent = h.store(memory, summary), f"held-{u}", f"agent-held-{u}"
    bind(h, roles["sunset"], agent)
    weak = h.cp.service_account_kubeconfig(NS, agent, tmp_path / "weak.kubeconfig")
    load(store, [interaction(sid, 0, now_ms() - 60_000, "Keep FACTSECRETADDR as the address."),
                 interaction(sid, 1, now_ms() - 59_000, "Ship it.")])  # fmt: skip
    first = summaryctl_here("sunset", sid, "-n", NS, "--summarizer", f"held-{u}", "--wait", "60")
    assert first.returncode == 0, first.stdout + first.stderr
    # Another writer's live claim on the row (a killed writer's stays live for its duration).
    name = claim_name(store.location.row_scope, sid)
    held = Claim(sid, store.location.row_scope, Writer("other-replica", "uid-x", "ns/x"), 60.0)
    body = {"apiVersion": API_VERSION, "kind": CLAIM_KIND, "metadata": {"name": name},
            "spec": held.spec()}  # fmt: skip
    kube.custom().create_cluster_custom_object(GROUP, VERSION, CLAIM_PLURAL, body)
    try:
        asked = summaryctl_here(*ask[:1], sid, "-n", NS, *ask[1:])
        assert asked.returncode == 0, asked.stdout + asked.stderr
        wait_for(lambda: "SessionClaimed" in json.dumps(h.obj(sid).get("status") or {}), 60, 0.3,
                 message="the request waiting for the claim", log=h.log)  # fmt: skip
        spec = h.obj(sid)["spec"]
        sunset = summaryctl_as(h, weak, "sunset", sid, "-n", NS)
        print("$ summaryctl sunset  # sunset role\n" + sunset.stdout + sunset.stderr)
        assert sunset.returncode == 0, sunset.stdout + sunset.stderr
        assert "unchanged" in sunset.stdout and "not replaced" in sunset.stdout
        summarize = {
            "action": "Summarize",
            "forgetMemories": False,
            "requestedAt": "2026-12-01T00:00:00Z",
        }
        patched = as_identity(h, weak, "-n", NS, "patch", "ssum", summary_object_name(sid),
                              "--type", "merge", "-p", json.dumps({"spec": summarize}))  # fmt: skip
        print("$ kubectl patch ... action Summarize  # sunset role\n" + patched.stderr)
        assert patched.returncode != 0
        assert "this SessionSummary asks is not finished" in patched.stderr
        assert h.obj(sid)["spec"] == spec
    finally:
        kube.custom().delete_cluster_custom_object(GROUP, VERSION, CLAIM_PLURAL, name)
    final = h.wait_phase(sid, done, timeout=90)
    assert final["spec"] == spec
    if done == "Forgotten":
        assert store.session_ids(sid) == [] and store.read_summary(sid) is None
        assert [e for e in h.events(sid) if e.get("reason") == "Forgotten"]
    again = summaryctl_as(h, weak, "sunset", sid, "-n", NS)  # finished: replaced by a new pass
    assert again.returncode == 0 and " patched " in again.stdout, again.stdout + again.stderr
    assert h.obj(sid)["spec"]["action"] == "Summarize"


# --- the sunset marker ----------------------------------------------------------------------

# An agent's memory service: chromadb's client and nothing else, no Kubernetes credentials
# (no KUBECONFIG, an empty HOME, outside any Pod). It writes rows as agents write memories.
WRITER = """
import json, os, sys
import chromadb
from chromadb.config import Settings

assert "KUBECONFIG" not in os.environ and "KUBERNETES_SERVICE_HOST" not in os.environ
assert not os.path.exists(os.path.expanduser("~/.kube"))
host, port, collection, rows = sys.argv[1], int(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4])
client = chromadb.HttpClient(host=host, port=port, settings=Settings(anonymized_telemetry=False))
memories = client.get_collection(collection)
memories.add(
    ids=[r["id"] for r in rows],
    documents=[r["document"] for r in rows],
    metadatas=[r["metadata"] for r in rows],
    embeddings=[[1.0] + [0.0] * 383 for _ in rows],
)
"""


def write_without_credentials(
    h: Harness, collection: str, rows: list[dict[str, Any]], home: Path
) -> None:
    url = urlsplit(h.chroma.url)
    home.mkdir(exist_ok=True)
    env = {"PATH": os.environ["PATH"], "HOME": str(home)}
    argv = [sys.executable, "-c", WRITER, url.hostname or "127.0.0.1", str(url.port), collection]
    res = subprocess.run(
        [*argv, json.dumps(rows)], env=env, capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr


def marker(session_id: object, at_ms: int, memory_id: str, text: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"timestamp": at_ms, "type": SUNSET_MARKER_TYPE}
    if session_id is not None:
        meta["sessionId"] = session_id
    if text:
        meta["prompt"] = text
    return {"id": memory_id, "document": text or "session sunset", "metadata": meta}


def summarizer_status(h: Harness, name: str) -> dict[str, Any]:
    return dict(json.loads(h.kubectl("get", "ssumr", name, "-o", "json")).get("status") or {})


def start_marker_summarizer(h: Harness, name: str, memory: str, summary: str) -> None:
    """A summarizer whose sweep runs every hour and calls a session idle after an hour:
    only a marker can get a fresh session summarized. Waits for its first sweep (the
    watermark the marker scan starts from)."""
    sweep = "enabled: true, intervalSeconds: 3600, idleSeconds: 3600"
    manifest = summarizer_yaml(name, h.chroma.url, memory=memory, summary=summary, sweep=sweep)
    h.kubectl("apply", "-f", "-", input=manifest)
    wait_for(
        lambda: summarizer_status(h, name).get("watermark") is not None,
        30,
        0.2,
        message=f"{name}'s first sweep",
        log=h.log,
    )


@pytest.fixture
def marker_summarizer(harness: Harness) -> Iterator[tuple[str, MemoryStore]]:
    """(name, store) of a SessionSummarizer on fresh collections, deleted afterwards."""
    u = uid()
    name, memory, summary = f"markers-{u}", f"marker-mem-{u}", f"marker-sum-{u}"
    store = harness.store(memory, summary)
    store.create_memory_collection()
    start_marker_summarizer(harness, name, memory, summary)
    yield name, store
    harness.kubectl("delete", "ssumr", name, "--wait=true", "--timeout=60s", check=False)


def conditions(obj_status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in obj_status.get("conditions") or []}


def test_a_marker_memory_written_without_cluster_credentials_summarizes_the_session(
    harness: Harness, marker_summarizer: tuple[str, MemoryStore], tmp_path: Path
) -> None:
    h, (name, store) = harness, marker_summarizer
    sid = f"marker-session-{uid()}"
    start = now_ms() - 60_000
    load(store, [interaction(sid, i, start + i * 1000, f"Marker step {i}") for i in range(3)])
    time.sleep(2)  # two marker scans: without a marker, nothing happens
    assert h.kubectl("get", "ssum", summary_object_name(sid), check=False) == ""

    t0, written = time.monotonic(), now_ms()
    text = f"SUNSET-MARKER-TEXT-{uid()}"
    marker_id = f"sunset-{uid()}"
    rows = [marker(sid, written, marker_id, text)]
    write_without_credentials(h, store.location.memory_collection, rows, tmp_path / "home")
    obj = h.wait_phase(sid, "Summarized", timeout=60)
    print(f"marker write -> Summarized: {(time.monotonic() - t0) * 1000:.0f} ms")

    assert obj["spec"]["trigger"] == "sunset-marker"
    assert obj["spec"]["summarizerRef"] == name
    assert obj["status"]["memoryCount"] == 4  # every row of the session, the marker too
    stored = store.stored_summary(sid)  # the row, and its ledger entry's keys
    assert stored is not None
    doc, meta = stored
    assert "Marker step 2" in doc
    assert text not in doc and "sunset" not in doc.lower()
    assert all(text not in str(v) for v in meta.values())
    assert meta["triggerSource"] == "sunset-marker"
    assert (meta["memoryCount"], meta["timestamp"]) == (4, written)
    cond = conditions(summarizer_status(h, name))["SunsetMarkers"]
    assert (cond["status"], cond["reason"]) == ("True", "SummaryRequested")
    assert cond["message"] == f"requested summaries of 1 session(s) with a sunset marker: {sid!r}"

    # Acted on once: neither the marker scan (every tick) nor a sweep that finds the
    # session idle asks again, because the summary counts the marker as a row.
    generation, summarized_at = obj["metadata"]["generation"], meta["summarizedAt"]
    h.kubectl(
        "patch", "ssumr", name, "--type", "merge",
        "-p", '{"spec": {"sweep": {"intervalSeconds": 5, "idleSeconds": 0}}}',
    )  # fmt: skip
    fresh = "scanned 4 new memories and 4 added rows: 0 stale, 0 still active, 1 fresh"
    wait_for(
        lambda: fresh in (summarizer_status(h, name).get("message") or ""),
        30,
        0.3,
        message="a sweep finding the session fresh",
        log=h.log,
    )
    time.sleep(3)  # three more marker scans
    assert h.obj(sid)["metadata"]["generation"] == generation
    again = store.stored_summary(sid)
    assert again is not None and again[1]["summarizedAt"] == summarized_at


def printed_object(h: Harness, session_id: str) -> str:
    """The SessionSummary of the session as `kubectl get` prints it; empty when there is none."""
    return h.kubectl("get", "ssum", summary_object_name(session_id), "--ignore-not-found",
                     check=False).strip()  # fmt: skip


def test_a_marker_for_an_empty_session_ends_in_phase_empty_and_an_unknown_one_makes_no_object(
    harness: Harness, marker_summarizer: tuple[str, MemoryStore], tmp_path: Path
) -> None:
    h, (name, store) = harness, marker_summarizer
    unknown, empty = f"unknown-{uid()}", f"only-heartbeats-{uid()}"
    now = now_ms()
    pings = [interaction(empty, i, now - 30_000 + i, "ping", type_="heartbeat") for i in range(2)]
    load(store, pings)
    write_without_credentials(
        h,
        store.location.memory_collection,
        [marker(unknown, now, f"sunset-{uid()}"), marker(empty, now, f"sunset-{uid()}")],
        tmp_path / "home",
    )
    # Only heartbeats besides the marker: an object, phase Empty, nothing written.
    obj = h.wait_phase(empty, "Empty", timeout=60)
    status = obj["status"]
    assert obj["spec"]["trigger"] == "sunset-marker"
    assert status["memoryCount"] == 3
    cond = conditions(status)["Summarized"]
    assert (cond["status"], cond["reason"]) == ("False", "NoSummarizableMemories")
    assert "nothing was written" in cond["message"]
    # Nothing but the marker: no object at all, the summarizer says so.

    def reported() -> dict[str, Any] | None:
        cond = conditions(summarizer_status(h, name)).get("SunsetMarkers")
        return cond if cond and cond["reason"] == "MarkerWithoutMemories" else None

    said = wait_for(reported, 30, 0.3, message="MarkerWithoutMemories", log=h.log)
    assert unknown in said["message"]
    assert printed_object(h, unknown) == ""
    summaries = store.summaries(create=True).get(ids=[f"summary_{unknown}", f"summary_{empty}"])
    assert summaries["ids"] == []
    # A marker is acted on once: the empty outcome is final until a newer marker.
    generation = h.obj(empty)["metadata"]["generation"]
    time.sleep(3)
    assert h.obj(empty)["metadata"]["generation"] == generation
    assert printed_object(h, unknown) == ""


def test_a_marker_that_names_no_session_is_reported_on_the_summarizer(
    harness: Harness, marker_summarizer: tuple[str, MemoryStore], tmp_path: Path
) -> None:
    h, (name, store) = harness, marker_summarizer
    missing, blank = f"no-session-{uid()}", f"blank-session-{uid()}"
    write_without_credentials(
        h,
        store.location.memory_collection,
        [marker(None, now_ms(), missing), marker("  ", now_ms(), blank)],
        tmp_path / "home",
    )

    def reported() -> dict[str, Any] | None:
        cond = conditions(summarizer_status(h, name)).get("SunsetMarkers")
        return cond if cond and cond["reason"] == "InvalidSunsetMarker" else None

    cond: dict[str, Any] = wait_for(reported, 30, 0.3, message="InvalidSunsetMarker", log=h.log)
    assert cond["status"] == "False"
    assert cond["message"] == (
        "ignored 2 sunset marker(s) that name no session: "
        f"memory {blank!r} has a blank sessionId, "
        f"memory {missing!r} has no sessionId (metadata sessionId must be the session's id)"
    )
    events = json.loads(
        h.kubectl("get", "events", "--field-selector", f"involvedObject.name={name}", "-o", "json")
    )["items"]
    assert any(e["type"] == "Warning" and e["reason"] == "InvalidSunsetMarker" for e in events), (
        events
    )
    objects = json.loads(h.kubectl("get", "ssum", "-o", "json"))["items"]
    assert [o for o in objects if o["spec"].get("summarizerRef") == name] == []


def test_memory_rows_the_operator_cannot_act_on_are_counted_on_the_summarizer(
    harness: Harness, tmp_path: Path
) -> None:
    """Rows whose sessionId is a number or a boolean, and a sunset marker with an ISO
    timestamp, written before the summarizer: its first walk reports each, by memory id."""
    h, u = harness, uid()
    name, memory, summary = f"ignored-{u}", f"ignored-mem-{u}", f"ignored-sum-{u}"
    store = h.store(memory, summary)
    store.create_memory_collection()
    ok, at = f"ok-{u}", now_ms() - 7_200_000
    rows = [
        {"id": f"num-{u}", "document": "a turn", "metadata": {"sessionId": 42, "timestamp": at}},
        {"id": f"float-{u}", "document": "a turn", "metadata": {"sessionId": 4.5, "timestamp": at}},
        {"id": f"bool-{u}", "document": "a turn", "metadata": {"sessionId": True, "timestamp": at}},
        {"id": f"m-{u}", "document": "a turn", "metadata": {"sessionId": ok, "timestamp": at}},
        marker(ok, 0, f"iso-{u}"),
    ]
    rows[-1]["metadata"]["timestamp"] = "2026-11-30T10:00:00Z"
    write_without_credentials(h, memory, rows, tmp_path / "home")
    start_marker_summarizer(h, name, memory, summary)
    try:

        def reported() -> dict[str, Any] | None:
            cond = conditions(summarizer_status(h, name)).get("MemoryRowsUsable")
            return cond if cond else None

        cond: dict[str, Any] = wait_for(reported, 60, 0.3, message="MemoryRowsUsable", log=h.log)
        assert (cond["status"], cond["reason"]) == ("False", "IgnoredMemoryRows")
        never = "not text, so never summarized"
        assert cond["message"] == (
            f"ignored 4 of 5 memory rows: 1 where the row has a sessionId that is a boolean, "
            f"{never} (memory ids 'bool-{u}'); 2 where the row has a sessionId that is a "
            f"number, {never} (memory ids 'num-{u}', 'float-{u}'); 1 where the row is a sunset "
            "marker whose timestamp is not a number (epoch ms), so never found by the marker "
            f"scan (the sweep summarizes its session once idle) (memory ids 'iso-{u}')"
        )
        events = json.loads(
            h.kubectl(
                "get", "events", "--field-selector", f"involvedObject.name={name}", "-o", "json"
            )
        )["items"]
        assert [e["message"] for e in events if e["reason"] == "IgnoredMemoryRows"] == [
            cond["message"]
        ], events
        assert all(e["type"] == "Warning" for e in events if e["reason"] == "IgnoredMemoryRows")
    finally:
        h.kubectl("delete", "ssumr", name, "--wait=true", "--timeout=60s", check=False)
