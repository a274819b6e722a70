"""Thin Kubernetes API calls shared by the operator and summaryctl (blocking; typed models)."""

from __future__ import annotations

import base64
import functools
import logging
import os
from collections.abc import Callable, Iterator
from typing import Any, cast

import urllib3
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from controller.api import (
    API_VERSION,
    GROUP,
    REQUESTED_BY,
    SUMMARIZER_PLURAL,
    SUMMARY_KIND,
    SUMMARY_PLURAL,
    VERSION,
    Action,
    SessionSummarizerStatus,
    SessionSummarySpec,
)
from controller.config import in_pod
from controller.core.naming import summary_object_name
from controller.core.retention import kept_request
from controller.core.text import json_value, one_line
from controller.status.conditions import now_rfc3339, settled

API_POOL_SIZE = 64
# (connect, read) seconds for calls that set none; the client's default is none at all.
REQUEST_TIMEOUT = (5.0, 30.0)
log = logging.getLogger(__name__)


class BoundedApiClient(client.ApiClient):
    def call_api(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("_request_timeout") is None:
            kwargs["_request_timeout"] = REQUEST_TIMEOUT
        return super().call_api(*args, **kwargs)


class SecretError(RuntimeError):
    """A Secret or key named in a spec is missing; the message says which."""


@functools.lru_cache(maxsize=1)
def api_client() -> client.ApiClient:
    """In-cluster credentials in a pod, else the current kubeconfig context."""
    configuration = client.Configuration()
    if in_pod():
        config.load_incluster_config(client_configuration=configuration)
    else:  # a file that is no kubeconfig (not YAML, a list, binary, a directory): one error
        try:
            config.load_kube_config(
                config_file=os.environ.get("KUBECONFIG"), client_configuration=configuration
            )
        except (OSError, ValueError, TypeError, AttributeError, yaml.YAMLError) as exc:
            raise config.ConfigException(f"{type(exc).__name__}: {exc}") from exc
    configuration.connection_pool_maxsize = API_POOL_SIZE  # one per summarize thread
    # No resend after a read timeout (an applied claim PUT would fail on its resourceVersion).
    configuration.retries = urllib3.Retry(total=3, read=0)
    return BoundedApiClient(configuration)


def custom() -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client())


def core() -> client.CoreV1Api:
    return client.CoreV1Api(api_client())


def unless(refusals: tuple[int, ...], call: Callable[..., Any], *args: Any, **kw: Any) -> Any:
    """call's answer; None when the API answers one of these statuses."""
    try:
        return call(*args, **kw)
    except ApiException as exc:
        if exc.status in refusals:
            return None
        raise


def api_message(exc: ApiException) -> str:
    """What the API server answered, in one line: its Status message, else its reason."""
    try:
        message = json_value(exc.body or "").get("message")
    except (TypeError, ValueError, AttributeError):  # not a Status: a proxy's page, say
        message = None
    given = (message, exc.reason, one_line(exc.body or "", 200))
    return next((str(w) for w in given if w and str(w).strip()), "no reason given")


def applied(refusals: tuple[int, ...], call: Callable[..., Any], *args: Any, **kw: Any) -> bool:
    """Calls `call` on our API group; False when it answers one of these statuses."""
    return unless(refusals, call, GROUP, VERSION, *args, **kw) is not None


