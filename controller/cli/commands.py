"""summaryctl's commands, on the cluster (sunset, rebuild, forget, check) and on the store and
its ledger (core/ledger.py); each cmd_*'s docstring is its help. Failures are one line."""

from __future__ import annotations

import argparse
import contextlib
import getpass
import json
import os
import time
import uuid
from collections.abc import Callable
from typing import Any

from controller.cli.args import FORBIDDEN, CliError, kube_call, out, shown_time, summarizer_object
from controller.core.retention import NOT_FAILURES, parse_time
from controller.core.text import json_value, ms_to_rfc3339, one_line


def unserved(summarizer: dict[str, Any]) -> str | None:
    """Why no operator serves this SessionSummarizer now (ReplicaActive); None when one does."""
    meta, status = summarizer["metadata"], summarizer.get("status") or {}
    where = f"SessionSummarizer {meta['namespace']}/{meta['name']}"
    replica: dict[str, Any] = _conditions(status).get("ReplicaActive", {})
    if not replica:
        return (
            f"no operator serves namespace {meta['namespace']!r}: none has reported on {where} "
            "(an operator serves the namespaces it is given: --namespace, SSO_NAMESPACES)"
        )
    if replica.get("status") != "True":
        return f"no operator replica is active for {where}: {replica.get('message', '')}"
    return None


REPORT_GRACE_S = 20.0  # a new SessionSummarizer's first report, at the latest


def served(namespace: str, ref: str) -> None:
    """Refuses when no operator serves SessionSummarizer `ref`: one just applied gets
    REPORT_GRACE_S to be served; one this identity may not read is let through."""
    while True:
        try:
            summarizer = summarizer_object(namespace, ref)
        except CliError as exc:
            if str(exc).startswith(FORBIDDEN):  # the sunset role: let through
                return
            raise
        if not (why := unserved(summarizer)):
            return
        created = parse_time(summarizer["metadata"].get("creationTimestamp"))
        if not created or time.time() - created.timestamp() >= REPORT_GRACE_S:
            raise CliError(f"{why}; nothing was changed")
        time.sleep(0.5)


def request_pass(args: argparse.Namespace, action: str = "Summarize", **asked: Any) -> int:
    """Creates or patches the session's SessionSummary to ask for a pass of `action` (a sunset's
    Summarize, else asked by hand, and who asked recorded) and, with --wait, waits for its end."""
    from controller.core.naming import summary_object_name
    from controller.kube import client as kube

    existing = kube_call(kube.get_summary, args.namespace, summary_object_name(args.session_id))
    ref = args.summarizer or ((existing or {}).get("spec") or {}).get("summarizerRef", "default")
    served(args.namespace, ref)
    manual = action != "Summarize"
    name, made = kube_call(
        kube.request_summary,
        args.namespace,
        args.session_id,
        trigger="manual" if manual else "sunset",
        summarizer=args.summarizer,
        set_summarizer_on_patch=args.summarizer is not None,
        action=action,
        requested_by=requester() if manual else None,
        **asked,
    )
    if made == "pending":  # its unfinished Forget or Rebuild, that this would cancel, goes on
        held = (kube_call(kube.get_summary, args.namespace, name) or {}).get("spec") or {}
        action = held.get("action", action)
        made, applied = "unchanged", "the unfinished request it holds goes on, not replaced"
    elif made == "created":
        applied = f"summarizerRef {args.summarizer or 'default'}"
    elif args.summarizer is not None:
        applied = f"new pass requested, summarizerRef set to {args.summarizer}"
    else:
        applied = "new pass requested, summarizerRef unchanged"
    if action != "Summarize":
        applied += f", action {action}"
    out(f"sessionsummary/{name} {made} (namespace {args.namespace}; {applied})")
    if args.wait <= 0:
        return 0
    done = "Forgotten" if action == "Forget" else "Summarized"
    deadline = time.monotonic() + args.wait
    last: dict[str, Any] = {}
    while time.monotonic() < deadline:
        last = kube_call(kube.get_summary, args.namespace, name) or {}
        if (outcome := pass_outcome(last)) is not None:
            phase, reason, message = outcome
            if phase == done:
                out(_said(phase, message))
                return 0
            out(_said(phase, reason, message), err=True)
            if phase == "Pending":
                out(
                    f"summaryctl: the pass failed; the operator retries it with backoff "
                    f"(kubectl -n {args.namespace} describe sessionsummary {name})",
                    err=True,
                )
            return 1
        time.sleep(0.2)
    removed = ""
    if made == "created" and last and not last.get("status"):  # nobody took it up
        rv = last["metadata"]["resourceVersion"]
        with contextlib.suppress(CliError):  # the sunset role may not delete: left
            if kube_call(kube.delete_summary_if_unchanged, args.namespace, name, rv):
                removed = "; removed the SessionSummary this command created"
    raise CliError(
        f"not {done.lower()} within {args.wait:g}s ({_where(last)}); check `kubectl -n "
        f"{args.namespace} describe sessionsummary {name}` and that the operator runs{removed}"
    )


