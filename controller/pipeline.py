"""Where a summary is written: one session, prior summary + new memories -> the store.

A backlog is a sequence of passes over chunks bounded by the summarizer's input budget
(core/chunking.py), each building on the previous one and validated before anything is
written, so a failed pass never replaces a good summary; every CHECKPOINT_PASSES passes the
summary so far is written. Blocking I/O: handlers call it in a worker thread.
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

from controller.core.chunking import chunk_memories
from controller.core.coverage import PriorCoverage, digest_of_text, digest_text
from controller.core.item_sources import forget_gone, partly_gone, rekeyed
from controller.core.memories import Memory, is_excluded, placed
from controller.core.merge import derived_title, merge_pass
from controller.core.naming import summary_row_id
from controller.core.provenance import PassTokens, Provenance, added_text, pass_tokens
from controller.core.summary import (
    LegacySummary,
    OtherWriter,
    PriorSummary,
    StructuredSummary,
    validate_summary,
)
from controller.core.visibility import (
    DEFAULT_VISIBILITY,
    VisibilityRules,
    row_visibility,
    union_agents,
)
from controller.redaction import DEFAULT_REDACTION, PassRedaction, Redaction
from controller.store.memory_store import Forgotten, MemoryStore, SessionRows, StoredPrior
from controller.summarizers.contract import Summarizer
from controller.summarizers.extractive import EXTRACTIVE
from controller.upsert import (
    Embedder,
    GroupWrite,
    PhaseTimer,
    RowSeen,
    WriteGuard,
    Written,
    untimed,
    write_alone,
    write_row,
)

OutcomeKind = Literal["summarized", "up-to-date", "not-found", "empty", "forgotten"]


CHECKPOINT_PASSES = 20


class PassInterrupted(Exception):
    """The operator is stopping: a checkpoint was written; the next pass resumes from it."""


@dataclass(frozen=True)
class Outcome:
    kind: OutcomeKind
    session_id: str
    memory_count: int
    summary: StructuredSummary | None = None
    new_memories: int = 0
    passes: int = 0
    last_memory_at_ms: int | None = None
    tokens_used: int = 0  # model tokens (usage.total_tokens) spent by this summarization
    checkpoints: int = 0  # intermediate writes of a long backlog
    # Rows whose time cannot be read (still summarized), and of them those with none at all.
    skipped_memories: int = 0
    missing_times: int = 0
    provenance: Provenance | None = None  # per pass tokens in/out of this summarization
    # Another writer rewrote the row since our last write; its text is carried here.
    other_writer: OtherWriter | None = None
    # Memories that had landed behind the prior's watermark, found and summarized now.
    late_memories: int = 0
    # Set when the write took the row over from a claim history our fences do not order.
    taken_over: str | None = None
    # Rows whose time no clock could have given (a Warning Event names them).
    untrusted_times: tuple[str, ...] = ()
    # Of skipped_memories, those this pass summarized for the first time.
    new_untimed: int = 0
    # Secrets masked by this pass (redaction.py), counted by kind; never the secrets.
    redactions: dict[str, int] = field(default_factory=dict)
    rebuilt: bool = False  # written from the memories alone, the prior's text replaced
    dropped_items: int = 0  # items whose memories were all deleted (core/item_sources.py)
    forgotten: Forgotten | None = None  # what a forget removed (controller/erasure.py)

    @property
    def summary_id(self) -> str:
        return summary_row_id(self.session_id)


@dataclass(frozen=True)
class PassResult:
    """One validated pass: the merged summary and the model tokens it cost."""

    summary: StructuredSummary
    tokens_used: int = 0


def run_pass(
    session_id: str,
    memories: Sequence[Memory],
    current: PriorSummary | None,
    summarizer: Summarizer,
) -> PassResult:
    """One pass: the summarizer proposes, the merge applies, the result is validated
    (SummaryValidationError: lost a prior item, empty, or error text as title)."""
    proposal = summarizer.propose(session_id, memories, current)
    summary = merge_pass(current, proposal.update, memories, session_id=session_id)
    validate_summary(summary, current)
    return PassResult(summary, proposal.tokens_used)


def chunks_for(
    summarizer: Summarizer,
    memories: Iterable[Memory],
    *,
    chunk_tokens: int | None = None,
    chunk_size: int | None = None,
) -> Iterator[list[Memory]]:
    """A backlog's chunks, one pass each, bounded by the summarizer's budgets by default."""
    return chunk_memories(
        memories,
        budget_tokens=chunk_tokens or summarizer.memory_budget_tokens,
        max_memories=chunk_size or summarizer.max_memories_per_pass,
    )


def prior_coverage(prior: StructuredSummary | None) -> PriorCoverage:
    if prior is None:
        return PriorCoverage()
    mark = prior.watermark
    key = (mark.timestamp_ms, mark.memory_id) if mark is not None else None
    return PriorCoverage(
        key,
        prior.coverage,
        prior.memory_count,
        digest_of_text(prior.rows_digest) if prior.rows_digest else None,
        prior.sources_json,
        frozenset(prior.untimed_ids),
    )


def _checkpoint(
    current: StructuredSummary, rows: SessionRows, upto: tuple[int, str] | None
) -> StructuredSummary:
    """The summary so far, covering up to `upto`, with no rows digest (not all rows yet)."""
    coverage, count = rows.coverage(upto)
    update = {"memory_count": count, "coverage": coverage, "rows_digest": None}
    return current.model_copy(update=update)


def _with_session_facts(summary: StructuredSummary, rows: SessionRows) -> StructuredSummary:
    """The session's counts and facts from its full row listing, as neo's writer does."""
    sources = rows.sources
    return summary.model_copy(
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


def _timed(chunks: Iterable[list[Memory]], phase: PhaseTimer) -> Iterator[list[Memory]]:
    """The chunks, each one's (lazy) reading timed as phase read."""
    it = iter(chunks)
    while True:
        with phase("read"):
            chunk = next(it, None)
        if chunk is None:
            return
        yield chunk