def read_secret(namespace: str, name: str) -> tuple[dict[str, str], dict[str, str]]:
    """A Secret's (annotations, data), the values base64-encoded as the API returns them."""
    try:
        secret = core().read_namespaced_secret(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            raise SecretError(f"Secret {namespace}/{name} not found") from exc
        if exc.status == 403:
            raise SecretError(f"not allowed to read Secret {namespace}/{name}") from exc
        raise
    annotations = (secret.metadata.annotations if secret.metadata else None) or {}
    return dict(annotations), {str(k): str(v) for k, v in (secret.data or {}).items()}


def secret_value(data: dict[str, str], namespace: str, name: str, key: str) -> str:
    if key not in data:
        raise SecretError(f"Secret {namespace}/{name} has no key {key!r}")
    value = base64.b64decode(data[key]).decode(errors="replace").strip()
    if not (value.isascii() and value.isprintable()):  # every value goes in an HTTP header
        raise SecretError(
            f"Secret {namespace}/{name} key {key!r} has a character no HTTP header carries (a "
            "line break, a control or non-ASCII character, or bytes that are not UTF-8)"
        )
    return value


def get_object(plural: str, namespace: str, name: str) -> dict[str, Any] | None:
    get = custom().get_namespaced_custom_object
    return cast(dict[str, Any] | None, unless((404,), get, GROUP, VERSION, namespace, plural, name))


def get_summary(namespace: str, name: str) -> dict[str, Any] | None:
    return get_object(SUMMARY_PLURAL, namespace, name)


def get_summarizer(namespace: str, name: str) -> dict[str, Any] | None:
    return get_object(SUMMARIZER_PLURAL, namespace, name)


def request_summary(
    namespace: str,
    session_id: str,
    *,
    trigger: str,
    summarizer: str | None = None,
    requested_at: str | None = None,
    patch_if_exists: bool = True,
    set_summarizer_on_patch: bool = False,
    resource_version: str | None = None,
    action: Action = "Summarize",
    forget_memories: bool = False,
    requested_by: str | None = None,
) -> tuple[str, str]:
    """Creates the session's SessionSummary, or patches spec.requestedAt to force a new pass;
    returns (name, "created" | "patched" | "exists" | "changed" | "pending"). Every patch is
    made as read: with resource_version, the caller's read ("changed" when it changed since);
    without, its own, re-read on a conflict, and not made over an unfinished Forget or Rebuild
    the request would cancel ("pending": retention.kept_request)."""
    name = summary_object_name(session_id)
    spec = SessionSummarySpec(
        session_id=session_id,
        summarizer_ref=summarizer or "default",
        requested_at=requested_at or now_rfc3339(precise=True),
        trigger=trigger,
        action=action,
        forget_memories=forget_memories,
    )
    body = {
        "apiVersion": API_VERSION,
        "kind": SUMMARY_KIND,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "session-summary-operator"},
            "annotations": {REQUESTED_BY: requested_by} if requested_by else {},
        },
        "spec": spec.to_api(),
    }
    asked = {k: v for k, v in spec.to_api().items() if k not in ("sessionId", "summarizerRef")}
    patch: dict[str, Any] = {
        "spec": asked,
        "metadata": {"annotations": {REQUESTED_BY: requested_by}},
    }
    if set_summarizer_on_patch and summarizer is not None:
        patch["spec"]["summarizerRef"] = summarizer
    while True:
        read = resource_version
        if read is None:
            create = custom().create_namespaced_custom_object
            if applied((409,), create, namespace, SUMMARY_PLURAL, body):
                return name, "created"
            if not patch_if_exists:
                return name, "exists"
            if (current := get_summary(namespace, name)) is None:
                continue  # deleted since: made again
            if kept_request(current, asked):
                return name, "pending"
            read = current["metadata"]["resourceVersion"]
        patch["metadata"]["resourceVersion"] = read
        patch_call = custom().patch_namespaced_custom_object
        try:
            patch_call(GROUP, VERSION, namespace, SUMMARY_PLURAL, name, patch)
            return name, "patched"
        except ApiException as exc:
            if exc.status not in (404, 409):
                raise
            if resource_version is not None and exc.status == 409:
                return name, "changed"
            if resource_version is not None:  # deleted since the caller read it (retention):
                resource_version, patch_if_exists = None, False  # made again unless another was


def patch_summary_status(
    namespace: str, name: str, status: dict[str, Any], resource_version: str | None = None
) -> bool:
    """A merge patch of a SessionSummary's status; False if gone (or changed since the read)."""
    patch = custom().patch_namespaced_custom_object_status
    meta = {"metadata": {"resourceVersion": resource_version}} if resource_version else {}
    return applied((404, 409), patch, namespace, SUMMARY_PLURAL, name, {"status": status, **meta})


def iter_summaries(namespace: str, page_size: int = 500) -> Iterator[dict[str, Any]]:
    list_call = custom().list_namespaced_custom_object
    yield from list_pages(list_call, namespace, SUMMARY_PLURAL, page_size=page_size)


def list_pages(
    list_call: Callable[..., Any], *args: Any, page_size: int = 500
) -> Iterator[dict[str, Any]]:
    """Every object a list call of ours returns, a page at a time (one 10k-object answer is a
    heap spike that stays)."""
    kwargs: dict[str, Any] = {"limit": page_size} if page_size > 0 else {}
    while True:
        page = cast(dict[str, Any], list_call(GROUP, VERSION, *args, **kwargs))
        yield from page.get("items") or []
        if not (token := (page.get("metadata") or {}).get("continue")):
            return
        kwargs["_continue"] = token


