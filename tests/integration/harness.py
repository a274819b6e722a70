"""The operator under test: a real control plane, a real Chroma server, the operator as a
local process (standalone) watching one namespace. Shared by the integration modules."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from controller.core.memories import render_interaction_document
from controller.core.naming import summary_object_name
from controller.kube import client as kube
from controller.store.connection import StoreLocation, connect
from controller.store.errors import CollectionNotFound
from controller.store.memory_store import MemoryStore
from devenv.chroma import ChromaServer
from devenv.controlplane import REPO_ROOT, ControlPlane, free_port
from devenv.operator import LOOPBACK_MODELS, start_operator
from devenv.otlp import Receiver, running_receiver
from devenv.processes import stop, tail, wait_for

NS = "ops"
# What `helm install` finds in the cluster and `helm template` cannot: the API server's
# address and an external Chroma's destination (the NetworkPolicy names both).
CHART_OFFLINE = (
    "--set-json",
    'networkPolicy.apiServer.cidrs=["10.96.0.1/32"]',
    "--set-json",
    'networkPolicy.chromaTo=[{"ipBlock":{"cidr":"10.0.0.7/32"}}]',
)


@dataclass
class Harness:
    cp: ControlPlane
    chroma: ChromaServer
    log: Path
    metrics_url: str = ""
    # The OTLP/HTTP receiver the operator exports its pass traces to (controller/tracing.py).
    otlp: Receiver | None = None

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        return self.cp.kubectl_run("-n", NS, *args, input=input, check=check).stdout

    def store(
        self, memory: str = "neo-agent-memory", summary: str = "neo-agent-sessions"
    ) -> MemoryStore:
        loc = StoreLocation(
            url=self.chroma.url, memory_collection=memory, summary_collection=summary
        )
        return MemoryStore(connect(loc), loc)

    def summaryctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return summaryctl_on(self.cp, *args)

    def obj(self, session_id: str) -> dict[str, Any]:
        out = self.kubectl("get", "ssum", summary_object_name(session_id), "-o", "json")
        return json.loads(out)

    def wait_phase(self, session_id: str, phase: str, timeout: float = 60) -> dict[str, Any]:
        def done() -> dict[str, Any] | None:
            o = self.obj(session_id)
            st = o.get("status") or {}
            if (
                st.get("phase") == phase
                and st.get("observedGeneration") == o["metadata"]["generation"]
            ):
                return o
            return None

        return wait_for(done, timeout, 0.2, message=f"{session_id} -> {phase}", log=self.log)

    def events(self, session_id: str) -> list[dict[str, Any]]:
        name = summary_object_name(session_id)
        out = self.kubectl(
            "get", "events", "--field-selector", f"involvedObject.name={name}", "-o", "json"
        )
        return list(json.loads(out)["items"])


LIVE: list[Harness] = []  # the session's shared operator while it runs


@pytest.fixture(scope="module", autouse=True)
def shared_operator_left_quiet() -> Iterator[None]:
    """Deletes, after each module, the SessionSummarizers it left in the shared operator's
    namespace (all but the harness's own `default`). The shared operator ticks each of them
    every second (probes, marker scans, sweeps): left behind, they loaded every later module
    more (30 of them by the end of a run), and a slow machine's run fell behind its limit."""
    yield
    if not LIVE:
        return
    names = LIVE[0].kubectl("get", "ssumr", "-o", "name").split()
    gone = [n for n in names if n.rsplit("/", 1)[-1] != "default"]
    if gone:
        LIVE[0].kubectl("delete", "--wait=false", "--ignore-not-found", *gone)


def summaryctl_on(cp: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    """summaryctl, as a process, against this control plane; memories may go to the test
    model servers on this host, as they may from the operator start_operator runs."""
    return subprocess.run(
        [sys.executable, "-m", "controller", *args],
        env={"SSO_ALLOWED_MODEL_URLS": LOOPBACK_MODELS, **cp.env()},
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def summarizer_yaml(
    name: str,
    url: str,
    *,
    memory: str = "neo-agent-memory",
    summary: str = "neo-agent-sessions",
    sweep: str = "enabled: false",
) -> str:
    # The reconciliation runs whatever the sweep says: off with the sweep here, as before
    # it had a setting of its own, so a quiet summarizer stays quiet.
    reconcile = "true" if "enabled: true" in sweep else "false"
    return textwrap.dedent(f"""
        apiVersion: memorycore.io/v1alpha1
        kind: SessionSummarizer
        metadata: {{name: {name}, namespace: {NS}}}
        spec:
          store: {{url: "{url}", memoryCollection: {memory}, summaryCollection: {summary}}}
          sweep: {{{sweep}}}
          reconcile: {{enabled: {reconcile}}}
    """)


@pytest.fixture(scope="session")
def harness(
    control_plane: ControlPlane,
    chroma_server: ChromaServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Harness]:
    cp = control_plane
    cp.kubectl_run("apply", "-f", str(REPO_ROOT / "crds"))
    cp.kubectl_run("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
    cp.kubectl_run("create", "namespace", NS, check=False)
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    metrics_port = free_port()
    otlp = contextlib.ExitStack()
    receiver = otlp.enter_context(running_receiver())
    h = Harness(cp, chroma_server, log, f"http://127.0.0.1:{metrics_port}/metrics", otlp=receiver)
    # In-process API calls (controller.kube.client) aim at this control plane too.
    os.environ["KUBECONFIG"] = str(cp.kubeconfig)
    kube.api_client.cache_clear()
    h.kubectl("apply", "-f", "-", input=summarizer_yaml("default", chroma_server.url))
    env = dict(
        cp.env(),
        SSO_REPLICA_ID="it-operator",
        SSO_SWEEP_TICK_SECONDS="1",
        SSO_RETRY_BASE_SECONDS="0.5",
        SSO_RETRY_MAX_SECONDS="2",
        SSO_FAILURE_GATE="3",
        SSO_EMBEDDING_REPROBE_SECONDS="2",
        SSO_METRICS_PORT=str(metrics_port),
        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url,
        OTEL_BSP_SCHEDULE_DELAY="200",  # ms: the spans reach the receiver soon after a pass
    )
    proc = start_operator(log, env, "--standalone", "--namespace", NS)
    try:
        # Served once the operator reports on its SessionSummarizer (summaryctl's requests
        # check that first).
        wait_for(lambda: conditions_of(kube.get_summarizer(NS, "default") or {}).get(
            "ReplicaActive"), 120, 0.5, message="the operator's report", log=log)  # fmt: skip
        LIVE.append(h)
        yield h
    finally:
        LIVE.clear()
        stop(proc)
        otlp.close()
        print("operator log tail:\n" + tail(log, 60))


def model_summarizer_yaml(
    name: str,
    harness: Harness,
    base_url: str,
    *,
    model: str,
    timeout_seconds: float,
    max_retries: int,
    max_concurrency: int | None = None,
) -> str:
    """A SessionSummarizer with the openai backend at base_url and its own collections."""
    concurrency = f"\n            maxConcurrency: {max_concurrency}" if max_concurrency else ""
    return textwrap.dedent(f"""
        apiVersion: memorycore.io/v1alpha1
        kind: SessionSummarizer
        metadata: {{name: {name}, namespace: {NS}}}
        spec:
          store:
            url: "{harness.chroma.url}"
            memoryCollection: {name}-memory
            summaryCollection: {name}-sessions
          model:
            backend: openai
            baseUrl: "{base_url}"
            model: {model}
            timeoutSeconds: {timeout_seconds:g}
            maxRetries: {max_retries}{concurrency}
          sweep: {{enabled: false}}
          reconcile: {{enabled: false}}
    """)


def stored_summary_ids(store: MemoryStore, ids: list[str]) -> list[str]:
    """Which of these summary rows exist; none when the summary collection does not exist
    (reads never create it: only the first write does)."""
    try:
        return list(store.summaries().get(ids=ids)["ids"])
    except CollectionNotFound:
        return []


def load(
    store: MemoryStore,
    rows: list[tuple[str, str, dict[str, Any]]],
    embed: Callable[[list[str]], Any] | None = None,
) -> None:
    """Adds the memory rows (embedded with `embed`, else local MiniLM)."""
    store.add_memories(
        [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], create=True, embed=embed
    )


def interaction(
    sid: str, i: int, ts: int, prompt: str, type_: str = "agent-interaction"
) -> tuple[str, str, dict[str, Any]]:
    meta = {
        "sessionId": sid,
        "timestamp": ts,
        "type": type_,
        "prompt": prompt,
        "thought": f"thinking about step {i}",
        "response": f"Done with step {i}.",
        "agent": "claude-code",
        "model": "claude-sonnet",
        "amountToolCalls": 1,
        "toolsUsed": '["edit_file"]',
    }
    doc = render_interaction_document(prompt, f"thinking about step {i}", f"Done with step {i}.")
    return (f"{sid}-{i:04d}", doc, meta)


@contextlib.contextmanager
def own_operator(
    cp: ControlPlane,
    namespace: str,
    log: Path,
    *,
    standalone: bool = True,
    replica: str | None = None,
    **settings: str,
) -> Iterator[subprocess.Popen[bytes]]:
    """An operator process of its own (standalone unless told) watching one namespace (made
    if absent), with these SSO_* settings; stopped (SIGTERM, by PID) on exit."""
    cp.kubectl_run("create", "namespace", namespace, check=False)
    env = dict(
        cp.env(),
        SSO_REPLICA_ID=replica or f"{namespace}-operator",
        **{f"SSO_{k.upper()}": v for k, v in settings.items()},
    )
    args = ["--namespace", namespace] + (["--standalone"] if standalone else [])
    proc = start_operator(log, env, *args)
    try:
        yield proc
    finally:
        stop(proc, grace=30)
        print(f"{namespace} operator log tail:\n" + tail(log, 40))


def summaries_in(namespace: str) -> dict[str, dict[str, Any]]:
    """Every SessionSummary of the namespace by name."""
    return {o["metadata"]["name"]: o for o in kube.iter_summaries(namespace)}


def conditions_of(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}
