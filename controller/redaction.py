"""Credentials out of everything a summary is made of, before it is made. Pure, but
outside core/: its rules come from detect-secrets, a library core/ does not import.

A summary is read by every agent of the fleet, and with a model backend its input goes to
the model endpoint; so secrets are masked where memories are read (store/session_listing.py)
and in the prior summary a pass carries, never later. The rules are detect-secrets' (pinned
in requirements.lock): its regex plugins (cloud keys, tokens, private keys, passwords in
URLs, JWTs, ...), its keyword assignments (quoted values always; unquoted ones when they
look random, by its Shannon entropy) and its quoted high-entropy strings; plus a
SessionSummarizer's own patterns. A secret becomes `[redacted: <kind>]`, so what is around
it (a URL's host, the variable's name) stays readable.
"""

from __future__ import annotations

import functools
import hashlib
import re
import types
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
from detect_secrets.plugins import keyword
from detect_secrets.plugins.base import RegexBasedDetector
from detect_secrets.plugins.basic_auth import BasicAuthDetector
from detect_secrets.plugins.high_entropy_strings import (
    Base64HighEntropyString,
    HexHighEntropyString,
    HighEntropyStringsPlugin,
)
from detect_secrets.plugins.ip_public import IPPublicDetector
from detect_secrets.plugins.private_key import PrivateKeyDetector

from controller.core.memories import Memory
from controller.core.summary import LegacySummary, PriorSummary, StructuredSummary, SummaryItem

PLACEHOLDER = re.compile(r"\[redacted: [a-z0-9-]+\]")
# Unquoted `NAME=value` counts when the value is at least this long and this random (bits
# per character): words ("password: is wrong") do not, keys do.
UNQUOTED_MIN_CHARS = 8
UNQUOTED_MIN_ENTROPY = 3.0
# Memory metadata a summary takes text from besides its three parts (row metadata, ledger).
SOURCE_KEYS = ("agent", "agentIdentity", "model", "toolsUsed")
_TOKEN_TAIL = re.compile(r"[\w\-+/=]*")  # a token's rest after what a detector matched
_KEYWORD = re.compile(keyword.DENYLIST_REGEX, re.IGNORECASE)
_KEY_END = re.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\n\s*\n")
# Bumped when `Redaction.spans` finds secrets differently for the same rules: a summary
# masked by an earlier way is then masked again (Redaction.fingerprint).
MASKING_VERSION = 1


def kind_of(secret_type: str) -> str:
    """`AWS Access Key` -> `aws-access-key`: the placeholder's kind."""
    return re.sub(r"[^a-z0-9]+", "-", secret_type.lower()).strip("-")


@dataclass(frozen=True)
class Rule:
    kind: str
    pattern: re.Pattern[str]
    group: int = 0  # the part of a match that is the secret
    min_entropy: float = 0.0  # 0: every match; else only values at least this random
    whole_token: bool = True  # extend over the rest of the token (a JWT's signature)
    charset: str | None = None  # what the entropy counts (None: base64's)
    keyword: bool = False  # only in a text naming a secret (password, api_key, ...)


def _detector_rules() -> tuple[Rule, ...]:
    rules: list[Rule] = []
    plugin: type
    for secret_type, plugin in get_mapping_from_secret_type_to_class().items():
        if not issubclass(plugin, RegexBasedDetector) or plugin is IPPublicDetector:
            continue  # an address is not a credential
        group = 1 if plugin is BasicAuthDetector else 0
        whole = plugin is not BasicAuthDetector
        patterns: Iterable[re.Pattern[str]] = plugin.denylist  # type: ignore[attr-defined]
        rules += [Rule(kind_of(secret_type), p, group, 0.0, whole) for p in patterns]
    kw = kind_of(keyword.KeywordDetector.secret_type)
    for pattern, group in keyword.QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP.items():
        rules.append(Rule(kw, pattern, group, 0.0, False, keyword=True))
    for pattern, group in keyword.CONFIG_DENYLIST_REGEX_TO_GROUP.items():
        rules.append(Rule(kw, pattern, group, UNQUOTED_MIN_ENTROPY, False, keyword=True))
    for entropy in (Base64HighEntropyString(), HexHighEntropyString()):
        kind = kind_of(entropy.secret_type)
        rules.append(Rule(kind, entropy.regex, 2, entropy.entropy_limit, False, entropy.charset))
    return tuple(rules)