def unless_changed(resource_version: str) -> dict[str, Any]:
    return {"preconditions": {"resourceVersion": resource_version}}  # a delete's body


def delete_summary_if_unchanged(namespace: str, name: str, resource_version: str) -> bool:
    """Deletes only the version we looked at (a sunset in between wins); True if deleted."""
    delete, options = custom().delete_namespaced_custom_object, unless_changed(resource_version)
    return applied((404, 409), delete, namespace, SUMMARY_PLURAL, name, body=options)


STATUS_CONFLICT_RETRIES = 8


def update_summarizer_status(
    namespace: str,
    name: str,
    mutate: Callable[[SessionSummarizerStatus], SessionSummarizerStatus],
) -> tuple[SessionSummarizerStatus, SessionSummarizerStatus] | None:
    """Read-modify-write under a resourceVersion precondition: (before, after), None if gone."""
    for _ in range(STATUS_CONFLICT_RETRIES):
        if (obj := get_summarizer(namespace, name)) is None:
            return None
        before = SessionSummarizerStatus.model_validate(obj.get("status") or {})
        after = settled(mutate(before.model_copy(deep=True)), obj["metadata"].get("generation"))
        old, new = before.to_api(), after.to_api()
        if old == new:
            return before, after
        body: dict[str, Any] = {
            "metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
            # Fields the caller cleared are removed (null in a merge patch).
            "status": {**dict.fromkeys(old), **new},
        }
        patch = custom().patch_namespaced_custom_object_status
        try:
            if applied((409,), patch, namespace, SUMMARIZER_PLURAL, name, body):
                return before, after  # else changed: read again
        except ApiException as exc:
            if exc.status != 404:
                raise
            if get_summarizer(namespace, name) is None:
                return None  # deleted since the read
            raise RuntimeError(
                f"SessionSummarizer {namespace}/{name}: its status cannot be written: the API "
                "server has no status subresource for SessionSummarizers (404 on /status while "
                "the object reads); apply the chart's "
                "crds/sessionsummarizers.memorycore.io.yaml again"
            ) from None
    raise RuntimeError(
        f"SessionSummarizer {namespace}/{name}: status kept changing under us "
        f"({STATUS_CONFLICT_RETRIES} conflicts in a row)"
    )


def list_summarizers(namespaces: tuple[str, ...], *, cached: bool = False) -> list[dict[str, Any]]:
    """Every SessionSummarizer in these namespaces (all when empty); cached: the watch cache."""
    api = custom()
    kwargs: dict[str, Any] = {"resource_version": "0"} if cached else {}
    lists: list[tuple[Callable[..., Any], tuple[str, ...]]] = [
        (api.list_namespaced_custom_object, (ns,)) for ns in namespaces
    ] or [(api.list_cluster_custom_object, ())]
    listings = [call(GROUP, VERSION, *ns, SUMMARIZER_PLURAL, **kwargs) for call, ns in lists]
    return [item for listing in listings for item in listing.get("items") or []]


def release_finalizers(namespaces: tuple[str, ...], names: tuple[str, ...]) -> int:
    """Removes these finalizers from every SessionSummarizer (a changed list is left alone)."""
    released = 0
    for obj in list_summarizers(namespaces):
        meta = obj.get("metadata") or {}
        present = list(meta.get("finalizers") or [])
        ops: list[dict[str, Any]] = []
        for index in sorted((i for i, f in enumerate(present) if f in names), reverse=True):
            path = f"/metadata/finalizers/{index}"
            ops += [
                {"op": "test", "path": path, "value": present[index]},
                {"op": "remove", "path": path},
            ]
        if ops:  # 404, 409, 422: gone, or the list changed: nothing to do here
            where = (meta["namespace"], SUMMARIZER_PLURAL, meta["name"], ops)
            patch = custom().patch_namespaced_custom_object
            json_patch = "application/json-patch+json"
            released += applied((404, 409, 422), patch, *where, _content_type=json_patch)
    return released


def ask_again(namespace: str, name: str, resource_version: str, asked: dict[str, Any]) -> bool:
    """Asks a new pass of a SessionSummary at its resourceVersion, with these spec fields
    (requestedAt at least; core/retention.py); False if it changed or went since."""
    patch = {"metadata": {"resourceVersion": resource_version}, "spec": asked}
    patch_call = custom().patch_namespaced_custom_object
    return applied((404, 409), patch_call, namespace, SUMMARY_PLURAL, name, patch)
