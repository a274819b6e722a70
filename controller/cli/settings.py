"""Where summaryctl's store commands get their settings: the SessionSummarizer the operator
uses (--summarizer, --summarizer-file), else a spec's defaults, with the store flags over
them, so `summaryctl summarize` writes what the operator would (docs/configuration.md)."""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml
from pydantic import ValidationError

from controller import backends
from controller.api import API_VERSION, SUMMARIZER_KIND, SessionSummarizerSpec, StoreSpec
from controller.cli.args import (
    STORE_FLAGS,
    CliError,
    check_chroma_url,
    kube_call,
    namespace_arg,
    summarizer_object,
)
from controller.core.destinations import DestinationRefused
from controller.core.text import one_line
from controller.embeddings.minilm import EmbeddingError
from controller.kube import client as kube
from controller.pipeline import Backends, Embedder
from controller.status.conditions import masked
from controller.store.connection import StoreLocation, connect
from controller.store.errors import (
    CollectionNotFound,
    EmbeddingMismatch,
    InvalidStoreConfig,
    StoreUnavailable,
)
from controller.store.memory_store import MemoryStore
from controller.summarizers.contract import Summarizer
from controller.summarizers.extractive import EXTRACTIVE

# The env var that stands in for each Secret (by the spec field that names the Secret).
SECRET_ENV = MappingProxyType(
    {"store": "CHROMA_TOKEN", "embedding": "EMBEDDING_API_KEY", "model": "MODEL_API_KEY"}
)
# summaryctl checks destinations against its own SSO_* variables: a refusal names them.
PROGRAM = "summaryctl"


@dataclass(frozen=True)
class SummarizerSettings:
    """A SessionSummarizer's spec and its Secrets' namespace; none named: the defaults."""

    spec: SessionSummarizerSpec
    namespace: str
    secret_unused: str | None = None  # why the store is read without its Secret


def _manifest(path: str, namespace: str | None) -> tuple[Any, str]:
    """The spec of the SessionSummarizer in the manifest at path, and its namespace."""
    try:
        doc = yaml.safe_load(Path(path).read_bytes())  # bytes: YAML's own UTF-8/16 reading
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except (yaml.YAMLError, RecursionError) as exc:  # RecursionError: nested too deep
        raise CliError(f"{path} is not YAML: {one_line(exc, 200)}") from exc
    if not isinstance(doc, dict) or doc.get("kind") != SUMMARIZER_KIND:
        raise CliError(f"{path} is not a {SUMMARIZER_KIND} manifest (apiVersion {API_VERSION})")
    meta = doc.get("metadata")
    ns = meta.get("namespace") if isinstance(meta, dict) else None
    if not isinstance(ns, str | None):  # 7, a list: never read as text
        why = f"must be a namespace name (text), not {one_line(repr(ns), 60)}"
        raise CliError(f"{path}: metadata.namespace {why}")
    if ns:
        try:
            namespace_arg(ns)
        except argparse.ArgumentTypeError as exc:
            raise CliError(f"{path}: metadata.namespace: {exc}") from None
    return doc.get("spec") or {}, namespace or ns or "default"


def load_summarizer(args: argparse.Namespace) -> SummarizerSettings:
    """The summarizer --summarizer or --summarizer-file names, else the spec's defaults."""
    spec: Any = {}
    namespace, source = args.namespace or "default", None
    if args.summarizer_file:
        source = args.summarizer_file
        spec, namespace = _manifest(source, args.namespace)
    elif args.summarizer:
        source = f"SessionSummarizer {namespace}/{args.summarizer}"
        spec = summarizer_object(namespace, args.summarizer).get("spec") or {}
    unused = None
    if args.path:
        unused = "the store is read from --path, with no credential"
    elif os.environ.get(SECRET_ENV["store"]):
        unused = f"the store is read with {SECRET_ENV['store']}, not with its Secret"
    try:
        parsed = SessionSummarizerSpec.model_validate(spec)
        return SummarizerSettings(parsed, namespace, unused)
    except ValidationError as exc:
        raise CliError(f"invalid spec in {source}: {one_line(exc, 300)}") from exc


def read_secret(spec_field: str, namespace: str, ref: Any, url: str) -> str:
    """A backends.SecretReader: the env var standing for the Secret if set, else the Secret,
    refused unless it allows the URL (docs/security.md)."""
    env = SECRET_ENV[spec_field.split(".")[0]]
    if value := os.environ.get(env):
        return value
    try:
        return str(kube_call(backends.secret_for, spec_field, namespace, ref, url))
    except (kube.SecretError, DestinationRefused) as exc:
        raise CliError(f"{exc} (or set {env})") from exc


