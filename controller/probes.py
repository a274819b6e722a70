"""The SessionSummarizer's health probes, one condition each (status/summarizer_status.py
has the owner table). They probe the store and embedder its passes use, so a probe that
loads the local model or connects spares the first pass the wait. Blocking."""

from __future__ import annotations

from functools import partial

import httpx2

from controller.api import Condition, SessionSummarizerSpec
from controller.backends import (
    chat_model_config,
    check_memory_destinations,
    secret_uses,
    secret_verdict,
)
from controller.core.destinations import DestinationRefused, SecretVerdict, redirect_refusal, shown
from controller.core.text import one_line
from controller.embeddings.minilm import EmbeddingError
from controller.http_deadline import AnswerTooLarge
from controller.kube import client as kube
from controller.status.summarizer_status import secrets_allowed, store_reachable
from controller.store.errors import EmbeddingMismatch, InvalidStoreConfig, StoreUnavailable
from controller.summarizer_parts import SummarizerParts


def _condition(kind: str, ok: bool, reason: str, message: str) -> Condition:
    return Condition(type=kind, status="True" if ok else "False", reason=reason, message=message)


def check_store(
    parts: SummarizerParts, spec: SessionSummarizerSpec, namespace: str, name: str
) -> Condition:
    try:
        with parts.store(namespace, name, spec) as store:
            store.heartbeat()
    except kube.SecretError as exc:
        return store_reachable(spec.store.url, reason="SecretNotFound", message=str(exc))
    except DestinationRefused as exc:
        return store_reachable(spec.store.url, reason=exc.reason, message=one_line(exc, 1000))
    except (InvalidStoreConfig, StoreUnavailable) as exc:  # the parts reconnect at next use
        reason = "InvalidStoreConfig" if isinstance(exc, InvalidStoreConfig) else "StoreUnavailable"
        return store_reachable(spec.store.url, reason=reason, message=one_line(exc, 300))
    return store_reachable(spec.store.url)


def check_model(spec: SessionSummarizerSpec, namespace: str) -> Condition:
    from controller.embeddings.remote import deadline_client  # loads the openai SDK

    model = spec.model
    ready = partial(_condition, "ModelReady", True)
    unavailable = partial(_condition, "ModelReady", False)
    if model.backend == "extractive":
        return ready("Extractive", "embedded extractive summarizer (no model)")
    try:
        check_memory_destinations(spec, namespace, "model.baseUrl")
        config = chat_model_config(model, namespace)
        headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        # Joined as the openai client joins its paths (dot segments resolved in the base
        # first, then one slash if none ends it), so the probe asks where the passes post.
        base = httpx2.URL(config.base_url)
        if not base.raw_path.endswith(b"/"):
            base = base.copy_with(raw_path=base.raw_path + b"/")
        url = str(base.copy_with(raw_path=base.raw_path + b"models"))
        timeout = min(model.timeout_seconds, 10)
        with deadline_client(timeout) as client:  # bound in time and size, as a pass's calls
            resp = client.get(url, headers=headers, timeout=timeout)
        if resp.is_redirect:  # httpx follows none unless asked
            where = resp.headers.get("location")
            return unavailable("ModelUnavailable", redirect_refusal(url, resp.status_code, where))
        if resp.status_code >= 400:
            return unavailable("ModelUnavailable", f"GET {shown(url)} answered {resp.status_code}")
    except kube.SecretError as exc:
        return unavailable("SecretNotFound", str(exc))
    except DestinationRefused as exc:
        return unavailable(exc.reason, one_line(exc, 1000))
    except (httpx2.HTTPError, AnswerTooLarge) as exc:
        return unavailable("ModelUnavailable", f"GET {shown(url)}: {one_line(exc, 300)}")
    return ready("EndpointOK", f"{shown(config.base_url)} answers")


def check_embedding(
    parts: SummarizerParts, spec: SessionSummarizerSpec, namespace: str, name: str
) -> Condition:
    """Embeds a probe text with the configured function (this also loads the local model,
    so the first summary after a start or a failover does not pay for it) and compares its
    dimension with the vectors the summary collection already holds."""
    failed = partial(_condition, "EmbeddingReady", False)
    ok = partial(_condition, "EmbeddingReady", True, "EmbeddingOK")
    provider = spec.embedding.provider
    try:
        with parts.embedder(namespace, name, spec) as embed:
            vector = embed(["embedding check"])[0]
    except kube.SecretError as exc:
        return failed("SecretNotFound", str(exc))
    except DestinationRefused as exc:
        return failed(exc.reason, one_line(exc, 1000))
    except (EmbeddingError, ValueError) as exc:
        return failed("EmbeddingUnavailable", one_line(exc, 300))
    dimension = len(vector)
    try:
        with parts.store(namespace, name, spec) as store:
            held = store.check_embedding(dimension)
    except EmbeddingMismatch as exc:
        return failed("EmbeddingMismatch", one_line(exc, 300))
    except (StoreUnavailable, kube.SecretError, InvalidStoreConfig, DestinationRefused):
        # StoreReachable reports it; the dimension is checked again before every write.
        return ok(
            f"{provider} produces {dimension}-d vectors (collection not checked: "
            "the store is unreachable)"
        )
    return ok(
        f"{provider} produces {dimension}-d vectors"
        + (", as the summary collection holds" if held else "; the summary collection is empty")
    )


def check_secrets(spec: SessionSummarizerSpec, namespace: str) -> Condition:
    """Reads the annotations of every Secret the spec would send (nothing is sent here)."""
    verdicts: list[SecretVerdict] = []
    unread: list[str] = []
    for use in secret_uses(spec, namespace):
        try:
            annotations, _ = kube.read_secret(use.namespace, use.name)
        except kube.SecretError as exc:
            unread.append(str(exc))
            continue
        verdicts.append(secret_verdict(use, annotations))
    return secrets_allowed(verdicts, unread)


def health_conditions(
    parts: SummarizerParts, spec: SessionSummarizerSpec, namespace: str, name: str
) -> list[Condition]:
    return [
        check_secrets(spec, namespace),
        check_store(parts, spec, namespace, name),
        check_model(spec, namespace),
        check_embedding(parts, spec, namespace, name),
    ]