def _late_only(chunk: Sequence[Memory], prior_key: tuple[int, str] | None) -> bool:
    """Every memory of the chunk is at or before the prior's watermark: it landed late."""
    return (
        bool(chunk)
        and prior_key is not None
        and all((m.timestamp_ms, m.id) <= prior_key for m in chunk)
    )


@dataclass(frozen=True)
class _Start:
    """What a pass builds on once deleted memories are accounted for (_start)."""

    prior: PriorSummary | None  # masked, rekeyed; without the items of deleted memories
    again: list[Memory]  # memories whose items went with a deleted one's: summarized again
    dropped: int  # items whose memories are all deleted


def _read_prior(
    store: MemoryStore, session_id: str, mask: PassRedaction, rebuild: bool
) -> tuple[StoredPrior, PriorSummary | None]:
    """Step 1: the stored row and the prior this pass builds on, masked under today's rules.
    A rebuild reads no prior: it replaces one that cannot be read too."""
    if rebuild:
        found = StoredPrior(None, store.read_row_state(session_id).digest)
    else:
        found = store.read_prior(session_id)
    prior = rekeyed(found.summary, mask.prior(found.summary))
    if isinstance(prior, StructuredSummary):
        mark = prior.watermark
        if mark and not placed(mark.timestamp_ms, int(time.time() * 1000)):
            # A bad clock's row was its watermark (before memories.placed): read it whole.
            drop = dict.fromkeys(("watermark", "coverage", "rows_digest"))
            prior = prior.model_copy(update=drop)
    return found, prior


