"""Turns a SessionSummarizer spec into live parts: the store, the embedder, the summarizer.
Secrets are read here only, so their values never reach a status, an Event or a log line,
and go only to a URL their Secret allows and the allowed endpoints admit (core/destinations.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, Field, model_validator

from controller.api import SecretKeyRef, SessionSummarizerSpec
from controller.config import CONFIG
from controller.core.destinations import (
    ALLOWED_MODEL_URLS_ANNOTATION,
    ALLOWED_URLS_ANNOTATION,
    OPERATOR,
    EndpointNotAllowed,
    MemoryDestinationNotAllowed,
    SecretHostNotAllowed,
    SecretUse,
    SecretVerdict,
    StoreCredential,
    endpoint_refusal,
    judge_secret,
    memory_destination_refusal,
)
from controller.embeddings.minilm import (
    MINILM_ALIASES,
    MINILM_MODEL_NAME,
    EmbeddingFunction,
    LocalMiniLMEmbedding,
)
from controller.kube import client as kube
from controller.redaction import Redaction
from controller.store.connection import StoreLocation
from controller.summarizers.chat_prompt import ChatModelConfig


def redaction_of(spec: SessionSummarizerSpec) -> Redaction:
    """detect-secrets' rules and the summarizer's own patterns (docs/privacy.md)."""
    return Redaction(tuple((p.name, p.pattern) for p in spec.redaction.extra_patterns))


def check_endpoint(field: str, url: str, program: str = OPERATOR) -> None:
    setting = CONFIG.setting("allowed_endpoints", program)
    refusal = endpoint_refusal(field, url, CONFIG.allowed_endpoints, setting, program)
    if refusal is not None:
        raise EndpointNotAllowed(refusal)


def check_memory_destinations(
    spec: SessionSummarizerSpec,
    namespace: str,
    field: str | None = None,
    program: str = OPERATOR,
    secret_unused: str | None = None,
) -> None:
    """Raises MemoryDestinationNotAllowed unless the store credential's owner (or the install)
    allows every endpoint the memories would go to (only `field`'s, when given); the
    Secret is not read when `secret_unused` says why the store is read without it."""
    m, e = spec.model, spec.embedding
    endpoints = (
        ("model.baseUrl", m.backend == "openai" and m.base_url),
        ("embedding.baseUrl", e.provider == "openai" and e.base_url),
    )
    destinations = [(where, url) for where, url in endpoints if url and field in (None, where)]
    if not destinations:
        return
    credential = None
    if (ref := spec.store.auth_secret_ref) is not None and secret_unused is None:
        annotations, _ = kube.read_secret(namespace, ref.name)
        owner_allows = annotations.get(ALLOWED_MODEL_URLS_ANNOTATION)
        credential = StoreCredential(namespace, ref.name, owner_allows)
    for where, url in destinations:
        allow = CONFIG.allowed_model_urls, CONFIG.setting("allowed_model_urls", program)
        refusal = memory_destination_refusal(where, url, credential, *allow, program, secret_unused)
        if refusal is not None:
            raise MemoryDestinationNotAllowed(refusal)


def secret_verdict(use: SecretUse, annotations: dict[str, str]) -> SecretVerdict:
    return judge_secret(
        use,
        annotations.get(ALLOWED_URLS_ANNOTATION),
        allow_unannotated=CONFIG.allow_unannotated_secrets,
    )


def secret_for(field: str, namespace: str, ref: SecretKeyRef, url: str) -> str:
    """The value of a Secret key that will be sent to url, if the Secret allows url (else
    SecretHostNotAllowed, never naming the value)."""
    annotations, data = kube.read_secret(namespace, ref.name)
    verdict = secret_verdict(SecretUse(field, namespace, ref.name, url), annotations)
    if not verdict.allowed:
        raise SecretHostNotAllowed(verdict.refusal)
    return kube.secret_value(data, namespace, ref.name, ref.key)


def secret_uses(spec: SessionSummarizerSpec, namespace: str) -> list[SecretUse]:
    """Every Secret this spec would send, and where to: only those actually used."""
    e, m = spec.embedding, spec.model
    refs = (
        ("store.authSecretRef", spec.store.auth_secret_ref, spec.store.url),
        ("embedding.apiKeySecretRef", e.api_key_secret_ref, e.provider == "openai" and e.base_url),
        ("model.apiKeySecretRef", m.api_key_secret_ref, m.backend == "openai" and m.base_url),
    )
    return [
        SecretUse(field, namespace, ref.name, url)
        for field, ref, url in refs
        if ref is not None and url
    ]


# (field, namespace, ref, url) -> the value: secret_for, or summaryctl's (env first).
SecretReader = Callable[[str, str, SecretKeyRef, str], str]


def store_location(
    spec: SessionSummarizerSpec,
    namespace: str,
    read_secret: SecretReader = secret_for,
    *,
    embedded: bool = False,
    program: str = OPERATOR,
) -> StoreLocation:
    """embedded (summaryctl --path) reaches no URL: store.url is not judged, no token read."""
    s = spec.store
    token = None
    if not embedded:
        check_endpoint("store.url", s.url, program)
        if s.auth_secret_ref is not None:
            token = read_secret("store.authSecretRef", namespace, s.auth_secret_ref, s.url)
    return StoreLocation(
        **s.model_dump(exclude={"auth_secret_ref"}),  # the token is read from its Secret
        token=token,
        embedding_provider=spec.embedding.provider,
        embedding_model=spec.embedding.model,
        document_max_chars=spec.document.max_chars,
    )


class EmbeddingSpec(BaseModel, frozen=True, extra="forbid"):
    """Which model embeds summaries; must be the model the collection was created with (a
    collection's model and dimension are fixed by its first insert)."""

    provider: Literal["local-minilm", "openai"] = "local-minilm"
    model: str = MINILM_MODEL_NAME
    base_url: str | None = None
    api_key: str | None = Field(default=None, repr=False)

    @model_validator(mode="after")
    def _consistent(self) -> EmbeddingSpec:
        if self.provider == "local-minilm" and self.model not in MINILM_ALIASES:
            raise ValueError(
                f"provider 'local-minilm' only runs {MINILM_MODEL_NAME}, not {self.model!r}"
            )
        return self


def build_embedding_function(
    spec: EmbeddingSpec, local: LocalMiniLMEmbedding | None = None
) -> EmbeddingFunction:
    """A plain callable, never handed to chromadb. local: the runtime's shared local model."""
    if spec.provider == "local-minilm":
        return local or LocalMiniLMEmbedding()
    assert spec.base_url is not None  # api.EmbeddingConfig requires it of provider openai
    # Imported here: the openai SDK costs ~14 MB of RSS (bench/operator_rss.py).
    from controller.embeddings.remote import OpenAICompatibleEmbedding

    return OpenAICompatibleEmbedding(base_url=spec.base_url, model=spec.model, api_key=spec.api_key)


def embedding_spec(
    spec: SessionSummarizerSpec,
    namespace: str,
    read_secret: SecretReader = secret_for,
    program: str = OPERATOR,
) -> EmbeddingSpec:
    e = spec.embedding
    api_key = None
    if e.provider == "openai" and e.base_url:
        check_endpoint("embedding.baseUrl", e.base_url, program)
        if (ref := e.api_key_secret_ref) is not None:
            api_key = read_secret("embedding.apiKeySecretRef", namespace, ref, e.base_url)
    return EmbeddingSpec(provider=e.provider, model=e.model, base_url=e.base_url, api_key=api_key)


def chat_model_config(
    spec: SessionSummarizerSpec,
    namespace: str,
    read_secret: SecretReader = secret_for,
    program: str = OPERATOR,
) -> ChatModelConfig:
    """The model endpoint of an openai backend; the API key from its Secret, if any."""
    model = spec.model
    assert model.base_url and model.model  # ModelSpec requires both of an openai backend
    check_endpoint("model.baseUrl", model.base_url, program)
    api_key = None
    if (ref := model.api_key_secret_ref) is not None:
        api_key = read_secret("model.apiKeySecretRef", namespace, ref, model.base_url)
    limits = {"timeout_seconds", "max_retries", "max_concurrency", "max_input_tokens"}
    return ChatModelConfig(
        base_url=model.base_url,
        model=model.model,
        api_key=api_key,
        redaction=redaction_of(spec),
        **model.model_dump(include=limits),
    )
