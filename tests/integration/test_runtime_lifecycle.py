"""What the operator holds for a SessionSummarizer is let go when the SessionSummarizer
changes or goes (controller/runtime.py): a real operator
process, a real Chroma, Secrets on the real API server and a chat model over real HTTP.

50 times: a SessionSummarizer with a store token and a model key from Secrets is created,
a pass runs under it (a Chroma client, a model client with its semaphore, two Secret
values), it is reconfigured (a new generation), a pass runs under the new spec, and it is
deleted. The runtime's counts (session_summary_runtime_parts, read from the process's
/metrics) return to where they started, and the process's RSS stays within a stated
bound."""

from __future__ import annotations

import json
import re
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from controller.api import GROUP, SUMMARIZER_PLURAL, SUMMARY_PLURAL, VERSION
from controller.kube import client as kube
from controller.store.connection import StoreLocation, connect
from controller.store.memory_store import MemoryStore
from devenv.chroma import ChromaServer
from devenv.controlplane import REPO_ROOT, ControlPlane, free_port
from devenv.processes import wait_for
from tests.integration.harness import interaction, load, own_operator
from tests.integration.test_model_backend import FIRST, step
from tests.support.openai_server import running_openai_server

NS = "runtime-life"
ROUNDS = 50
# What is compared is the highest RSS of each half, after round 10 (everything loaded once:
# MiniLM, the openai SDK, chromadb's client): the second half's may exceed the first's by at
# most this. Measured with the operator's full collection at each heap trim: 210 -> 214 MiB
# over 100 rounds. Without it a round's retired clients (reference cycles) waited for
# Python's own full collection: +0.9 MiB a round, 87 MiB over 100 rounds on a loaded machine
# before one came; chromadb 1.5.9's closed client kept in memory (before
# store/memory_store.py: forget_system) was 3.5 MiB a round.
RSS_GROWTH_BOUND_MIB = 12
PARTS = ("summarizers", "clients", "embedders", "model_clients", "semaphores", "secret_values")


def _parts(metrics_url: str) -> dict[str, float]:
    text = urllib.request.urlopen(metrics_url, timeout=5).read().decode()
    found = re.findall(r'^session_summary_runtime_parts\{part="(\w+)"\} (\S+)$', text, re.M)
    return {part: float(value) for part, value in found}


def _one_set(metrics_url: str) -> dict[str, float] | None:
    held = _parts(metrics_url)
    return held if held["clients"] <= 1 and held["model_clients"] <= 1 else None


def _parts_or_none(metrics_url: str):  # type: ignore[no-untyped-def]
    def read() -> dict[str, float] | None:
        try:
            return _parts(metrics_url) or None
        except OSError:
            return None

    return read


def _rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    kib = re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)
    assert kib is not None
    return int(kib.group(1)) / 1024


def _secret(cp: ControlPlane, name: str, key: str, value: str, url: str) -> None:
    manifest = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": NS,
            "annotations": {"memorycore.io/allowed-urls": url},
        },
        "stringData": {key: value},
    }
    cp.kubectl_run("apply", "-f", "-", input=json.dumps(manifest))


def _summarizer(name: str, chroma: str, model_url: str, timeout_s: int) -> str:
    return textwrap.dedent(f"""
        apiVersion: memorycore.io/v1alpha1
        kind: SessionSummarizer
        metadata: {{name: {name}, namespace: {NS}}}
        spec:
          store:
            url: "{chroma}"
            memoryCollection: life-memory
            summaryCollection: life-sessions
            authSecretRef: {{name: life-store, key: token}}
          model:
            backend: openai
            baseUrl: "{model_url}"
            model: scripted
            timeoutSeconds: {timeout_s}
            maxRetries: 1
            apiKeySecretRef: {{name: life-model, key: apiKey}}
          sweep: {{enabled: false}}
          reconcile: {{enabled: false}}
    """)


# The test's own API calls are in-process: 200 kubectl processes took a third of its time.
def _apply(name: str, generation: int, manifest: str) -> None:
    """Creates the SessionSummarizer (generation 1), else patches its spec (a new one)."""
    body = yaml.safe_load(manifest)
    api = kube.custom()
    if generation == 1:
        api.create_namespaced_custom_object(GROUP, VERSION, NS, SUMMARIZER_PLURAL, body)
    else:
        patch = {"spec": body["spec"]}
        api.patch_namespaced_custom_object(GROUP, VERSION, NS, SUMMARIZER_PLURAL, name, patch)


def _delete_all(plural: str) -> None:
    """Deletes every object of the kind in NS and waits until they are gone (finalizers
    released), as `kubectl delete --all --wait=true`."""
    api = kube.custom()
    api.delete_collection_namespaced_custom_object(GROUP, VERSION, NS, plural)
    listing = api.list_namespaced_custom_object
    wait_for(lambda: not listing(GROUP, VERSION, NS, plural)["items"], 60, 0.05,
             message=f"every {plural} of {NS} gone")  # fmt: skip