DETECTOR_RULES = _detector_rules()
_PRIVATE_KEY = kind_of(PrivateKeyDetector.secret_type)
_BASE64 = Base64HighEntropyString().charset


def _random_enough(rule: Rule, value: str) -> bool:
    if not rule.min_entropy:
        return True
    if rule.charset is None and len(value) < UNQUOTED_MIN_CHARS:  # keyword values
        return False
    measure = types.SimpleNamespace(charset=rule.charset or _BASE64)
    entropy = HighEntropyStringsPlugin.calculate_shannon_entropy(measure, value)  # type: ignore[arg-type]
    return bool(entropy > rule.min_entropy)


@dataclass(frozen=True)
class Redaction:
    """Masks credentials: the detector rules plus extra (kind, pattern) pairs."""

    extra: tuple[tuple[str, str], ...] = ()
    rules: tuple[Rule, ...] = field(init=False, repr=False, compare=False)
    # Which masking a text went through: the rules (detect-secrets' and the extra ones), the
    # thresholds and MASKING_VERSION. A summary written under the same fingerprint needs no
    # second look at what it carries (PassRedaction.prior).
    fingerprint: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        own = tuple(
            Rule(kind_of(name), compiled, 1 if compiled.groups else 0, 0.0, False)
            for name, pattern in self.extra
            for compiled in (re.compile(pattern),)
        )
        rules = DETECTOR_RULES + own
        object.__setattr__(self, "rules", rules)
        settings = [
            (r.kind, r.pattern.pattern, r.pattern.flags, r.group, r.min_entropy, r.whole_token,
             r.charset, r.keyword)
            for r in rules
        ]  # fmt: skip
        described = repr(
            (
                MASKING_VERSION,
                UNQUOTED_MIN_CHARS,
                UNQUOTED_MIN_ENTROPY,
                PLACEHOLDER.pattern,
                _KEYWORD.pattern,
                settings,
            )
        )
        object.__setattr__(self, "fingerprint", hashlib.sha256(described.encode()).hexdigest()[:16])

    def spans(self, text: str) -> list[tuple[int, int, str]]:
        """(start, end, kind) of each secret, in order, not overlapping a placeholder."""
        kept = [(m.start(), m.end(), "") for m in PLACEHOLDER.finditer(text)]
        named = _KEYWORD.search(text) is not None
        for rule in self.rules:
            if rule.keyword and not named:
                continue
            for match in rule.pattern.finditer(text):
                start, end = match.span(rule.group)
                value = match.group(rule.group)
                if rule.min_entropy and rule.charset is None:  # unquoted: one token
                    value = value.split(maxsplit=1)[0].rstrip(",;.)'\"") if value.strip() else ""
                    end = start + len(value)
                if start < 0 or not value.strip() or not _random_enough(rule, value):
                    continue
                if rule.kind == _PRIVATE_KEY:
                    start = text.rfind("-----", 0, start) if "-----" in text[:start] else start
                    tail = _KEY_END.search(text, end)
                    end = tail.end() if tail and tail.group(0).startswith("-") else len(text)
                elif rule.whole_token:
                    end = _TOKEN_TAIL.match(text, end).end()  # type: ignore[union-attr]
                kept.append((start, end, rule.kind))
        kept.sort(key=lambda s: (s[0], -s[1]))
        out: list[tuple[int, int, str]] = []
        reach = -1
        for start, end, kind in kept:
            if start >= reach:
                out.append((start, end, kind))
                reach = end
            elif end > reach and out and out[-1][2]:  # an overlap widens the secret
                out[-1] = (out[-1][0], end, out[-1][2])
                reach = end
        return [s for s in out if s[2]]

    def text(self, text: str, found: Counter[str] | None = None) -> str:
        if not text:
            return text
        spans = self.spans(text)
        if not spans:
            return text
        parts: list[str] = []
        at = 0
        for start, end, kind in spans:
            parts += [text[at:start], f"[redacted: {kind}]"]
            at = end
            if found is not None:
                found[kind] += 1
        parts.append(text[at:])
        return "".join(parts)

    def texts(self, texts: Iterable[str], found: Counter[str] | None = None) -> list[str]:
        return [self.text(t, found) for t in texts]

    def memory(self, memory: Memory, found: Counter[str] | None = None) -> Memory:
        """The memory with every text a summary could take from it masked."""
        update: dict[str, Any] = {
            name: self.text(getattr(memory, name), found)
            for name in ("prompt", "thought", "response", "document")
        }
        update["tools_used"] = tuple(self.texts(memory.tools_used, found))
        for name in ("agent", "model", "agent_identity"):
            value = getattr(memory, name)
            update[name] = self.text(value, found) if value else value
        return memory.model_copy(update=update)

    def source_meta(self, meta: Mapping[str, Any]) -> Mapping[str, Any]:
        """A row's metadata with SOURCE_KEYS masked (who wrote it, with what tools)."""
        masked = {k: self.text(meta[k]) for k in SOURCE_KEYS if isinstance(meta.get(k), str)}
        return {**meta, **masked} if any(masked[k] != meta[k] for k in masked) else meta


