"""Where a summary is written: one session, prior summary + new memories -> the store. A pass
is steps, each a function of what the last returned: _read, _start, _summarized per chunk,
_final, then the store's write_row. Nothing is written before it validates, so a failed pass
never replaces a good summary. Blocking I/O: handlers call it in a worker thread."""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from controller.core.chunking import chunk_memories
from controller.core.coverage import PriorCoverage, digest_of_text, digest_text
from controller.core.item_sources import forget_gone, partly_gone, rekeyed
from controller.core.memories import Memory, is_excluded, placed
from controller.core.merge import derived_title, merge_pass
from controller.core.summary import (
    OtherWriter,
    PriorSummary,
    StructuredSummary,
    validate_summary,
)
from controller.core.summary_row import PassTokens, Provenance, added_text, pass_tokens
from controller.core.visibility import (
    DEFAULT_VISIBILITY,
    VisibilityRules,
    row_visibility,
    union_agents,
)
from controller.redaction import DEFAULT_REDACTION, PassRedaction, Redaction
from controller.store.memory_store import (
    Embedder,
    Forgotten,
    GroupWrite,
    MemoryStore,
    PhaseTimer,
    SessionRows,
    StoredPrior,
    WriteGuard,
    Written,
    untimed,
    write_alone,
    write_row,
)
from controller.summarizers.contract import Summarizer
from controller.summarizers.extractive import EXTRACTIVE

OutcomeKind = Literal["summarized", "up-to-date", "not-found", "empty", "forgotten"]


CHECKPOINT_PASSES = 20  # a long backlog's summary so far is written every this many passes


class PassInterrupted(Exception):
    """The operator is stopping: a checkpoint was written; the next pass resumes from it."""


@dataclass(frozen=True)
class Backends:
    """What a pass runs with: the operator's from runtime.SummarizerParts, summaryctl's from its
    settings, both from a SessionSummarizer's spec (backends.py)."""

    store: MemoryStore
    embed: Embedder
    excluded_types: Sequence[str] = ()
    summarizer: Summarizer = EXTRACTIVE
    visibility: VisibilityRules = DEFAULT_VISIBILITY
    redaction: Redaction = DEFAULT_REDACTION


@dataclass(frozen=True)
class Outcome:
    kind: OutcomeKind
    session_id: str
    memory_count: int
    summary: StructuredSummary | None = None
    new_memories: int = 0
    passes: int = 0
    last_memory_at_ms: int | None = None
    tokens_used: int = 0  # model tokens (usage.total_tokens)
    checkpoints: int = 0  # intermediate writes of a long backlog
    skipped_memories: int = 0  # rows whose time cannot be read (still summarized)
    missing_times: int = 0  # of skipped_memories, those with no time at all
    provenance: Provenance | None = None
    other_writer: OtherWriter | None = None  # rewrote the row since our last write
    late_memories: int = 0  # landed behind the prior's watermark, summarized now
    taken_over: str | None = None  # from a claim history our fences do not order
    untrusted_times: tuple[str, ...] = ()  # rows whose time no clock could have given
    new_untimed: int = 0  # of skipped_memories, those summarized for the first time
    redactions: dict[str, int] = field(default_factory=dict)  # secrets masked, by kind
    dropped_items: int = 0  # items whose memories were all deleted (core/item_sources.py)
    forgotten: Forgotten | None = None  # what a forget removed (handlers/session_summary.py)


def run_pass(
    session_id: str,
    memories: Sequence[Memory],
    current: PriorSummary | None,
    summarizer: Summarizer,
    mask: PassRedaction | None = None,
) -> tuple[StructuredSummary, int]:
    """One chunk: proposed, masked, merged and validated; the summary and its model tokens."""
    proposal = summarizer.propose(session_id, memories, current)
    update = (mask or PassRedaction()).proposal(proposal.update)
    summary = merge_pass(current, update, memories, session_id=session_id)
    validate_summary(summary, current)
    return summary, proposal.tokens_used


def prior_coverage(prior: StructuredSummary | None) -> PriorCoverage:
    if prior is None:
        return PriorCoverage()
    mark = prior.watermark
    key = (mark.timestamp_ms, mark.memory_id) if mark is not None else None
    return PriorCoverage(
        key,
        prior.coverage,
        prior.memory_count,
        digest_of_text(prior.rows_digest),
        prior.sources_json,
        frozenset(prior.untimed_ids),
    )


def _final(done: _Progress, rows: SessionRows) -> StructuredSummary:
    """Step 4: counts and facts from the full row listing (excluded types too, as neo's
    writer does), validated against what the last pass built on."""
    assert isinstance(done.summary, StructuredSummary)
    sources = rows.sources
    final = done.summary.model_copy(
        update={
            "memory_count": rows.total,
            "watermark": rows.newest,
            "first_memory_at_ms": sources.first_ms,
            "last_memory_at_ms": sources.last_ms,
            "participating_agents": union_agents([], sources.names),
            "models": sorted(sources.models),
            "tools_used": sorted(sources.tools),
            "total_tool_calls": sources.tool_calls,
            "coverage": rows.coverage()[0],
            "rows_digest": digest_text(rows.digest),
            "sources_json": sources.to_json(),
            "untimed_ids": rows.untimed,
        }
    )
    validate_summary(final, done.before)
    return final


