"""summaryctl: what agents and people call.

summaryctl sunset SESSION_ID        create/patch the session's SessionSummary (sunset step)
summaryctl summaries --limit N      the newest summaries, as the next agent reads them at boot
summaryctl summarize ID... --local  recovery path: summarize straight into Chroma, no cluster
summaryctl demo                     sample sessions summarized end to end
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from controller.api import DEFAULT_EXCLUDED_TYPES


class CliError(Exception):
    """A failure with a message that says what to do; printed without a traceback."""


def _kube_call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException
    from urllib3.exceptions import HTTPError

    try:
        return fn(*args, **kwargs)
    except ConfigException as exc:
        raise CliError(
            f"no Kubernetes context ({exc}); set KUBECONFIG, or run `make cluster-up` for a "
            "local control plane"
        ) from exc
    except HTTPError as exc:
        raise CliError(f"cannot reach the Kubernetes API: {exc}") from exc
    except ApiException as exc:
        if exc.status == 404 and "the server could not find the requested resource" in (
            exc.body or ""
        ):
            raise CliError(
                "the SessionSummary CRD is not installed in this cluster: "
                "kubectl apply -f crds/ (or helm install the chart)"
            ) from exc
        if exc.status == 403:
            raise CliError(f"forbidden: {_api_message(exc)}") from exc
        if exc.status == 422:
            raise CliError(f"rejected by the API server: {_api_message(exc)}") from exc
        raise CliError(f"Kubernetes API error {exc.status}: {_api_message(exc)}") from exc


def _api_message(exc: Any) -> str:
    try:
        return str(json.loads(exc.body).get("message"))
    except (TypeError, ValueError):
        return str(exc.reason)


def cmd_sunset(args: argparse.Namespace) -> int:
    from controller import kube

    name, action = _kube_call(
        kube.request_summary,
        args.namespace,
        args.session_id,
        trigger="sunset",
        summarizer=args.summarizer,
    )
    print(f"sessionsummary/{name} {action} (namespace {args.namespace})")
    if args.wait <= 0:
        return 0
    deadline = time.monotonic() + args.wait
    while time.monotonic() < deadline:
        obj = _kube_call(kube.get_summary, args.namespace, name) or {}
        status = obj.get("status") or {}
        generation = (obj.get("metadata") or {}).get("generation")
        if status.get("observedGeneration") == generation and status.get("phase") in (
            "Summarized",
            "Empty",
            "NotFound",
            "Failed",
        ):
            print(f"{status['phase']}: {status.get('message', '')}")
            return 0 if status["phase"] == "Summarized" else 1
        time.sleep(0.2)
    raise CliError(
        f"not summarized within {args.wait}s; check `kubectl -n {args.namespace} describe "
        f"sessionsummary {name}` and that the operator runs"
    )


def _location(args: argparse.Namespace) -> Any:
    from controller.store import StoreLocation

    if not args.chroma_url and not args.path:
        raise CliError("say where Chroma is: --chroma-url http://HOST:8000 or --path DIR")
    return StoreLocation(
        url=args.chroma_url or None,
        path=args.path,
        tenant=args.tenant,
        database=args.database,
        memory_collection=args.memory_collection,
        summary_collection=args.summary_collection,
        token=os.environ.get("CHROMA_TOKEN") or None,
    )


def _store(args: argparse.Namespace) -> Any:
    from controller.store import MemoryStore, StoreUnavailable, connect

    location = _location(args)
    try:
        return MemoryStore(connect(location), location)
    except StoreUnavailable as exc:
        raise CliError(f"{exc}; is the Chroma server running?") from exc


def cmd_summaries(args: argparse.Namespace) -> int:
    from controller.store import StoreUnavailable

    try:
        rows = _store(args).latest_summaries(args.limit)
    except StoreUnavailable as exc:
        raise CliError(str(exc)) from exc
    if args.json:
        print(json.dumps([{"id": i, "document": d, "metadata": m} for i, d, m in rows], indent=2))
        return 0
    if not rows:
        print("no summaries yet")
    for row_id, document, meta in rows:
        when = meta.get("timestamp")
        stamp = (
            time.strftime("%Y-%m-%d %H:%M", time.gmtime(when / 1000))
            if isinstance(when, int | float)
            else "?"
        )
        print(
            f"== {row_id}  [{meta.get('category', '?')}] {stamp}Z  "
            f"{meta.get('memoryCount', '?')} memories"
        )
        print(document.strip())
        print()
    return 0


def cmd_summarize(args: argparse.Namespace) -> int:
    from controller.embeddings import EmbeddingError, LocalMiniLMEmbedding
    from controller.store import StoreUnavailable
    from controller.summarize import summarize_session

    if not args.local:
        raise CliError(
            "summarize writes to Chroma directly, bypassing the operator's single-writer "
            "claim; pass --local to confirm that no operator is running against this store "
            "(otherwise use `summaryctl sunset`)"
        )
    store = _store(args)
    embed = LocalMiniLMEmbedding()
    failures = 0
    total = len(args.session_ids)
    for i, session_id in enumerate(args.session_ids, 1):
        try:
            outcome = summarize_session(
                store,
                session_id,
                embed=lambda texts: list(embed(texts)),
                writer=f"summaryctl@{os.uname().nodename}",
                trigger="manual",
                excluded_types=DEFAULT_EXCLUDED_TYPES,
            )
        except (StoreUnavailable, EmbeddingError, ValueError) as exc:
            failures += 1
            print(f"[{i}/{total}] {session_id}: FAILED: {exc}", file=sys.stderr)
            continue
        detail = {
            "summarized": f"{outcome.new_memories} new memories, {outcome.passes} pass(es)",
            "up-to-date": "already up to date",
            "not-found": "no memories with this sessionId; nothing written",
            "empty": "only excluded memory types; nothing written",
        }[outcome.kind]
        print(f"[{i}/{total}] {session_id}: {outcome.kind} ({detail})")
    return 1 if failures else 0


def cmd_demo(args: argparse.Namespace) -> int:
    from controller.demo import run_demo

    return run_demo(
        keep=args.keep, use_current_context=args.use_current_context, chroma_url=args.chroma_url
    )


def _add_store_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--chroma-url",
        default=os.environ.get("CHROMA_URL"),
        help="Chroma server URL (env CHROMA_URL)",
    )
    p.add_argument("--path", help="embedded Chroma directory (single process only)")
    p.add_argument("--tenant", default="default_tenant")
    p.add_argument("--database", default="default_database")
    p.add_argument("--memory-collection", default="neo-agent-memory")
    p.add_argument("--summary-collection", default="neo-agent-sessions")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="summaryctl", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser(
        "sunset", help="force an immediate summary of a session (create/patch its SessionSummary)"
    )
    p.add_argument("session_id")
    p.add_argument("-n", "--namespace", default=os.environ.get("SSO_NAMESPACE", "default"))
    p.add_argument("--summarizer", default="default", help="SessionSummarizer name")
    p.add_argument(
        "--wait",
        type=float,
        default=0,
        metavar="SECONDS",
        help="wait until the summary is written (exit 1 unless Summarized)",
    )
    p.set_defaults(func=cmd_sunset)

    p = sub.add_parser("summaries", help="the newest summaries, newest first")
    p.add_argument("--limit", type=int, default=5)
    p.add_argument("--json", action="store_true")
    _add_store_args(p)
    p.set_defaults(func=cmd_summaries)

    p = sub.add_parser("summarize", help="recovery path: summarize sessions directly, no cluster")
    p.add_argument("session_ids", nargs="+", metavar="SESSION_ID")
    p.add_argument(
        "--local",
        action="store_true",
        help="required: confirms no operator writes to this store meanwhile",
    )
    _add_store_args(p)
    p.set_defaults(func=cmd_summarize)

    p = sub.add_parser("demo", help="sample agent sessions summarized end to end")
    p.add_argument("--keep", action="store_true", help="leave the servers running at the end")
    p.add_argument(
        "--use-current-context",
        action="store_true",
        help="use the current kube context instead of a local control plane",
    )
    p.add_argument("--chroma-url", help="use this Chroma server instead of starting one")
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except CliError as exc:
        print(f"summaryctl: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