def _pass(sid: str, summarizer: str, generation: int) -> None:
    """Asks for a pass of the session under the summarizer and waits until it is written."""
    name, _ = kube.request_summary(NS, sid, trigger="manual", summarizer=summarizer)

    def done() -> bool:
        obj = kube.get_summary(NS, name) or {}
        status = obj.get("status") or {}
        meta = obj.get("metadata") or {}
        return status.get("phase") == "Summarized" and status.get("observedGeneration") == meta.get(
            "generation", generation
        )

    wait_for(done, 60, message=f"the pass of {sid} under {summarizer}")


def test_reconfiguring_and_deleting_a_summarizer_50_times_lets_go_of_what_it_held(
    control_plane: ControlPlane,
    chroma_server: ChromaServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cp = control_plane
    cp.kubectl_run("apply", "-f", str(REPO_ROOT / "crds"))
    cp.kubectl_run("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
    cp.kubectl_run("create", "namespace", NS, check=False)
    monkeypatch.setenv("KUBECONFIG", str(cp.kubeconfig))  # in-process API calls, too
    kube.api_client.cache_clear()
    # The counts are the whole process's: its namespace must be this test's alone.
    others = [o["metadata"]["name"] for o in kube.list_summarizers((NS,))]
    others += [o["metadata"]["name"] for o in kube.iter_summaries(NS)]
    assert others == [], f"namespace {NS} already holds {others}: another test's objects"
    where = StoreLocation(
        url=chroma_server.url, memory_collection="life-memory", summary_collection="life-sessions"
    )
    store = MemoryStore(connect(where), where)
    now = int(time.time() * 1000)
    load(store, [interaction("life-session", i, now - 10_000 + i, step(i)) for i in range(3)])
    port = free_port()
    metrics_url = f"http://127.0.0.1:{port}/metrics"
    with running_openai_server(default_reply=json.dumps(FIRST)) as model:
        _secret(cp, "life-store", "token", "store-token-0", chroma_server.url)
        _secret(cp, "life-model", "apiKey", "model-key-0", model.base_url)
        with own_operator(
            cp,
            NS,
            tmp_path / "operator.log",
            metrics_port=str(port),
            retry_base_seconds="0.5",
            retry_max_seconds="2",
            heap_trim_seconds="1",  # RSS read after freed pages went back to the OS
        ) as proc:
            wait_for(_parts_or_none(metrics_url), 60, message="the operator's /metrics")
            before = _parts(metrics_url)
            assert all(before[p] == 0 for p in PARTS), before
            most: dict[str, float] = dict.fromkeys(PARTS, 0.0)

            rss: dict[int, float] = {}
            for i in range(ROUNDS):
                name = f"life-{i}"
                # Created, then reconfigured (a new generation, model.timeoutSeconds 30 ->
                # 31): a pass under each spec builds its parts from that spec.
                for generation, timeout_s in ((1, 30), (2, 31)):
                    manifest = _summarizer(name, chroma_server.url, model.base_url, timeout_s)
                    _apply(name, generation, manifest)
                    _pass("life-session", name, generation)
                    # Soon at most one set, the current spec's: the previous generation's
                    # is closed. (Not at once: the spec handler's retirement of the old
                    # generation may run after this pass, which built from the new spec
                    # already; the handlers of one change run in either order.)
                    held = wait_for(
                        lambda: _one_set(metrics_url),
                        30,
                        message=f"round {i}: the previous generation's parts to be closed",
                    )
                    most = {p: max(most[p], held[p]) for p in PARTS}
                _delete_all(SUMMARIZER_PLURAL)
                _delete_all(SUMMARY_PLURAL)
                if (i + 1) % 5 == 0:
                    wait_for(
                        lambda: _parts(metrics_url)["summarizers"] == 0,
                        30,
                        message="the deleted SessionSummarizer's parts to be dropped",
                    )
                    time.sleep(1.5)  # a heap trim
                    rss[i + 1] = _rss_mib(proc.pid)
            wait_for(
                lambda: all(_parts(metrics_url)[p] == before[p] for p in PARTS),
                30,
                message="every part to be let go",
            )
            after = _parts(metrics_url)
    # While a SessionSummarizer was in use, the runtime did hold its parts (the counts are
    # live), and all of them were let go.
    assert most["clients"] >= 1 and most["semaphores"] >= 1 and most["secret_values"] >= 2, most
    assert {p: after[p] for p in PARTS} == {p: before[p] for p in PARTS}
    half = 10 + (ROUNDS - 10) // 2
    first = max(v for r, v in rss.items() if 10 <= r <= half)
    growth = max(v for r, v in rss.items() if r > half) - first
    print(f"runtime_lifecycle: rounds={ROUNDS} growth_mib={growth:.1f} rss_mib="
          + ",".join(f"r{r}:{v:.0f}" for r, v in rss.items()) + f" most={most}")  # fmt: skip
    assert growth <= RSS_GROWTH_BOUND_MIB, f"RSS's peak grew {growth:.1f} MiB: {rss}"
