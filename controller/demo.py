"""`summaryctl demo`: sample agent sessions summarized end to end on embedded defaults.

A real control plane (local etcd + kube-apiserver, or the current kube context), a real
Chroma server, the operator as a local process, the extractive summarizer. Three sessions
are sunset explicitly; the fourth is found by the periodic sweep.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from controller.localenv.controlplane import REPO_ROOT, running_control_plane, tools_bin_dir

NAMESPACE = "summaries-demo"


def say(message: str) -> None:
    print(f"\n==> {message}", flush=True)


def _kubectl(env: dict[str, str], *args: str, input: str | None = None) -> str:
    out = subprocess.run(
        ["kubectl", *args], env=env, input=input, capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)} failed: {out.stderr.strip()}")
    return out.stdout


@contextlib.contextmanager
def _cluster(use_current: bool, workdir: Path) -> Iterator[dict[str, str]]:
    if use_current:
        env = dict(os.environ)
        env["PATH"] = f"{tools_bin_dir()}{os.pathsep}{env['PATH']}"
        yield env
        return
    say("starting a local control plane (etcd + kube-apiserver)")
    with running_control_plane(workdir / "cluster") as cp:
        print(f"    kube-apiserver at {cp.server}; KUBECONFIG={cp.kubeconfig}")
        yield cp.env()


@contextlib.contextmanager
def _chroma(url: str | None, workdir: Path) -> Iterator[str]:
    if url:
        yield url
        return
    from controller.localenv.chroma import running_chroma

    say("starting a Chroma server (chroma run)")
    with running_chroma(workdir / "chroma") as server:
        print(f"    Chroma at {server.url}")
        yield server.url


def _summarizer_yaml(chroma_url: str) -> str:
    return f"""
apiVersion: memorycore.io/v1alpha1
kind: SessionSummarizer
metadata:
  name: default
  namespace: {NAMESPACE}
spec:
  store:
    url: {chroma_url}
  sweep:
    intervalSeconds: 5
    idleSeconds: 0
"""


def run_demo(*, keep: bool, use_current_context: bool, chroma_url: str | None) -> int:
    from controller.demo_data import SAMPLE_SESSIONS, memory_rows
    from controller.localenv.processes import spawn, stop, tail, wait_for
    from controller.store import MemoryStore, StoreLocation, connect

    workdir = Path(tempfile.mkdtemp(prefix="sso-demo-"))
    with _cluster(use_current_context, workdir) as env, _chroma(chroma_url, workdir) as url:
        say("installing the CRDs and a SessionSummarizer")
        _kubectl(env, "apply", "-f", str(REPO_ROOT / "crds"))
        _kubectl(env, "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        with contextlib.suppress(RuntimeError):
            _kubectl(env, "create", "namespace", NAMESPACE)
        _kubectl(env, "apply", "-f", "-", input=_summarizer_yaml(url))

        say(f"loading {len(SAMPLE_SESSIONS)} sample agent sessions into neo-agent-memory")
        store = MemoryStore(connect(StoreLocation(url=url)), StoreLocation(url=url))
        start = int(time.time() * 1000) - 3_600_000
        for i, session in enumerate(SAMPLE_SESSIONS):
            rows = memory_rows(session, start + i * 600_000)
            store.add_memories([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])
            print(f"    {session.session_id}: {len(rows)} memories ({session.agent})")

        say("starting the operator (python -m controller run --standalone)")
        op_env = dict(env, SSO_REPLICA_ID="demo-operator", SSO_SWEEP_TICK_SECONDS="2")
        log = workdir / "operator.log"
        operator = spawn(
            [sys.executable, "-m", "controller", "run", "--standalone", "--namespace", NAMESPACE],
            log,
            env=op_env,
            cwd=REPO_ROOT,
        )
        try:
            sunset = SAMPLE_SESSIONS[:3]
            say(f"sunsetting {len(sunset)} sessions (summaryctl sunset); the sweep finds the last")
            for session in sunset:
                subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "controller",
                        "sunset",
                        session.session_id,
                        "-n",
                        NAMESPACE,
                    ],
                    env=env,
                    check=True,
                    cwd=REPO_ROOT,
                )

            def all_summarized() -> bool:
                out = _kubectl(
                    env,
                    "-n",
                    NAMESPACE,
                    "get",
                    "ssum",
                    "-o",
                    "jsonpath={range .items[*]}{.status.phase}{'\\n'}{end}",
                )
                phases = out.split()
                return len(phases) == len(SAMPLE_SESSIONS) and set(phases) == {"Summarized"}

            wait_for(all_summarized, 120, 0.5, message="every session Summarized\n" + tail(log))
            say("kubectl get sessionsummaries")
            print(_kubectl(env, "-n", NAMESPACE, "get", "sessionsummaries"))
            say("kubectl get sessionsummarizers")
            print(_kubectl(env, "-n", NAMESPACE, "get", "ssumr"))
            say("what the next agent reads at boot: summaryctl summaries --limit 2")
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "controller",
                    "summaries",
                    "--limit",
                    "2",
                    "--chroma-url",
                    url,
                ],
                env=env,
                check=True,
                cwd=REPO_ROOT,
            )
            if keep:
                say(f"--keep: servers stay up; operator log {log}. Ctrl-C to stop everything.")
                with contextlib.suppress(KeyboardInterrupt):
                    while True:
                        time.sleep(3600)
        finally:
            stop(operator)
    say("demo done: every process it started is stopped")
    return 0
