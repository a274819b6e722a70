"""summaryctl's parser and entry point (the console script and `python -m controller`)."""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import sys
from collections.abc import Callable
from typing import NoReturn

from controller import cli as cli_package
from controller.api import StoreSpec
from controller.cli import commands
from controller.cli.args import (
    STORE_FLAGS,
    CliError,
    namespace_arg,
    object_name_arg,
    out,
    positive_int_arg,
    seconds_arg,
    session_id_arg,
    store_name_arg,
    text_arg,
)
from controller.core.text import printable


def _add_store_args(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group()  # CHROMA_URL set: --path still takes precedence
    where.add_argument(
        "--chroma-url",
        default=os.environ.get("CHROMA_URL"),
        help="Chroma server URL, http(s)://HOST[:PORT] (env CHROMA_URL; token: env CHROMA_TOKEN)",
    )
    where.add_argument("--path", help="embedded Chroma directory (single process only)")
    for field in STORE_FLAGS:  # --tenant ... --summary-collection, the spec's default in the help
        flag, default = f"--{field.replace('_', '-')}", StoreSpec.model_fields[field].default
        check = functools.partial(store_name_arg, field)
        p.add_argument(flag, type=check, help=f"default: {default}")
    which = p.add_mutually_exclusive_group()
    which.add_argument(
        "--summarizer",
        type=object_name_arg,
        metavar="NAME",
        help="use this SessionSummarizer's settings, read from the cluster (-n); the store "
        "flags above override its store",
    )
    which.add_argument(
        "--summarizer-file",
        metavar="FILE",
        help="use the settings of the SessionSummarizer in this manifest (YAML)",
    )
    _add_namespace(p, "the summarizer's namespace, where its Secrets are", None)


def _add_namespace(p: argparse.ArgumentParser, what: str, default: str | None) -> None:
    shown = default or "the manifest's, else default"
    p.add_argument(
        "-n",
        "--namespace",
        type=namespace_arg,
        default=os.environ.get("SSO_NAMESPACE") or default,
        help=f"{what} (env SSO_NAMESPACE; default: {shown})",
    )


def _add_wait(p: argparse.ArgumentParser, until: str) -> None:
    p.add_argument("--wait", type=seconds_arg, default=0, metavar="SECONDS", help=until)


class _Parser(argparse.ArgumentParser):
    """argparse, with control characters in an echoed argument shown escaped."""

    def error(self, message: str) -> NoReturn:
        if "unrecognized arguments: --local" in message:
            message += " (removed in 0.2.0: --bypass-claim confirms the same)"
        super().error(printable(message))


def _add_request_args(p: argparse.ArgumentParser, done: str, nargs: str | None = None) -> None:
    """SESSION_ID, -n, --summarizer and --wait: a request for a pass of the session."""
    p.add_argument("session_id", type=session_id_arg, metavar="SESSION_ID", nargs=nargs)
    _add_namespace(p, "namespace of the SessionSummary", "default")
    p.add_argument(
        "--summarizer",
        type=object_name_arg,
        help="SessionSummarizer name: for a new object (default: default), and written to an "
        "existing one (without it, an existing object keeps its summarizer)",
    )
    _add_wait(
        p,
        f"wait until the pass ends: exit 0 when {done}, 1 as soon as it fails (its reason and "
        "message printed) or ends otherwise",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="summaryctl",
        description=cli_package.__doc__,
        allow_abbrev=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, func: Callable[..., int], about: str = "") -> argparse.ArgumentParser:
        # Its help: the command's docstring. No abbreviations: `--b` must not pass for a
        # confirmation such as --bypass-claim.
        p = sub.add_parser(name, help=about or func.__doc__, allow_abbrev=False)
        p.set_defaults(func=func)
        return p

    about = "force an immediate summary of a session (create/patch its SessionSummary)"
    p = command("sunset", commands.request_pass, about)
    _add_request_args(p, "Summarized")

    p = command("rebuild", commands.cmd_rebuild)
    _add_request_args(p, "Summarized", nargs="?")
    p.add_argument(
        "--all-with-secrets",
        action="store_true",
        help="instead of SESSION_ID: every session whose stored summary or ledger entry holds "
        "a secret the redaction rules recognise (written before redaction); needs --summarizer",
    )
    # --all-with-secrets reads the store the SessionSummarizer names (its Secrets in -n).
    p.set_defaults(**dict.fromkeys(("chroma_url", "path", *STORE_FLAGS, "summarizer_file")))

    p = command("forget", commands.cmd_forget)
    _add_request_args(p, "Forgotten")
    p.add_argument(
        "--memories",
        action="store_true",
        help="delete the session's memories from the memory collection too (needs --yes)",
    )
    p.add_argument("--yes", action="store_true", help="confirm --memories")

    p = command("check", commands.cmd_check)
    _add_namespace(p, "namespace of the SessionSummarizer", "default")
    p.add_argument(
        "--summarizer", type=object_name_arg, default="default", help="its name (default: default)"
    )
    _add_wait(p, "measure again until Ready, up to this long (a first measurement: up to 30s)")

    p = command("remember", commands.cmd_remember)
    p.add_argument("session_id", type=session_id_arg, metavar="SESSION_ID")
    p.add_argument("--prompt", type=text_arg, help="what the user asked")
    p.add_argument("--response", type=text_arg, help="what the agent did and answered")
    p.add_argument(
        "--thought", type=text_arg, default="", help="the agent's reasoning (default: none)"
    )
    p.add_argument(
        "--sunset-marker",
        action="store_true",
        help="instead of a turn: a sunset marker, asking for a summary now without Kubernetes "
        "credentials (docs/agents.md)",
    )

    p = command("summaries", commands.cmd_summaries)
    p.add_argument("--limit", type=positive_int_arg, default=5, help="how many (at least 1)")
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--full",
        action="store_true",
        help="each summary whole, as its row and ledger keep it (documents are bounded)",
    )

    p = command("summarize", commands.cmd_summarize)
    p.add_argument("session_ids", nargs="+", type=session_id_arg, metavar="SESSION_ID")
    p.add_argument(
        "--bypass-claim",
        action="store_true",
        help="required: write without the operator's session claim, confirming that no "
        "operator writes to this store meanwhile (was --local)",
    )

    p = command("ledger", commands.cmd_ledger)
    p.add_argument("session_id", type=session_id_arg, metavar="SESSION_ID")
    p.add_argument("--json", action="store_true", help="every key, and the row's document")

    command("handover", commands.cmd_handover)

    p = command("verify", commands.cmd_verify)
    p.add_argument("session_ids", nargs="+", type=session_id_arg, metavar="SESSION_ID")
    p.add_argument("--json", action="store_true")

    for store_command in ("remember", "summaries", "summarize", "ledger", "handover", "verify"):
        _add_store_args(sub.choices[store_command])  # after each command's own arguments
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `summaryctl summaries | head`: no traceback at exit either
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Exception as exc:  # one line, never a traceback
        from controller.status.conditions import masked, own_text

        # What says what to do (a refused setting, a missing Secret): exit 2; a failure nobody
        # named: its type, exit 1. Masked unless ours: a server's answer may quote a credential.
        named = isinstance(exc, CliError) or own_text(exc)
        shown = str(exc) if named else f"{type(exc).__name__}: {exc}"
        if not (own_text(exc) or own_text(exc.__cause__)):
            shown = masked(shown, 4000, flat=False)
        out(f"summaryctl: error: {shown}", err=True)
        return 2 if named else 1
