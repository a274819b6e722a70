"""summaryctl forget and rebuild: a SessionSummary that asks for spec.action Forget or
Rebuild (docs/privacy.md, "Forget and rebuild"), the same request `kubectl apply` makes,
with who ran it recorded for the operator's Event."""

from __future__ import annotations

import argparse
import getpass

from controller.cli.args import CliError
from controller.cli.commands import request_pass


def requester() -> str:
    """Who runs summaryctl: the OS user and the kubeconfig's user, as far as they are known."""
    try:
        who = getpass.getuser()
    except (KeyError, OSError):
        who = "unknown user"
    try:
        from kubernetes import config

        _, active = config.list_kube_config_contexts()
        kube_user = (active or {}).get("context", {}).get("user")
    except Exception:  # in a Pod, or no kubeconfig: the OS user says what is known
        kube_user = None
    return f"{who} via summaryctl" + (f" (kubeconfig user {kube_user})" if kube_user else "")


def cmd_forget(args: argparse.Namespace) -> int:
    """Forgets the session: its summary and the operator's state (--memories: its memories
    too, which needs --yes: they cannot be brought back)."""
    if args.memories and not args.yes:
        raise CliError(
            f"--memories deletes every memory of session {args.session_id!r} from the memory "
            "collection, for good; add --yes to confirm"
        )
    return request_pass(
        args,
        trigger="manual",
        action="Forget",
        done="Forgotten",
        forget_memories=args.memories,
        requested_by=requester(),
    )


def cmd_rebuild(args: argparse.Namespace) -> int:
    """Regenerates the session's summary from its living memories, replacing the old text."""
    return request_pass(args, trigger="manual", action="Rebuild", requested_by=requester())