def pass_outcome(obj: dict[str, Any]) -> tuple[str, str, str] | None:
    """(phase, reason, message) once the current request's pass has ended or failed (also
    Pending between retries); None while it is still to come or running."""
    status = obj.get("status") or {}
    generation = (obj.get("metadata") or {}).get("generation")
    if status.get("observedGeneration") != generation:
        return None
    summarized = _conditions(status).get("Summarized", {})
    current = summarized.get("observedGeneration") in (None, generation)
    reason = str(summarized.get("reason", "")) if current else ""
    message = str(status.get("message", ""))
    phase = status.get("phase")
    if phase in ("Summarized", "Empty", "NotFound", "Failed", "Forgotten"):
        return str(phase), reason, message
    retrying = phase == "Pending" and summarized.get("status") == "False"
    failed = retrying and reason not in {"", *NOT_FAILURES}  # "": not current
    return ("Pending", reason, message) if failed else None


def _where(obj: dict[str, Any]) -> str:
    status = obj.get("status") or {}
    if not obj:
        return "the object is gone"
    if not status:
        return "no pass has started: is the operator running, and does it watch this namespace?"
    return _said(f"phase {status.get('phase') or 'none yet'}", status.get("message"))


def _said(*parts: Any) -> str:
    """parts joined by ': ', an empty one left out (no dangling colon)."""
    return ": ".join(str(part) for part in parts if part)


def _condition_line(kind: str, c: dict[str, Any]) -> str:
    return _said(f"{kind}={c.get('status')} {c.get('reason') or ''}".rstrip(), c.get("message"))


ANSWER_SECONDS = 30.0  # how long check waits for the operator to measure anew


def cmd_check(args: argparse.Namespace) -> int:
    """is a SessionSummarizer Ready, measured now? prints every condition and when it was measured;
    exit 1 unless Ready"""
    from controller.api import GROUP, PROBE_REQUESTED, SUMMARIZER_PLURAL, VERSION
    from controller.kube import client as kube
    from controller.status.conditions import now_rfc3339

    start = time.monotonic()
    asked: str | None = ""  # the request's value; None: this identity may not make one
    last_answer = ""  # Ready as the operator measured it for one of this check's requests
    while True:
        status = summarizer_object(args.namespace, args.summarizer).get("status") or {}
        conditions = _conditions(status)
        ready = conditions.get("Ready", {}).get("status") == "True"
        answered = asked is not None and status.get("lastHandledProbeRequest") == asked
        waited = time.monotonic() - start
        if asked is None or (answered and (ready or waited >= args.wait)):
            break  # measured for this check, or not allowed to ask: as last measured
        if answered:
            last_answer = _condition_line("Ready", conditions.get("Ready", {}))
        if waited >= max(args.wait, ANSWER_SECONDS):
            why = f"is the operator running, and does it serve namespace {args.namespace!r}?"
            if last_answer:
                why = f"the operator last answered {last_answer}"
            out(f"summaryctl: no newer measurement within {waited:.0f}s: {why}", err=True)
            break
        if not asked or answered:  # first, or measured and not Ready yet: again
            asked = now_rfc3339(precise=True)
            patch = {"metadata": {"annotations": {PROBE_REQUESTED: asked}}}
            where = (GROUP, VERSION, args.namespace, SUMMARIZER_PLURAL, args.summarizer)
            try:
                kube_call(kube.custom().patch_namespaced_custom_object, *where, patch)
            except CliError as exc:
                out(f"summaryctl: cannot ask for a new measurement: {exc}", err=True)
                asked = None
                continue
        time.sleep(0.5)
    out(f"sessionsummarizer/{args.summarizer} (namespace {args.namespace}):")
    for kind in sorted(conditions, key=lambda t: (t != "Ready", t)):
        c = conditions[kind]
        out(f"  {_condition_line(kind, c)} (measured {c.get('lastProbeTime') or 'unknown'})")
    if not ready or not (answered or asked is None):
        out(f"summaryctl: not Ready (waited {time.monotonic() - start:.0f}s)", err=True)
        return 1
    return 0


