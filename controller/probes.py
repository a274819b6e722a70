"""The SessionSummarizer's health probes, one condition each, on the store and embedder its
passes use: a probe that loads the local model or connects spares the first pass the wait."""

from __future__ import annotations

from functools import partial

import httpx2

from controller.api import Condition, SessionSummarizerSpec
from controller.backends import (
    chat_model_config,
    check_memory_destinations,
    redaction_of,
    secret_uses,
    secret_verdict,
)
from controller.core.destinations import DestinationRefused, SecretVerdict, redirect_refusal, shown
from controller.embeddings.minilm import EmbeddingError
from controller.http_deadline import AnswerTooLarge
from controller.kube import client as kube
from controller.runtime import SummarizerParts
from controller.status.conditions import (
    condition,
    failure_shown,
    masked,
    secrets_allowed,
    store_reachable,
)
from controller.store.errors import EmbeddingMismatch, InvalidStoreConfig, StoreUnavailable


def _shown(exc: Exception, spec: SessionSummarizerSpec) -> tuple[str, str]:
    """(reason, message) as a pass shows the failure, but a missing Secret's message whole."""
    shown = failure_shown(exc, redaction_of(spec))
    assert shown is not None, exc  # a kind FAILURES names
    return shown[0], str(exc) if isinstance(exc, kube.SecretError) else shown[1]


def check_store(
    parts: SummarizerParts, spec: SessionSummarizerSpec, namespace: str, name: str
) -> Condition:
    try:
        with parts.store(namespace, name, spec) as store:
            store.heartbeat()
    except (kube.SecretError, DestinationRefused, InvalidStoreConfig, StoreUnavailable) as exc:
        reason, message = _shown(exc, spec)  # the parts reconnect at next use
        return store_reachable(spec.store.url, reason=reason, message=message)
    return store_reachable(spec.store.url)


def check_model(spec: SessionSummarizerSpec, namespace: str) -> Condition:
    from openai import APIConnectionError, APIStatusError  # loads the openai SDK

    from controller.embeddings.remote import openai_client

    model = spec.model
    ready = partial(condition, "ModelReady", "True")
    unavailable = partial(condition, "ModelReady", "False")
    if model.backend == "extractive":
        return ready("Extractive", "embedded extractive summarizer (no model)")
    try:
        check_memory_destinations(spec, namespace, "model.baseUrl")
        config = chat_model_config(spec, namespace)
        timeout = min(model.timeout_seconds, 10)
        # The passes' client: bound in time and size, and asked where the passes post.
        client, headers = openai_client(config.base_url, config.api_key, timeout, 0)
        url = f"{client.base_url}models"
        with client:
            client.get("models", cast_to=httpx2.Response, options={"headers": headers})
    except (kube.SecretError, DestinationRefused) as exc:
        return unavailable(*_shown(exc, spec))
    except APIStatusError as exc:
        if exc.response.is_redirect:  # the client follows none
            where = exc.response.headers.get("location")
            return unavailable("ModelUnavailable", redirect_refusal(url, exc.status_code, where))
        return unavailable("ModelUnavailable", f"GET {shown(url)} answered {exc.status_code}")
    except (APIConnectionError, AnswerTooLarge) as exc:  # the SDK's error wraps httpx's
        why = masked(exc.__cause__ or exc, 300, redaction_of(spec))
        return unavailable("ModelUnavailable", f"GET {shown(url)}: {why}")
    return ready("EndpointOK", f"{shown(config.base_url)} answers")


def check_embedding(
    parts: SummarizerParts, spec: SessionSummarizerSpec, namespace: str, name: str
) -> Condition:
    """Embeds a probe text with the configured function (this also loads the local model,
    so the first summary after a start or a failover does not pay for it) and compares its
    dimension with the vectors the summary collection already holds."""
    failed = partial(condition, "EmbeddingReady", "False")
    ok = partial(condition, "EmbeddingReady", "True", "EmbeddingOK")
    try:
        with parts.embedder(namespace, name, spec) as embed:
            vector = embed(["embedding check"])[0]
    except (kube.SecretError, DestinationRefused, EmbeddingError) as exc:
        return failed(*_shown(exc, spec))
    except ValueError as exc:
        return failed("EmbeddingUnavailable", masked(exc, 300, redaction_of(spec)))
    produces = f"{spec.embedding.provider} produces {len(vector)}-d vectors"
    try:
        with parts.store(namespace, name, spec) as store:
            held = store.check_embedding(len(vector))
    except EmbeddingMismatch as exc:
        return failed(*_shown(exc, spec))
    except (StoreUnavailable, kube.SecretError, InvalidStoreConfig, DestinationRefused):
        # StoreReachable reports it; the dimension is checked again before every write.
        return ok(f"{produces} (collection not checked: the store is unreachable)")
    held_by = ", as the summary collection holds" if held else "; the summary collection is empty"
    return ok(produces + held_by)


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
