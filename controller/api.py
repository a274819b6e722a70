"""The custom resources' spec and status, described once and used everywhere, never raw dicts.
Field names are the CRDs' (camelCase aliases); defaults are the CRD schema's, so an object
the apiserver defaulted and one built here agree."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from controller.core.destinations import (
    _OCTET,
    AUTHORITY_PATTERN,
    ENDPOINT_URL_MAX,
    checked_endpoint_url,
    host_name_problem,
    shown,
)
from controller.core.naming import blank_session_id
from controller.core.text import re2_pattern
from controller.core.visibility import (
    NEO_IDENTITY_TRUST_TIERS,
    NEO_SHARED_AGENTS,
    MemorySharing,
    TrustTier,
    VisibilityRules,
)

GROUP = "memorycore.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
SUMMARY_KIND, SUMMARY_PLURAL = "SessionSummary", "sessionsummaries"
SUMMARIZER_KIND, SUMMARIZER_PLURAL = "SessionSummarizer", "sessionsummarizers"
CLAIM_KIND, CLAIM_PLURAL = "SessionClaim", "sessionclaims"  # cluster-scoped write claims
FINALIZER = f"{GROUP}/session-summary-operator"  # kopf's, on SessionSummarizers (timers)
# summaryctl forget records who ran it here; else the field manager of the last change.
REQUESTED_BY = f"{GROUP}/requested-by"
# summaryctl check asks a SessionSummarizer's probes and sweep to run now: a new value here
# is answered in status.lastHandledProbeRequest (as Flux's reconcile.fluxcd.io/requestedAt).
PROBE_REQUESTED = f"{GROUP}/probe-requested-at"

Phase = Literal["Pending", "Summarizing", "Summarized", "Empty", "NotFound", "Failed", "Forgotten"]
Action = Literal["Summarize", "Rebuild", "Forget"]  # docs/privacy.md, "Forget and rebuild"
# sunset-marker, refresh: the sweep's (a marker memory; past refreshAfterTokens).
Trigger = Literal["sunset", "sweep", "manual", "sunset-marker", "refresh"]


class CamelModel(BaseModel):
    # hide_input_in_errors: a refused value (a URL with a password in it) is never repeated
    # in the error, which ends up in a condition, an Event or a log line.
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", hide_input_in_errors=True
    )

    def to_api(self) -> dict[str, object]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


# Kubernetes' own rules: a namespace is a DNS label, an object's name a DNS subdomain (also an
# annotation key's prefix), a Secret's key [-._a-zA-Z0-9]+.
DNS_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
SECRET_NAME_PATTERN = rf"^{DNS_LABEL}(\.{DNS_LABEL})*$"
SECRET_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"
ObjectName = Annotated[str, Field(min_length=1, max_length=253, pattern=SECRET_NAME_PATTERN)]
SecretKey = Annotated[str, Field(min_length=1, max_length=253, pattern=SECRET_KEY_PATTERN)]


class SecretKeyRef(CamelModel):
    name: ObjectName
    key: SecretKey


class TokenSecretRef(SecretKeyRef):
    key: SecretKey = "token"


class ApiKeySecretRef(SecretKeyRef):
    key: SecretKey = "api-key"


MODEL_NAME_MAX = 256
TTLSeconds = Annotated[int, Field(ge=0, le=315_360_000)]  # at most 10 years
EndpointUrl = Annotated[
    str | None, Field(max_length=ENDPOINT_URL_MAX), AfterValidator(checked_endpoint_url)
]


class StoreSpec(CamelModel):
    """Which Chroma and which collections. The CRD schema states the URL and name rules too,
    so `kubectl apply` refuses a name Chroma would refuse (not a later pass, like an outage)."""

    # Chroma 1.5's collection-name rule (docs/configuration.md); "a+b" names a topology.
    COLLECTION_NAME_MAX: ClassVar[int] = 512
    COLLECTION_NAME_PATTERN: ClassVar[str] = (
        r"^[a-zA-Z0-9][a-zA-Z0-9._-]+[a-zA-Z0-9](\+[a-zA-Z0-9][a-zA-Z0-9._-]+[a-zA-Z0-9])?$"
    )
    IPV4_PART_PATTERN: ClassVar[str] = rf"(^|[+]){_OCTET}([.]{_OCTET}){{3}}([+]|$)"
    NAME_PATTERN_MESSAGE: ClassVar[str] = (
        "must be 3-512 characters from [a-zA-Z0-9._-] starting and ending with a letter or digit"
    )
    DOUBLE_PERIOD_MESSAGE: ClassVar[str] = "must not contain two consecutive periods (..)"
    IPV4_MESSAGE: ClassVar[str] = "must not be an IPv4 address"
    LEDGER_SUFFIX: ClassVar[str] = "-ledger"  # the ledger's name (docs/ledger.md)
    SAME_COLLECTION_MESSAGE: ClassVar[str] = (
        "memoryCollection must differ from summaryCollection and from its ledger "
        "(summaryCollection + '-ledger'): the operator writes those, never the memories"
    )
    # Chroma's client uses only scheme, host and port: a path or query would be ignored.
    URL_PATTERN: ClassVar[str] = rf"^https?://{AUTHORITY_PATTERN}/?$"
    URL_MESSAGE: ClassVar[str] = (
        "must be http(s)://host[:port] and nothing more, e.g. http://chroma:8000 (a host name's "
        "labels 1-63 characters long, the last no number)"
    )
    # A tenant's '/' ends its segment of the request path ("x/../default_tenant").
    TENANT_MESSAGE: ClassVar[str] = "must not contain '/' (it would end its segment of the URL)"
    NAME_MAX: ClassVar[int] = 256  # a tenant's and a database's, ours (Chroma allows more)

    URL_MAX: ClassVar[int] = 300  # a 253-character host name, a port and the scheme fit
    url: str = Field(default="http://chroma:8000", max_length=URL_MAX)
    tenant: str = Field(default="default_tenant", min_length=3, max_length=NAME_MAX)
    database: str = Field(default="default_database", min_length=3, max_length=NAME_MAX)
    memory_collection: str = Field(default="neo-agent-memory", min_length=3, max_length=512)
    summary_collection: str = Field(
        default="neo-agent-sessions",
        min_length=3,
        max_length=COLLECTION_NAME_MAX - len(LEDGER_SUFFIX),
    )
    auth_secret_ref: TokenSecretRef | None = None
    timeout_seconds: float = Field(default=10.0, ge=1, le=300)

    @classmethod
    def collection_name_problem(cls, name: str) -> str | None:
        """Why Chroma 1.5 would refuse this collection name; None when it accepts it."""
        too_long = len(name) > cls.COLLECTION_NAME_MAX
        if too_long or not re.fullmatch(cls.COLLECTION_NAME_PATTERN, name):
            return cls.NAME_PATTERN_MESSAGE
        if ".." in name:
            return cls.DOUBLE_PERIOD_MESSAGE
        if re.search(cls.IPV4_PART_PATTERN, name):
            return cls.IPV4_MESSAGE
        return None

    @classmethod
    def url_problem(cls, url: str) -> str | None:
        return host_name_problem(url) if re.fullmatch(cls.URL_PATTERN, url) else cls.URL_MESSAGE

    @classmethod
    def name_problem(cls, field: str, name: str, shown: Callable[[str], str] = repr) -> str | None:
        """Why the spec (and summaryctl's flag) refuses `name` as this field, in Chroma's
        words where the rule is Chroma's (a database's is a collection's)."""
        if field != "tenant":
            problem = cls.collection_name_problem(name)
        elif len(name) < 3:
            problem = "must be 3 characters or more"
        else:
            problem = cls.TENANT_MESSAGE if "/" in name else None
        room = cls.COLLECTION_NAME_MAX - len(cls.LEDGER_SUFFIX)
        if not problem and field == "summary_collection" and len(name) > room:
            problem = (
                f"must be at most {room} characters, so that its ledger (its name + "
                f"{cls.LEDGER_SUFFIX!r}) is a collection name too"
            )
        if not problem and field in ("tenant", "database") and len(name) > cls.NAME_MAX:
            problem = f"must be at most {cls.NAME_MAX} characters"
        what = field.replace("_", " ")
        return problem and f"{shown(name)} is not a valid Chroma {what} name: it {problem}"

    @field_validator("memory_collection", "summary_collection", "database", "tenant", mode="before")
    @classmethod
    def _chroma_name(cls, value: object, info: ValidationInfo) -> object:
        if isinstance(value, str) and (problem := cls.name_problem(str(info.field_name), value)):
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _memories_apart(self) -> StoreSpec:
        written = (self.summary_collection, self.summary_collection + self.LEDGER_SUFFIX)
        if self.memory_collection in written:
            raise ValueError(self.SAME_COLLECTION_MESSAGE)
        return self

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if problem := cls.url_problem(value):
            raise ValueError(f"{shown(value)!r} {problem}")
        return value


class EmbeddingConfig(CamelModel):
    provider: Literal["local-minilm", "openai"] = "local-minilm"
    model: str = Field(default="all-MiniLM-L6-v2", min_length=1, max_length=MODEL_NAME_MAX)
    base_url: EndpointUrl = None
    api_key_secret_ref: ApiKeySecretRef | None = None

    @model_validator(mode="after")
    def _openai_endpoint(self) -> EmbeddingConfig:  # the CRD's CEL rule, for older objects
        if self.provider == "openai" and self.base_url is None:
            raise ValueError("embedding.baseUrl is required when provider is openai")
        return self


class ModelSpec(CamelModel):
    backend: Literal["extractive", "openai"] = "extractive"
    base_url: EndpointUrl = None
    model: str | None = Field(default=None, min_length=1, max_length=MODEL_NAME_MAX)
    api_key_secret_ref: ApiKeySecretRef | None = None
    timeout_seconds: float = Field(default=60.0, ge=1, le=600)
    max_retries: int = Field(default=3, ge=0, le=10)
    max_concurrency: int = Field(default=4, ge=1, le=64)
    # Up to the largest context windows offered (2M tokens); a chunk is read into memory.
    max_input_tokens: int = Field(default=6000, ge=256, le=2_000_000)

    @model_validator(mode="after")
    def _openai_endpoint(self) -> ModelSpec:  # the CRD's CEL rule, for older objects
        if self.backend == "openai" and (self.base_url is None or self.model is None):
            raise ValueError("model.baseUrl and model.model are required when backend is openai")
        return self


class VisibilitySpec(CamelModel):
    """How summary rows are tagged for neo memory-core's readers (core/visibility.py); the
    defaults are neo.mjs 13.1.0's (docs/configuration.md)."""

    memory_sharing: MemorySharing = "team"
    shared_agents: list[Annotated[str, Field(min_length=1, max_length=253)]] = Field(
        default=list(NEO_SHARED_AGENTS), max_length=256
    )
    identity_trust_tiers: dict[Annotated[str, Field(min_length=1, max_length=253)], TrustTier] = (
        Field(default=dict(NEO_IDENTITY_TRUST_TIERS), max_length=256)
    )

    def rules(self) -> VisibilityRules:
        return VisibilityRules(
            memory_sharing=self.memory_sharing,
            shared_agents=tuple(self.shared_agents),
            identity_trust_tiers=dict(self.identity_trust_tiers),
        )


class SweepSpec(CamelModel):
    enabled: bool = True
    interval_seconds: int = Field(default=300, ge=5, le=86_400)
    lookback_days: int = Field(default=30, ge=1, le=3650)
    idle_seconds: int = Field(default=900, ge=0, le=2_592_000)  # 30 days
    max_sessions_per_sweep: int = Field(default=50, ge=1, le=10_000)
    # Refresh by size (docs/summaries.md); 0 turns it off.
    refresh_after_tokens: int = Field(default=16_000, ge=0, le=100_000_000)
    min_refresh_seconds: int = Field(default=900, ge=0, le=86_400)
    marker_requests_per_minute: int = Field(default=60, ge=1, le=6000)  # runtime.TokenBucket
    reconcile_interval_seconds: int = Field(default=3600, ge=60, le=604_800)
    reconcile_rows_per_second: int = Field(default=2000, ge=10, le=1_000_000)


class ReconcileSpec(CamelModel):
    """The reconciliation (core/sweep_plan.py), on or off whatever the sweep is."""

    enabled: bool = True


class RetentionSpec(CamelModel):
    """Seconds a finished SessionSummary stays, by phase (0: for ever; core/retention.py)."""

    summarized_ttl_seconds: TTLSeconds = Field(default=604_800, alias="summarizedTTLSeconds")
    empty_ttl_seconds: TTLSeconds = Field(default=86_400, alias="emptyTTLSeconds")
    not_found_ttl_seconds: TTLSeconds = Field(default=86_400, alias="notFoundTTLSeconds")
    failed_ttl_seconds: TTLSeconds = Field(default=604_800, alias="failedTTLSeconds")


class RedactionPattern(CamelModel):
    """A secret of one's own shape: an RE2 pattern, its first group (if any) the secret."""

    name: str = Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
    pattern: str = Field(min_length=1, max_length=1000)

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        re2_pattern(value)  # ValueError: RE2 refuses it
        return value


class RedactionSpec(CamelModel):  # masked before a summary is made: redaction.py
    extra_patterns: list[RedactionPattern] = Field(default=[], max_length=64)


DEFAULT_EXCLUDED_TYPES = ("context-injection", "context-refresh", "tick", "heartbeat")


class DocumentSpec(CamelModel):
    """The summary document agents read at boot (controller/core/document.py)."""

    max_chars: int = Field(default=8000, ge=500, le=32_000)


class SessionSummarizerSpec(CamelModel):
    store: StoreSpec = StoreSpec()
    embedding: EmbeddingConfig = EmbeddingConfig()
    model: ModelSpec = ModelSpec()
    sweep: SweepSpec = SweepSpec()
    reconcile: ReconcileSpec = ReconcileSpec()
    retention: RetentionSpec = RetentionSpec()
    visibility: VisibilitySpec = VisibilitySpec()
    redaction: RedactionSpec = RedactionSpec()
    document: DocumentSpec = DocumentSpec()
    excluded_memory_types: list[Annotated[str, Field(min_length=1, max_length=256)]] = Field(
        default=list(DEFAULT_EXCLUDED_TYPES), max_length=64
    )


class Condition(CamelModel):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str = ""
    observed_generation: int | None = None
    last_transition_time: str | None = None
    last_probe_time: str | None = None  # when it was measured (a SessionSummarizer's)


class SessionSummarySpec(CamelModel):
    session_id: str = Field(min_length=1, max_length=1024)
    summarizer_ref: ObjectName = "default"  # never "." (the GET of it lists them all)
    requested_at: str | None = Field(default=None, max_length=64)
    trigger: Trigger = "manual"
    action: Action = "Summarize"
    forget_memories: bool = False  # with action Forget: the session's memories too

    @field_validator("session_id")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if blank_session_id(value):
            raise ValueError("sessionId must not be blank (memories never carry a blank sessionId)")
        return value


class SummaryProvenance(CamelModel):
    """What the last written summary covers (the memory range and the watermark) and what
    its passes cost: estimated tokens of memory read (in) vs. summary written (out)."""

    first_memory_at: str | None = None
    last_memory_at: str | None = None
    memory_count: int | None = None
    watermark_timestamp: int | None = None
    watermark_memory_id: str | None = None
    passes: int | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    document_tokens: int | None = None
    compaction_ratio: float | None = None


class SessionSummaryStatus(CamelModel):
    phase: Phase | None = None
    last_phase_transition_time: str | None = None
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
    skipped_memories: int | None = None
    redactions: int | None = None
    provenance: SummaryProvenance | None = None
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
    last_retention_at: str | None = None
    watermark: int | None = None
    appended_offset: int | None = None  # the appended-rows scan's cursor (sweep_plan)
    appended_last_id: str | None = None
    reconciled_at: str | None = None  # the last finished reconciliation's
    reconciled_rows: int | None = None
    uncovered_found: int | None = None
    last_handled_probe_request: str | None = None  # annotation PROBE_REQUESTED
    message: str | None = None
    conditions: list[Condition] | None = None
