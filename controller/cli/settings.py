"""Where summaryctl's store commands get their settings: the SessionSummarizer the operator
uses (--summarizer NAME -n NS, or --summarizer-file), so `summaryctl summarize` writes what
the operator would (store, collections, embedding model, summarizer, reader tags); flags
override its store. Without one: the flags, else neo's default collections, the local
all-MiniLM-L6-v2 and the extractive summarizer. Secrets come from the environment
(CHROMA_TOKEN, EMBEDDING_API_KEY, MODEL_API_KEY), else from the cluster.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml
from pydantic import ValidationError

from controller.api import (
    API_VERSION,
    DEFAULT_EXCLUDED_TYPES,
    SUMMARIZER_KIND,
    SessionSummarizerSpec,
    StoreSpec,
)
from controller.cli.args import CliError, check_chroma_url
from controller.cli.failures import kube_call, summarizer_object
from controller.core.text import one_line
from controller.core.visibility import DEFAULT_VISIBILITY, VisibilityRules
from controller.redaction import DEFAULT_REDACTION, Redaction
from controller.store.connection import StoreLocation

# The Secret each env var stands in for (by the spec field that names the Secret).
SECRET_ENV = MappingProxyType(
    {"store": "CHROMA_TOKEN", "embedding": "EMBEDDING_API_KEY", "model": "MODEL_API_KEY"}
)
STORE_FLAGS = ("tenant", "database", "memory_collection", "summary_collection")


@dataclass(frozen=True)
class Summarizer:
    """A SessionSummarizer's spec and the namespace its Secrets are in."""

    spec: SessionSummarizerSpec
    namespace: str
    source: str  # how a message names it


def _from_manifest(path: str, namespace: str | None) -> Summarizer:
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise CliError(f"{path} is not YAML: {one_line(exc, 200)}") from exc
    if not isinstance(doc, dict) or doc.get("kind") != SUMMARIZER_KIND:
        raise CliError(f"{path} is not a {SUMMARIZER_KIND} manifest (apiVersion {API_VERSION})")
    meta = doc.get("metadata")
    ns = namespace or (meta.get("namespace") if isinstance(meta, dict) else None) or "default"
    return Summarizer(_parsed(doc.get("spec") or {}, path), str(ns), path)


def _from_cluster(name: str, namespace: str) -> Summarizer:
    obj = summarizer_object(namespace, name) or {}
    where = f"SessionSummarizer {namespace}/{name}"
    return Summarizer(_parsed(obj.get("spec") or {}, where), namespace, where)


def _parsed(spec: Any, where: str) -> SessionSummarizerSpec:
    try:
        return SessionSummarizerSpec.model_validate(spec)
    except ValidationError as exc:
        raise CliError(f"invalid spec in {where}: {one_line(exc, 300)}") from exc


def load_summarizer(args: argparse.Namespace) -> Summarizer | None:
    """The summarizer --summarizer or --summarizer-file names, if any."""
    if getattr(args, "summarizer_file", None):
        return _from_manifest(args.summarizer_file, args.namespace)
    if getattr(args, "summarizer", None):
        return _from_cluster(args.summarizer, args.namespace or "default")
    return None


def secret_reader(field: str) -> Any:
    """Reads a Secret key a summarizer names: the field's env var if set, else the Secret
    from the cluster, refused unless its memorycore.io/allowed-urls allows the URL
    (docs/security.md)."""
    from controller import backends

    def read(spec_field: str, namespace: str, ref: Any, url: str) -> str:
        value = os.environ.get(SECRET_ENV[field])
        if value:
            return value
        from controller.core.destinations import DestinationRefused
        from controller.kube import client as kube

        try:
            return str(kube_call(backends.secret_for, spec_field, namespace, ref, url))
        except (kube.SecretError, DestinationRefused) as exc:
            raise CliError(f"{exc} (or set {SECRET_ENV[field]})") from exc

    return read


def store_location(args: argparse.Namespace, summarizer: Summarizer | None) -> StoreLocation:
    """The store: flags given on the command line, else the summarizer's, else defaults."""
    from controller import backends

    store = summarizer.spec.store if summarizer else StoreSpec()
    base = (
        backends.store_location(summarizer.spec, summarizer.namespace, secret_reader("store"))
        if summarizer
        else None
    )
    url = args.chroma_url or (store.url if summarizer and not args.path else None)
    if not url and not args.path:
        raise CliError(
            "say where Chroma is: --chroma-url http://HOST:8000, --path DIR, or a summarizer "
            "(--summarizer NAME, --summarizer-file FILE)"
        )
    chosen = {f: getattr(args, f, None) or getattr(store, f) for f in STORE_FLAGS}
    embedding = summarizer.spec.embedding if summarizer else None
    return StoreLocation(
        url=check_chroma_url(url) if url and not args.path else None,
        path=args.path,
        **chosen,
        timeout_seconds=store.timeout_seconds,
        token=os.environ.get("CHROMA_TOKEN") or (base.token if base else None),
        embedding_provider=embedding.provider if embedding else "local-minilm",
        embedding_model=embedding.model if embedding else "all-MiniLM-L6-v2",
    )


@dataclass(frozen=True)
class SummarizeParts:
    """What `summaryctl summarize` runs with: the operator's parts for that summarizer."""

    embed: Any
    summarizer: Any
    excluded_types: Sequence[str]
    visibility: VisibilityRules
    redaction: Redaction = DEFAULT_REDACTION


def embedder(summarizer: Summarizer | None) -> Any:
    """The summarizer's embedding, as the operator builds it (without one: the local MiniLM)."""
    from controller import backends
    from controller.embeddings.minilm import EmbeddingError
    from controller.embeddings.spec import EmbeddingSpec, build_embedding_function

    try:
        embedding = (
            backends.embedding_spec(
                summarizer.spec, summarizer.namespace, secret_reader("embedding")
            )
            if summarizer
            else EmbeddingSpec()
        )
        ef = build_embedding_function(embedding)
    except (EmbeddingError, ValueError) as exc:
        raise CliError(f"the embedding cannot be used: {one_line(exc, 300)}") from exc
    return lambda texts: list(ef(texts))


def summarize_parts(summarizer: Summarizer | None) -> SummarizeParts:
    from controller import backends
    from controller.summarizers.extractive import EXTRACTIVE

    spec = summarizer.spec if summarizer else None
    model = spec.model if spec else None
    chosen: Any = EXTRACTIVE
    if model is not None and model.backend != "extractive" and summarizer is not None:
        from controller.summarizers.chat_model import ChatModelSummarizer

        try:
            config = backends.chat_model_config(model, summarizer.namespace, secret_reader("model"))
        except ValueError as exc:
            raise CliError(f"{summarizer.source}: {exc}") from exc
        chosen = ChatModelSummarizer(config)
    return SummarizeParts(
        embed=embedder(summarizer),
        summarizer=chosen,
        excluded_types=tuple(spec.excluded_memory_types) if spec else DEFAULT_EXCLUDED_TYPES,
        visibility=spec.visibility.rules() if spec else DEFAULT_VISIBILITY,
        redaction=backends.redaction_of(spec) if spec else DEFAULT_REDACTION,
    )