def _conditions(status: dict[str, Any]) -> dict[Any, dict[str, Any]]:
    return {c.get("type"): c for c in status.get("conditions") or []}


def _full_document(store: Any, session_id: Any, document: str) -> str:
    """The whole summary, rebuilt from the row and its ledger entry; else the row as it is."""
    from controller.core.document import render_document
    from controller.core.summary import StructuredSummary

    prior = None
    with contextlib.suppress(ValueError):  # an entry not as the operator writes it
        prior = store.read_summary(session_id) if isinstance(session_id, str) else None
    if isinstance(prior, StructuredSummary):
        return render_document(prior, max_chars=None)
    return document


def cmd_summaries(args: argparse.Namespace) -> int:
    """the newest summaries, newest first"""
    from controller.cli.settings import open_store

    with open_store(args) as (store, _):
        rows = store.latest_summaries(args.limit)
        if args.full:
            rows = [(i, _full_document(store, m.get("sessionId"), d), m) for i, d, m in rows]
    if args.json:
        listed = [{"id": i, "document": d, "metadata": m} for i, d, m in rows]
        out(*json.dumps(listed, indent=2).split("\n"))
        return 0
    if not rows:
        out("no summaries yet")
    for row_id, document, meta in rows:
        stamp = shown_time(meta.get("timestamp"))
        count = meta.get("memoryCount", "?")
        out(f"== {row_id}  [{meta.get('category', '?')}] {stamp}  {count} memories")
        out(*document.strip().split("\n"), "")
    return 0


def cmd_remember(args: argparse.Namespace) -> int:
    """write a memory as an agent does: a turn (--prompt, --response) or a sunset marker; creates
    the memory collection in an empty Chroma"""
    from controller.cli.settings import embedder, open_store
    from controller.core.memories import SUNSET_MARKER_TYPE, render_interaction_document

    halves = {"--prompt": args.prompt, "--response": args.response}
    given = [flag for flag, value in halves.items() if value is not None]
    if args.sunset_marker and (given or args.thought):
        wrong = " nor ".join(given + (["--thought"] if args.thought else []))
        raise CliError(f"--sunset-marker is instead of a turn: it takes no {wrong}")
    if len(given) == 1:
        (missing,) = halves.keys() - given
        raise CliError(f"{given[0]} needs {missing}: a turn has both halves")
    if not (given or args.sunset_marker):
        raise CliError("give --prompt and --response (an agent's turn), or --sunset-marker")
    meta: dict[str, Any] = {"sessionId": args.session_id, "timestamp": int(time.time() * 1000)}
    if args.sunset_marker:
        document, meta["type"] = "session sunset", SUNSET_MARKER_TYPE
    else:
        turn = {"prompt": args.prompt, "thought": args.thought, "response": args.response}
        document = render_interaction_document(**turn)
        meta.update(type="agent-interaction", **turn)
    row_id = str(uuid.uuid4())
    with open_store(args, create=True) as (store, summarizer):
        store.add_memories([row_id], [document], [meta], create=True, embed=embedder(summarizer))
        count = len(store.session_ids(args.session_id))
    where = f"{store.location.memory_collection!r} at {store.location.describe()}"
    out(
        f"{meta['type']} memory {row_id} written to {where} "
        f"(session {args.session_id}: {count} memories)"
    )
    return 0