DEFAULT_REDACTION = Redaction()


@dataclass
class PassRedaction:
    """One pass's masking: what it read, masked, and how many secrets of each kind it
    masked per memory row (a row read twice counts once) and in the prior summary it
    carried. Counts by kind, never the secrets."""

    redaction: Redaction = DEFAULT_REDACTION
    by_row: dict[str, Counter[str]] = field(default_factory=dict)
    prior_found: Counter[str] = field(default_factory=Counter)

    def memory(self, memory: Memory) -> Memory:
        found: Counter[str] = Counter()
        masked = self.redaction.memory(memory, found)
        if found:
            self.by_row[memory.id] = found
        return masked

    def meta(self, meta: Mapping[str, Any]) -> Mapping[str, Any]:
        return self.redaction.source_meta(meta)

    def prior(self, prior: PriorSummary | None) -> PriorSummary | None:
        """The prior summary with what earlier releases stored unmasked masked now. A summary
        this masking wrote (its fingerprint, and no other writer's text in it) is returned
        as it is: what it holds was masked when it came in, so a pass does not re-read the
        whole history."""
        if prior is None:
            return None
        if (
            isinstance(prior, StructuredSummary)
            and prior.other_writer is None
            and prior.masked_with == self.redaction.fingerprint
        ):
            return prior
        text = functools.partial(self.redaction.text, found=self.prior_found)
        if isinstance(prior, LegacySummary):
            title = text(prior.title) if prior.title else prior.title
            return prior.model_copy(update={"text": text(prior.text), "title": title})
        sections = {
            name: [
                SummaryItem(
                    text=text(item.text),
                    superseded_by=text(item.superseded_by) if item.superseded_by else None,
                )
                for item in items
            ]
            for name, items in prior.sections.items()
        }
        update: dict[str, Any] = {
            "sections": sections,
            "title": text(prior.title),
            "references": [text(r) for r in prior.references],
            "legacy_text": text(prior.legacy_text) if prior.legacy_text else prior.legacy_text,
            "sources_json": text(prior.sources_json) if prior.sources_json else None,
        }
        for name in ("technologies", "participating_agents", "models", "tools_used"):
            update[name] = [text(v) for v in getattr(prior, name)]
        return prior.model_copy(update=update) if self.prior_found else prior

    def counts(self) -> dict[str, int]:
        total = Counter(self.prior_found)
        for found in self.by_row.values():
            total.update(found)
        return dict(sorted(total.items()))
