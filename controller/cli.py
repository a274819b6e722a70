"""summaryctl: what agents and people call.

summaryctl sunset SESSION_ID        create/patch the session's SessionSummary (sunset step)
summaryctl summaries --limit N      the newest summaries, as the next agent reads them at boot
summaryctl summarize ID... --local  recovery path: summarize straight into Chroma, no cluster
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import sys
import time
from collections.abc import Iterator
from typing import Any, NoReturn
from urllib.parse import urlsplit

from controller.api import DEFAULT_EXCLUDED_TYPES

MAX_SESSION_ID = 1024  # the CRD's spec.sessionId maxLength
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


class CliError(Exception):
    """A failure with a message that says what to do; printed without a traceback."""


# -- argument checks: run by argparse, before any API or store call ---------------------


def _shown(value: str, limit: int = 60) -> str:
    return repr(value if len(value) <= limit else value[:limit] + "...")


def printable(text: object) -> str:
    """text for one terminal line: control characters (a carriage return, an escape
    sequence, a newline in an id) shown escaped instead of acting on the terminal."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def session_id_arg(value: str) -> str:
    """A session id as memories carry it: the same rules as the CRD's spec.sessionId."""
    if not value.strip():
        raise argparse.ArgumentTypeError("a session id must not be empty or only whitespace")
    if len(value) > MAX_SESSION_ID:
        raise argparse.ArgumentTypeError(
            f"a session id is at most {MAX_SESSION_ID} characters (got {len(value)})"
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError(
            f"session id {_shown(value)} is not valid text (undecodable bytes)"
        ) from None
    return value


def namespace_arg(value: str) -> str:
    if len(value) > 63 or not _DNS_LABEL.fullmatch(value):
        raise argparse.ArgumentTypeError(
            f"invalid namespace {_shown(value)}: lowercase letters, digits and '-', "
            "at most 63 characters"
        )
    return value


def object_name_arg(value: str) -> str:
    if len(value) > 253 or not _DNS_SUBDOMAIN.fullmatch(value):
        raise argparse.ArgumentTypeError(
            f"invalid object name {_shown(value)}: lowercase letters, digits, '-' and '.', "
            "at most 253 characters"
        )
    return value


def positive_int_arg(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {_shown(value)}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (got {number})")
    return number


def seconds_arg(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {_shown(value)}") from None
    if not math.isfinite(number) or number < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds (got {value})")
    return number


def nonblank_arg(value: str) -> str:
    if not value.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    if not value.isprintable():
        raise argparse.ArgumentTypeError(f"{_shown(value)} contains control characters")
    return value


def collection_arg(value: str) -> str:
    from controller.api import StoreSpec

    problem = StoreSpec.collection_name_problem(value)
    if problem:
        raise argparse.ArgumentTypeError(
            f"{_shown(value)} is not a Chroma collection name: it {problem}"
        )
    return value


def chroma_url_problem(url: str) -> str | None:
    """Why url cannot be a Chroma server address, or None. The client uses only scheme,
    host and port: anything else would be silently ignored, so it is refused."""
    try:
        parts = urlsplit(url)
        port = parts.port  # ValueError when not a number or out of range
    except ValueError as exc:
        return str(exc)
    if parts.scheme not in ("http", "https"):
        return "the scheme must be http or https (e.g. http://localhost:8000)"
    if not parts.hostname:
        return "no host"
    if any(c.isspace() or not c.isprintable() for c in parts.netloc):
        return "the host contains whitespace or control characters"
    if port == 0:
        return "port 0 is not a server port"
    if parts.username is not None or parts.password is not None:
        return "credentials in the URL are not used; put a token in CHROMA_TOKEN"
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return "only scheme, host and port are used; remove the path, query or fragment"
    from controller.api import StoreSpec  # the CRD's rule, for what is left

    return StoreSpec.url_problem(url)


def check_chroma_url(url: str) -> str:
    problem = chroma_url_problem(url)
    if problem:
        raise CliError(f"invalid Chroma URL {_shown(url)}: {problem}")
    return url


# -- Kubernetes and store errors as one line ------------------------------------------------


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
        if exc.status == 404:
            raise CliError(f"not found: {_api_message(exc)}") from exc
        if exc.status == 403:
            raise CliError(f"forbidden: {_api_message(exc)}") from exc
        if exc.status == 422:
            raise CliError(f"rejected by the API server: {_api_message(exc)}") from exc
        raise CliError(f"Kubernetes API error {exc.status}: {_api_message(exc)}") from exc


def _api_message(exc: Any) -> str:
    try:
        return str(json.loads(exc.body).get("message"))
    except (TypeError, ValueError, AttributeError):
        return str(exc.reason)


def _missing_collection(exc: Any) -> CliError:
    return CliError(f"{exc} (--{exc.role}-collection; reading never creates a collection)")


@contextlib.contextmanager
def _store_errors() -> Iterator[None]:
    """Every way a store call fails, as a CliError naming what to fix."""
    from controller.store.errors import (
        CollectionNotFound,
        EmbeddingMismatch,
        InvalidStoreConfig,
        StoreUnavailable,
    )

    try:
        yield
    except CollectionNotFound as exc:
        raise _missing_collection(exc) from exc
    except (StoreUnavailable, EmbeddingMismatch, InvalidStoreConfig) as exc:
        raise CliError(str(exc)) from exc


# -- commands ------------------------------------------------------------------------------


def _check_summarizer_exists(namespace: str, name: str) -> None:
    """A --summarizer that names nothing would leave the session Pending; say so now. Best
    effort: an identity allowed to sunset may not be allowed to read SessionSummarizers."""
    from kubernetes.client.exceptions import ApiException

    from controller.api import GROUP, SUMMARIZER_PLURAL, VERSION
    from controller.kube import client as kube

    def exists() -> bool:
        try:
            kube.custom().get_namespaced_custom_object(
                GROUP, VERSION, namespace, SUMMARIZER_PLURAL, name
            )
        except ApiException as exc:
            if exc.status == 403:
                return True  # cannot tell; the object's condition will say
            if exc.status == 404 and "could not find the requested resource" not in (
                exc.body or ""
            ):
                return False
            raise
        return True

    if not _kube_call(exists):
        raise CliError(
            f"SessionSummarizer {namespace}/{name} does not exist "
            f"(kubectl -n {namespace} get sessionsummarizers); nothing was changed"
        )


def cmd_sunset(args: argparse.Namespace) -> int:
    from controller.kube import client as kube

    if args.summarizer is not None:
        _check_summarizer_exists(args.namespace, args.summarizer)
    name, action = _kube_call(
        kube.request_summary,
        args.namespace,
        args.session_id,
        trigger="sunset",
        summarizer=args.summarizer,
        set_summarizer_on_patch=args.summarizer is not None,
    )
    if action == "created":
        applied = f"summarizerRef {args.summarizer or 'default'}"
    elif args.summarizer is not None:
        applied = f"new pass requested, summarizerRef set to {args.summarizer}"
    else:
        applied = "new pass requested, summarizerRef unchanged"
    print(f"sessionsummary/{name} {action} (namespace {args.namespace}; {applied})")
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
        f"not summarized within {args.wait:g}s; check `kubectl -n {args.namespace} describe "
        f"sessionsummary {name}` and that the operator runs"
    )


def _location(args: argparse.Namespace) -> Any:
    from controller.store.connection import StoreLocation

    if not args.chroma_url and not args.path:
        raise CliError("say where Chroma is: --chroma-url http://HOST:8000 or --path DIR")
    return StoreLocation(
        url=check_chroma_url(args.chroma_url) if args.chroma_url else None,
        path=args.path,
        tenant=args.tenant,
        database=args.database,
        memory_collection=args.memory_collection,
        summary_collection=args.summary_collection,
        token=os.environ.get("CHROMA_TOKEN") or None,
    )


def _store(args: argparse.Namespace) -> Any:
    from controller.store.connection import connect
    from controller.store.errors import InvalidStoreConfig, StoreUnavailable
    from controller.store.memory_store import MemoryStore

    location = _location(args)
    try:
        return MemoryStore(connect(location), location)
    except StoreUnavailable as exc:
        raise CliError(f"{exc}; is the Chroma server running?") from exc
    except InvalidStoreConfig as exc:
        raise CliError(str(exc)) from exc


def cmd_summaries(args: argparse.Namespace) -> int:
    store = _store(args)
    with _store_errors():
        rows = store.latest_summaries(args.limit)
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


_OUTCOME_DETAIL = {
    "summarized": "{new} new memories, {passes} pass(es)",
    "up-to-date": "already up to date",
    "not-found": "no memories with this sessionId; nothing written",
    "empty": "only excluded memory types; nothing written",
}


def cmd_summarize(args: argparse.Namespace) -> int:
    from controller.embeddings.minilm import EmbeddingError, LocalMiniLMEmbedding
    from controller.pipeline import summarize_session
    from controller.store.errors import (
        CollectionNotFound,
        EmbeddingMismatch,
        InvalidStoreConfig,
        StoreUnavailable,
    )

    if not args.local:
        raise CliError(
            "summarize writes to Chroma directly, bypassing the operator's single-writer "
            "claim; pass --local to confirm that no operator is running against this store "
            "(otherwise use `summaryctl sunset`)"
        )
    store = _store(args)
    try:
        embed = LocalMiniLMEmbedding()
    except (EmbeddingError, ValueError) as exc:
        raise CliError(f"the local embedding model cannot load: {exc}") from exc
    failures: list[str] = []
    not_found: list[str] = []
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
        except CollectionNotFound as exc:  # the same for every session: stop here
            raise _missing_collection(exc) from exc
        except InvalidStoreConfig as exc:
            raise CliError(str(exc)) from exc
        except (StoreUnavailable, EmbeddingMismatch, EmbeddingError, ValueError) as exc:
            failures.append(session_id)
            print(
                f"[{i}/{total}] {printable(session_id)}: FAILED: {printable(exc)}", file=sys.stderr
            )
            continue
        if outcome.kind == "not-found":
            not_found.append(session_id)
        detail = _OUTCOME_DETAIL.get(outcome.kind, "").format(
            new=outcome.new_memories, passes=outcome.passes
        )
        shown = f"[{i}/{total}] {printable(session_id)}: {outcome.kind}"
        print(shown + (f" ({detail})" if detail else ""))
    if not_found:
        print(
            f"summaryctl: no memories found for {len(not_found)} of {total} session(s): "
            + ", ".join(map(printable, not_found)),
            file=sys.stderr,
        )
    if failures:
        print(
            f"summaryctl: {len(failures)} of {total} session(s) failed: "
            + ", ".join(map(printable, failures)),
            file=sys.stderr,
        )
    return 1 if failures or not_found else 0


# -- the parser ----------------------------------------------------------------------------


def _add_store_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--chroma-url",
        default=os.environ.get("CHROMA_URL"),
        help="Chroma server URL, http(s)://HOST[:PORT] (env CHROMA_URL; token: env CHROMA_TOKEN)",
    )
    p.add_argument("--path", help="embedded Chroma directory (single process only)")
    p.add_argument("--tenant", type=nonblank_arg, default="default_tenant")
    p.add_argument("--database", type=nonblank_arg, default="default_database")
    p.add_argument("--memory-collection", type=collection_arg, default="neo-agent-memory")
    p.add_argument("--summary-collection", type=collection_arg, default="neo-agent-sessions")


class _Parser(argparse.ArgumentParser):
    """argparse, with control characters in an echoed argument shown escaped: a stray
    carriage return or escape sequence must not rewrite the error line on the terminal."""

    def error(self, message: str) -> NoReturn:
        super().error(printable(message))


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="summaryctl", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser(
        "sunset", help="force an immediate summary of a session (create/patch its SessionSummary)"
    )
    p.add_argument("session_id", type=session_id_arg, metavar="SESSION_ID")
    p.add_argument(
        "-n",
        "--namespace",
        type=namespace_arg,
        default=os.environ.get("SSO_NAMESPACE") or "default",
        help="namespace of the SessionSummary (env SSO_NAMESPACE; default: default)",
    )
    p.add_argument(
        "--summarizer",
        type=object_name_arg,
        default=None,
        help="SessionSummarizer name: for a new object (default: default), and written to an "
        "existing one (without it, an existing object keeps its summarizer)",
    )
    p.add_argument(
        "--wait",
        type=seconds_arg,
        default=0,
        metavar="SECONDS",
        help="wait until the summary is written (exit 1 unless Summarized)",
    )
    p.set_defaults(func=cmd_sunset)

    p = sub.add_parser("summaries", help="the newest summaries, newest first")
    p.add_argument("--limit", type=positive_int_arg, default=5, help="how many (at least 1)")
    p.add_argument("--json", action="store_true")
    _add_store_args(p)
    p.set_defaults(func=cmd_summaries)

    p = sub.add_parser("summarize", help="recovery path: summarize sessions directly, no cluster")
    p.add_argument("session_ids", nargs="+", type=session_id_arg, metavar="SESSION_ID")
    p.add_argument(
        "--local",
        action="store_true",
        help="required: confirms no operator writes to this store meanwhile",
    )
    _add_store_args(p)
    p.set_defaults(func=cmd_summarize)

    return parser


def _quiet_broken_pipe() -> None:
    """`summaryctl summaries | head`: the reader left; no traceback at exit either."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except CliError as exc:
        print(f"summaryctl: error: {printable(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        _quiet_broken_pipe()
        return 1
    except Exception as exc:  # a failure nobody named: still one line, never a traceback
        print(f"summaryctl: error: {type(exc).__name__}: {printable(exc)}", file=sys.stderr)
        return 1
