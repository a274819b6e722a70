"""Where Events are posted: one Event per state change, its repeats a PATCH of its count
(core/event_aggregation.py). Like client-go's recorder, it posts from a background thread
and never blocks or fails its caller; a full queue drops the newest with a log line."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from controller.core.event_aggregation import EventKey, EventLog
from controller.kube import client as kube
from controller.status.conditions import now_rfc3339

log = logging.getLogger("controller.kube.events")
COMPONENT = "session-summary-operator"
MESSAGE_MAX = 1024


@dataclass(frozen=True)
class _Pending:
    ref: dict[str, Any]  # V1ObjectReference's arguments: the model is made by the sender
    key: EventKey


def object_reference(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The involvedObject of an Event on obj (a kopf body or an API dict)."""
    meta = obj.get("metadata") or {}
    return {
        "api_version": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "uid": meta.get("uid"),
        "resource_version": meta.get("resourceVersion"),
    }


class EventRecorder:
    """Posts Events in the background, aggregated as client-go's recorder does."""

    def __init__(
        self, component: str = COMPONENT, instance: str = "", queue_size: int = 1000
    ) -> None:
        self.component, self.instance = component, instance
        self._log = EventLog()
        self._queue: queue.Queue[_Pending | None] = queue.Queue(queue_size)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> EventRecorder:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="events", daemon=True)
                self._thread.start()
        return self

    def post(self, obj: Mapping[str, Any], *, type_: str, reason: str, message: str) -> None:
        """An Event on obj, or one more count on the same Event posted before."""
        ref = object_reference(obj)
        key = EventKey(
            api_version=str(ref["api_version"] or ""),
            kind=str(ref["kind"] or ""),
            namespace=str(ref["namespace"] or "default"),
            name=str(ref["name"] or "object"),
            uid=str(ref["uid"] or ""),
            type=type_,
            reason=reason,
            message=message[:MESSAGE_MAX],
            component=self.component,
        )
        self.start()
        try:
            self._queue.put_nowait(_Pending(ref, key))
        except queue.Full:
            log.warning("event queue full: dropped %s %s on %s", type_, reason, key.name)

    def close(self, timeout: float = 2.0) -> None:
        """Posts what is queued (for at most timeout seconds) and stops."""
        thread = self._thread
        if thread is None:
            return
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            return
        thread.join(timeout)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            try:
                self._send(item)
            except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
                log.warning(
                    "could not post Event %s on %s: %s", item.key.reason, item.key.name, exc
                )
            except Exception:  # never let one Event stop the others
                log.exception("could not post Event %s on %s", item.key.reason, item.key.name)

    def _send(self, item: _Pending) -> None:
        key, now = item.key, now_rfc3339()
        decision = self._log.observe(key, now)
        if not decision.create:
            try:
                self._patch(key, decision.name, decision.count, now)
                return
            except ApiException as exc:
                if exc.status != 404:
                    raise
            self._log.forget(key)  # expired by the apiserver's event TTL: a new one
            self._log.observe(key, now)
        try:
            self._create(item, decision.name, now)
        except ApiException as exc:
            if exc.status != 409:
                raise
            # Posted before by another replica or before a restart: count on it.
            existing = kube.core().read_namespaced_event(decision.name, key.namespace)
            count = int(existing.count or 1) + 1
            first = existing.first_timestamp
            first_s = first.strftime("%Y-%m-%dT%H:%M:%SZ") if first else now
            self._patch(key, decision.name, count, now)
            self._log.learned(key, count, first_s)

    def _create(self, item: _Pending, name: str, now: str) -> None:
        key = item.key
        event = client.CoreV1Event(
            metadata=client.V1ObjectMeta(name=name, namespace=key.namespace),
            involved_object=client.V1ObjectReference(**item.ref),
            type=key.type,
            reason=key.reason,
            message=key.message,
            first_timestamp=now,
            last_timestamp=now,
            count=1,
            source=client.V1EventSource(component=self.component),
            reporting_component=self.component,
            reporting_instance=self.instance,
        )
        _read(kube.core().create_namespaced_event(key.namespace, event, _preload_content=False))

    def _patch(self, key: EventKey, name: str, count: int, now: str) -> None:
        body = {"count": count, "lastTimestamp": now}
        _read(kube.core().patch_namespaced_event(
            name, key.namespace, body, _content_type="application/merge-patch+json",
            _preload_content=False,
        ))  # fmt: skip


def _read(answer: object) -> None:
    """Reads a raw answer (`_preload_content=False`): no model object, which costs CPU."""
    cast(Any, answer).read()
