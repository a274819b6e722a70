"""summaryctl forget and rebuild: spec.action Forget or Rebuild (docs/privacy.md, "Forget
and rebuild"), with who ran it recorded for the operator's Event."""

from __future__ import annotations

import argparse
import getpass
import sys

from controller.cli.args import CliError, printable
from controller.cli.commands import request_pass
from controller.cli.failures import kube_call, store_errors


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
    """Regenerates the session's summary from its living memories, replacing the old text;
    with --all-with-secrets, asks that of every session whose stored state holds a secret."""
    if not args.all_with_secrets:
        if args.session_id is None:
            raise CliError("name the session to rebuild (SESSION_ID), or --all-with-secrets")
        return request_pass(args, trigger="manual", action="Rebuild", requested_by=requester())
    if args.session_id is not None or args.wait or args.summarizer is None:
        raise CliError(
            "--all-with-secrets takes no SESSION_ID nor --wait and needs --summarizer NAME: "
            "the store it writes and the redaction patterns it adds"
        )
    from controller.kube import client as kube

    asked = {"summarizer": args.summarizer, "action": "Rebuild", "requested_by": requester()}
    for session_id in (found := _with_secrets(args)):
        kube_call(kube.request_summary, args.namespace, session_id, trigger="manual", **asked)
        print(f"rebuild asked: {printable(session_id)}")
    print(
        f"{len(found)} session(s) with a secret stored; `kubectl -n {args.namespace} get "
        "sessionsummaries` follows them"
        if found
        else "no stored summary holds a secret the redaction rules recognise"
    )
    return 0


def _with_secrets(args: argparse.Namespace) -> list[str]:
    """Sessions whose stored summary holds a secret the next pass would mask
    (PassRedaction.prior)."""
    from controller import backends
    from controller.cli.settings import open_store
    from controller.core.summary import UnreadablePriorSummary
    from controller.redaction import PassRedaction

    store, summarizer = open_store(args)
    rules = backends.redaction_of(summarizer.spec)
    found: list[str] = []
    with store_errors():
        for _, _, meta in store.latest_summaries(limit=2**62):
            session_id = meta.get("sessionId")
            mask = PassRedaction(rules)
            try:
                mask.prior(store.read_summary(session_id) if isinstance(session_id, str) else None)
            except UnreadablePriorSummary as exc:  # the message names the session
                print(f"not asked: {printable(str(exc))}", file=sys.stderr)
            if mask.prior_found:
                found.append(str(session_id))
    return found
