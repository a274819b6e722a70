"""Does our embedding model match the one a collection records? Pure.

A different model of the same dimension passes Chroma's dimension check and silently ruins
every semantic search over summaries, so the model a collection's embedding function record
names is compared with ours before any write (the dimension is checked in controller/store).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MINILM = "all-MiniLM-L6-v2"
MINILM_FUNCTIONS = frozenset({"default", "onnx_mini_lm_l6_v2"})
NEO_FUNCTION = "dynamic_text_embedding_service"
NEO_DEFAULT_MODEL = "text-embedding-qwen3-embedding-8b"


def _model_key(model: str) -> str:
    """Models compare without case or organisation prefix ("sentence-transformers/x" is x)."""
    return model.strip().rsplit("/", 1)[-1].lower()


def embedding_function_problem(
    record: Mapping[str, Any] | None, collection: str, provider: str, model: str
) -> str | None:
    """Why embedding with (provider, model) would not match what the collection records,
    naming both; None when it matches or the record names no known function or model."""
    if not isinstance(record, Mapping) or record.get("type") != "known":
        return None
    name = record.get("name")
    if not isinstance(name, str) or not name:
        return None
    config = {"model_name": MINILM} if name in MINILM_FUNCTIONS else record.get("config")
    theirs = config.get("model_name") if isinstance(config, Mapping) else None
    ours = MINILM if provider == "local-minilm" else model
    described = f"{provider} model {ours!r}"
    if name == NEO_FUNCTION:
        if provider != "local-minilm":
            return None  # neo's endpoint model is not recorded; the dimension check remains
        return (
            f"collection {collection!r} records neo memory-core's embedding function "
            f"{NEO_FUNCTION!r} (neo's endpoint, by default {NEO_DEFAULT_MODEL}, 4096-d) but "
            f"this summarizer embeds with the {described}; set spec.embedding to neo's "
            "endpoint and model (docs/migrating-from-neo.md)"
        )
    if not isinstance(theirs, str) or not theirs.strip() or _model_key(theirs) == _model_key(ours):
        return None
    return (
        f"collection {collection!r} records the embedding function {name!r} with model "
        f"{theirs!r} but this summarizer embeds with the {described}; set spec.embedding to "
        "the model the collection uses"
    )
