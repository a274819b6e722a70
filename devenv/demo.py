"""`make demo` (`python -m devenv.demo`): sample agent sessions summarized end to end,
on embedded defaults.

A real control plane (local etcd + kube-apiserver, or the current kube context), a real
Chroma server, the operator as a local process, the extractive summarizer. Three sessions
are sunset explicitly; the fourth is found by the periodic sweep.

In the current kube context the demo leaves nothing behind, whether it succeeds or fails:
the store is checked before the cluster is touched, and what it created there (its
SessionSummaries, its SessionSummarizer, the namespace if it made it) is deleted at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devenv.controlplane import REPO_ROOT, running_control_plane, tools_bin_dir

NAMESPACE = "summaries-demo"
SUMMARIZER = "default"
OPERATOR_READY_SECONDS = 90
SUMMARIZED_SECONDS = 120


class DemoError(RuntimeError):
    """The demo cannot go on; the message says why in one line."""


def say(message: str) -> None:
    print(f"\n==> {message}", flush=True)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _kubectl(env: dict[str, str], *args: str, input: str | None = None) -> str:
    try:
        out = subprocess.run(
            ["kubectl", *args], env=env, input=input, capture_output=True, text=True, check=False
        )
    except FileNotFoundError:
        raise DemoError("kubectl not found on PATH (make tools builds it)") from None
    if out.returncode != 0:
        raise DemoError(f"kubectl {' '.join(args)} failed: {_last_line(out.stderr)}")
    return out.stdout


def _check_current_context() -> None:
    """Fails in one line, before anything starts, when the current context cannot be used."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException
    from urllib3.exceptions import HTTPError

    from controller.kube import client as kube

    try:
        client.VersionApi(kube.api_client()).get_code()
    except ConfigException as exc:
        raise DemoError(f"no usable kube context ({exc}); set KUBECONFIG") from exc
    except (HTTPError, ApiException) as exc:
        raise DemoError(f"cannot reach the Kubernetes API of the current context: {exc}") from exc


def _tools_bin() -> Path:
    try:
        return tools_bin_dir()
    except (subprocess.CalledProcessError, OSError) as exc:
        raise DemoError(
            f"kubectl could not be built or found (hack/install-tools.sh): {exc}"
        ) from exc


@contextlib.contextmanager
def _cluster(use_current: bool, workdir: Path) -> Iterator[dict[str, str]]:
    if use_current:
        _check_current_context()
        env = dict(os.environ)
        env["PATH"] = f"{_tools_bin()}{os.pathsep}{env['PATH']}"
        yield env
        return
    from devenv.controlplane import ControlPlaneError

    say("starting a local control plane (etcd + kube-apiserver)")
    with contextlib.ExitStack() as stack:
        try:
            cp = stack.enter_context(running_control_plane(workdir / "cluster"))
        except (ControlPlaneError, subprocess.CalledProcessError, OSError) as exc:
            raise DemoError(f"the local control plane did not start: {exc}") from exc
        print(f"    kube-apiserver at {cp.server}; KUBECONFIG={cp.kubeconfig}")
        yield cp.env()


@contextlib.contextmanager
def _chroma(url: str | None, workdir: Path) -> Iterator[str]:
    if url:
        yield url
        return
    from devenv.chroma import running_chroma

    say("starting a Chroma server (chroma run)")
    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(running_chroma(workdir / "chroma"))
        except (AssertionError, OSError) as exc:  # its start raises AssertionError on a timeout
            raise DemoError(f"the Chroma server did not start: {_last_line(str(exc))}") from exc
        print(f"    Chroma at {server.url}")
        yield server.url


def _summarizer_yaml(chroma_url: str) -> str:
    return f"""
apiVersion: memorycore.io/v1alpha1
kind: SessionSummarizer
metadata:
  name: {SUMMARIZER}
  namespace: {NAMESPACE}
spec:
  store:
    url: {json.dumps(chroma_url)}
  sweep:
    intervalSeconds: 5
    idleSeconds: 0
"""


@dataclass
class _Created:
    """What this run added to the cluster, so that exactly that is removed at the end."""

    namespace: bool = False
    summarizer: bool = False
    summaries: bool = False


def _exists(env: dict[str, str], *args: str) -> dict[str, Any] | None:
    out = _kubectl(env, "get", *args, "--ignore-not-found", "-o", "json")
    return json.loads(out) if out.strip() else None


