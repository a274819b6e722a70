"""Operator process settings, read once from the environment: SSO_<FIELD>, described in
docs/configuration.md. A bad value stops the operator at start with a message naming it."""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from types import MappingProxyType
from typing import Annotated, Any

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from controller.api import DNS_LABEL
from controller.api import SECRET_NAME_PATTERN as SUBDOMAIN
from controller.core.destinations import OPERATOR, UrlPrefix, parse_prefixes, shown


def _default_replica_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class OperatorConfig(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="SSO_", frozen=True, extra="ignore", env_ignore_empty=True
    )

    # Kopf's peering identity, claims' writer, Events' reportingInstance: printable, no spaces.
    replica_id: str = Field(default_factory=_default_replica_id, max_length=128, pattern="^[!-~]+$")
    namespaces: Annotated[tuple[str, ...], NoDecode] = ()  # empty: cluster-wide
    sweep_tick_seconds: float = Field(default=5.0, gt=0)
    metrics_port: int = Field(default=0, ge=0, le=65535)  # 0: no metrics endpoint
    metrics_address: str = Field(default="127.0.0.1", min_length=1)
    retry_base_seconds: float = Field(default=2.0, gt=0)
    retry_max_seconds: float = Field(default=300.0, gt=0)
    # Unset: chosen at start below every live replica's (kube/peering.py:joining_priority).
    peering_priority: int | None = None
    peering_lifetime: int = Field(default=15, ge=1)
    claim_ttl_seconds: float = Field(default=60.0, gt=0)
    # The margin absorbs clocks that run at different rates (core/claim_rules.py).
    claim_margin_seconds: float = Field(default=5.0, ge=0)
    claim_renew_seconds: float | None = Field(default=None, gt=0)  # unset: a third of the TTL
    summarizing_after_seconds: float = Field(default=2.0, ge=0)
    give_way_seconds: float = Field(default=1.0, ge=0)
    give_way_gap_seconds: float = Field(default=0.25, ge=0)
    claim_collect_seconds: float = Field(default=60.0, gt=0)
    claim_retry_seconds: float = Field(default=1.0, gt=0)
    claim_retry_max_seconds: float = Field(default=30.0, gt=0)
    shutdown_seconds: float = Field(default=20.0, ge=0)
    replica_resync_seconds: float = Field(default=60.0, gt=0)
    failure_gate: int = Field(default=5, ge=1)
    heap_trim_seconds: float = Field(default=30.0, gt=0)
    workers: int = Field(default=32, ge=1)
    cpu_slots: int = Field(default=0, ge=0)  # 0: one per usable core
    store_write_slots: int = Field(default=1, ge=1)
    embedding_reprobe_seconds: float = Field(default=30.0, gt=0)
    list_chunk_size: int = Field(default=500, ge=0)  # 0: one page
    worker_idle_seconds: float = Field(default=0.5, ge=0)
    annotation_prefix: str = Field(default="memorycore.io", max_length=253, pattern=SUBDOMAIN)
    allow_unannotated_secrets: bool = False  # deprecated (docs/security.md)
    allowed_endpoints: Annotated[tuple[UrlPrefix, ...], NoDecode] = ()  # empty: any URL
    allowed_model_urls: Annotated[tuple[UrlPrefix, ...], NoDecode] = ()

    def setting(self, field: str, program: str = OPERATOR) -> str:
        """Where a message's reader changes a setting: the operator's chart value in a Pod,
        else SSO_* in the environment of the process that read it (the operator, summaryctl)."""
        if program != OPERATOR:
            return f"SSO_{field.upper()} in {program}'s environment"
        chart = f"the chart value operator.{to_camel(field)}"
        return chart if in_pod() else f"SSO_{field.upper()} in the operator process's environment"

    @property
    def claim_renew_period(self) -> float:
        return self.claim_renew_seconds or self.claim_ttl_seconds / 3

    @model_validator(mode="after")
    def _claim_renewed_in_time(self) -> OperatorConfig:
        if self.claim_renew_period >= self.claim_ttl_seconds - self.claim_margin_seconds:
            raise ValueError(
                f"the claim renew period ({self.claim_renew_period:g}s) must be shorter than "
                f"SSO_CLAIM_TTL_SECONDS - SSO_CLAIM_MARGIN_SECONDS "
                f"({self.claim_ttl_seconds - self.claim_margin_seconds:g}s), or a pass would "
                "stop writing before its first renewal"
            )
        return self

    @field_validator("namespaces", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        names = value.split(",") if isinstance(value, str) else value
        names = tuple(n.strip() for n in names if n.strip())
        if bad := [n for n in names if len(n) > 63 or not re.fullmatch(DNS_LABEL, n)]:
            raise ValueError(f"not namespace names (DNS-1123 labels): {', '.join(map(repr, bad))}")
        return names

    @field_validator("metrics_address")
    @classmethod
    def _host(cls, value: str) -> str:
        """An IP address or a host name: what the metrics server's socket binds to."""
        try:
            ipaddress.ip_address(value)
        except ValueError:
            if len(value) > 253 or not re.fullmatch(SUBDOMAIN, value.lower()):
                raise ValueError("not an IP address or host name") from None
        return value

    @field_validator("allowed_endpoints", "allowed_model_urls", mode="before")
    @classmethod
    def _url_prefixes(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        prefixes, invalid = parse_prefixes(value)
        if invalid:
            raise ValueError(
                f"not http(s) URL prefixes: {', '.join(map(shown, invalid))} "
                "(e.g. https://api.openai.com/v1, http://chroma.memory.svc:8000)"
            )
        return tuple(prefixes)


def in_pod() -> bool:
    """Running in a Pod (its service account), not as a local process with a kubeconfig."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and not os.environ.get("KUBECONFIG")


def _problem(err: Any) -> str:
    """The variable, its value (not a URL list's: its message names the invalid URLs as
    shown()) and the rule it breaks, in words (not a pattern)."""
    loc = err["loc"]
    why = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] == "string_pattern_mismatch":
        why = _PATTERN_RULES[loc[0]]
    if not loc:
        return why
    value = "" if loc[0] in ("allowed_endpoints", "allowed_model_urls") else f"={err['input']!r}"
    return f"SSO_{'_'.join(str(p) for p in loc).upper()}{value}: {why}"


_PATTERN_RULES = MappingProxyType({
    "replica_id": "must be printable ASCII without spaces",
    "annotation_prefix": "must be a DNS-1123 subdomain (lower-case letters, digits, '-' and '.')",
})  # fmt: skip


def load() -> OperatorConfig:
    """The settings from the environment; SystemExit names every invalid variable (exit 1)."""
    try:
        return OperatorConfig()
    except ValidationError as exc:
        problems = "; ".join(_problem(err) for err in exc.errors())
        raise SystemExit(f"session-summary-operator: invalid settings: {problems}") from None


CONFIG = load()


def backoff_seconds(retry: int) -> float:
    """Exponential backoff for the retry-th retry, capped (2.0 ** 1024 overflows a float)."""
    doubled = CONFIG.retry_base_seconds * 2.0 ** min(max(retry, 0), 1023)
    return min(doubled, CONFIG.retry_max_seconds)
