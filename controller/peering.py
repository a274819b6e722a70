"""Who is the active replica, as kopf peering sees it: computed from the peering object, so
every replica (active or paused) can log changes and export the active-replica gauge.

Read-only on purpose: this runs from an on.startup task, and kopf never pauses those.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Mapping
from typing import Any

from kubernetes.client.exceptions import ApiException

from controller import kube

log = logging.getLogger("controller.peering")
PEERING_GROUP, PEERING_VERSION = "kopf.dev", "v1"


def live_peers(status: Mapping[str, Any], now: dt.datetime) -> dict[str, int]:
    """identity -> priority of the peers whose lastseen + lifetime is still ahead."""
    alive: dict[str, int] = {}
    for identity, info in (status or {}).items():
        if not isinstance(info, Mapping):
            continue
        try:
            seen = dt.datetime.fromisoformat(str(info["lastseen"]))
            if seen.tzinfo is None:
                seen = seen.replace(tzinfo=dt.UTC)
            lifetime = dt.timedelta(seconds=int(info.get("lifetime", 60)))
            priority = int(info.get("priority", 0))
        except (KeyError, ValueError, TypeError):
            continue
        if seen + lifetime > now:
            alive[identity] = priority
    return alive


def leader_of(peers: Mapping[str, int]) -> str | None:
    """The unique highest-priority peer; None when the top priority is shared (kopf then
    pauses every one of them) or there are no peers."""
    if not peers:
        return None
    top = max(peers.values())
    leaders = [identity for identity, prio in peers.items() if prio == top]
    return leaders[0] if len(leaders) == 1 else None


def read_peering(name: str, namespaces: tuple[str, ...]) -> Mapping[str, Any]:
    api = kube.custom()
    try:
        if namespaces:
            obj = api.get_namespaced_custom_object(
                PEERING_GROUP, PEERING_VERSION, namespaces[0], "kopfpeerings", name
            )
        else:
            obj = api.get_cluster_custom_object(
                PEERING_GROUP, PEERING_VERSION, "clusterkopfpeerings", name
            )
    except ApiException as exc:
        if exc.status == 404:
            return {}
        raise
    return dict(obj.get("status") or {})  # type: ignore[attr-defined]


def ensure_peering_object(name: str, namespaces: tuple[str, ...]) -> None:
    """kopf only patches the peering object; it must exist. Create-if-absent, idempotent."""
    api = kube.custom()
    version = f"{PEERING_GROUP}/{PEERING_VERSION}"

    def create(fn: Any, *args: Any) -> None:
        try:
            fn(PEERING_GROUP, PEERING_VERSION, *args)
        except ApiException as exc:
            if exc.status != 409:  # 409: it exists already
                raise

    for ns in namespaces:
        body = {
            "apiVersion": version,
            "kind": "KopfPeering",
            "metadata": {"name": name, "namespace": ns},
        }
        create(api.create_namespaced_custom_object, ns, "kopfpeerings", body)
    if not namespaces:
        body = {"apiVersion": version, "kind": "ClusterKopfPeering", "metadata": {"name": name}}
        create(api.create_cluster_custom_object, "clusterkopfpeerings", body)


async def watch_leader(
    me: str, name: str, namespaces: tuple[str, ...], on_change: Any, interval: float = 2.0
) -> None:
    """Polls the peering object and calls on_change(leader, previous) when it changes."""
    previous: str | None = "(unknown)"
    while True:
        try:
            status = await asyncio.to_thread(read_peering, name, namespaces)
            leader = leader_of(live_peers(status, dt.datetime.now(dt.UTC)))
            if leader != previous:
                on_change(leader, previous)
                previous = leader
        except Exception as exc:  # keep watching through API hiccups
            log.debug("reading the peering object failed: %s", exc)
        await asyncio.sleep(interval)
