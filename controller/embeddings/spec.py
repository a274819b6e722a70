"""Which model embeds summaries, and the one place that turns that into an embedding function.
A collection's model and dimension are fixed by its first insert, so the writer embeds with
the collection's model. Both functions are plain callables, never handed to chromadb."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from controller.embeddings.minilm import (
    MINILM_ALIASES,
    MINILM_MODEL_NAME,
    EmbeddingFunction,
    LocalMiniLMEmbedding,
    MiniLMWeights,
)


class EmbeddingSpec(BaseModel):
    """Which model embeds summaries; must be the model the collection was created with."""

    model_config = ConfigDict(frozen=True, extra="forbid")

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
    spec: EmbeddingSpec, weights: MiniLMWeights | None = None
) -> EmbeddingFunction:
    """weights: the local model's, shared (the operator's runtime); else loaded per function."""
    if spec.provider == "local-minilm":
        return LocalMiniLMEmbedding(weights=weights)
    assert spec.base_url is not None  # api.EmbeddingConfig requires it of provider openai
    # Imported here: the openai SDK costs ~14 MB of RSS (bench/operator_rss.py).
    from controller.embeddings.remote import OpenAICompatibleEmbedding

    return OpenAICompatibleEmbedding(base_url=spec.base_url, model=spec.model, api_key=spec.api_key)
