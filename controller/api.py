"""The custom resources' spec and status, described once.

Handlers, the CLI and the sweep read and write these models, never raw dicts. Field names
are the CRDs' (camelCase aliases); defaults match the CRD schema defaults so an object that
the apiserver defaulted and one built here agree.
"""

from __future__ import annotations

import datetime as dt
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

GROUP = "memorycore.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
SUMMARY_KIND, SUMMARY_PLURAL = "SessionSummary", "sessionsummaries"
SUMMARIZER_KIND, SUMMARIZER_PLURAL = "SessionSummarizer", "sessionsummarizers"

Phase = Literal["Pending", "Summarizing", "Summarized", "Empty", "NotFound", "Failed"]
Trigger = Literal["sunset", "sweep", "manual"]


class CamelModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    def to_api(self) -> dict[str, object]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class SecretKeyRef(CamelModel):
    name: str
    key: str


class StoreSpec(CamelModel):
    url: str = "http://chroma:8000"
    tenant: str = "default_tenant"
    database: str = "default_database"
    memory_collection: str = "neo-agent-memory"
    summary_collection: str = "neo-agent-sessions"
    auth_secret_ref: SecretKeyRef | None = None
    timeout_seconds: float = 10.0


class EmbeddingConfig(CamelModel):
    provider: Literal["local-minilm", "openai"] = "local-minilm"
    model: str = "all-MiniLM-L6-v2"
    base_url: str | None = None
    api_key_secret_ref: SecretKeyRef | None = None


class ModelSpec(CamelModel):
    backend: Literal["extractive", "openai"] = "extractive"
    base_url: str | None = None
    model: str | None = None
    api_key_secret_ref: SecretKeyRef | None = None
    timeout_seconds: float = 60.0
    max_retries: int = 3
    max_concurrency: int = 4
    max_input_tokens: int = 6000


class SweepSpec(CamelModel):
    enabled: bool = True
    interval_seconds: int = Field(default=300, ge=5)
    lookback_days: int = Field(default=30, ge=1)
    idle_seconds: int = Field(default=900, ge=0)
    max_sessions_per_sweep: int = Field(default=50, ge=1)


class RetentionSpec(CamelModel):
    summarized_ttl_seconds: int = Field(default=604_800, ge=0, alias="summarizedTTLSeconds")


DEFAULT_EXCLUDED_TYPES = ["context-injection", "context-refresh", "tick", "heartbeat"]


class SessionSummarizerSpec(CamelModel):
    store: StoreSpec = StoreSpec()
    embedding: EmbeddingConfig = EmbeddingConfig()
    model: ModelSpec = ModelSpec()
    sweep: SweepSpec = SweepSpec()
    retention: RetentionSpec = RetentionSpec()
    excluded_memory_types: list[str] = Field(default_factory=lambda: list(DEFAULT_EXCLUDED_TYPES))


class Condition(CamelModel):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str = ""
    observed_generation: int | None = None
    last_transition_time: str | None = None


class SessionSummarySpec(CamelModel):
    session_id: str = Field(min_length=1, max_length=1024)
    summarizer_ref: str = "default"
    requested_at: str | None = None
    trigger: Trigger = "manual"


class SessionSummaryStatus(CamelModel):
    phase: Phase | None = None
    observed_generation: int | None = None
    memory_count: int | None = None
    last_memory_at: str | None = None
    summarized_at: str | None = None
    title: str | None = None
    trigger_source: str | None = None
    summary_id: str | None = None
    writer: str | None = None
    passes: int | None = None
    model_tokens: int | None = None
    consecutive_failures: int | None = None
    message: str | None = None
    conditions: list[Condition] | None = None


class SessionSummarizerStatus(CamelModel):
    observed_generation: int | None = None
    active_replica: str | None = None
    last_sweep_at: str | None = None
    last_sweep_duration_seconds: float | None = None
    candidates_found: int | None = None
    deferred: int | None = None
    created: int | None = None
    patched: int | None = None
    scanned_memories: int | None = None
    deleted_by_retention: int | None = None
    watermark: int | None = None
    message: str | None = None
    conditions: list[Condition] | None = None


def now_rfc3339(*, precise: bool = False) -> str:
    """Seconds for status fields; milliseconds (precise) where a new value must differ from
    the previous one, as spec.requestedAt must for two sunsets in the same second."""
    now = dt.datetime.now(dt.UTC)
    if precise:
        return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"
    return rfc3339(now)


def rfc3339(when: dt.datetime) -> str:
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def ms_to_rfc3339(ms: int) -> str:
    return rfc3339(dt.datetime.fromtimestamp(ms / 1000, dt.UTC))


def set_condition(
    conditions: list[Condition] | None, new: Condition, *, now: str | None = None
) -> list[Condition]:
    """Replaces the condition of new.type; lastTransitionTime moves only when status changes."""
    result: list[Condition] = []
    previous = None
    for cond in conditions or []:
        if cond.type == new.type:
            previous = cond
        else:
            result.append(cond)
    changed = previous is None or previous.status != new.status
    transition = (now or now_rfc3339()) if changed else previous.last_transition_time  # type: ignore[union-attr]
    result.append(new.model_copy(update={"last_transition_time": transition}))
    return sorted(result, key=lambda c: c.type)
