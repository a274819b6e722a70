"""Who can see a summary row: the keys neo's readers filter on (userId and the provenance
keys), computed from the session's memories as neo 13.1.0's writer does (docs/migrating-
from-neo.md). Pure. The defaults are neo's tables (test_neo_client.py checks them).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from types import MappingProxyType
from typing import Any, Literal, get_args

from pydantic import TypeAdapter

from controller.core.memories import (
    listed_text,
    optional_text,
    scalar_text,
    tool_call_count,
    tool_names,
)
from controller.core.text import Linear, listed_names

MemorySharing = Literal["team", "legacy", "private"]
TrustTier = Literal[  # highest to lowest trust (neo's TRUST_TIER_ORDER)
    "system",
    "repo-trusted",
    "owner",
    "self",
    "peer-trusted",
    "internal-authored",
    "external",
    "unclassified",
]
# A larger index is more restrictive.
TRUST_TIER_ORDER: tuple[TrustTier, ...] = get_args(TrustTier)
UNCLASSIFIED: TrustTier = "unclassified"

# neo 13.1.0: CORE_SWARM_USER_IDS (RequestContextService.mjs) and the trust tier of each
# AgentIdentity root (graph/identityRoots.mjs).
NEO_SHARED_AGENTS: tuple[str, ...] = (
    "neo-opus-ada",
    "neo-opus-grace",
    "neo-opus-vega",
    "neo-gemini-pro",
    "neo-gpt",
)
NEO_IDENTITY_TRUST_TIERS: MappingProxyType[str, TrustTier] = MappingProxyType(
    {
        "@system": "system",
        "@neo-opus-ada": "peer-trusted",
        "@neo-opus-grace": "peer-trusted",
        "@neo-opus-vega": "peer-trusted",
        "@neo-fable": "peer-trusted",
        "@neo-fable-clio": "peer-trusted",
        "@neo-gemini-pro": "peer-trusted",
        "@tobiu": "owner",
        "@neo-gpt": "peer-trusted",
        "AGENT:*": "unclassified",
    }
)

# On RE2: Python's re took time quadratic in a name of many "(" or spaces.
_WRAPPER = Linear(r"\s*\(.*?\)\s*")


def normalize_user_id(value: str) -> str:
    """neo's normalizeUserId: an AgentIdentity node id ("@alice") names user "alice"."""
    return value[1:] if value.startswith("@") else value


def canonical_agent(name: str) -> str:
    """An agent name as neo compares it (parseAgentList): no " (Harness)" wrapper, lower case,
    no leading "@": "Claude-Code (VS Code)" and "@claude-code" are one agent."""
    return normalize_user_id(_WRAPPER.sub("", name.strip()).lower())


def union_agents(prior: Iterable[str], new: Iterable[str]) -> list[str]:
    """A summary's agents, one per agent as neo compares names (first spelling, no "@")."""
    found: dict[str, str] = {}
    for name in listed_names([*prior, *new]):
        if key := canonical_agent(name):
            # "@@x" stays whole: "@x" would be another agent when read again
            spelled = normalize_user_id(name)
            found.setdefault(key, spelled if canonical_agent(spelled) == key else name)
    return [found[k] for k in sorted(found)]


@dataclass(frozen=True)
class VisibilityRules:
    """How rows are tagged for neo's readers (a SessionSummarizer's spec.visibility)."""

    memory_sharing: MemorySharing = "team"
    shared_agents: tuple[str, ...] = NEO_SHARED_AGENTS
    identity_trust_tiers: Mapping[str, TrustTier] = field(
        default_factory=lambda: NEO_IDENTITY_TRUST_TIERS
    )


DEFAULT_VISIBILITY = VisibilityRules()


@dataclass
class SessionSources:
    """Who wrote the session's rows and with what, from every row's metadata (any type)."""

    identities: dict[str, int] = field(default_factory=dict)  # identity -> rows, first seen first
    anonymous: int = 0  # rows without an agentIdentity
    agents: dict[str, None] = field(default_factory=dict)  # `agent` values, first seen first
    owner: tuple[int, str, str] | None = None  # (timestamp, id, userId) of the earliest tagged
    names: dict[str, None] = field(default_factory=dict)  # agent, else identity: who took part
    models: dict[str, None] = field(default_factory=dict)
    tools: dict[str, None] = field(default_factory=dict)
    tool_calls: int = 0
    first_ms: int | None = None
    last_ms: int | None = None

    def add(self, row_id: str, meta: Mapping[str, Any], timestamp_ms: int | None) -> None:
        identity = meta.get("agentIdentity")
        if isinstance(identity, str) and identity:
            self.identities[identity] = self.identities.get(identity, 0) + 1
        else:
            self.anonymous += 1
        if agent := listed_text(meta.get("agent")):
            self.agents.setdefault(agent)
        if name := agent or optional_text(identity):
            self.names.setdefault(name)
        if model := listed_text(meta.get("model")):
            self.models.setdefault(model)
        self.tools.update(dict.fromkeys(tool_names(meta.get("toolsUsed"))))
        self.tool_calls += tool_call_count(meta.get("amountToolCalls"))
        if timestamp_ms is not None:
            first, last = self.first_ms, self.last_ms
            self.first_ms = timestamp_ms if first is None else min(first, timestamp_ms)
            self.last_ms = timestamp_ms if last is None else max(last, timestamp_ms)
        if user := optional_text(scalar_text(meta.get("userId"))):  # String(userId): 42 is "42"
            key = (timestamp_ms if timestamp_ms is not None else 2**63, row_id)
            if self.owner is None or key < self.owner[:2]:
                self.owner = (*key, normalize_user_id(user))

    def to_json(self) -> str:
        """What the ledger keeps, so a pass that reads only new rows adds them to it."""
        return json.dumps(asdict(self), separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: object) -> SessionSources | None:
        """The sources as to_json wrote them; None for anything else."""
        try:
            sources = _SOURCES.validate_json(str(text))
        except ValueError:
            return None
        return sources if sources.to_json() == text else None


_SOURCES = TypeAdapter(SessionSources)


def summary_user_id(
    participants: Sequence[str], owner_user_id: str | None, rules: VisibilityRules
) -> str | None:
    """The row's userId (neo's resolveSummaryVisibilityUserId), None: untagged."""
    shared = {canonical_agent(a) for a in rules.shared_agents}
    # neo joins the agents with "," and splits that list again before comparing.
    names = {canonical_agent(part) for p in participants for part in p.split(",")}
    if names & shared:
        return "shared"
    return owner_user_id if rules.memory_sharing == "private" else None


def row_visibility(sources: SessionSources, rules: VisibilityRules) -> dict[str, str | int | None]:
    """The row's reader-facing keys, as neo's resolveSummarySourceProvenance computes them;
    None removes a key (neo sets these only when they apply)."""
    tiers, owner = rules.identity_trust_tiers, sources.owner[2] if sources.owner else None
    unclassified = sources.anonymous + sum(
        rows for identity, rows in sources.identities.items() if not tiers.get(identity)
    )
    found = [tiers.get(identity) or UNCLASSIFIED for identity in sources.identities]
    if sources.anonymous:
        found.append(UNCLASSIFIED)
    return {
        "userId": summary_user_id(list(sources.agents), owner, rules),
        "sourceAgentIdentities": ",".join(sources.identities),
        "sourceTrustTier": max(found, key=TRUST_TIER_ORDER.index, default=UNCLASSIFIED),
        "provenancePolicy": "most-restrictive-source",
        "unclassifiedSourceCount": unclassified or None,
    }
