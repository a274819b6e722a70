"""Turns a SessionSummarizer spec into live parts: the store, the embedder, the summarizer.

Secrets are read here (and only here) so their values never reach a status, an Event or a
log line. Built parts are cached per configuration, so a summary costs no reconnects.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from controller.api import ModelSpec, SessionSummarizerSpec
from controller.core.visibility import DEFAULT_VISIBILITY, VisibilityRules
from controller.embeddings.spec import EmbeddingSpec, build_embedding_function
from controller.kube import client as kube
from controller.pipeline import Embedder
from controller.scheduling import cpu_slots
from controller.store.connection import StoreLocation
from controller.store.memory_store import MemoryStore, store_for
from controller.summarizers.chat_prompt import ChatModelConfig
from controller.summarizers.contract import Summarizer
from controller.summarizers.extractive import EXTRACTIVE


@dataclass(frozen=True)
class Backends:
    store: MemoryStore
    embed: Embedder
    excluded_types: Sequence[str]
    summarizer: Summarizer = EXTRACTIVE
    visibility: VisibilityRules = DEFAULT_VISIBILITY


# The StoreSpec fields a StoreLocation takes as they are (the token is read from its Secret).
_STORE_FIELDS = (
    "url",
    "tenant",
    "database",
    "memory_collection",
    "summary_collection",
    "timeout_seconds",
)


# Reads one key of a Secret: (namespace, name, key) -> value. The operator reads the
# cluster; summaryctl may read the environment first (cli/settings.py).
SecretReader = Callable[[str, str, str], str]


def store_location(
    spec: SessionSummarizerSpec, namespace: str, read_secret: SecretReader = kube.read_secret_key
) -> StoreLocation:
    s = spec.store
    token = None
    if s.auth_secret_ref is not None:
        token = read_secret(namespace, s.auth_secret_ref.name, s.auth_secret_ref.key)
    where = s.model_dump(include=set(_STORE_FIELDS))
    # The summary collection records the embedding function it is created with.
    return StoreLocation(
        **where,
        token=token,
        embedding_provider=spec.embedding.provider,
        embedding_model=spec.embedding.model,
    )


def embedding_spec(
    spec: SessionSummarizerSpec, namespace: str, read_secret: SecretReader = kube.read_secret_key
) -> EmbeddingSpec:
    e = spec.embedding
    api_key = None
    if e.api_key_secret_ref is not None:
        api_key = read_secret(namespace, e.api_key_secret_ref.name, e.api_key_secret_ref.key)
    return EmbeddingSpec(provider=e.provider, model=e.model, base_url=e.base_url, api_key=api_key)


_EMBEDDERS: dict[EmbeddingSpec, Embedder] = {}
_LOCK = threading.Lock()


def embedder_for(spec: EmbeddingSpec) -> Embedder:
    """The live embedder of a spec. The local model runs on this process's cores, so its
    calls take a CPU slot, earliest deadline first (controller/scheduling.py); an endpoint
    is only I/O here and is not gated."""
    with _LOCK:
        if spec not in _EMBEDDERS:
            ef = build_embedding_function(spec)
            if spec.provider == "local-minilm":

                def gated(texts: list[str]) -> list[Any]:
                    with cpu_slots().slot():
                        return list(ef(texts))

                _EMBEDDERS[spec] = gated
            else:
                _EMBEDDERS[spec] = lambda texts: list(ef(texts))
        return _EMBEDDERS[spec]


def chat_model_config(
    model: ModelSpec, namespace: str, read_secret: SecretReader = kube.read_secret_key
) -> ChatModelConfig:
    """The model endpoint of an openai backend; the API key from its Secret, if any."""
    if not model.base_url or not model.model:
        raise ValueError("model.baseUrl and model.model are required when backend is openai")
    api_key = None
    if model.api_key_secret_ref is not None:
        ref = model.api_key_secret_ref
        api_key = read_secret(namespace, ref.name, ref.key)
    return ChatModelConfig(
        base_url=model.base_url,
        model=model.model,
        api_key=api_key,
        timeout_seconds=model.timeout_seconds,
        max_retries=model.max_retries,
        max_concurrency=model.max_concurrency,
        max_input_tokens=model.max_input_tokens,
    )


_SUMMARIZERS: dict[ChatModelConfig, Summarizer] = {}


def summarizer_for(model: ModelSpec, namespace: str) -> Summarizer:
    """extractive (no model), or a cached chat-completions summarizer for the endpoint."""
    if model.backend == "extractive":
        return EXTRACTIVE
    # Imported here: the openai SDK costs ~14 MB of RSS, which only an operator that uses
    # a model should pay (bench/operator_rss.py).
    from controller.summarizers.chat_model import ChatModelSummarizer

    config = chat_model_config(model, namespace)
    with _LOCK:
        if config not in _SUMMARIZERS:
            _SUMMARIZERS[config] = ChatModelSummarizer(config)
        return _SUMMARIZERS[config]


def backends_for(spec: SessionSummarizerSpec, namespace: str) -> Backends:
    """Blocking: may read Secrets and connect to Chroma."""
    location = store_location(spec, namespace)
    return Backends(
        store=store_for(location),
        embed=embedder_for(embedding_spec(spec, namespace)),
        excluded_types=tuple(spec.excluded_memory_types),
        summarizer=summarizer_for(spec.model, namespace),
        visibility=spec.visibility.rules(),
    )
