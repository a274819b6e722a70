"""The active replica, computed from kopf's peering object by every replica and written on
every SessionSummarizer (status.activeReplica, condition ReplicaActive). Runs in an on.startup
task, which kopf never pauses: when a priority tie pauses every replica, it alone can say so."""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from controller import metrics
from controller.api import Condition, SessionSummarizerStatus
from controller.core.retention import parse_time
from controller.kube import client as kube
from controller.status.conditions import condition, with_conditions

if TYPE_CHECKING:
    from controller.runtime import Runtime

log = logging.getLogger("controller.kube.peering")
PEERING_GROUP, PEERING_VERSION = "kopf.dev", "v1"


def live_peers(status: Mapping[str, Any], now: dt.datetime) -> dict[str, int]:
    alive: dict[str, int] = {}
    for identity, info in (status or {}).items():
        try:  # a record not a mapping: TypeError; a time or number out of range: OverflowError
            seen = parse_time(info["lastseen"])
            lifetime = dt.timedelta(seconds=int(info.get("lifetime", 60)))
            priority = int(info.get("priority", 0))
            if seen is not None and seen + lifetime > now:
                alive[identity] = priority
        except (KeyError, ValueError, TypeError, OverflowError):
            continue
    return alive


def _top(peers: Mapping[str, int]) -> list[str]:
    top = max(peers.values(), default=None)
    return sorted(identity for identity, prio in peers.items() if prio == top)


def leader_of(peers: Mapping[str, int]) -> str | None:
    """The unique highest-priority peer; None if there is none or a tie (kopf pauses all)."""
    top = _top(peers)
    return top[0] if len(top) == 1 else None


# A joining replica goes a random step below every live one, so two joining at once don't tie.
TOP_PRIORITY = 2**31 - 1
PRIORITY_STEP = 2**20


def joining_priority(live: Mapping[str, int], me: str, draw: int) -> int:
    """Below every other live replica's (draw in [1, PRIORITY_STEP]): it never preempts the
    leader, and leadership passes to the longest-running replica when the leader stops."""
    others = [priority for identity, priority in live.items() if identity != me]
    ceiling = min(others) if others else TOP_PRIORITY + 1
    return ceiling - max(1, min(draw, PRIORITY_STEP))


def with_own_priority(peers: Mapping[str, int], me: str, priority: int | None) -> dict[str, int]:
    """Our record at our priority: until kopf's first keep-alive it is our predecessor's."""
    mine = {me: priority} if priority is not None and me in peers else {}
    return {**peers, **mine}


def read_peering(name: str, namespaces: tuple[str, ...]) -> dict[str, int]:
    """The live peers in kopf's peering object (none if it is absent)."""
    api = kube.custom()
    get: Callable[..., Any] = api.get_cluster_custom_object
    place: tuple[str, ...] = ("clusterkopfpeerings",)
    if namespaces:
        get, place = api.get_namespaced_custom_object, (namespaces[0], "kopfpeerings")
    obj = kube.unless((404,), get, PEERING_GROUP, PEERING_VERSION, *place, name)
    return live_peers((obj or {}).get("status") or {}, dt.datetime.now(dt.UTC))


def ensure_peering_object(name: str, namespaces: tuple[str, ...]) -> None:
    """kopf only patches the peering object: it must exist."""
    api, where = kube.custom(), (PEERING_GROUP, PEERING_VERSION)
    version = f"{PEERING_GROUP}/{PEERING_VERSION}"
    for ns in namespaces:
        meta = {"name": name, "namespace": ns}
        body = {"apiVersion": version, "kind": "KopfPeering", "metadata": meta}
        kube.unless((409,), api.create_namespaced_custom_object, *where, ns, "kopfpeerings", body)
    if not namespaces:
        body = {"apiVersion": version, "kind": "ClusterKopfPeering", "metadata": {"name": name}}
        kube.unless((409,), api.create_cluster_custom_object, *where, "clusterkopfpeerings", body)


def replica_status(
    live: Mapping[str, int], me: str, standalone: bool = False
) -> tuple[str | None, Condition]:
    """Every SessionSummarizer's activeReplica and ReplicaActive, from the live peers."""

    def said(active: str | None, reason: str, message: str) -> tuple[str | None, Condition]:
        status = "True" if active else "False"
        return active, condition("ReplicaActive", status, reason, message)

    if standalone:
        message = f"replica {me} runs standalone (no peering): the only writer by configuration"
        return said(me, "Standalone", message)
    if len(tied := _top(live)) > 1:  # kopf pauses every one of them
        return said(
            None,
            "PeeringPriorityTie",
            f"replicas {', '.join(tied)} share peering priority {live[tied[0]]}: kopf "
            "pauses all of them and nothing is summarized; give each replica its own "
            "SSO_PEERING_PRIORITY, or leave it unset for a random one",
        )
    if (leader := leader_of(live)) is None:
        message = "no operator replica is alive in the peering object: nothing is summarized"
        return said(None, "NoLiveReplica", message)
    return said(leader, "Elected", f"replica {leader} is active ({len(live)} live)")


