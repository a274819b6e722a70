"""summaryctl's commands: sunset and check (the cluster), summaries and summarize (the store), with
Kubernetes and store errors turned into one line."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from types import MappingProxyType
from typing import Any

from controller.cli.args import CliError, printable
from controller.cli.failures import kube_call, missing_collection, store_errors

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

    if not kube_call(exists):
        raise CliError(
            f"SessionSummarizer {namespace}/{name} does not exist "
            f"(kubectl -n {namespace} get sessionsummarizers); nothing was changed"
        )


def cmd_sunset(args: argparse.Namespace) -> int:
    return request_pass(args, trigger="sunset")


def request_pass(
    args: argparse.Namespace,
    *,
    trigger: str,
    action: str = "Summarize",
    done: str = "Summarized",
    **asked: Any,
) -> int:
    """Creates or patches the session's SessionSummary to ask for a pass of `action` and,
    with --wait, waits for its end: exit 0 once the object reaches `done`."""
    from controller.kube import client as kube

    if args.summarizer is not None:
        _check_summarizer_exists(args.namespace, args.summarizer)
    name, made = kube_call(
        kube.request_summary,
        args.namespace,
        args.session_id,
        trigger=trigger,
        summarizer=args.summarizer,
        set_summarizer_on_patch=args.summarizer is not None,
        action=action,
        **asked,
    )
    if made == "created":
        applied = f"summarizerRef {args.summarizer or 'default'}"
    elif args.summarizer is not None:
        applied = f"new pass requested, summarizerRef set to {args.summarizer}"
    else:
        applied = "new pass requested, summarizerRef unchanged"
    if action != "Summarize":
        applied += f", action {action}"
    print(f"sessionsummary/{name} {made} (namespace {args.namespace}; {applied})")
    if args.wait <= 0:
        return 0
    deadline = time.monotonic() + args.wait
    last: dict[str, Any] = {}
    while time.monotonic() < deadline:
        obj = kube_call(kube.get_summary, args.namespace, name) or {}
        last = obj
        outcome = pass_outcome(obj)
        if outcome is not None:
            phase, reason, message = outcome
            if phase == done:
                print(f"{phase}: {message}")
                return 0
            print(printable(f"{phase}: {reason}: {message}"), file=sys.stderr)
            if phase == "Pending":
                print(
                    f"summaryctl: the pass failed; the operator retries it with backoff "
                    f"(kubectl -n {args.namespace} describe sessionsummary {name})",
                    file=sys.stderr,
                )
            return 1
        time.sleep(0.2)
    raise CliError(
        f"not {done.lower()} within {args.wait:g}s ({_where(last)}); check `kubectl -n "
        f"{args.namespace} describe sessionsummary {name}` and that the operator runs"
    )


DONE = ("Summarized", "Empty", "NotFound", "Failed", "Forgotten")
NOT_YET = ("SessionClaimed", "Summarizing")


def pass_outcome(obj: dict[str, Any]) -> tuple[str, str, str] | None:
    """(phase, reason, message) once the pass for the object's current request has ended:
    done, or failed (Pending between retries: reason and message say why, as soon as the
    first pass fails); None while it is still to come, waiting or running."""
    status = obj.get("status") or {}
    generation = (obj.get("metadata") or {}).get("generation")
    if status.get("observedGeneration") != generation:
        return None
    summarized: dict[str, Any] = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "Summarized"), {}
    )
    current = summarized.get("observedGeneration") in (None, generation)
    reason = str(summarized.get("reason", "")) if current else ""
    message = str(status.get("message", ""))
    phase = status.get("phase")
    if phase in DONE:
        return str(phase), reason, message
    failed = current and summarized.get("status") == "False" and reason not in ("", *NOT_YET)
    return ("Pending", reason, message) if phase == "Pending" and failed else None


def _where(obj: dict[str, Any]) -> str:
    status = obj.get("status") or {}
    if not obj:
        return "the object is gone"
    if not status:
        return "no pass has started: is the operator running, and does it watch this namespace?"
    return f"phase {status.get('phase') or 'none yet'}: {status.get('message', '')}"


def cmd_check(args: argparse.Namespace) -> int:
    """Whether a SessionSummarizer is Ready: every condition, one line each."""
    from controller.api import GROUP, SUMMARIZER_PLURAL, VERSION
    from controller.kube import client as kube

    deadline = time.monotonic() + args.wait

    def read() -> Any:
        return kube.custom().get_namespaced_custom_object(
            GROUP, VERSION, args.namespace, SUMMARIZER_PLURAL, args.summarizer
        )

    while True:
        obj = kube_call(read)
        conditions = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}
        ready = conditions.get("Ready", {})
        if ready.get("status") == "True" or time.monotonic() >= deadline:
            break
        time.sleep(1)
    print(f"sessionsummarizer/{args.summarizer} (namespace {args.namespace}):")
    for kind in sorted(conditions, key=lambda t: (t != "Ready", t)):
        c = conditions[kind]
        print(printable(f"  {kind}={c.get('status')} {c.get('reason')}: {c.get('message', '')}"))
    if ready.get("status") != "True":
        print(f"summaryctl: not Ready (waited {args.wait:g}s)", file=sys.stderr)
        return 1
    return 0


def _store(args: argparse.Namespace, summarizer: Any = None) -> Any:
    from controller.cli.settings import store_location
    from controller.store.connection import connect
    from controller.store.errors import InvalidStoreConfig, StoreUnavailable
    from controller.store.memory_store import MemoryStore

    location = store_location(args, summarizer)
    try:
        return MemoryStore(connect(location), location)
    except StoreUnavailable as exc:
        raise CliError(f"{exc}; is the Chroma server running?") from exc
    except InvalidStoreConfig as exc:
        raise CliError(str(exc)) from exc


def _full_document(store: Any, session_id: Any, document: str) -> str:
    """The whole summary, nothing folded: rebuilt from the row and its ledger entry (a row
    we did not write is its document)."""
    from controller.core.document import render_document
    from controller.core.summary import StructuredSummary

    try:
        prior = store.read_summary(str(session_id))
    except ValueError:
        return document
    if isinstance(prior, StructuredSummary):
        return render_document(prior, max_chars=None)
    return document


def cmd_summaries(args: argparse.Namespace) -> int:
    from controller.cli.settings import load_summarizer

    store = _store(args, load_summarizer(args))
    with store_errors():
        rows = store.latest_summaries(args.limit)
    if args.full:
        with store_errors():
            rows = [(i, _full_document(store, m.get("sessionId"), d), m) for i, d, m in rows]
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


_OUTCOME_DETAIL = MappingProxyType(
    {
        "summarized": "{new} new memories, {passes} pass(es)",
        "up-to-date": "already up to date",
        "not-found": "no memories with this sessionId; nothing written",
        "empty": "only excluded memory types; nothing written",
    }
)


def cmd_summarize(args: argparse.Namespace) -> int:
    from controller.cli.settings import load_summarizer, summarize_parts
    from controller.embeddings.minilm import EmbeddingError
    from controller.pipeline import summarize_session
    from controller.store.errors import (
        CollectionNotFound,
        EmbeddingMismatch,
        InvalidStoreConfig,
        StoreUnavailable,
    )

    if not args.bypass_claim:
        raise CliError(
            "summarize writes to Chroma directly, bypassing the operator's single-writer "
            "claim; pass --bypass-claim to confirm that no operator is running against this "
            "store (otherwise use `summaryctl sunset`)"
        )
    summarizer = load_summarizer(args)
    store = _store(args, summarizer)
    parts = summarize_parts(summarizer)
    failures: list[str] = []
    not_found: list[str] = []
    total = len(args.session_ids)
    for i, session_id in enumerate(args.session_ids, 1):
        try:
            outcome = summarize_session(
                store,
                session_id,
                embed=parts.embed,
                writer=f"summaryctl@{os.uname().nodename}",
                trigger="manual",
                excluded_types=parts.excluded_types,
                summarizer=parts.summarizer,
                visibility=parts.visibility,
                redaction=parts.redaction,
            )
        except CollectionNotFound as exc:  # the same for every session: stop here
            raise missing_collection(exc) from exc
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