@dataclass(frozen=True)
class _Read:
    """The stored row, the prior (masked under today's rules; none on a rebuild) and the
    session's rows (listed; memories read lazily)."""

    session_id: str
    found: StoredPrior
    prior: PriorSummary | None
    rows: SessionRows

    def outcome(self, kind: OutcomeKind, summary: StructuredSummary | None = None) -> Outcome:
        return Outcome(
            kind,
            self.session_id,
            self.rows.total,
            summary,
            last_memory_at_ms=self.rows.newest.timestamp_ms if self.rows.newest else None,
            skipped_memories=len(self.rows.untimed),
            missing_times=sum(value is None for value in self.rows.untimed_values.values()),
        )


@dataclass(frozen=True)
class _Progress:
    """The summary so far: what _start and each chunk's pass return, the next builds on."""

    summary: PriorSummary | None  # first the prior, without the items of deleted memories
    digest: str | None  # the row's document as this pass last saw (or wrote) it
    before: StructuredSummary | None  # what the last pass built on
    again: tuple[Memory, ...] = ()  # memories whose items went with a deleted one's
    dropped: int = 0  # items whose memories are all deleted
    spent: tuple[PassTokens, ...] = ()  # tokens in and out of each pass
    tokens: int = 0  # model tokens
    upto: tuple[int, str] | None = None  # the last memory summarized
    checkpoints: int = 0


def _read(
    store: MemoryStore,
    session_id: str,
    mask: PassRedaction,
    excluded: Callable[[Memory], bool],
    rebuild: bool,
    phase: PhaseTimer,
) -> _Read:
    """Step 1. A rebuild reads no prior: it replaces one that cannot be read too."""
    with phase("read"):
        if rebuild:
            found = StoredPrior(None, store.read_row_state(session_id).digest)
        else:
            found = store.read_prior(session_id)
        prior = rekeyed(found.summary, mask.prior(found.summary))
        if isinstance(prior, StructuredSummary):
            mark = prior.watermark
            if mark and not placed(mark.timestamp_ms, int(time.time() * 1000)):
                # a bad clock's row is the watermark: read the session whole
                drop = dict.fromkeys(("watermark", "coverage", "rows_digest"))
                prior = prior.model_copy(update=drop)
        covered = prior_coverage(prior if isinstance(prior, StructuredSummary) else None)
        rows = store.session_rows(session_id, covered, exclude=excluded, mask=mask)
    return _Read(session_id, found, prior, rows)


def _start(
    store: MemoryStore,
    read: _Read,
    summarizer: Summarizer,
    again_of: Callable[[list[str]], list[Memory]],
    guard: WriteGuard | None,
) -> _Progress | Outcome:
    """Step 2: the items of deleted memories dropped (or, read by again_of, summarized
    again from the living ones), or the pass's outcome when it has nothing to write."""
    prior, rows, session_id = read.prior, read.rows, read.session_id
    structured = prior if isinstance(prior, StructuredSummary) else None
    gone_all = rows.total == 0  # no memory carries the session's id (untimed ones counted)
    if gone_all and structured is None:
        return read.outcome("not-found")
    dropped, again = 0, list[Memory]()
    if structured is not None and rows.base is None:  # every row listed: who is gone?
        living = [*(row_id for _, row_id in rows.keys), *rows.untimed]
        if not summarizer.one_memory_per_item:
            structured, ids, dropped = partly_gone(structured, living)
            again = again_of(ids)
        retitle = functools.partial(derived_title, session_id=session_id)
        kept, gone = forget_gone(structured, living, retitle)
        dropped += gone
        prior = structured = kept  # the same object when nothing went: may be up to date
    if structured is not None and structured.is_empty() and not (rows.included or again):
        found = store.read_row_state(session_id)  # what the drop deletes, and nothing since
        if guard is not None:  # every item went with its memories: nothing is left to keep
            guard.admit(found.fence)
        store.drop_summary(session_id, found, guard.check if guard is not None else None)
        # no rows at all, or only rows never summarized (excluded types)
        return replace(read.outcome("not-found" if gone_all else "empty"), dropped_items=dropped)
    if (
        isinstance(prior, StructuredSummary)
        and prior.other_writer is None
        and read.found.row_current
        and prior is read.found.summary  # nothing masked anew, dropped or set aside
        and rows.selected == 0
        and prior.memory_count == rows.total
    ):
        return read.outcome("up-to-date", prior)
    if prior is None and not rows.included:
        return read.outcome("empty")
    return _Progress(prior, read.found.row_digest, structured, tuple(again), dropped)


