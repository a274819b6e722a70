"""Where Events are posted: one per state change, repeats a PATCH of its count. Like client-go's
recorder, it posts from a thread and never blocks or fails its caller; as its EventCorrelator,
but the name derives from the key: a restart continues a count."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import queue
import threading
from collections.abc import Mapping
from typing import Any, NamedTuple, cast

import urllib3
from cachetools import LRUCache
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from controller.core.text import cut
from controller.kube import client as kube
from controller.status.conditions import now_rfc3339

log = logging.getLogger("controller.kube.events")
COMPONENT = "session-summary-operator"
MESSAGE_MAX = 1024
QUEUE_SIZE = 1000
CACHE_SIZE = 4096  # keys whose count this process keeps, least recently used first out
NAME_MAX, DIGEST_LEN = 253, 16


class EventKey(NamedTuple):
    """What makes two Events the same one (client-go's getEventKey, without the host)."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str
    type: str
    reason: str
    message: str
    component: str


def event_name(key: EventKey) -> str:
    """The object's name, a dot and a hash of the key: a DNS subdomain whatever the name."""
    digest = hashlib.sha256("\0".join(key).encode()).hexdigest()[:DIGEST_LEN]
    base = key.name.lower()[: NAME_MAX - DIGEST_LEN - 1].rstrip("-.")
    return f"{base}.{digest}" if base else digest


class EventRecorder:
    def __init__(self, instance: str = "") -> None:
        self.instance = instance
        self._counts: LRUCache[EventKey, int] = LRUCache(CACHE_SIZE)
        self._queue: queue.Queue[tuple[dict[str, Any], EventKey] | None] = queue.Queue(QUEUE_SIZE)
        self._thread = threading.Thread(target=self._run, name="events", daemon=True)
        self._thread.start()

    def post(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        """An Event on obj, or one more count on the same Event posted before."""
        meta = obj.get("metadata") or {}
        # V1ObjectReference's arguments: the sender's thread makes the model.
        ref = {
            "api_version": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "resource_version": meta.get("resourceVersion"),
        }
        key = EventKey(
            api_version=str(ref["api_version"] or ""),
            kind=str(ref["kind"] or ""),
            namespace=str(ref["namespace"] or "default"),
            name=str(ref["name"] or "object"),
            uid=str(ref["uid"] or ""),
            type=type_,
            reason=reason,
            message=cut(message, MESSAGE_MAX, ""),
            component=COMPONENT,
        )
        try:
            self._queue.put_nowait((ref, key))
        except queue.Full:
            log.warning("event queue full: dropped %s %s on %s", type_, reason, key.name)

    def close(self, timeout: float = 2.0) -> None:
        """Posts what is queued (for at most timeout seconds) and stops."""
        with contextlib.suppress(queue.Full):
            self._queue.put(None, timeout=timeout)
            self._thread.join(timeout)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            ref, key = item
            try:
                self._send(ref, key)
            except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
                log.warning("could not post Event %s on %s: %s", key.reason, key.name, exc)
            except Exception:  # never let one Event stop the others
                log.exception("could not post Event %s on %s", key.reason, key.name)

    def _send(self, ref: dict[str, Any], key: EventKey) -> None:
        name, now = event_name(key), now_rfc3339()
        count = self._counts[key] = self._counts.get(key, 0) + 1
        if count > 1:
            if kube.unless((404,), self._patch, key, name, count, now) is not None:
                return
            self._counts[key] = 1  # expired by the apiserver's event TTL: a new one
        if kube.unless((409,), self._create, ref, key, name, now) is None:
            # Posted before by another replica or before a restart: count on it.
            existing = kube.core().read_namespaced_event(name, key.namespace)
            count = int(existing.count or 1) + 1
            self._patch(key, name, count, now)
            self._counts[key] = count

    def _create(self, ref: dict[str, Any], key: EventKey, name: str, now: str) -> object:
        event = client.CoreV1Event(
            metadata=client.V1ObjectMeta(name=name, namespace=key.namespace),
            involved_object=client.V1ObjectReference(**ref),
            type=key.type,
            reason=key.reason,
            message=key.message,
            first_timestamp=now,
            last_timestamp=now,
            count=1,
            source=client.V1EventSource(component=COMPONENT),
            reporting_component=COMPONENT,
            reporting_instance=self.instance,
        )
        answer = kube.core().create_namespaced_event(key.namespace, event, _preload_content=False)
        return cast(Any, answer).read()  # raw: a model object costs CPU

    def _patch(self, key: EventKey, name: str, count: int, now: str) -> object:
        body, merge = {"count": count, "lastTimestamp": now}, "application/merge-patch+json"
        patch = kube.core().patch_namespaced_event
        answer = patch(name, key.namespace, body, _content_type=merge, _preload_content=False)
        return cast(Any, answer).read()