def _install(env: dict[str, str], url: str, created: _Created) -> None:
    say("installing the CRDs and a SessionSummarizer")
    _kubectl(env, "apply", "-f", str(REPO_ROOT / "crds"))
    _kubectl(env, "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
    namespace = _exists(env, "namespace", NAMESPACE)
    if namespace is None:
        _kubectl(env, "create", "namespace", NAMESPACE)
        created.namespace = True
    elif (namespace.get("status") or {}).get("phase") == "Terminating":
        raise DemoError(f"namespace {NAMESPACE} is being deleted; run the demo when it is gone")
    created.summarizer = _exists(env, "-n", NAMESPACE, "ssumr", SUMMARIZER) is None
    _kubectl(env, "apply", "-f", "-", input=_summarizer_yaml(url))


def _wait(
    what: str,
    done: Callable[[], bool],
    operator: subprocess.Popen[bytes],
    log: Path,
    timeout: float,
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code = operator.poll()
        if code is not None:
            last = _last_line(log.read_text(errors="replace"))
            raise DemoError(f"the operator exited with code {code}: {last} (log: {log})")
        if done():
            return
        time.sleep(0.5)
    raise DemoError(f"{what} did not happen within {timeout:.0f}s; operator log: {log}")


def _summarizer_checked(env: dict[str, str]) -> bool:
    obj = _exists(env, "-n", NAMESPACE, "ssumr", SUMMARIZER) or {}
    return bool((obj.get("status") or {}).get("conditions"))


def _all_summarized(env: dict[str, str], session_ids: list[str]) -> bool:
    from controller.core.naming import summary_object_name

    listing = json.loads(_kubectl(env, "-n", NAMESPACE, "get", "ssum", "-o", "json"))
    phases = {
        (o.get("metadata") or {}).get("name"): (o.get("status") or {}).get("phase")
        for o in listing.get("items") or []
    }
    return all(phases.get(summary_object_name(s)) == "Summarized" for s in session_ids)


def _found_by_sweep(env: dict[str, str]) -> list[str]:
    """The sessions whose SessionSummary the sweep made (trigger sweep)."""
    listing = json.loads(_kubectl(env, "-n", NAMESPACE, "get", "ssum", "-o", "json"))
    return sorted(
        o["spec"]["sessionId"]
        for o in listing.get("items") or []
        if o["spec"].get("trigger") == "sweep"
    )


def _summaryctl(env: dict[str, str], *args: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "controller", *args],
        env=env,
        cwd=REPO_ROOT,
        stdout=None,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise DemoError(f"summaryctl {args[0]} failed: {_last_line(out.stderr)}")


def _clean_up(
    env: dict[str, str],
    created: _Created,
    session_ids: list[str],
    operator: subprocess.Popen[bytes] | None,
) -> None:
    """Deletes what this run created, while its operator still runs (it removes its own
    finalizer from the SessionSummarizer). Reports, never raises: the demo's own error
    (if any) is the one that matters."""
    from controller.core.naming import summary_object_name

    steps: list[tuple[str, list[str]]] = []
    if created.summaries:
        names = [summary_object_name(s) for s in session_ids]
        steps.append(("its SessionSummaries", ["-n", NAMESPACE, "delete", "ssum", *names]))
    if created.summarizer:
        steps.append(
            (
                f"SessionSummarizer {SUMMARIZER}",
                ["-n", NAMESPACE, "delete", "ssumr", SUMMARIZER, "--wait=false"],
            )
        )
    if not steps and not created.namespace:
        return
    say(f"removing what the demo created in namespace {NAMESPACE}")
    for what, args in steps:
        try:
            _kubectl(env, *args, "--ignore-not-found")
        except DemoError as exc:
            print(f"    could not delete {what}: {exc}", file=sys.stderr)
    if created.summarizer:
        _drop_summarizer(env, operator)
    if created.namespace:
        try:
            _kubectl(env, "delete", "namespace", NAMESPACE, "--wait=false", "--ignore-not-found")
        except DemoError as exc:
            print(f"    could not delete namespace {NAMESPACE}: {exc}", file=sys.stderr)


def _drop_summarizer(env: dict[str, str], operator: subprocess.Popen[bytes] | None) -> None:
    """Waits for the operator to release the SessionSummarizer; when the demo's operator is
    not running (it failed), nobody else will, so its finalizer is removed here."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and operator is not None and operator.poll() is None:
        with contextlib.suppress(DemoError):
            if _exists(env, "-n", NAMESPACE, "ssumr", SUMMARIZER) is None:
                return
        time.sleep(0.3)
    with contextlib.suppress(DemoError):
        if _exists(env, "-n", NAMESPACE, "ssumr", SUMMARIZER) is not None:
            _kubectl(
                env,
                "-n",
                NAMESPACE,
                "patch",
                "ssumr",
                SUMMARIZER,
                "--type=merge",
                "-p",
                '{"metadata":{"finalizers":null}}',
            )


def run_demo(*, keep: bool, use_current_context: bool, chroma_url: str | None) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="sso-demo-"))
    try:
        _run(workdir, keep=keep, use_current_context=use_current_context, chroma_url=chroma_url)
    except DemoError as exc:
        if any(workdir.iterdir()):  # logs to look at
            raise DemoError(f"{exc} (logs: {workdir})") from exc
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    shutil.rmtree(workdir, ignore_errors=True)
    say("demo done: every process it started is stopped")
    return 0


def _run(workdir: Path, *, keep: bool, use_current_context: bool, chroma_url: str | None) -> None:
    from controller.store.connection import StoreLocation, connect
    from controller.store.errors import StoreUnavailable
    from controller.store.memory_store import MemoryStore
    from devenv.demo_data import SAMPLE_SESSIONS, memory_rows
    from devenv.operator import start_operator
    from devenv.processes import stop

    session_ids = [s.session_id for s in SAMPLE_SESSIONS]
    with _cluster(use_current_context, workdir) as env, _chroma(chroma_url, workdir) as url:
        location = StoreLocation(url=url)
        try:  # before the cluster is touched: a bad store leaves nothing behind
            store = MemoryStore(connect(location), location)
            store.heartbeat()
        except StoreUnavailable as exc:
            raise DemoError(str(exc)) from exc

        created = _Created()
        operator: subprocess.Popen[bytes] | None = None
        try:
            _install(env, url, created)

            say(f"loading {len(SAMPLE_SESSIONS)} sample agent sessions into neo-agent-memory")
            start = int(time.time() * 1000) - 3_600_000
            try:
                for i, session in enumerate(SAMPLE_SESSIONS):
                    rows = memory_rows(session, start + i * 600_000)
                    store.add_memories(
                        [r[0] for r in rows],
                        [r[1] for r in rows],
                        [r[2] for r in rows],
                        create=True,  # a fresh demo store has no memory collection yet
                    )
                    print(f"    {session.session_id}: {len(rows)} memories ({session.agent})")
            except StoreUnavailable as exc:
                raise DemoError(str(exc)) from exc

            say("starting the operator (python -m controller run --standalone, as a local process)")
            created.summaries = True  # from now on its sweep may create them
            op_env = dict(env, SSO_REPLICA_ID="demo-operator", SSO_SWEEP_TICK_SECONDS="2")
            log = workdir / "operator.log"
            operator = start_operator(log, op_env, "--standalone", "--namespace", NAMESPACE)
            _wait(
                "the operator's check of the SessionSummarizer",
                lambda: _summarizer_checked(env),
                operator,
                log,
                OPERATOR_READY_SECONDS,
            )

            sunset = SAMPLE_SESSIONS[:3]
            say(f"sunsetting {len(sunset)} sessions (summaryctl sunset); the sweep finds the last")
            for session in sunset:
                _summaryctl(env, "sunset", session.session_id, "-n", NAMESPACE)
            _wait(
                "every sample session Summarized",
                lambda: _all_summarized(env, session_ids),
                operator,
                log,
                SUMMARIZED_SECONDS,
            )
            say("kubectl get sessionsummaries")
            print(_kubectl(env, "-n", NAMESPACE, "get", "sessionsummaries"))
            for found in _found_by_sweep(env):
                print(f"    the sweep found {found} (nobody sunset it)")
            say("kubectl get sessionsummarizers")
            print(_kubectl(env, "-n", NAMESPACE, "get", "ssumr"))
            shown = str(len(session_ids))
            say(f"what the next agent reads at boot: summaryctl summaries --limit {shown}")
            _summaryctl(env, "summaries", "--limit", shown, "--chroma-url", url)
            if keep:
                say(f"--keep: servers stay up; operator log {log}. Ctrl-C to stop everything.")
                with contextlib.suppress(KeyboardInterrupt):
                    while True:
                        time.sleep(3600)
        finally:
            if use_current_context:  # a local control plane goes away as a whole
                _clean_up(env, created, session_ids, operator)
            if operator is not None:
                stop(operator)


def main(argv: list[str] | None = None) -> int:
    import argparse

    from controller.cli.args import check_chroma_url

    parser = argparse.ArgumentParser(
        prog="python -m devenv.demo",
        description="Sample agent sessions summarized end to end, on embedded defaults.",
    )
    parser.add_argument("--keep", action="store_true", help="leave the servers running at the end")
    parser.add_argument(
        "--use-current-context",
        action="store_true",
        help="use the current kube context instead of a local control plane",
    )
    parser.add_argument("--chroma-url", help="use this Chroma server instead of starting one")
    args = parser.parse_args(argv)
    try:
        if args.chroma_url is not None:
            check_chroma_url(args.chroma_url)
        return run_demo(
            keep=args.keep,
            use_current_context=args.use_current_context,
            chroma_url=args.chroma_url,
        )
    except Exception as exc:  # DemoError, CliError: one line, never a traceback
        print(f"demo: error: demo failed: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