def _summarized(
    done: _Progress, chunk: list[Memory], summarizer: Summarizer, read: _Read, mask: PassRedaction
) -> _Progress:
    """Step 3, per chunk. A chunk all at or before the prior's watermark landed late: it
    is history, and Current State stays the latest memories'."""
    summary, tokens = run_pass(read.session_id, chunk, done.summary, summarizer, mask)
    before = done.summary if isinstance(done.summary, StructuredSummary) else None
    mark = read.rows.prior_key
    late = bool(chunk) and mark is not None and all((m.timestamp_ms, m.id) <= mark for m in chunk)
    if before is not None and late:
        state = {"Current State": list(before.sections["Current State"])}
        summary = summary.model_copy(update={"sections": {**summary.sections, **state}})
    return replace(
        done,
        summary=summary,
        before=before,
        spent=(*done.spent, pass_tokens(chunk, added_text(before, summary))),
        tokens=done.tokens + tokens,
        upto=(chunk[-1].timestamp_ms, chunk[-1].id) if chunk else done.upto,
    )


def summarize_session(
    backends: Backends,
    session_id: str,
    *,
    writer: str,
    trigger: str,
    chunk_size: int | None = None,
    checkpoint_passes: int = CHECKPOINT_PASSES,
    guard: WriteGuard | None = None,
    stop: Callable[[], bool] | None = None,
    group: GroupWrite = write_alone,
    rebuild: bool = False,
    phase: PhaseTimer = untimed,
) -> Outcome:
    """Brings the session's stored summary up to date with its memories. stop is asked
    between chunks: when True the summary so far is written and PassInterrupted raised."""
    store, summarizer, redaction = backends.store, backends.summarizer, backends.redaction
    mask = PassRedaction(redaction)
    excluded = functools.partial(is_excluded, excluded_types=backends.excluded_types)

    def again_of(ids: list[str]) -> list[Memory]:
        with phase("read"):
            return [m for m in store.memories_by_id(ids, mask) if not excluded(m)]

    read = _read(store, session_id, mask, excluded, rebuild, phase)
    done = _start(store, read, summarizer, again_of, guard)
    if isinstance(done, Outcome):
        return done
    rows, seen_by = read.rows, row_visibility(read.rows.sources, backends.visibility)

    def write(summary: StructuredSummary, done: _Progress) -> Written:
        return write_row(
            store,
            summary.model_copy(update={"masked_with": redaction.fingerprint}),
            embed=backends.embed,
            writer=writer,
            trigger=trigger,
            guard=guard,
            provenance=Provenance(list(done.spent)),
            visibility=seen_by,
            seen=done.digest,
            group=group,
            phase=phase,
        )

    # Memories whose items went with a deleted one's are summarized first (partly_gone).
    chunks = chunk_memories(
        itertools.chain(done.again, rows.memories()),
        budget_tokens=summarizer.memory_budget_tokens,
        max_memories=chunk_size or summarizer.max_memories_per_pass,
    )

    def next_chunk() -> list[Memory] | None:  # the rows are read lazily, in this phase
        with phase("read"):
            return next(chunks, None)

    for chunk in iter(next_chunk, None) if rows.included or done.again else iter([[]]):
        if guard is not None:
            guard.check()  # a writer that lost its claim stops spending model calls
        passes = len(done.spent)
        stopping = bool(passes and stop is not None and stop())
        if stopping or (passes and checkpoint_passes and passes % checkpoint_passes == 0):
            assert isinstance(done.summary, StructuredSummary)
            assert done.summary.watermark is not None
            # The summary so far, covering up to done.upto; no rows digest (not all rows yet).
            coverage, count = rows.coverage(done.upto)
            update = {"memory_count": count, "coverage": coverage, "rows_digest": None}
            digest = write(done.summary.model_copy(update=update), done).digest
            done = replace(done, digest=digest, checkpoints=done.checkpoints + 1)
        if stopping:
            raise PassInterrupted(
                f"stopped after {passes} pass(es) of session {session_id!r}; what they "
                "covered is written"
            )
        with phase("summarized"):
            done = _summarized(done, chunk, summarizer, read, mask)
    with phase("summarized"):
        final = _final(done, rows)
    written = write(final, done)
    prior = read.prior if isinstance(read.prior, StructuredSummary) else None  # as read
    return replace(
        read.outcome("summarized", final.model_copy(update={"summarized_at_ms": written.at_ms})),
        new_memories=rows.included,
        passes=len(done.spent),
        tokens_used=done.tokens,
        checkpoints=done.checkpoints,
        provenance=Provenance(list(done.spent)).with_document(written.document),
        other_writer=prior.other_writer if prior else None,
        late_memories=rows.late,
        untrusted_times=rows.untrusted,
        new_untimed=len(set(rows.untimed) - set(prior.untimed_ids if prior else ())),
        redactions=mask.counts(),
        dropped_items=done.dropped,
    )
