"""A structured summary as the two records it is stored in, and back. Pure.

The reader's row holds the document and only the keys neo's readers use (READER_ROW_KEYS);
the ledger entry (core/ledger.py) every key of the write: one mapping, built and read here.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from pydantic import ValidationError

from controller.core.chunking import estimate_tokens, memory_text
from controller.core.coverage import Coverage
from controller.core.document import FOLDED_MARK
from controller.core.memories import JS_SAFE_INTEGER, Memory, Watermark, newest_time
from controller.core.quoting import fit
from controller.core.references import ReferenceOverflow
from controller.core.summary import (
    CATEGORIES,
    HISTORY_SECTIONS,
    ITEM_MAX,
    SCORES,
    SUMMARY_FORMAT,
    TITLE_MAX,
    LegacySummary,
    OtherWriter,
    PriorSummary,
    StructuredSummary,
    SummaryItem,
    UnreadablePriorSummary,
    fallback_title,
)
from controller.core.text import cut, json_value, listed_names, ms_to_rfc3339, one_line
from controller.core.visibility import DEFAULT_VISIBILITY, SessionSources, row_visibility

# Chroma's upsert merges metadata, so another writer's leaves our keys: each row records its
# document's digest; a mismatch names another writer, whose text is carried verbatim.
DIGEST_KEY = "documentDigest"

# Keys neo computes from a row's text: each write of ours removes them, so neo digests our
# text as new (docs/migrating-from-neo.md). Only neo writes the first three: they name it.
NEO_WRITER_KEYS = ("sourceTier", "degraded", "rawCanonical")
NEO_DERIVED_KEYS = (
    *NEO_WRITER_KEYS,
    *("graphDigested", "digestState", "digestAttempts", "deferReason", "dreamInputRevision"),
)


def document_digest(document: str) -> str:
    return hashlib.sha256(document.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def rewritten_by(document: str | None, meta: Mapping[str, Any]) -> str | None:
    """Who rewrote a row of ours since our last write, or None (no digest: neo's keys tell)."""
    digest = meta.get(DIGEST_KEY)
    if isinstance(document, str) and document_digest(document) == digest:
        return None
    if any(key in meta for key in NEO_WRITER_KEYS):
        return NEO_WRITER
    return UNKNOWN_WRITER if isinstance(digest, str) else None


NEO_WRITER = "neo memory-core's summary task (SessionService.summarizeSession)"
UNKNOWN_WRITER = "another writer"


class RowChangedDuringPass(Exception):
    """Another writer rewrote the row during the pass: the next pass carries its text."""


# Provenance: per pass, tokens in (memory text read) against tokens out (added to the
# document), by the one estimate (core/chunking.py); the compaction ratio is in / out.
PASS_TOKENS_KEPT = 100  # per-pass figures stored in the row (the sums cover every pass)


@dataclass(frozen=True)
class PassTokens:
    tokens_in: int
    tokens_out: int


def pass_tokens(memories: Sequence[Memory], added: str) -> PassTokens:
    tokens_in = sum(estimate_tokens(memory_text(m)) for m in memories)
    return PassTokens(tokens_in, estimate_tokens(added))


def added_text(before: StructuredSummary | None, after: StructuredSummary) -> str:
    """What a pass added, by items, not the document (folding never reads as adding nothing)."""
    parts: list[str] = []
    for title, items in after.sections.items():
        old = before.sections.get(title, []) if before is not None else []
        new = items[len(old) :] if title in HISTORY_SECTIONS else items if items != old else []
        parts += [item.text for item in new]
    parts += after.references[len(before.references) if before is not None else 0 :]
    return "\n".join(parts)


@dataclass(frozen=True)
class Provenance:
    """What one write of a summary covers and cost."""

    passes: list[PassTokens] = field(default_factory=list)
    document_tokens: int = 0

    @property
    def tokens_in(self) -> int:
        return sum(p.tokens_in for p in self.passes)

    @property
    def tokens_out(self) -> int:
        return sum(p.tokens_out for p in self.passes)

    @property
    def ratio(self) -> float | None:
        """Tokens of memory per token of summary; None when nothing was read or written."""
        ok = self.tokens_in > 0 and self.tokens_out > 0
        return round(self.tokens_in / self.tokens_out, 2) if ok else None

    def with_document(self, document: str) -> Provenance:
        return Provenance(list(self.passes), estimate_tokens(document))

    def metadata(self) -> dict[str, MetadataValue | None]:
        kept = [[p.tokens_in, p.tokens_out] for p in self.passes[:PASS_TOKENS_KEPT]]
        return {
            "passCount": len(self.passes),
            "passTokensIn": self.tokens_in,
            "passTokensOut": self.tokens_out,
            "passTokensJson": json.dumps(kept, separators=(",", ":")),
            "documentTokens": self.document_tokens,
            "compactionRatio": self.ratio,  # None: no key (to_chroma_metadata)
        }


def compact_json(value: Any) -> str:
    """JSON with sorted keys and no spaces: the same value is always the same text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# The reader's row keys: neo's, our format, DIGEST_KEY and where `timestamp` came from.
READER_ROW_KEYS = frozenset(
    (
        *("sessionId", "timestamp", "memoryCount", "title", "category", "quality"),
        *("productivity", "impact", "complexity", "technologies", "participatingAgents"),
        *("models", "toolsUsed", "totalToolCalls", "userId", "sourceAgentIdentities"),
        *("sourceTrustTier", "provenancePolicy", "unclassifiedSourceCount"),
        *("summaryFormat", DIGEST_KEY, "timestampSource"),
    )
)

# Every key a write of ours has ever set on the row (the previous release kept its whole
# state there): upsert_metadata removes those a write does not set.
ROW_KEYS = (
    *sorted(READER_ROW_KEYS),
    *("formatVersion", "sectionsJson", "firstMemoryAt", "watermarkTimestamp", "watermarkMemoryId"),
    *("coverageJson", "writer", "triggerSource", "summarizedAt", "legacySummary", "rowsDigest"),
    *("sourcesJson", "untimedJson", "itemSourcesJson", "skippedRows", "referencesJson"),
    *("referencesOmitted", "referencesOmittedFrom", "referencesOmittedTo"),
    *("referencesOmittedDigests",),
    "claimFence",  # the previous release's fence on the row (now in the ledger)
    *("passCount", "passTokensIn", "passTokensOut", "passTokensJson", "documentTokens"),
    "compactionRatio",  # Provenance.metadata
)

MetadataValue = str | int | float | bool
# The comma-joined name lists: the summary's field and neo's key.
NAME_LISTS = MappingProxyType(
    {"technologies": "technologies", "participating_agents": "participatingAgents"}
    | {"models": "models", "tools_used": "toolsUsed"}
)


def to_chroma_metadata(
    summary: StructuredSummary,
    *,
    writer: str,
    trigger: str,
    summarized_at_ms: int,
    provenance: Provenance | None = None,
    visibility: Mapping[str, str | int | None] | None = None,
    document: str | None = None,
) -> dict[str, MetadataValue]:
    """neo's keys and ours; a missing value is an omitted key. visibility: None is untagged."""
    watermark, over = summary.watermark, summary.references_overflow
    # neo's `timestamp` (its boot read fails without): the newest memory time, else the write's
    first, last = summary.first_memory_at_ms, summary.last_memory_at_ms
    timestamp = newest_time([first if last is None else last], summarized_at_ms)
    sections = summary.model_dump(include={"sections"}, exclude_none=True)["sections"]
    meta: dict[str, MetadataValue | None] = {
        # neo memory-core keys
        "sessionId": summary.session_id,
        "timestamp": timestamp,
        "memoryCount": summary.memory_count,
        "title": summary.title,
        "category": summary.category,
        **{score: getattr(summary, score) for score in SCORES},
        **{k: ",".join(listed_names(getattr(summary, n))) for n, k in NAME_LISTS.items()},
        "totalToolCalls": min(summary.total_tool_calls, JS_SAFE_INTEGER),
        **(visibility or row_visibility(SessionSources(), DEFAULT_VISIBILITY)),
        # ours
        "summaryFormat": SUMMARY_FORMAT,
        "formatVersion": summary.format_version,
        "sectionsJson": compact_json(sections),
        "firstMemoryAt": summary.first_memory_at_ms,
        # `timestamp` is a number even when no memory time is known (row_timestamp): say so.
        "timestampSource": None if timestamp == summary.last_memory_at_ms else "fallback",
        "watermarkTimestamp": watermark.timestamp_ms if watermark else None,
        "watermarkMemoryId": watermark.memory_id if watermark else None,
        "coverageJson": summary.coverage.to_json() if summary.coverage is not None else None,
        "writer": writer,
        "triggerSource": trigger,
        "summarizedAt": summarized_at_ms,
        "legacySummary": summary.legacy_text or None,
        "rowsDigest": summary.rows_digest,
        "sourcesJson": summary.sources_json,
        "untimedJson": json.dumps(list(summary.untimed_ids)) if summary.untimed_ids else None,
        "itemSourcesJson": json.dumps(summary.item_sources) if summary.item_sources else None,
        "referencesJson": json.dumps(summary.references, ensure_ascii=False),
        "referencesOmitted": over.count or None,
        "referencesOmittedFrom": over.first_ms,
        "referencesOmittedTo": over.last_ms,
        "referencesOmittedDigests": ",".join(over.digests) or None,
        DIGEST_KEY: document_digest(document) if document is not None else None,
        "maskedWith": summary.masked_with,
        **(provenance.metadata() if provenance is not None else {}),
    }
    return {key: value for key, value in meta.items() if value is not None}


def upsert_metadata(meta: Mapping[str, MetadataValue]) -> dict[str, MetadataValue | None]:
    """The row's keys, and None (chromadb: remove it) for each key of ours not set and neo's
    derived from the text replaced: none outlives what it describes."""
    removed = {key: None for key in (*ROW_KEYS, *NEO_DERIVED_KEYS) if key not in meta}
    return {**meta, **removed}


def _split(value: object) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()] if isinstance(value, str) else []


