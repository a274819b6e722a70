"""The operator's ledger entry of one summary row (docs/ledger.md), and the fence a write
must pass over it. Pure. A head record holds a write's keys but the growing lists; segments
hold what the lists gained at each write. A fence is a claim grant's resourceVersion and the
cluster that issued it; another cluster's counts while that cluster renews its record.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from controller.core.claim_rules import Sighting, sighted
from controller.core.naming import summary_row_id
from controller.core.summary import HISTORY_SECTIONS, UnreadablePriorSummary
from controller.core.summary_row import DIGEST_KEY, READER_ROW_KEYS, compact_json, document_digest
from controller.core.text import json_value

LEDGER_FORMAT = 1
FENCE_KEY = "fence"
AUTHORITY_KEY = "fenceAuthority"
AUTHORITY_RECORD = "authority"  # the `record` key of a cluster's record in the ledger
_INTEGER = re.compile(r"[1-9][0-9]*")
ROW_DIGEST_KEY = "rowDigest"  # the row document this entry goes with
BUILT_ON_KEY = "builtOnDigest"  # the row document the write read: its text is in the entry
FORGOTTEN_KEY = "forgottenAt"  # a tombstone's: the session was forgotten at that time (ms)
# A tombstone's: its memories' newest time, in their clocks (0.1.0's: forgottenAt only).
LAST_MEMORY_KEY = "lastMemoryAt"
REQUEST_KEY = "forgetRequest"  # the forget that wrote a tombstone (its object's uid, generation)
REMOVED_KEYS = ("removedRow", "removedRecords", "removedMemories")  # reported whole by its retry
FORGOTTEN_BY_KEY = "forgottenBy"  # the object that forgot ("SessionSummary ns/name"), no person
# Every key a head of ours sets (plan_write's, a tombstone's): see replacing_head.
HEAD_KEYS = (
    *("sessionId", "ledgerFormat", "generation", "segments", "lists", FENCE_KEY, AUTHORITY_KEY),
    *(ROW_DIGEST_KEY, BUILT_ON_KEY, "summarizedAt", "rowsDigest", FORGOTTEN_KEY, "memoryCount"),
    *(REQUEST_KEY, FORGOTTEN_BY_KEY, LAST_MEMORY_KEY, *REMOVED_KEYS),
)
# Records are found by id, never by meaning, but Chroma wants a vector: one 1-d constant.
LEDGER_VECTOR = (1.0,)
GROWING = (*HISTORY_SECTIONS, "References", "Sources")  # the lists segments append to
SEGMENTS_MAX = 64
# Keys of the coverage: with the lists lost, none of them holds (the pass reads every row).
COVERAGE_KEYS = ("coverageJson", "watermarkTimestamp", "watermarkMemoryId", "rowsDigest")
Admission = Literal["write", "newer-grant", "other-authority", "ahead-of-authority"]


@dataclass(frozen=True)
class RowState:
    """A session's row as a write finds it right before writing (MemoryStore.read_row_states)."""

    fence: Fence | None
    digest: str | None  # of the row's document; None: no row
    head: dict[str, Any] | None = None  # the ledger entry's head metadata; None: no entry
    records: tuple[str, ...] = ()  # the ids of the session's other ledger records


class LedgerRecord(NamedTuple):
    record_id: str
    document: str
    metadata: dict[str, Any]


class LedgerEntry(NamedTuple):
    head: dict[str, Any]  # the head's metadata (fence, digests, generation)
    keys: dict[str, Any]  # every key of the write
    leftovers: int  # records beside those the head names: the next write deletes them
    lost: bool  # segments the head names are gone: the lists are empty, the coverage none
    own: bool  # the head holds the row's own keys (release 0.1.0's did not)


