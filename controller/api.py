"""The custom resources' spec and status, described once.

Handlers, the CLI and the sweep read and write these models, never raw dicts. Field names
are the CRDs' (camelCase aliases); defaults match the CRD schema defaults so an object that
the apiserver defaulted and one built here agree.
"""

from __future__ import annotations

import re
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

from controller.core.endpoint_url import (
    AUTHORITY_PATTERN,
    ENDPOINT_URL_MAX,
    HOST_LENGTH_MESSAGE,
    HOST_LENGTH_PATTERN,
    checked_endpoint_url,
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

Phase = Literal["Pending", "Summarizing", "Summarized", "Empty", "NotFound", "Failed", "Forgotten"]
# What a SessionSummary asks of its pass (docs/privacy.md, "Forget and rebuild").
Action = Literal["Summarize", "Rebuild", "Forget"]
# sunset-marker: the sweep found a sunset marker memory of the session (docs/agents.md).
# refresh: the sweep found an active session that grew past spec.sweep.refreshAfterTokens.
Trigger = Literal["sunset", "sweep", "manual", "sunset-marker", "refresh"]


class CamelModel(BaseModel):
    # hide_input_in_errors: a refused value (a URL with a password in it) is never repeated
    # in the error, which ends up in a condition, an Event or a log line.
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", hide_input_in_errors=True
    )

    def to_api(self) -> dict[str, object]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


# Kubernetes' own rules: an object's name (a Secret's, a SessionSummarizer's) is a DNS
# subdomain (dot-separated labels, each starting and ending alphanumeric), a Secret's keys
# [-._a-zA-Z0-9]+; both at most 253 characters. summaryctl checks names with the same rule.
SECRET_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
SECRET_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"
ObjectName = Annotated[str, Field(min_length=1, max_length=253, pattern=SECRET_NAME_PATTERN)]
SecretKey = Annotated[str, Field(min_length=1, max_length=253, pattern=SECRET_KEY_PATTERN)]


class SecretKeyRef(CamelModel):
    name: ObjectName
    key: SecretKey


class TokenSecretRef(SecretKeyRef):
    """A Secret key holding a Chroma token; the key defaults to "token"."""

    key: SecretKey = "token"


class ApiKeySecretRef(SecretKeyRef):
    """A Secret key holding an API key; the key defaults to "api-key"."""

    key: SecretKey = "api-key"


# Bounds of the free-form strings and lists (the CRD states them too).
MODEL_NAME_MAX = 256
MEMORY_TYPE_MAX = 256
EXCLUDED_TYPES_MAX = 64
TTLSeconds = Annotated[int, Field(ge=0, le=315_360_000)]  # at most 10 years
# An endpoint's base URL, never with credentials in it (core/endpoint_url.py).
EndpointUrl = Annotated[
    str | None, Field(max_length=ENDPOINT_URL_MAX), AfterValidator(checked_endpoint_url)
]