def _number(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value) if math.isfinite(value) else None


def _ids(raw: object) -> tuple[str, ...]:
    try:
        ids = json_value(raw) if isinstance(raw, str) else None
    except ValueError:
        return ()
    return tuple(i for i in ids if isinstance(i, str)) if isinstance(ids, list) else ()


def _stored_items(raw: object) -> list[SummaryItem]:
    """Items as stored. One over ITEM_MAX makes the row unreadable (carried whole, never cut);
    a longer reason (another writer's) is cut, else each pass would carry and mask it again."""
    if not isinstance(raw, list):
        raise ValueError("a section must be a list")
    items = []
    for entry in raw:
        entry = {"text": entry} if isinstance(entry, str) else entry
        if not isinstance(entry, dict) or not isinstance(entry.get("text"), str):
            raise ValueError("a section item is neither text nor an object with a text")
        text = entry["text"].strip()
        if len(text) > ITEM_MAX:
            raise ValueError(f"a stored item is longer than {ITEM_MAX} characters")
        if text:
            reason = entry.get("superseded_by")
            reason = fit(reason.strip()) if isinstance(reason, str) else None
            items.append(SummaryItem(text=text, superseded_by=reason))
    return items


def _structured_from_metadata(session_id: str, meta: Mapping[str, Any]) -> StructuredSummary:
    raw_sections = json_value(str(meta.get("sectionsJson")))
    if not isinstance(raw_sections, dict):
        raise ValueError("sectionsJson is not an object")
    watermark = None
    mark_ts, mark_id = _number(meta.get("watermarkTimestamp")), meta.get("watermarkMemoryId")
    if mark_ts is not None and isinstance(mark_id, str):
        watermark = Watermark(timestamp_ms=mark_ts, memory_id=mark_id)
    legacy_text = meta.get("legacySummary")
    if legacy_text is not None and not isinstance(legacy_text, str):
        raise ValueError("legacySummary is not text")
    title = meta.get("title")
    if not isinstance(title, str) or not title.strip():
        title = fallback_title(session_id)
    fallback = meta.get("timestampSource") == "fallback"  # no memory time was known
    # An unreadable coverage is none: the next pass re-reads what memoryCount lacks (to_reread).
    try:
        raw = meta.get("coverageJson")
        coverage = Coverage.from_json(raw) if isinstance(raw, str) else None
    except (ValueError, TypeError, KeyError):
        coverage = None
    raw = meta.get("referencesJson")  # a row written before References has none
    references = json_value(raw) if isinstance(raw, str) else []
    if not isinstance(references, list) or not all(isinstance(r, str) for r in references):
        raise ValueError("referencesJson is not a list of strings")
    return StructuredSummary(
        session_id=session_id,
        title=cut(title, TITLE_MAX, ""),
        category=meta.get("category") if meta.get("category") in CATEGORIES else "other",
        **{s: 50 if (n := _number(meta.get(s))) is None else max(0, min(100, n)) for s in SCORES},
        sections={str(k): _stored_items(v) for k, v in raw_sections.items()},
        **{name: _split(meta.get(key)) for name, key in NAME_LISTS.items()},
        total_tool_calls=max(0, _number(meta.get("totalToolCalls")) or 0),
        memory_count=max(0, _number(meta.get("memoryCount")) or 0),
        first_memory_at_ms=_number(meta.get("firstMemoryAt")),
        last_memory_at_ms=None if fallback else _number(meta.get("timestamp")),
        watermark=watermark,
        coverage=coverage,
        format_version=_number(meta.get("formatVersion")) or 1,
        legacy_text=legacy_text or None,
        summarized_at_ms=_number(meta.get("summarizedAt")),
        rows_digest=meta.get("rowsDigest") if isinstance(meta.get("rowsDigest"), str) else None,
        sources_json=meta["sourcesJson"] if isinstance(meta.get("sourcesJson"), str) else None,
        # skippedRows (an older count) names no row: the next pass summarizes those rows.
        untimed_ids=_ids(meta.get("untimedJson")),
        item_sources=list(_ids(meta.get("itemSourcesJson"))),
        masked_with=meta["maskedWith"] if isinstance(meta.get("maskedWith"), str) else None,
        references=references,
        references_overflow=ReferenceOverflow(
            count=max(0, _number(meta.get("referencesOmitted")) or 0),
            first_ms=_number(meta.get("referencesOmittedFrom")),
            last_ms=_number(meta.get("referencesOmittedTo")),
            digests=_split(meta.get("referencesOmittedDigests")),
        ),
    )