def _start(
    store: MemoryStore,
    session_id: str,
    prior: PriorSummary | None,
    rows: SessionRows,
    summarizer: Summarizer,
    mask: PassRedaction,
    excluded: Callable[[Memory], bool],
    guard: WriteGuard | None,
    phase: PhaseTimer,
) -> _Start | Outcome:
    """Step 2: the items of deleted memories dropped (or summarized again from the living
    ones), or the pass's outcome when no memory of the session is left."""
    structured = prior if isinstance(prior, StructuredSummary) else None
    gone_all = rows.total == 0  # no memory carries the session's id (untimed ones counted)
    if gone_all and structured is None:
        return Outcome("not-found", session_id, 0)
    dropped, again = 0, list[Memory]()
    if structured is not None and rows.base is None:  # every row listed: who is gone?
        living = [*(row_id for _, row_id in rows.keys), *rows.untimed]
        if not summarizer.one_memory_per_item:
            structured, ids, dropped = partly_gone(structured, living)
            with phase("read"):
                again = [m for m in store.memories_by_id(ids, mask) if not excluded(m)]
        retitle = functools.partial(derived_title, session_id=session_id)
        kept, gone = forget_gone(structured, living, retitle)
        dropped += gone
        prior = structured = kept  # the same object when nothing went: may be up to date
    if gone_all and structured is not None and structured.is_empty():
        if guard is not None:  # every item went with its memories: nothing is left to keep
            guard.admit(store.read_row_state(session_id).fence)
        store.drop_summary(session_id)
        return Outcome("not-found", session_id, 0, dropped_items=dropped)
    return _Start(prior, again, dropped)


def _idle(
    session_id: str, found: StoredPrior, prior: PriorSummary | None, rows: SessionRows
) -> Outcome | None:
    """Step 3: the outcome of a pass with nothing to write (up to date, or no memory to
    summarize and no prior), else None."""
    last_ms = rows.newest.timestamp_ms if rows.newest else None
    skipped = len(rows.untimed)
    missing = sum(value is None for value in rows.untimed_values.values())
    if (
        isinstance(prior, StructuredSummary)
        and prior.other_writer is None
        and found.row_current
        and prior is found.summary  # nothing masked anew, dropped or set aside
        and rows.selected == 0
        and prior.memory_count == rows.total
    ):
        return Outcome("up-to-date", session_id, rows.total, prior, last_memory_at_ms=last_ms,
                       skipped_memories=skipped, missing_times=missing)  # fmt: skip
    if prior is None and not rows.included:
        return Outcome("empty", session_id, rows.total, last_memory_at_ms=last_ms,
                       skipped_memories=skipped, missing_times=missing)  # fmt: skip
    return None