def store_location(args: argparse.Namespace, summarizer: SummarizerSettings) -> StoreLocation:
    """The store: flags given on the command line, else the summarizer's, else defaults."""
    chroma_url = None if args.path else args.chroma_url and check_chroma_url(args.chroma_url)
    base = StoreLocation(url=chroma_url)
    if args.summarizer or args.summarizer_file:
        spec = summarizer.spec
        if chroma_url:  # the URL the store is reached at: the one allowed and sent the token
            store = spec.store.model_copy(update={"url": chroma_url})
            spec = spec.model_copy(update={"store": store})
        base = backends.store_location(
            spec, summarizer.namespace, read_secret, embedded=bool(args.path), program=PROGRAM
        )
    elif chroma_url:
        backends.check_endpoint("--chroma-url", chroma_url, PROGRAM)
    if not (base.url or args.path):
        raise CliError(
            "say where Chroma is: --chroma-url http://HOST:8000, --path DIR, or a summarizer "
            "(--summarizer NAME, --summarizer-file FILE)"
        )
    location = replace(
        base,
        url=None if args.path else base.url,  # a spec's passed StoreSpec's stricter check
        path=args.path,
        token=None if args.path else os.environ.get("CHROMA_TOKEN") or base.token,
        **{flag: getattr(args, flag) for flag in STORE_FLAGS if getattr(args, flag)},
    )
    if location.memory_collection in (location.summary_collection, location.ledger_collection):
        raise CliError(StoreSpec.SAME_COLLECTION_MESSAGE)
    return location


@contextlib.contextmanager
def open_store(
    args: argparse.Namespace, *, create: bool = False
) -> Iterator[tuple[MemoryStore, SummarizerSettings]]:
    """The store the flags and the summarizer they name say, and that summarizer; every way
    a store call fails inside is one line naming what to fix. Only `create` makes a --path."""
    summarizer = load_summarizer(args)
    location = store_location(args, summarizer)
    if args.path and not create and not os.path.isdir(args.path):
        raise CliError(f"--path {args.path!r} is no directory (`remember` makes a store there)")
    try:
        store = MemoryStore(connect(location), location)
    except StoreUnavailable as exc:
        raise CliError(f"{exc}; is the Chroma server running?") from exc
    except InvalidStoreConfig as exc:
        raise CliError(str(exc)) from exc
    try:
        yield store, summarizer
    except CollectionNotFound as exc:
        why = f"--{exc.role}-collection; reading never creates a collection"
        raise CliError(f"{exc} ({why})") from exc
    except (StoreUnavailable, EmbeddingMismatch, InvalidStoreConfig) as exc:
        raise CliError(str(exc)) from exc
    except EmbeddingError as exc:  # the endpoint did not answer, or not with vectors
        raise CliError(f"the embedding failed: {exc}") from exc


def check_memory_destination(summarizer: SummarizerSettings, field: str) -> None:
    """backends.check_memory_destinations for `field`'s endpoint, as the operator checks it."""
    kube_call(
        backends.check_memory_destinations,
        summarizer.spec,
        summarizer.namespace,
        field,
        PROGRAM,
        summarizer.secret_unused,
    )


def embedder(summarizer: SummarizerSettings) -> Embedder:
    """The summarizer's embedding, as the operator builds it (by default the local MiniLM)."""
    check_memory_destination(summarizer, "embedding.baseUrl")
    try:
        spec = backends.embedding_spec(summarizer.spec, summarizer.namespace, read_secret, PROGRAM)
        ef = backends.build_embedding_function(spec)
    except (EmbeddingError, ValueError) as exc:
        raise CliError(f"the embedding cannot be used: {masked(exc, 300)}") from exc
    return lambda texts: list(ef(texts))


def summarize_backends(store: MemoryStore, summarizer: SummarizerSettings) -> Backends:
    """What `summaryctl summarize` runs with: the operator's parts for that summarizer."""
    spec = summarizer.spec
    check_memory_destination(summarizer, "model.baseUrl")
    chosen: Summarizer = EXTRACTIVE
    if spec.model.backend != "extractive":
        from controller.summarizers.chat_model import ChatModelSummarizer

        config = backends.chat_model_config(spec, summarizer.namespace, read_secret, PROGRAM)
        chosen = ChatModelSummarizer(config)
    return Backends(
        store,
        embedder(summarizer),
        tuple(spec.excluded_memory_types),
        chosen,
        spec.visibility.rules(),
        backends.redaction_of(spec),
    )