def cmd_summarize(args: argparse.Namespace) -> int:
    """recovery path: summarize sessions directly, no operator (with a summarizer's settings:
    --summarizer or --summarizer-file)"""
    from controller.cli.settings import open_store, summarize_backends
    from controller.embeddings.minilm import EmbeddingError
    from controller.pipeline import summarize_session
    from controller.status.conditions import masked
    from controller.store.errors import EmbeddingMismatch, InvalidStoreConfig, StoreUnavailable
    from controller.summarizers.chat_prompt import ModelUnavailable

    if not args.bypass_claim:
        raise CliError(
            "summarize writes to Chroma directly, bypassing the operator's single-writer "
            "claim; pass --bypass-claim to confirm that no operator is running against this "
            "store (otherwise use `summaryctl sunset`)"
        )
    failures: list[str] = []
    not_found: list[str] = []
    total = len(args.session_ids)
    skipped = (StoreUnavailable, EmbeddingMismatch, EmbeddingError, ModelUnavailable, ValueError)
    writer = f"summaryctl@{os.uname().nodename}"
    with open_store(args) as (store, summarizer):
        backends = summarize_backends(store, summarizer)
        for i, session_id in enumerate(args.session_ids, 1):
            shown = f"[{i}/{total}] {session_id}"
            try:
                outcome = summarize_session(backends, session_id, writer=writer, trigger="manual")
            except InvalidStoreConfig:  # a refused setting: stop here (open_store says it)
                raise
            except skipped as exc:  # this session's pass failed: on to the next
                failures.append(session_id)
                said = masked(exc, 4000, backends.redaction, flat=False)
                out(f"{shown}: FAILED: {said}", err=True)
                continue
            if outcome.kind == "not-found":
                not_found.append(session_id)
            detail = {
                "summarized": f"{outcome.new_memories} new memories, {outcome.passes} pass(es)",
                "up-to-date": "already up to date",
                "not-found": "no memories with this sessionId; nothing written",
                "empty": "only excluded memory types; nothing written",
            }.get(outcome.kind)
            out(f"{shown}: {outcome.kind}" + (f" ({detail})" if detail else ""))
    for ids, what in (
        (not_found, "no memories found for {} of {} session(s)"),
        (failures, "{} of {} session(s) failed"),
    ):
        if ids:
            out(f"summaryctl: {what.format(len(ids), total)}: {', '.join(ids)}", err=True)
    return 1 if failures or not_found else 0


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
    """delete a session's summary and everything the operator keeps for it (spec.action Forget); the
    sweep does not bring it back until new memories arrive"""
    if args.memories and not args.yes:
        raise CliError(
            f"--memories deletes every memory of session {args.session_id!r} from the memory "
            "collection, for good; add --yes to confirm"
        )
    if args.yes and not args.memories:  # a confirmation of nothing: --memories left out?
        raise CliError(
            "--yes confirms --memories, which is not given: add --memories to delete the "
            "session's memories too, or leave --yes out"
        )
    return request_pass(args, "Forget", forget_memories=args.memories)


def cmd_rebuild(args: argparse.Namespace) -> int:
    """regenerate a session's summary from its living memories with the current backend, replacing
    the old text (spec.action Rebuild)"""
    if not args.all_with_secrets:
        if args.session_id is None:
            raise CliError("name the session to rebuild (SESSION_ID), or --all-with-secrets")
        return request_pass(args, "Rebuild")
    problems = []  # each one named: the user may have got the others right
    if args.session_id is not None:
        problems.append("takes no SESSION_ID (it finds the sessions)")
    if args.wait:
        problems.append("takes no --wait")
    if args.summarizer is None:
        problems.append(
            "needs --summarizer NAME: the store it writes and the redaction patterns it adds"
        )
    if problems:
        raise CliError("--all-with-secrets " + "; it ".join(problems))
    served(args.namespace, args.summarizer)
    from kubernetes.client.exceptions import ApiException

    from controller.core.sweep_plan import marker_problem
    from controller.kube import client as kube

    asked = {
        "summarizer": args.summarizer,
        "set_summarizer_on_patch": True,  # rebuilt where, and by the rules that, found it
        "action": "Rebuild",
        "requested_by": requester(),
    }
    failed: list[str] = []
    for session_id in (found := _with_secrets(args)):
        if problem := marker_problem(session_id):  # another writer's row: as the sweep skips it
            failed.append(session_id)
            out(f"not asked: {session_id}: its row {problem}: no SessionSummary names it", err=True)
            continue
        try:  # one session's refusal leaves the others to ask
            _, how = kube_call(
                kube.request_summary, args.namespace, session_id, trigger="manual", **asked
            )
            out(f"{'rebuild asked' if how != 'pending' else 'its forget goes on'}: {session_id}")
        except CliError as exc:
            if not isinstance(exc.__cause__, ApiException):
                raise  # no context, no connection: no other session can be asked either
            failed.append(session_id)
            out(f"not asked: {session_id}: {exc}", err=True)
    if failed and len(failed) == len(found):
        raise CliError(f"no rebuild was asked: each of the {len(found)} request(s) failed")
    out(
        f"{len(found)} session(s) with a secret stored; `kubectl -n {args.namespace} get "
        "sessionsummaries` follows them"
        if found
        else "no stored summary holds a secret the redaction rules recognise"
    )
    if failed:
        out(f"summaryctl: {len(failed)} of {len(found)} not asked: {', '.join(failed)}", err=True)
    return 1 if failed else 0