def from_chroma_row(
    session_id: str, document: str | None, metadata: Mapping[str, Any] | None
) -> PriorSummary | None:
    """The prior summary from a row (None: none); anything not ours is legacy text."""
    meta = metadata or {}
    text = document.strip() if isinstance(document, str) else ""
    ours = meta.get("summaryFormat") == SUMMARY_FORMAT
    if ours:
        try:
            summary = _structured_from_metadata(session_id, meta)
        except (ValueError, TypeError, ValidationError) as exc:
            if not text:  # shown on the object and by summaryctl: pydantic's text quotes values
                reason = (
                    "invalid " + ", ".join(sorted({str(e["loc"][0]) for e in exc.errors()}))
                    if isinstance(exc, ValidationError)
                    else one_line(exc, 160)
                )
                raise UnreadablePriorSummary(
                    f"the stored summary of session {session_id!r} cannot be read ({reason}) "
                    "and has no document to carry forward; it is left in place"
                ) from None
        else:
            who = rewritten_by(document, meta)
            if who is None:
                return summary
            # Another writer's text is carried verbatim under a line naming it.
            carried, at = summary.legacy_text, summary.summarized_at_ms
            if text:
                when = f" of {ms_to_rfc3339(at)}" if at is not None else ""
                block = f"[Written by {who} over this operator's summary{when}; kept verbatim:]"
                carried = f"{carried}\n\n{block}\n\n{text}" if carried else f"{block}\n\n{text}"
            other = OtherWriter(who=who, characters=len(text))
            return summary.model_copy(update={"legacy_text": carried, "other_writer": other})
    if not text:
        return None
    if ours and FOLDED_MARK in text:  # unreadable as sections: what its document folded away
        kept = (
            f"[{key}, kept verbatim:]\n{meta[key]}"
            for key in ("sectionsJson", "referencesJson", "legacySummary")
            if isinstance(meta.get(key), str) and meta[key] not in text
        )
        text = "\n\n".join([text, *kept])
    title = meta["title"].strip() or None if isinstance(meta.get("title"), str) else None
    return LegacySummary(session_id=session_id, text=text, title=title)
