"""Turns a SessionSummarizer spec into live parts: the store and the embedder.

Secrets are read here (and only here) so their values never reach a status, an Event or a
log line. Built parts are cached per configuration, so a summary costs no reconnects.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from controller import kube
from controller.api import SessionSummarizerSpec
from controller.embeddings import EmbeddingSpec, build_embedding_function
from controller.store import MemoryStore, StoreLocation, store_for
from controller.summarize import Embedder


@dataclass(frozen=True)
class Backends:
    store: MemoryStore
    embed: Embedder
    excluded_types: Sequence[str]


def store_location(spec: SessionSummarizerSpec, namespace: str) -> StoreLocation:
    s = spec.store
    token = None
    if s.auth_secret_ref is not None:
        token = kube.read_secret_key(namespace, s.auth_secret_ref.name, s.auth_secret_ref.key)
    return StoreLocation(
        url=s.url,
        tenant=s.tenant,
        database=s.database,
        memory_collection=s.memory_collection,
        summary_collection=s.summary_collection,
        token=token,
        timeout_seconds=s.timeout_seconds,
    )


def embedding_spec(spec: SessionSummarizerSpec, namespace: str) -> EmbeddingSpec:
    e = spec.embedding
    api_key = None
    if e.api_key_secret_ref is not None:
        api_key = kube.read_secret_key(
            namespace, e.api_key_secret_ref.name, e.api_key_secret_ref.key
        )
    return EmbeddingSpec(provider=e.provider, model=e.model, base_url=e.base_url, api_key=api_key)


_EMBEDDERS: dict[EmbeddingSpec, Embedder] = {}
_LOCK = threading.Lock()


def embedder_for(spec: EmbeddingSpec) -> Embedder:
    with _LOCK:
        if spec not in _EMBEDDERS:
            ef = build_embedding_function(spec)
            _EMBEDDERS[spec] = lambda texts: list(ef(texts))
        return _EMBEDDERS[spec]


def backends_for(spec: SessionSummarizerSpec, namespace: str) -> Backends:
    """Blocking: may read Secrets and connect to Chroma."""
    location = store_location(spec, namespace)
    return Backends(
        store=store_for(location),
        embed=embedder_for(embedding_spec(spec, namespace)),
        excluded_types=tuple(spec.excluded_memory_types),
    )