def report_due(
    now: tuple[str | None, Condition],
    reported: tuple[str | None, str] | None,
    since_sync_s: float,
    resync_s: float,
    nudged: bool,
) -> bool:
    """On a change, when nudged (a summarizer was created), every resync_s, and at every poll
    while no replica is active (no handler runs to nudge then)."""
    active, cond = now
    changed = (active, cond.reason) != reported
    return changed or nudged or cond.status == "False" or since_sync_s > resync_s


def priority_conflicts(live: Mapping[str, int], me: str, priority: int) -> list[str]:
    return sorted(i for i, p in live.items() if p == priority and i != me)


def _apply_replica_status(
    active: str | None, cond: Condition, standalone: bool, status: SessionSummarizerStatus
) -> SessionSummarizerStatus:
    current = {c.type: c for c in status.conditions or []}.get("ReplicaActive")
    if standalone and status.active_replica and current is not None:
        return status  # stamped once: two standalone replicas must not flip it back and forth
    said = (active, cond.status, cond.reason, cond.message)
    if current and said == (status.active_replica, current.status, current.reason, current.message):
        return status  # as last measured: nothing to write
    return with_conditions(status, [cond], active_replica=active)


def report_replica_status(runtime: Runtime, active: str | None, cond: Condition) -> None:
    """Writes activeReplica and ReplicaActive where they differ, an Event where it changes."""
    apply = functools.partial(_apply_replica_status, active, cond, runtime.options.standalone)
    for obj in kube.list_summarizers(runtime.options.namespaces, cached=True):
        meta = obj["metadata"]
        listed = SessionSummarizerStatus.model_validate(obj.get("status") or {})
        if apply(listed) == listed:
            continue  # as it should be: no read, no write
        result = kube.update_summarizer_status(meta["namespace"], meta["name"], apply)
        if result is None or result[0] == result[1]:
            continue
        before = {c.type: c for c in result[0].conditions or []}.get("ReplicaActive")
        if before is None or (before.status, before.reason) != (cond.status, cond.reason):
            kind = "Normal" if cond.status == "True" else "Warning"
            runtime.events.post(obj, type_=kind, reason=cond.reason, message=cond.message)


async def watch_leader(runtime: Runtime, priority: int) -> None:
    """Polls the peering object every 2 s; says when the leader changes and reports it when
    report_due says so (an empty peering not before two lifetimes)."""
    run, nudged, me = runtime.options, runtime.summarizers_changed, runtime.config.replica_id
    resync_s, grace_s = runtime.config.replica_resync_seconds, 2.0 * runtime.config.peering_lifetime
    previous: str | None = "(unknown)"
    reported: tuple[str | None, str] | None = None
    last_error = ""
    started = last_sync = time.monotonic()
    while True:
        try:
            live = {me: 0}
            if not run.standalone:
                peers = await asyncio.to_thread(read_peering, run.peering, run.namespaces)
                live = with_own_priority(peers, me, priority)
            if (leader := leader_of(live)) != previous:
                runtime.leader = leader
                metrics.ACTIVE_REPLICA.labels(me).set(leader == me)
                if leader is None:
                    log.warning(
                        "no active replica (peers share the top priority, or none is alive)"
                    )
                else:
                    role = "this replica" if leader == me else "another replica"
                    log.info("active replica is now %s (%s; was %s)", leader, role, previous)
                previous = leader
            active, cond = replica_status(live, me, run.standalone)
            since_sync = time.monotonic() - last_sync
            due = report_due((active, cond), reported, since_sync, resync_s, nudged.is_set())
            if due and (live or time.monotonic() - started > grace_s):
                nudged.clear()
                await asyncio.to_thread(report_replica_status, runtime, active, cond)
                reported, last_sync = (active, cond.reason), time.monotonic()
        except Exception as exc:  # keep watching through API hiccups; say each new one once
            said = f"{type(exc).__name__}: {exc}"[:300]
            if said != last_error:
                log.warning("reading or reporting the peering failed: %s", said)
                last_error = said
        await asyncio.sleep(2.0)