def _lists(state: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """(the state without its growing lists, the lists)."""
    sections = json_value(str(state.get("sectionsJson") or "{}"))
    lists = {title: list(sections.pop(title, [])) for title in HISTORY_SECTIONS}
    lists["References"] = list(json_value(str(state.get("referencesJson") or "[]")))
    lists["Sources"] = list(json_value(str(state.get("itemSourcesJson") or "[]")))
    rest = {k: v for k, v in state.items() if k not in ("referencesJson", "itemSourcesJson")}
    return {**rest, "sectionsJson": compact_json(sections)}, lists


def _digest(items: list[Any]) -> str:
    return document_digest(compact_json(items))[:24]


def segment_id(session_id: str, generation: int, seq: int) -> str:
    return f"{summary_row_id(session_id)}#{generation}.{seq}"


def plan_write(
    session_id: str, keys: Mapping[str, Any], found: RowState, fence: Mapping[str, Any]
) -> tuple[list[LedgerRecord], list[str]]:
    """(the records one write of `keys` over `found` upserts, the ids of the session's records
    its head no longer names): a segment of what the lists gained when each starts with what the
    head recorded, else a new generation; then the head."""
    rest, lists = _lists(keys)
    generation, seq = _number(found.head, "generation"), _number(found.head, "segments")
    shape = _shape(found.head) if seq < SEGMENTS_MAX else None
    if shape is not None and all(
        len(lists[name]) >= length and _digest(lists[name][:length]) == digest
        for name, (length, digest) in shape.items()
    ):
        part = {n: lists[n][shape[n][0] :] for n in GROWING if lists[n][shape[n][0] :]}
    else:  # not grown: a new generation
        generation, seq, part, shape = generation + 1, 0, lists, None
    segments: list[LedgerRecord] = []
    if part or shape is None:
        meta = {"sessionId": session_id, "generation": generation, "segment": seq}
        segments = [LedgerRecord(segment_id(session_id, generation, seq), compact_json(part), meta)]
        seq += 1
    head_meta: dict[str, Any] = {
        "sessionId": session_id,
        "ledgerFormat": LEDGER_FORMAT,
        "generation": generation,
        "segments": seq,
        "lists": compact_json({n: [len(items), _digest(items)] for n, items in lists.items()}),
        **fence,
        ROW_DIGEST_KEY: keys.get(DIGEST_KEY),
        BUILT_ON_KEY: found.digest,
        "summarizedAt": keys.get("summarizedAt"),
        # the reconciliation's walk compares it with the ids it counts (sweep_plan.py)
        "rowsDigest": keys.get("rowsDigest"),
    }
    document = compact_json({"ledgerFormat": LEDGER_FORMAT, **rest})
    head_record = LedgerRecord(summary_row_id(session_id), document, replacing_head(head_meta))
    named = {segment_id(session_id, generation, n) for n in range(seq)}
    return [*segments, head_record], [r for r in found.records if r not in named]


def replacing_head(meta: Mapping[str, Any]) -> dict[str, Any]:
    """A head's metadata with None (chromadb: remove the key; an upsert merges metadata) for
    each head key it does not set, so it replaces the head before it whole."""
    return {**dict.fromkeys(HEAD_KEYS), **meta}


def entry_as_read(session_id: str, head: Mapping[str, Any]) -> dict[str, Any]:
    """Chroma's filter for the records of the entry whose head was read as `head`: that head
    while unchanged (a newer writer's has its own fence) and the segments of its generation
    and before (a newer write over an entry whose items all went starts a new generation)."""
    session = {"sessionId": session_id}
    same = [{k: head[k]} for k in (FENCE_KEY, AUTHORITY_KEY, ROW_DIGEST_KEY) if k in head]
    older = [{"segment": {"$gte": 0}}, {"generation": {"$lte": _number(head, "generation")}}]
    segments = {"$and": [session, *older]}
    return {"$or": [{"$and": [session, *same]}, segments]} if same else segments


def _number(head: Mapping[str, Any] | None, key: str) -> int:
    value = (head or {}).get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _shape(head: Mapping[str, Any] | None) -> dict[str, tuple[int, str]] | None:
    """What each list held at the head's write: (length, digest); None when unknown."""
    try:
        shape = json_value(str((head or {})["lists"]))
        shape.setdefault("Sources", [0, _digest([])])  # a head written before item sources
        return {n: (int(shape[n][0]), str(shape[n][1])) for n in GROWING}
    except Exception:  # not as we write it (another writer's, or a ledger hand-edited)
        return None


def row_agreement(
    document: str | None, row: Mapping[str, Any], head: Mapping[str, Any]
) -> Literal["agrees", "behind", "foreign"]:
    """What the session's row is to the entry: the one it names; behind it (missing, an
    earlier row of ours); or another writer's (its upsert leaves our documentDigest)."""
    if document is None:
        return "behind"
    digest = document_digest(document)
    if digest == head.get(ROW_DIGEST_KEY):
        return "agrees"
    if digest == head.get(BUILT_ON_KEY) or row.get(DIGEST_KEY) == digest:
        return "behind"
    return "foreign"


def read_entry(
    session_id: str,
    records: Sequence[tuple[str, str | None, Mapping[str, Any]]],
    row: Mapping[str, Any],
) -> LedgerEntry | None:
    """The entry from the session's records (any order); None without a head or for a tombstone.
    Lost lists: segments missing or not as the head recorded. 0.1.0's head: the row's keys."""
    by_id = {record_id: (doc, meta) for record_id, doc, meta in records}
    found = by_id.get(summary_row_id(session_id))
    if found is None or FORGOTTEN_KEY in (found[1] or {}):
        return None
    try:
        rest = json_value(found[0] or "")
    except ValueError as exc:
        raise UnreadablePriorSummary(f"the ledger entry is not JSON ({exc})") from None
    if not isinstance(rest, dict) or rest.pop("ledgerFormat", None) != LEDGER_FORMAT:
        raise UnreadablePriorSummary(f"the ledger entry is not of format {LEDGER_FORMAT}")
    head = dict(found[1] or {})
    generation, count = _number(head, "generation"), _number(head, "segments")
    named = [segment_id(session_id, generation, seq) for seq in range(count)]
    lists: dict[str, list[Any]] = {name: [] for name in GROWING}
    try:
        for record_id in named:
            for name, items in json_value(by_id[record_id][0] or "").items():
                lists[name].extend(items)
        shape = _shape(head)
        lost = shape is not None and any(_digest(lists[n]) != d for n, (_, d) in shape.items())
    except (KeyError, ValueError, TypeError, AttributeError):
        lost = True
    if lost:
        lists = {name: [] for name in GROWING}
        # the title too: it may quote a memory deleted since (the next pass derives it anew)
        rest = {k: v for k, v in rest.items() if k not in (*COVERAGE_KEYS, "untimedJson", "title")}
    try:
        sections = json_value(rest.get("sectionsJson") or "{}")
        sections.update({title: lists[title] for title in HISTORY_SECTIONS})
    except (TypeError, ValueError, AttributeError):  # not the JSON text of an object
        raise UnreadablePriorSummary("its sectionsJson is not a JSON object") from None
    whole = "summaryFormat" in rest
    own = {} if whole else {k: v for k, v in row.items() if k in READER_ROW_KEYS}
    keys = {
        **own,
        **rest,
        "sectionsJson": compact_json(sections),
        "referencesJson": json.dumps(lists["References"], ensure_ascii=False),
        "itemSourcesJson": json.dumps(lists["Sources"]),
    }
    leftovers = len(set(by_id) - {summary_row_id(session_id), *named})
    return LedgerEntry(head, keys, leftovers, lost, whole)


class FenceUnavailable(ValueError):
    """No fence: the resourceVersion is no comparable integer, or the cluster's id is unreadable."""


class AuthorityConflict(RuntimeError):
    """The row was written by another cluster whose operator still writes the store."""


@dataclass(frozen=True)
class Fence:
    number: int
    authority: str

    def metadata(self) -> dict[str, int | str]:
        return {FENCE_KEY: self.number, AUTHORITY_KEY: self.authority}


def fence_of(resource_version: str) -> int:
    """A grant's fencing number: its resourceVersion, comparable as KEP-5504 defines it."""
    if not _INTEGER.fullmatch(resource_version):
        raise FenceUnavailable(
            f"the API server gave the SessionClaim resourceVersion {resource_version!r}, not a "
            "comparable integer (Kubernetes >= 1.35 guarantees one; every etcd-backed server "
            "has one): writes cannot be fenced"
        )
    return int(resource_version)


def recorded_fence(ledger: Mapping[str, Any] | None) -> Fence | None:
    """The fence in a ledger entry's head; None without one ("" authority: an unknown cluster)."""
    number, authority = (ledger or {}).get(FENCE_KEY), (ledger or {}).get(AUTHORITY_KEY)
    if isinstance(number, bool) or not isinstance(number, int):
        return None
    return Fence(number, authority if isinstance(authority, str) else "")


def admission(found: Fence | None, mine: Fence, grant_is_current: bool) -> Admission:
    """May a writer holding grant `mine` write over a row whose ledger carries `found`? Larger
    than ours: a newer grant took over, or (no grant after ours) our etcd went back in time."""
    if found is None:
        return "write"
    if found.authority != mine.authority:
        return "other-authority"
    if found.number <= mine.number:
        return "write"
    return "ahead-of-authority" if grant_is_current else "newer-grant"


@dataclass(frozen=True)
class AuthorityRecord:
    """A cluster's record in a store's ledger, renewed while its operator runs."""

    uid: str
    holder: str
    renewed_ms: int
    duration_s: float

    def metadata(self) -> dict[str, str | int | float]:
        return {"record": AUTHORITY_RECORD, "authority": self.uid, "holder": self.holder,
                "renewTime": self.renewed_ms, "leaseDurationSeconds": self.duration_s}  # fmt: skip

    @classmethod
    def parse(cls, meta: Mapping[str, Any]) -> AuthorityRecord | None:
        keys = ("authority", "holder", "renewTime", "leaseDurationSeconds")
        try:
            record = cls(*(f(meta[k]) for f, k in zip((str, str, int, float), keys, strict=True)))
        except (KeyError, TypeError, ValueError):
            return None
        return record if record.duration_s > 0 else None


def authority_record_id(uid: str) -> str:
    return f"authority:{uid}"


def still_writing(
    record: AuthorityRecord | None, sighting: Sighting | None, now_s: float
) -> tuple[Sighting | None, bool]:
    """(our sighting, whether `record`'s cluster writes: its record changed within its lease)."""
    if record is None:
        return sighting, False
    seen = sighted(sighting, record.uid, f"{record.holder}@{record.renewed_ms}", now_s)
    return seen, now_s - seen.seen_at_s < record.duration_s


def conflict_message(session_id: str, found: Fence, mine: Fence, record: AuthorityRecord) -> str:
    return (
        f"the row of session {session_id!r} was written by cluster {found.authority} (fence "
        f"{found.number}), whose operator ({record.holder}) still renews its authority in "
        f"this store; this cluster ({mine.authority}) writes nothing over it. Two clusters "
        "write one store: stop one's operator, then run `summaryctl handover` in the other "
        '(docs/operations.md, "Moving a store to another cluster")'
    )


def takeover_message(session_id: str, found: Fence, mine: Fence, verdict: Admission) -> str:
    where = (
        f"another cluster ({found.authority or 'unknown'}), whose operator no longer writes "
        "this store" if verdict == "other-authority" else "a history of this cluster that "
        "its own no longer orders (an etcd restored from a backup?)"
    )  # fmt: skip
    return (
        f"the row of session {session_id!r} was last written under a claim of {where}, fence "
        f"{found.number}; this cluster's claim (fence {mine.number}) took it over, keeping "
        "its summary as history"
    )
