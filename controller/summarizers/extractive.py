"""The embedded default summarizer: extractive, deterministic, no model. Pure.

Sorts the memories' sentences into the sections by cue words; new items follow the prior's,
deduplicated, and Current State is replaced. Every new item is kept: the document is fitted
to its bound (controller/core/document.py).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

from controller.core.facts import fact_tokens
from controller.core.item_sources import identity
from controller.core.memories import Memory, memory_sort_key
from controller.core.merge import PassUpdate
from controller.core.quoting import as_item, quote_if_needed
from controller.core.summary import (
    HISTORY_SECTIONS,
    ITEM_MAX,
    SECTION_TITLES,
    TITLE_MAX,
    Category,
    LegacySummary,
    PriorSummary,
    StructuredSummary,
    SummaryItem,
    fallback_title,
    title_problem,
)
from controller.core.text import ms_to_rfc3339
from controller.summarizers.contract import Proposal
from controller.summarizers.extractive_cues import (
    ACTION_CUES,
    CATEGORY_PHRASES,
    CORRECTION_CUES,
    DECISION_CUES,
    DESIGN_CUES,
    TOKEN,
    phrase_technologies,
    token_facts,
)
from controller.summarizers.extractive_text import clean, sentences, shorten

TITLE_CHARS = 80
STATE_SENTENCES = 3
AGENT_SENTENCES = 8

REQUESTS, QUESTIONS, DESIGN, CORRECTIONS, STATE = SECTION_TITLES


_COUNTS_LINE = re.compile(r"^\d+ memories so far\b")


# -- extraction ----------------------------------------------------------------------------


class _Section:
    """A history section being filled: carried items first, then new ones. New items are
    compared as the merge stores them (quoted), so a repeat is not added twice but is
    proposed again (`repeats`) for the merge to record its memory."""

    def __init__(self, carried: Sequence[SummaryItem]) -> None:
        self.items, self.carried, self.repeats = list(carried), len(carried), list[str]()
        self.keys = {identity(item.text) for item in self.items}

    def offer(self, text: str) -> None:
        item = shorten(text, ITEM_MAX)
        key = identity(as_item(item))
        if key and key not in self.keys:
            self.keys.add(key)
            self.items.append(SummaryItem(text=item))
        elif key in self.keys:
            self.repeats.append(item)

    def proposed(self) -> list[str]:
        return [item.text for item in self.items[self.carried :]] + self.repeats


def _extract_into(sections: dict[str, _Section], memory: Memory) -> None:
    """Sorts one memory's sentences into the history sections. What the user stated in
    passing is kept with the requests: the next agent asks about it."""
    requests, questions = sections[REQUESTS], sections[QUESTIONS]
    design, corrections = sections[DESIGN], sections[CORRECTIONS]
    for i, sentence in enumerate(sentences(memory.prompt)):
        low = sentence.lower()
        if i == 0:
            (corrections if CORRECTION_CUES.search(low) else requests).offer(sentence)
        elif sentence.endswith("?"):
            questions.offer(sentence)
        elif CORRECTION_CUES.search(low):
            corrections.offer(sentence)
        elif DESIGN_CUES.search(low):
            design.offer(sentence)
        else:  # what the user stated: every turn, both sides, is history
            requests.offer(sentence)
    response = memory.response
    if not (memory.prompt.strip() or memory.thought.strip() or response.strip()):
        response = memory.document  # a row only its document describes (a plan)
    said = sentences(response)
    for sentence in _said_by_agent(said):
        questions.offer(sentence)
    for sentence in sentences(memory.thought) + said:
        low = sentence.lower()
        if DECISION_CUES.search(low):
            questions.offer(sentence)
        elif DESIGN_CUES.search(low):
            design.offer(sentence)


def _said_by_agent(response: list[str]) -> list[str]:
    """The response's AGENT_SENTENCES most salient sentences reporting an action (ACTION_CUES)
    or a fact, in order: a bound per turn, so a fifty-name list adds few items."""
    found = []
    for n, sentence in enumerate(response):
        acted, facts = ACTION_CUES.search(sentence.lower()) is not None, len(fact_tokens(sentence))
        if acted or facts:
            found.append((not acted, -facts, n, sentence))
    return [
        sentence for *_, sentence in sorted(sorted(found)[:AGENT_SENTENCES], key=lambda f: f[2])
    ]


def _category(texts: Iterable[str], fallback: Category) -> Category:
    """Keyword vote; no votes or a tie keeps the fallback (the prior's category or other)."""
    low = "\n".join(texts).lower()
    votes: dict[Category, int] = {
        category: sum(low.count(phrase) for phrase in phrases)
        for category, phrases in CATEGORY_PHRASES.items()
    }
    for word, count in Counter(low.split()).items():  # tokenize each distinct word once
        for token in TOKEN.findall(word):
            category = token_facts(token)[1]
            if category is not None:
                votes[category] = votes.get(category, 0) + count
    best = max(votes.values(), default=0)
    winners = [c for c, v in votes.items() if v == best]
    return winners[0] if best > 0 and len(winners) == 1 else fallback


def _technologies(memories: Sequence[Memory]) -> set[str]:
    text = "\n".join(f"{m.prompt}\n{m.thought}\n{m.response}" for m in memories).lower()
    found = phrase_technologies(text)
    for word in set(text.split()):  # splitting on spaces first: tokenize each word once
        for token in TOKEN.findall(word):
            technology = token_facts(token)[0]
            if technology is not None:
                found.add(technology)
    return found


def _title(requests: Sequence[SummaryItem], session_id: str) -> str:
    """The first request that reads as a title, at most TITLE_CHARS, no trailing punctuation."""
    for item in requests:
        title = item.text
        if len(title) > TITLE_CHARS:
            title = title[:TITLE_CHARS]
            space = title.rfind(" ")
            title = title[:space] if space >= TITLE_CHARS // 2 else title
        title = title.rstrip(" .!?…:;,-")
        if title and title_problem(title) is None and quote_if_needed(item.text) == item.text:
            return title
    return fallback_title(session_id)


def _current_state(
    new: Sequence[Memory],
    prior_state: Sequence[SummaryItem],
    memory_count: int,
    last_ms: int | None,
) -> list[SummaryItem]:
    """The last response's first sentences and the counts; replaced each pass."""
    if not new:
        return list(prior_state)
    last_response = next((m.response for m in reversed(new) if sentences(m.response)), None)
    if last_response is not None:
        state = [SummaryItem(text=s) for s in sentences(last_response)[:STATE_SENTENCES]]
    else:  # nothing new was said: keep what was true, refresh the counts
        state = [item for item in prior_state if not _COUNTS_LINE.match(item.text)]
    counts = f"{memory_count} memories so far"
    if last_ms is not None:
        counts += f", the latest at {ms_to_rfc3339(last_ms)}"
    return [*state, SummaryItem(text=counts + ".")]


# -- scores (0..100, simple on purpose; the model backend may do better) --------------------

CATEGORY_IMPACT: MappingProxyType[str, int] = MappingProxyType({
    "new-app": 25, "feature": 20, "bugfix": 15, "refactoring": 10, "documentation": 5,
    "analysis": 5, "other": 0})  # fmt: skip


def _clamp(value: float) -> int:
    return max(0, min(100, round(value)))


def _scores(
    sections: dict[str, list[SummaryItem]],
    category: str,
    new: Sequence[Memory],
    base: StructuredSummary | None,
    memory_count: int,
    tools: Sequence[str],
    tool_calls: int,
) -> dict[str, int]:
    """quality: 100 - 10 per correction. productivity: share of prompts that got a response,
    averaged over all passes by memory count. impact: requests made plus a category bonus.
    complexity: distinct tools and session length."""
    prompts = sum(1 for m in new if m.prompt.strip())
    answered = sum(1 for m in new if m.prompt.strip() and m.response.strip())
    pass_productivity = 100 * answered / prompts if prompts else 50
    if base is not None and base.memory_count and memory_count:
        weight = base.memory_count / memory_count
        productivity = base.productivity * weight + pass_productivity * (1 - weight)
    else:
        productivity = base.productivity if base is not None and not new else pass_productivity
    requests = len(sections[REQUESTS])
    return {
        "quality": _clamp(100 - 10 * len(sections[CORRECTIONS])),
        "productivity": _clamp(productivity),
        "impact": _clamp(
            20 + 5 * min(requests, 10) + CATEGORY_IMPACT[category] + min(10, tool_calls // 10)
        ),
        "complexity": _clamp(10 + 6 * min(len(tools), 8) + min(memory_count, 40)),
    }


# -- the pass ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExtractiveSummarizer:
    """The embedded default Summarizer (controller.summarizers.contract): no model, no
    network, deterministic. It reads whatever it is given, so its chunk bounds only cap how
    much one pass holds."""

    memory_budget_tokens: ClassVar[int] = 100_000
    max_memories_per_pass: ClassVar[int] = 400
    one_memory_per_item: ClassVar[bool] = True

    def propose(
        self, session_id: str, memories: Sequence[Memory], prior: PriorSummary | None
    ) -> Proposal:
        return Proposal(propose_extractive(session_id, memories, prior))


EXTRACTIVE = ExtractiveSummarizer()


def propose_extractive(
    session_id: str,
    memories: Sequence[Memory],
    prior: PriorSummary | None = None,
) -> PassUpdate:
    """What one incremental pass finds: the given memories sorted into new items per section.
    A late memory (at or before the prior's watermark) adds its facts like any other; what
    repeats an item adds nothing. Current State and the counts follow only the memories after
    the watermark. Deterministic.
    """
    base = prior if isinstance(prior, StructuredSummary) else None
    legacy = prior if isinstance(prior, LegacySummary) else None
    covered = base.watermark if base is not None else None
    given = sorted(memories, key=memory_sort_key)
    new = [m for m in given if covered is None or covered.after(m)]

    # A legacy prior has no items: merge_pass carries its text, verbatim, as legacy_text.
    carried = {title: list(base.sections[title]) if base else [] for title in HISTORY_SECTIONS}
    filling = {title: _Section(carried[title]) for title in carried}
    for memory in given:
        _extract_into(filling, memory)
    sections = {title: section.items for title, section in filling.items()}

    memory_count = (base.memory_count if base else 0) + len(new)
    known = (base.last_memory_at_ms if base else None, new[-1].timestamp_ms if new else None)
    last_ms = max((ms for ms in known if ms is not None), default=None)
    sections[STATE] = _current_state(
        new, base.sections[STATE] if base else [], memory_count, last_ms
    )

    tools = sorted({t for m in new for t in m.tools_used} | set(base.tools_used if base else []))
    tool_calls = (base.total_tool_calls if base else 0) + sum(m.tool_calls for m in new)
    category: Category = base.category if base else "other"
    if new:  # the vote sees the requests so far and the new prompts
        votes = [i.text for i in carried[REQUESTS]] + [m.prompt for m in new]
        category = _category(votes, category)

    if legacy is not None and legacy.title and title_problem(legacy.title) is None:
        # merge_pass still refuses it if it reads as an instruction
        title = shorten(clean(legacy.title), TITLE_MAX)
    else:
        title = _title(sections[REQUESTS], session_id)

    # What this pass found, applied by the merge both backends share (controller.core.merge):
    # carried items verbatim, new ones appended, Current State replaced, counts computed.
    return PassUpdate(
        user_requests=filling[REQUESTS].proposed(),
        questions_and_decisions=filling[QUESTIONS].proposed(),
        design_choices=filling[DESIGN].proposed(),
        corrections_and_feedback=filling[CORRECTIONS].proposed(),
        current_state=[item.text for item in sections[STATE]] if new else None,
        title=title,
        category=category,
        technologies=sorted(_technologies(new)),
        **_scores(sections, category, new, base, memory_count, tools, tool_calls),
    )