def _with_secrets(args: argparse.Namespace) -> list[str]:
    """Sessions whose stored summary holds a secret the next pass would mask."""
    from controller import backends
    from controller.cli.settings import open_store
    from controller.core.summary import UnreadablePriorSummary
    from controller.redaction import PassRedaction

    found: list[str] = []
    with open_store(args) as (store, summarizer):
        rules = backends.redaction_of(summarizer.spec)
        for _, _, meta in store.latest_summaries(limit=2**62):
            session_id = meta.get("sessionId")
            mask = PassRedaction(rules)
            try:
                mask.prior(store.read_summary(session_id) if isinstance(session_id, str) else None)
            except UnreadablePriorSummary as exc:  # the message names the session
                out(f"not asked: {exc}", err=True)
            if mask.prior_found:
                found.append(str(session_id))
    return found


def _ledger_lines(session_id: str, document: str, keys: dict[str, Any]) -> list[str]:
    """A session's ledger entry for a person: what it records, and how big each part is."""

    def measured(key: str, measure: Callable[[Any], Any], absent: Any = 0) -> Any:
        if not isinstance(keys.get(key), str):
            return absent
        try:
            return measure(json_value(keys[key]))
        except (ValueError, TypeError, AttributeError) as exc:
            raise CliError(
                f"session {session_id!r}: its {key} is not as the operator writes it "
                f"({one_line(exc, 100)}); --json shows every key as stored"
            ) from exc

    buckets = measured("coverageJson", lambda coverage: len(coverage.get("b") or []))
    sections = measured(
        "sectionsJson",
        lambda s: [f"  {title}: {len(items)} items" for title, items in s.items()],
        [],
    )
    state = {k: v for k, v in keys.items() if not k.startswith("ledger.")}
    legacy = keys.get("legacySummary") or ""
    fence, authority = keys.get("ledger.fence"), keys.get("ledger.fenceAuthority")
    claim = (
        f"claim grant {fence} (the SessionClaim's resourceVersion when the writer took it: a "
        f"later grant's writer refuses an older one's write) from the cluster whose kube-system "
        f"namespace has UID {authority or '(not recorded)'}"
        if fence is not None
        else "(none: written without the operator's claim)"
    )
    lines = [
        f"session:        {session_id}",
        f"written:        {shown_time(keys.get('summarizedAt'))} by {keys.get('writer', '?')} "
        f"({keys.get('triggerSource', '?')})",
        f"written under:  {claim}",
        f"row digest:     {keys.get('ledger.rowDigest', '(none)')} (of the document agents read)",
        f"memories:       {keys.get('memoryCount', '?')}; the newest covered "
        f"{keys.get('watermarkMemoryId', '-')} at {shown_time(keys.get('watermarkTimestamp'))}",
        f"coverage:       {buckets} buckets",
        f"references:     {measured('referencesJson', len)} kept, "
        f"{keys.get('referencesOmitted', 0)} left out",
        f"legacy text:    {len(legacy) if isinstance(legacy, str) else '?'} characters",
        f"document:       {len(document)} characters (the row agents read)",
        f"state:          {len(json.dumps(state, ensure_ascii=False))} bytes",
    ]
    return lines + sections


def cmd_ledger(args: argparse.Namespace) -> int:
    """a session's ledger entry: the operator's state beside its row (when and by whom it was
    written, coverage, references, the claim grant it was written under)"""
    from controller.cli.settings import open_store

    with open_store(args) as (store, _):
        stored: tuple[str | None, dict[str, Any]] | None = store.stored_summary(args.session_id)
        if stored is None and (head := store.ledger_heads([args.session_id]).get(args.session_id)):
            stored = (None, head)  # a forget's: no text, the ids' digest and counts
    if stored is None:
        raise CliError(
            f"no summary or ledger entry of session {args.session_id!r} in "
            f"{store.location.summary_collection!r} / {store.location.ledger_collection!r}"
        )
    document, keys = stored
    if args.json:
        out(*json.dumps({"document": document, "keys": keys}, indent=2).split("\n"))
    elif document is None:
        out(
            f"session {args.session_id!r} was forgotten at {shown_time(keys.get('forgottenAt'))}: "
            f"no summary row; its ledger entry is a tombstone (no text: the digest of the "
            f"ids of the {keys.get('memoryCount', '?')} memories it left, and its fence)"
        )
    else:
        out(*_ledger_lines(args.session_id, document, keys))
    return 0