class StoreSpec(CamelModel):
    """Which Chroma and which collections. The URL and collection-name rules below are
    stated once more in the CRD schema (same patterns, CEL for what a pattern cannot say),
    so `kubectl apply` refuses a name Chroma would refuse, instead of the operator failing
    later with an error that looks like an outage."""

    # Chroma 1.5's collection-name rule (its Rust validators::validate_name): 3-512
    # characters from [a-zA-Z0-9._-], a letter or digit at both ends, no "..", not an IPv4
    # address. "a+b" names a topology: each half follows the rule, 512 characters in all.
    COLLECTION_NAME_MAX: ClassVar[int] = 512
    COLLECTION_NAME_PATTERN: ClassVar[str] = (
        r"^[a-zA-Z0-9][a-zA-Z0-9._-]+[a-zA-Z0-9](\+[a-zA-Z0-9][a-zA-Z0-9._-]+[a-zA-Z0-9])?$"
    )
    # Rust's Ipv4Addr parser: four decimal octets 0-255, no leading zeros ("01.2.3.4" is
    # a valid name). A name has no ':' so it is never an IPv6 address.
    _OCTET: ClassVar[str] = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
    IPV4_PART_PATTERN: ClassVar[str] = rf"(^|[+]){_OCTET}([.]{_OCTET}){{3}}([+]|$)"
    NAME_PATTERN_MESSAGE: ClassVar[str] = (
        "must be 3-512 characters from [a-zA-Z0-9._-] starting and ending with a letter or digit"
    )
    DOUBLE_PERIOD_MESSAGE: ClassVar[str] = "must not contain two consecutive periods (..)"
    IPV4_MESSAGE: ClassVar[str] = "must not be an IPv4 address"
    # The operator's ledger is the summary collection's name plus this (docs/ledger.md).
    LEDGER_SUFFIX: ClassVar[str] = "-ledger"
    # Both collections are written (summaries, the ledger): the agents' memories are not.
    SAME_COLLECTION_MESSAGE: ClassVar[str] = (
        "memoryCollection must differ from summaryCollection and from its ledger "
        "(summaryCollection + '-ledger'): the operator writes those, never the memories"
    )
    # http or https, a host (name, IPv4 or [IPv6]), an optional port 1-65535, nothing else:
    # Chroma's client uses only these, so a path or query would be silently ignored. The
    # host and port are an endpoint's (core/endpoint_url.py): what its HTTP client reads.
    URL_PATTERN: ClassVar[str] = rf"^https?://{AUTHORITY_PATTERN}/?$"
    URL_MESSAGE: ClassVar[str] = (
        "must be http(s)://host[:port] and nothing more, e.g. http://chroma:8000"
    )

    # Chroma's tenant rule: 3 characters or more; a '/' ends the tenant's segment of the
    # request path, so no tenant holding one is reached ("x/../default_tenant" reads another).
    TENANT_MESSAGE: ClassVar[str] = "must not contain '/' (it would end its segment of the URL)"
    NAME_MAX: ClassVar[int] = 256  # a tenant's and a database's, ours (Chroma allows more)

    URL_MAX: ClassVar[int] = 300  # a 253-character host name, a port and the scheme fit
    url: str = Field(default="http://chroma:8000", max_length=URL_MAX)
    tenant: str = Field(default="default_tenant", min_length=3, max_length=NAME_MAX)
    database: str = Field(default="default_database", min_length=3, max_length=NAME_MAX)
    memory_collection: str = Field(default="neo-agent-memory", min_length=3, max_length=512)
    # Its ledger's name (LEDGER_SUFFIX added) must be a collection name too.
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
        if len(name) > cls.COLLECTION_NAME_MAX or not re.fullmatch(
            cls.COLLECTION_NAME_PATTERN, name
        ):
            return cls.NAME_PATTERN_MESSAGE
        if ".." in name:
            return cls.DOUBLE_PERIOD_MESSAGE
        if re.search(cls.IPV4_PART_PATTERN, name):
            return cls.IPV4_MESSAGE
        return None

    @classmethod
    def url_problem(cls, url: str) -> str | None:
        if not re.fullmatch(cls.URL_PATTERN, url):
            return cls.URL_MESSAGE
        return None if re.match(HOST_LENGTH_PATTERN, url) else HOST_LENGTH_MESSAGE

    @classmethod
    def name_problem(cls, field: str, name: str) -> str | None:
        """Why the spec refuses `name` as this field (tenant, database, memory_collection or
        summary_collection), in Chroma's words where the rule is Chroma's; summaryctl's flags
        say the same. A database follows the collection rule (Chroma's same validate_name)."""
        if field != "tenant":
            problem = cls.collection_name_problem(name)
        elif len(name) < 3:
            problem = "must be 3 characters or more"
        else:
            problem = cls.TENANT_MESSAGE if "/" in name else None
        room = cls.COLLECTION_NAME_MAX - len(cls.LEDGER_SUFFIX)
        if not problem and field == "summary_collection" and len(name) > room:
            return (
                f"must be at most {room} characters, so that its ledger (its name + "
                f"{cls.LEDGER_SUFFIX!r}) is a collection name too"
            )
        if not problem and field in ("tenant", "database") and len(name) > cls.NAME_MAX:
            return f"must be at most {cls.NAME_MAX} characters"
        return problem

    @field_validator("memory_collection", "summary_collection", "database", "tenant", mode="before")
    @classmethod
    def _chroma_name(cls, value: object, info: ValidationInfo) -> object:
        # "before": Chroma's rule, in its words, ahead of the generic length message.
        field = str(info.field_name)
        if isinstance(value, str) and (problem := cls.name_problem(field, value)):
            what = field.replace("_", " ")
            raise ValueError(f"{value!r} is not a valid Chroma {what} name: it {problem}")
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
        problem = cls.url_problem(value)
        if problem:
            # Never repeated when it may carry credentials (the pattern refuses userinfo).
            raise ValueError(f"{'url' if '@' in value else repr(value)} {problem}")
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
    """How summary rows are tagged for neo memory-core's readers (core/visibility.py). The
    defaults are neo.mjs 13.1.0's: its default sharing policy, its core swarm and the trust
    tier of each of its agent identities."""

    # neo's NEO_MEMORY_SHARING_DEFAULT_POLICY: team (default) and legacy leave a summary
    # untagged (every reader sees it); private tags it with the session owner's userId.
    memory_sharing: MemorySharing = "team"
    # A summary any of these agents took part in is tagged userId "shared" (neo's
    # CORE_SWARM_USER_IDS): every reader sees it under every policy.
    shared_agents: list[Annotated[str, Field(min_length=1, max_length=253)]] = Field(
        default=list(NEO_SHARED_AGENTS), max_length=256
    )
    # agentIdentity -> trust tier; identities not listed are "unclassified".
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
    # Refresh by size (docs/summaries.md): an active session whose memories since its last
    # summary exceed this many estimated tokens is summarized anyway; 0 turns it off.
    refresh_after_tokens: int = Field(default=16_000, ge=0, le=100_000_000)
    # ... at most once per this many seconds per session, so a busy session never churns.
    min_refresh_seconds: int = Field(default=900, ge=0, le=86_400)
    # Sunset markers acted on per minute (a token bucket: core/rate_limit.py).
    marker_requests_per_minute: int = Field(default=60, ge=1, le=6000)
    # The reconciliation's walk over the collection (core/reconcile_plan.py): how often, how fast.
    reconcile_interval_seconds: int = Field(default=3600, ge=60, le=604_800)
    reconcile_rows_per_second: int = Field(default=2000, ge=10, le=1_000_000)


class ReconcileSpec(CamelModel):
    """The reconciliation (core/reconcile_plan.py), on or off whatever the sweep is: its
    pace is spec.sweep.reconcileIntervalSeconds and reconcileRowsPerSecond."""

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
    excluded_memory_types: list[Annotated[str, Field(min_length=1, max_length=MEMORY_TYPE_MAX)]] = (
        Field(default=list(DEFAULT_EXCLUDED_TYPES), max_length=EXCLUDED_TYPES_MAX)
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
    # When the phase began for the current request (retention of Empty/NotFound/Failed).
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
    # The appended-rows scan's cursor (core/reconcile_plan.py): rows listed, and the last.
    appended_offset: int | None = None
    appended_last_id: str | None = None
    # The last finished reconciliation: when, rows checked, rows no summary accounted for.
    reconciled_at: str | None = None
    reconciled_rows: int | None = None
    uncovered_found: int | None = None
    # The probe request (annotation PROBE_REQUESTED) the probes and the sweep last answered.
    last_handled_probe_request: str | None = None
    message: str | None = None
    conditions: list[Condition] | None = None