def summarize_session(
    store: MemoryStore,
    session_id: str,
    *,
    embed: Embedder,
    writer: str,
    trigger: str,
    excluded_types: Sequence[str] = (),
    summarizer: Summarizer = EXTRACTIVE,
    chunk_size: int | None = None,
    chunk_tokens: int | None = None,
    checkpoint_passes: int = CHECKPOINT_PASSES,
    guard: WriteGuard | None = None,
    writer_object: str = "",
    visibility: VisibilityRules = DEFAULT_VISIBILITY,
    stop: Callable[[], bool] | None = None,
    group: GroupWrite = write_alone,
    redaction: Redaction = DEFAULT_REDACTION,
    rebuild: bool = False,
    phase: PhaseTimer = untimed,
) -> Outcome:
    """Brings the session's stored summary up to date with its memories, in steps: read
    the prior (_read_prior), list the rows, account for deleted memories (_start), stop
    when there is nothing to write (_idle), summarize the chunks, validate, write.

    Reads the memories after the prior's watermark and, at or before it, the ranges the
    prior's coverage does not match (core/coverage.py), in chunks of at most chunk_size
    memories and chunk_tokens tokens. guard (the session's claim) is checked between
    passes and right before every upsert. stop: asked between chunks; when True the summary
    so far is written and PassInterrupted raised. group: writes the row with other passes'
    rows. A row another writer rewrote, or one masked under
    other rules, is written again even with nothing new. rebuild: the prior is set aside
    (spec.action Rebuild). phase: times the steps (tracing.py).
    """
    mask = PassRedaction(redaction)
    with phase("read"):
        found, prior = _read_prior(store, session_id, mask, rebuild)
    structured = prior if isinstance(prior, StructuredSummary) else None
    other = structured.other_writer if structured else None
    # The rows stream: the pass holds one chunk of memories at a time, never the session.
    excluded = functools.partial(is_excluded, excluded_types=excluded_types)
    with phase("read"):
        rows = store.session_rows(session_id, prior_coverage(structured), exclude=excluded,
                                  mask=mask)  # fmt: skip
    start = _start(store, session_id, prior, rows, summarizer, mask, excluded, guard, phase)
    if isinstance(start, Outcome):
        return start
    prior, again = start.prior, start.again
    structured = prior if isinstance(prior, StructuredSummary) else None
    if (idle := _idle(session_id, found, prior, rows)) is not None:
        return idle

    # The row as this pass last saw it: if another writer changes it, we do not overwrite.
    seen = RowSeen(found.row_digest)
    spent: list[PassTokens] = []
    seen_by = row_visibility(rows.sources, visibility)

    def write(summary: StructuredSummary) -> Written:
        return write_row(
            store,
            summary.model_copy(update={"masked_with": redaction.fingerprint}),
            embed=embed,
            writer=writer,
            trigger=trigger,
            guard=guard,
            writer_object=writer_object,
            provenance=Provenance(list(spent)),
            visibility=seen_by,
            seen=seen,
            group=group,
            phase=phase,
        )

    # Memories whose items went with a deleted one's are summarized again first (partly_gone).
    new = rows.included  # memories to summarize, in (timestamp, id) order from rows.memories
    stream = itertools.chain(again, rows.memories)
    chunks = chunks_for(summarizer, stream, chunk_tokens=chunk_tokens, chunk_size=chunk_size)
    current: StructuredSummary | LegacySummary | None = prior
    passes = tokens = checkpoints = 0
    read_upto: tuple[int, str] | None = None
    before = structured  # what the last pass built on
    for chunk in _timed(chunks, phase) if new or again else iter([[]]):
        if guard is not None:
            guard.check()  # a writer that lost its claim stops spending model calls
        if passes and stop is not None and stop():
            assert isinstance(current, StructuredSummary) and current.watermark is not None
            write(_checkpoint(current, rows, read_upto))
            raise PassInterrupted(
                f"stopped after {passes} pass(es) of session {session_id!r}; what they "
                "covered is written"
            )
        if passes and checkpoint_passes and passes % checkpoint_passes == 0:
            assert isinstance(current, StructuredSummary) and current.watermark is not None
            write(_checkpoint(current, rows, read_upto))
            checkpoints += 1
        with phase("summarized"):
            result = run_pass(session_id, chunk, current, summarizer)
        summary = result.summary
        if _late_only(chunk, rows.prior_key) and isinstance(current, StructuredSummary):
            # Late memories are history: the latest state stays the latest memories'.
            state = {"Current State": list(current.sections["Current State"])}
            summary = summary.model_copy(update={"sections": {**summary.sections, **state}})
        before = current if isinstance(current, StructuredSummary) else None
        spent.append(pass_tokens(chunk, "", added_text(before, summary)))
        current, passes, tokens = summary, passes + 1, tokens + result.tokens_used
        if chunk:
            read_upto = (chunk[-1].timestamp_ms, chunk[-1].id)
    assert isinstance(current, StructuredSummary)
    # What the summary covers: every row of the session, including excluded types.
    with phase("summarized"):
        final = _with_session_facts(current, rows)
        validate_summary(final, before)
    written = write(final)
    return Outcome(
        "summarized",
        session_id,
        rows.total,
        final.model_copy(update={"summarized_at_ms": written.at_ms}),
        new,
        passes,
        rows.newest.timestamp_ms if rows.newest else None,
        tokens,
        checkpoints,
        skipped_memories=len(rows.untimed),
        missing_times=sum(value is None for value in rows.untimed_values.values()),
        provenance=Provenance(spent).with_document(written.document),
        other_writer=other,
        late_memories=rows.late,
        untrusted_times=rows.untrusted,
        new_untimed=len(set(rows.untimed) - set(structured.untimed_ids if structured else ())),
        redactions=mask.counts(),
        rebuilt=rebuild,
        dropped_items=start.dropped,
    )
