"""What the scripts in bench/ share: their command line (the --quick smoke mode), the
control plane and Chroma server they run against, and a namespace with a SessionSummarizer.

--quick is a smoke run, not a measurement: the smallest sizes, budgets, lifetimes and
timeouts that still go through every code path the bench measures, so that the smoke tier
(tests/bench, in `make test`) notices a bench that no longer runs. Its figures mean nothing.

A bench run by hand starts its own control plane and Chroma server. The smoke tier starts
one of each for all the benches and names them in SSO_BENCH_CONTROL_PLANE (the directory
of a running control plane: its state.json, kubeconfig and audit log) and
SSO_BENCH_CHROMA_URL; a bench never stops what it did not start. Benches that share them
must use namespaces of their own (a second `create namespace` of one name fails).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from devenv.chroma import running_chroma
from devenv.controlplane import REPO_ROOT, ControlPlane, running_control_plane, tools_bin_dir

# A bench's QUICK_RUNS: (the arguments after --quick, the format of the last line it prints).
QuickRuns = list[tuple[list[str], str]]
SHARED_CONTROL_PLANE = "SSO_BENCH_CONTROL_PLANE"
SHARED_CHROMA_URL = "SSO_BENCH_CHROMA_URL"


def parse_bench_args(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None = None, **quick: Any
) -> argparse.Namespace:
    """The parser's arguments plus --quick, which makes `quick` (option dests) the defaults:
    an option given on the command line still wins. --help lists the quick values."""
    dests = {action.dest for action in parser._actions}
    unknown = sorted(set(quick) - dests)
    if unknown:  # a typo would silently leave the full-size value in the smoke run
        raise ValueError(f"quick values for options the parser does not have: {unknown}")
    shown = ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in quick.items())
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"a smoke run, not a measurement (docs/benchmarks.md): {shown}".replace("%", "%%"),
    )
    if parser.parse_known_args(argv)[0].quick:
        parser.set_defaults(**quick)
    return parser.parse_args(argv)


@contextlib.contextmanager
def bench_chroma(workdir: Path | None = None) -> Iterator[str]:
    """The URL of the Chroma server to use: the shared one, else one of its own until the
    block exits (data and log under workdir; without one, in a directory removed after)."""
    shared = os.environ.get(SHARED_CHROMA_URL)
    if shared:
        yield shared
        return
    with running_chroma(workdir) as chroma:
        yield chroma.url


@contextlib.contextmanager
def bench_control_plane(workdir: Path) -> Iterator[ControlPlane]:
    """A control plane with the CRDs established, and KUBECONFIG aimed at it in this
    process too (controller.kube.client): the shared one, else one of its own until the
    block exits."""
    from controller.kube import client as kube

    with contextlib.ExitStack() as stack:
        shared = os.environ.get(SHARED_CONTROL_PLANE)
        if shared:
            cp = ControlPlane.from_state(Path(shared))
            cp.bin_dir = tools_bin_dir()
        else:
            cp = stack.enter_context(running_control_plane(workdir))
        cp.kubectl_run("apply", "-f", str(REPO_ROOT / "crds"))
        cp.kubectl_run("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        os.environ["KUBECONFIG"] = str(cp.kubeconfig)
        kube.api_client.cache_clear()
        yield cp


def create_summarizer(cp: ControlPlane, namespace: str, spec: dict[str, Any]) -> None:
    """A new namespace holding the SessionSummarizer `default` with this spec."""
    cp.kubectl_run("create", "namespace", namespace)
    summarizer = {
        "apiVersion": "memorycore.io/v1alpha1",
        "kind": "SessionSummarizer",
        "metadata": {"name": "default", "namespace": namespace},
        "spec": spec,
    }
    cp.kubectl_run("apply", "-f", "-", input=json.dumps(summarizer))


# How often a bench looks for a summary it waits for (s): its figures are late by up to this
# much, idle and under load alike. A look is a Chroma request: every 5 ms they cost the
# machine under test 0.30 of a core (Chroma 0.18, the bench 0.12), every 20 ms 0.13.
POLL_S = 0.02


def summary_written_at(store: Any, session_id: str, after_ms: int = 0) -> int:
    """When the session's summary now in place was written (ms; 0 for none): its ledger
    entry's summarizedAt, once the row it goes with is written too (the row's document
    digest is the one the entry records). What the benches wait for after a sunset. A
    ledger entry written before after_ms is returned without reading the row: a bench
    polling for a write after its sunset sends one request a poll, not two, and loads the
    store it measures half as much."""
    from chromadb.errors import NotFoundError

    from controller.store.errors import CollectionNotFound

    row_id = f"summary_{session_id}"
    try:
        head = store.client.get_collection(store.location.ledger_collection).get(
            ids=[row_id], include=["metadatas"]
        )["metadatas"]
        if not head or int(head[0].get("summarizedAt") or 0) < after_ms:
            return int(head[0].get("summarizedAt") or 0) if head else 0
        row = store.summaries().get(ids=[row_id], include=["metadatas"])["metadatas"]
    except (CollectionNotFound, NotFoundError):
        return 0
    if not row:
        return 0
    if head[0].get("rowDigest") != row[0].get("documentDigest"):
        return 0
    return int(head[0].get("summarizedAt") or 0)


def operator_kubeconfig(cp: ControlPlane, namespace: str, account: str, path: Path) -> Path:
    """A kubeconfig of a ServiceAccount of its own (cluster-admin) for the operator under
    bench: every API request it makes is then its own in the audit log (audit_calls)."""
    cp.kubectl_run("-n", namespace, "create", "serviceaccount", account)
    cp.kubectl_run(
        "create", "clusterrolebinding", f"{namespace}-{account}", "--clusterrole=cluster-admin",
        f"--serviceaccount={namespace}:{account}",
    )  # fmt: skip
    return cp.service_account_kubeconfig(namespace, account, path)


def audit_calls(audit: Path, user: str, start_ms: int, end_ms: int) -> Counter[tuple[str, str]]:
    """The requests `user` made between start_ms and end_ms, by (verb, resource), from the
    apiserver's audit log."""
    calls: Counter[tuple[str, str]] = Counter()
    for line in audit.read_text().splitlines():
        event = json.loads(line)
        if event.get("user", {}).get("username") != user:
            continue
        when = event.get("requestReceivedTimestamp", "")
        stamp = time.mktime(time.strptime(when[:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
        ms = int(stamp * 1000) + int(when[20:26] or 0) // 1000
        if not start_ms <= ms <= end_ms:
            continue
        ref = event.get("objectRef") or {}
        resource = ref.get("resource", "?") + (
            f"/{ref['subresource']}" if ref.get("subresource") else ""
        )
        calls[(event.get("verb", "?"), resource)] += 1
    return calls