def cmd_handover(args: argparse.Namespace) -> int:
    """hand the store to this cluster: other clusters' rows are taken over at once (stop their
    operators first; docs/operations.md)"""
    from controller.cli.settings import open_store
    from controller.kube.client import core

    with open_store(args) as (store, _):
        kube_system = kube_call(lambda: core().read_namespace("kube-system"))
        mine = str(getattr(kube_system.metadata, "uid", ""))
        others = [r for r in store.authorities() if r.uid != mine]
        store.remove_authorities([r.uid for r in others])
    for r in others:
        out(f"removed cluster {r.uid} (renewed by {r.holder}, {ms_to_rfc3339(r.renewed_ms)})")
    out(f"{store.location.ledger_collection} is cluster {mine}'s")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    """which memories of the sessions no summary covers (exit 1 when any, or none exist)"""
    from controller.backends import redaction_of
    from controller.cli.settings import open_store
    from controller.redaction import PassRedaction

    with open_store(args) as (store, summarizer):
        mask = PassRedaction(redaction_of(summarizer.spec))  # the timestamps it quotes
        reports = [_report(store, session_id, mask) for session_id in args.session_ids]
    if args.json:
        out(*json.dumps(reports, indent=2).split("\n"))
    for report in [] if args.json else reports:
        out(*_report_lines(report))
    return 1 if any(r["uncovered"] or not r["memories"] for r in reports) else 0  # not verified


def _report(store: Any, session_id: str, mask: Any) -> dict[str, Any]:
    """verify's account of a session: the memories no pass of its summary has read."""
    from controller.core.coverage import uncovered
    from controller.core.summary import StructuredSummary, UnreadablePriorSummary
    from controller.pipeline import prior_coverage

    try:
        prior = store.read_summary(session_id)
    except UnreadablePriorSummary as exc:
        raise CliError(str(exc)) from exc
    rows = store.session_rows(session_id, mask=mask)
    structured = prior if isinstance(prior, StructuredSummary) else None
    found = uncovered(list(rows.keys), prior_coverage(structured))
    summarized = set(structured.untimed_ids if structured else ())
    untimed = [
        {"id": i, "timestamp": rows.untimed_values.get(i), "summarized": i in summarized}
        for i in rows.untimed
    ]
    return {
        "sessionId": session_id,
        "memories": rows.total,
        "summary": "structured" if structured else "earlier text only" if prior else "none",
        "uncovered": found.count + sum(not u["summarized"] for u in untimed),
        "rows": [
            {"id": i, "timestamp": ms_to_rfc3339(ts), "why": why} for ts, i, why in found.rows
        ],
        "unreadableTimes": untimed,
        "ranges": [
            {
                "from": ms_to_rfc3339(d.start) if d.start is not None else None,
                "to": ms_to_rfc3339(d.end) if d.end is not None else None,
                "uncovered": d.uncovered,
                "candidates": [i for _, i in candidates],
            }
            for d, candidates in found.unnamed
        ],
    }


def _report_lines(report: dict[str, Any]) -> list[str]:
    sid, total = report["sessionId"], report["memories"]
    untimed = report["unreadableTimes"]
    if not total:
        lines = [f"{sid}: no memory carries this sessionId: nothing to cover (is the id right?)"]
    elif not report["uncovered"]:
        lines = [
            f"{sid}: all {total} of its memories are covered: a pass of its summary read each "
            "one (what it kept of them: summaryctl summaries --full)"
        ]
    else:
        lines = [
            f"{sid}: {report['uncovered']} of its {total} memories are not covered (no pass of "
            f"its summary has read them; summary: {report['summary']}):"
        ]
        lines += [f"  {r['id']}  {r['timestamp']}  ({r['why']})" for r in report["rows"]]
        lines += [
            f"  {rng['uncovered']} of the {len(rng['candidates'])} memories from "
            f"{rng['from'] or 'the beginning'} to {rng['to'] or 'the watermark'} "
            "(the coverage cannot name which): " + ", ".join(rng["candidates"][:20])
            for rng in report["ranges"]
        ]
    if untimed:
        missing = sum(u["timestamp"] is None for u in untimed)
        lines.append(
            f"{sid}: {missing} of its memories have no timestamp and {len(untimed) - missing} "
            "one the operator cannot read (epoch seconds, ms, µs or ns, or ISO-8601); each is "
            "summarized once, at the end of the session's order:"
        )
        for u in untimed:
            stamp = "no timestamp" if u["timestamp"] is None else f"timestamp {u['timestamp']}"
            later = "" if u["summarized"] else "  (not covered yet)"
            lines.append(f"  {u['id']}  {stamp}{later}")
    return lines
