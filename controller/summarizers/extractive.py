"""The embedded default summarizer: extractive, deterministic, no model. Pure. Sentences go
to the sections by cue words; new items follow the prior's, deduplicated; Current State is
replaced. Every new item is kept: the document is fitted to its bound (core/document.py)."""

from __future__ import annotations

import re
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar, cast

from controller.core.document import fact_tokens
from controller.core.item_sources import identity
from controller.core.memories import Memory, memory_sort_key, render_interaction_document
from controller.core.merge import HISTORY_KEYS, PassUpdate
from controller.core.quoting import as_item, quote_if_needed
from controller.core.references import CODE_BLOCK
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
from controller.core.text import PLACEHOLDER, cut, ms_to_rfc3339
from controller.summarizers.contract import Proposal

# Cue words, matched in lower-cased text. Patterns have no leading \b where a cue is long enough
# to be unambiguous: a pattern that starts with a literal is scanned much faster by `re`.

DECISION_CUES = re.compile(
    r"decided|decide to|we will\b|we'll\b|let's\b|going with\b|go with\b|\bchose|opted\b|"
    r"instead of\b|will use\b|settled on\b"
)
DESIGN_CUES = re.compile(
    r"design|architect|pattern|schema|\bapis?\b|interface|trade-?off|data model|abstraction|"
    r"endpoint|protocol|\buse [\w.-]+ (?:for|as)\b"
)
# "fix" alone is a request ("fix the login crash"); only "fix that/this/it" corrects the agent.
CORRECTION_CUES = re.compile(
    r"^(?:no|nope)\b|\b(?:actually|wrong|instead|don't|dont|do not|that's not|that is not|"
    r"revert\w*|undo|should have|shouldn't have|not what i|fix (?:that|this|it))\b"
)
# What the agent did or found: a verb of doing in the past, or a state it reports ("X now
# skips the cache"). Matched in lower-cased response sentences.
ACTION_CUES = re.compile(
    r"\b(?:add|mov|creat|fix|updat|renam|remov|delet|replac|implement|chang|refactor|extract|"
    r"merg|install|configur|enabl|disabl|migrat|convert|introduc|dropp|bump|committ|appli|"
    r"wrapp|pinn|revert|test|measur|pass|document|resolv|clean)ed\b"
    r"|\b(?:wrote|rewrote|ran|made|built|set up|split|found|now)\b"
)
# A sentence that opens with a past-tense verb ("Pushed the branch", "I deployed it") reports
# what the agent did, whichever verb; "-eed" words (need, speed, indeed) are not verbs in -ed.
ACTION_OPENER = re.compile(r"[\W\d_]*(?:(?:i|we|then|also|and|so|finally)\s+)*[a-z]{2,}(?<!e)ed\b")

# Words are matched a token at a time: one simple regex, not one per cue, keeps a pass fast.
TOKEN = re.compile(r"[a-z0-9][a-z0-9_.+#-]*")
CATEGORY_WORDS = re.compile(
    r"(?P<bugfix>bugs?|buggy|fix\w*|errors?|crash\w*|fail\w*|broken|regressions?)"
    r"|(?P<feature>add|adds|added|adding|implement\w*|features?|support\w*)"
    r"|(?P<refactoring>refactor\w*|cleanups?|renam\w*|extract\w*|simplif\w*|restructur\w*)"
    r"|(?P<documentation>docs?|documentation|document|readme|readme\.md|comments?|docstrings?"
    r"|changelog)"
    r"|(?P<new_app>scaffold\w*|bootstrap\w*)"
    r"|(?P<analysis>analy\w*|investigat\w*|why|explain\w*|benchmark\w*|measur\w*|profil\w*)"
)
CATEGORY_PHRASES: MappingProxyType[Category, tuple[str, ...]] = MappingProxyType(
    {
        "refactoring": ("clean up",),
        "new-app": ("new app", "new application", "new project", "new service", "from scratch"),
    }
)
# Each technology, and the words that name it; a name alone names itself.
_TECHNOLOGY_ALIASES = MappingProxyType({
    "python": "python python2 python3", "go": "golang", "rust": "rust cargo",
    "kubernetes": "kubernetes k8s kubectl", "chroma": "chroma chromadb",
    "postgres": "postgres postgresql psql", "sqlite": "sqlite sqlite3", "mongodb": "mongo mongodb",
    "react": "reactjs react.js react-dom", "node": "node.js nodejs npm node_modules",
    "onnx": "onnx onnxruntime", **dict.fromkeys((
        "typescript", "javascript", "java", "kotlin", "helm", "mysql", "redis", "kopf", "pytest",
        "pydantic", "fastapi", "django", "flask", "numpy", "pandas", "terraform", "prometheus",
        "grafana", "graphql", "grpc", "kafka", "nginx", "openai", "ollama", "vllm", "mypy",
        "ruff"), "")})  # fmt: skip
TECHNOLOGY_WORDS: MappingProxyType[str, str] = MappingProxyType(
    {word: name for name, words in _TECHNOLOGY_ALIASES.items() for word in words.split() or [name]}
)
_FILE_EXTENSIONS = MappingProxyType({
    "py": "python", "ts": "typescript", "tsx": "typescript", "js": "javascript",
    "jsx": "javascript", "go": "go", "rs": "rust", "java": "java", "kt": "kotlin"})  # fmt: skip
# Ambiguous words count only in context: "go" as tooling, "kind" with cluster verbs, "react"
# as a library. Each pattern starts with a literal, so scanning for it is cheap.
_TECHNOLOGY_PHRASES: MappingProxyType[str, re.Pattern[str]] = MappingProxyType(
    {
        "go": re.compile(r"go (?:mod|build|test|run|vet|module|modules|toolchain)\b"),
        "kind": re.compile(r"kind (?:cluster|create|load|delete|get)\b"),
        "react": re.compile(r"react (?:native|components?|hooks?)\b"),
    }
)


def _words(low: str) -> Counter[str]:
    """The tokens of a lower-cased text (trailing punctuation stripped) and how often each is."""
    words: Counter[str] = Counter()
    for word, count in Counter(low.split()).items():
        for token in TOKEN.findall(word):
            words[token.rstrip(".-_+#")] += count
    return words


SENTENCE_MAX = 200

# C0/C1 controls (tab and newline are kept as whitespace), lone surrogates (cannot be encoded
# as UTF-8, so Chroma and the embedder would refuse them), zero-width characters.
_UNWANTED = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\u200b-\u200d\ufeff]")
# A Python traceback: its header, the indented frame and code lines, the exception line.
_TRACEBACK = re.compile(
    r"Traceback \(most recent call last\):[ \t]*(?:\r?\n[ \t]+[^\n]*|\r?\n[ \t]*(?=\r?\n))*"
    r"(?:\r?\n(?P<last>[^\n]*))?"
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[`*_]?[A-Z0-9])")
_LINE_MARKUP = re.compile(r"^(?:\s*(?:[-*+>]|#{1,6}|\d{1,3}[.)])\s+)+")
_WORDY = re.compile(r"\w")


def shorten(text: str, limit: int) -> str:
    """At most `limit` characters, cut at a word boundary when one is near, marked by '…'."""
    return cut(text, limit, word_from=limit * 3 // 5)


# Where a long sentence may be cut into clauses: after a comma, semicolon or colon (not the
# one inside a masked secret's placeholder), and before a dash between spaces.
_CLAUSE_END = re.compile(r"(?<=[,;:])(?<!\[redacted:)\s+|\s+(?=[-\u2013\u2014]\s)")
_WORD = re.compile(rf"(?:{PLACEHOLDER.pattern}|\S)+")  # a placeholder is never cut
_GAP = " …"


def cut_keeping_facts(text: str, limit: int) -> str:
    """At most `limit` characters of a sentence: the clauses (or, of a clause too long, the
    pieces) that carry the most facts, in order, a gap marked by '…'. Not the head alone: the
    amount at the end of a long aside is what the next agent asks about."""
    if len(text) <= limit:
        return text
    units: list[tuple[str, int | None]] = []  # a clause or piece, and its facts (None: never kept)
    for clause in filter(None, _CLAUSE_END.split(text)):
        units += (
            [(clause, len(fact_tokens(clause)))] if len(clause) <= limit else _pieces(clause, limit)
        )
    clauses = [unit for unit, _ in units]
    ranked = sorted((-facts, n) for n, (_, facts) in enumerate(units) if facts is not None)
    chosen: set[int] = set()
    for _, n in ranked:
        if len(_joined(clauses, chosen | {n})) <= limit:
            chosen.add(n)
    return _joined(clauses, chosen) if chosen else shorten(text, limit)


def _pieces(clause: str, limit: int) -> list[tuple[str, int | None]]:
    """A clause longer than the limit, cut at spaces (never inside a fact) into pieces that
    fit between two gap marks; a piece without a fact is never kept. Words longer than the
    limit are blanked first: the fact regex is quadratic in a word's length."""
    blanked = re.sub(rf"\S{{{limit + 1},}}", lambda word: " " * len(word.group()), clause)
    lowered, spans, at = blanked.lower(), [], 0
    for token in fact_tokens(blanked) if len(lowered) == len(blanked) else []:
        start = lowered.find(token, at)
        start = start if start >= 0 else lowered.find(token)  # quoted titles come last
        if start >= 0:
            spans.append((start, start + len(token)))
            at = max(at, start + len(token))
    spans.sort()
    room, cuts, reach, n = limit - 2 * len(_GAP), [0], 0, 0  # reach: where begun facts end
    for word in _WORD.finditer(clause):
        inside = word.start() < reach  # a fact's later word goes with its first
        while n < len(spans) and spans[n][0] < word.end():
            reach, n = max(reach, spans[n][1]), n + 1
        if not inside and max(word.end(), reach) - cuts[-1] > room and word.start() > cuts[-1]:
            cuts.append(word.start())
    facts_at = [start for start, _ in spans]
    return [
        (clause[a:b].strip(), bisect_left(facts_at, b) - bisect_left(facts_at, a) or None)
        for a, b in zip(cuts, [*cuts[1:], len(clause)], strict=True)
    ]


def _joined(clauses: list[str], chosen: set[int]) -> str:
    parts: list[str] = []
    for n in sorted(chosen):
        if parts and n - 1 not in chosen:
            parts.append(_GAP.strip())
        parts.append(clauses[n])
    text = " ".join(parts)
    return text if max(chosen) == len(clauses) - 1 else text.rstrip(" ,;:") + _GAP


def _one_line_traceback(match: re.Match[str]) -> str:
    last = " ".join((match.group("last") or "").split())
    return f"\nTraceback (most recent call last): {last}\n"


def sentences(text: str) -> list[str]:
    """Sentences of a text: code blocks and list markup dropped, each at most SENTENCE_MAX
    (cut_keeping_facts). A sentence ends at a line or at . ! or ? before a capital or digit,
    so URLs, file names and "e.g. this" stay whole; a traceback is one sentence."""
    text = _UNWANTED.sub(" ", text or "")
    text = CODE_BLOCK.sub("\n", text)
    text = _TRACEBACK.sub(_one_line_traceback, text)
    out = []
    for line in text.splitlines():
        line = _LINE_MARKUP.sub("", line)
        for raw in _SENTENCE_END.split(line):
            sentence = " ".join(raw.replace("\u2019", "'").split())
            if len(sentence) >= 3 and _WORDY.search(sentence):
                out.append(cut_keeping_facts(sentence, SENTENCE_MAX))
    return out


TITLE_CHARS = 80
STATE_SENTENCES = 3
AGENT_SENTENCES = 8
REQUESTS, QUESTIONS, DESIGN, CORRECTIONS, STATE = SECTION_TITLES
_COUNTS_LINE = re.compile(r"^\d+ memories so far\b")


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
    """Sorts one memory's sentences into the history sections."""
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
        else:  # what the user stated in passing: the next agent asks about it
            requests.offer(sentence)
    response = memory.response
    turn = (memory.prompt, memory.thought, response)
    if not "".join(turn).strip() and memory.document != render_interaction_document(*turn):
        response = memory.document  # a row only its document describes (a plan), not its labels
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
    """The response's AGENT_SENTENCES most salient sentences reporting an action (ACTION_CUES,
    ACTION_OPENER) or a fact, in order: a bound per turn, so a fifty-name list adds few items."""
    found = []
    for n, sentence in enumerate(response):
        low, facts = sentence.lower(), len(fact_tokens(sentence))
        acted = ACTION_CUES.search(low) is not None or ACTION_OPENER.match(low) is not None
        if acted or facts:
            found.append((not acted, -facts, n, sentence))
    return [
        sentence for *_, sentence in sorted(sorted(found)[:AGENT_SENTENCES], key=lambda f: f[2])
    ]


def _category(texts: Iterable[str], fallback: Category) -> Category:
    """Keyword vote; no votes or a tie keeps the fallback (the prior's category or other)."""
    low = "\n".join(texts).lower()
    votes = Counter({c: sum(map(low.count, phrases)) for c, phrases in CATEGORY_PHRASES.items()})
    for word, count in _words(low).items():
        if (match := CATEGORY_WORDS.fullmatch(word)) and match.lastgroup:
            votes[cast(Category, match.lastgroup.replace("_", "-"))] += count
    (first, most), (_, second) = votes.most_common(2)  # CATEGORY_PHRASES has two keys
    return first if most > second else fallback


def _technologies(memories: Sequence[Memory]) -> set[str]:
    text = "\n".join(f"{m.prompt}\n{m.thought}\n{m.response}" for m in memories).lower()
    found = {
        name
        for name, pattern in _TECHNOLOGY_PHRASES.items()
        if any(m.start() == 0 or not text[m.start() - 1].isalnum() for m in pattern.finditer(text))
    }
    for word in _words(text):
        technology = TECHNOLOGY_WORDS.get(word)
        if technology is None and word.startswith("docker"):
            technology = "docker"
        stem, _, extension = word.rpartition(".")
        if technology is None and stem[-1:].isalnum():
            technology = _FILE_EXTENSIONS.get(extension)
        if technology is not None:
            found.add(technology)
    return found


def _title(requests: Sequence[SummaryItem], session_id: str) -> str:
    """The first request that reads as a title, at most TITLE_CHARS, no trailing punctuation."""
    for item in requests:
        title = cut(item.text, TITLE_CHARS, "", word_from=TITLE_CHARS // 2).rstrip(" .!?…:;,-")
        if title and title_problem(title) is None and quote_if_needed(item.text) == item.text:
            return title
    return fallback_title(session_id)


def _current_state(new: Sequence[Memory], base: StructuredSummary | None, count: int) -> list[str]:
    """The last response's first distinct sentences (as the merge compares items) and the
    counts; replaced each pass that has new memories."""
    said = next((s for m in reversed(new) if (s := sentences(m.response))), None)
    if said is not None:
        first: dict[str, str] = {}
        for sentence in said:
            first.setdefault(identity(as_item(sentence)), sentence)
            if len(first) == STATE_SENTENCES:
                break
        state = list(first.values())
    else:  # nothing new was said: keep what was true, refresh the counts
        prior = base.sections[STATE] if base else []
        state = [item.text for item in prior if not _COUNTS_LINE.match(item.text)]
    known = (new[-1].timestamp_ms, base.last_memory_at_ms if base else None)
    latest = ms_to_rfc3339(max(ms for ms in known if ms is not None))
    return [*state, f"{count} memories so far, the latest at {latest}."]


# Scores are 0..100 and simple on purpose; a model may do better.
CATEGORY_IMPACT: MappingProxyType[str, int] = MappingProxyType({
    "new-app": 25, "feature": 20, "bugfix": 15, "refactoring": 10, "documentation": 5,
    "analysis": 5, "other": 0})  # fmt: skip


def _scores(
    sections: dict[str, _Section],
    category: str,
    new: Sequence[Memory],
    base: StructuredSummary | None,
    memory_count: int,
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
    requests = len(sections[REQUESTS].items)
    tools = {t for m in new for t in m.tools_used} | set(base.tools_used if base else [])
    tool_calls = (base.total_tool_calls if base else 0) + sum(m.tool_calls for m in new)
    bonus = CATEGORY_IMPACT[category] + min(10, tool_calls // 10)
    scores = {
        "quality": 100 - 10 * len(sections[CORRECTIONS].items),
        "productivity": productivity,
        "impact": 20 + 5 * min(requests, 10) + bonus,
        "complexity": 10 + 6 * min(len(tools), 8) + min(memory_count, 40),
    }
    return {name: max(0, min(100, round(value))) for name, value in scores.items()}


@dataclass(frozen=True)
class ExtractiveSummarizer:
    """The embedded default Summarizer: it reads whatever it is given, so its chunk bounds
    only cap how much one pass holds. Frozen: no module keeps mutable state."""

    memory_budget_tokens: ClassVar[int] = 100_000
    max_memories_per_pass: ClassVar[int] = 400
    one_memory_per_item: ClassVar[bool] = True

    def propose(
        self, session_id: str, memories: Sequence[Memory], prior: PriorSummary | None
    ) -> Proposal:
        """The given memories sorted into new items per section. A late memory (at or before
        the prior's watermark) adds its facts like any other; Current State and the counts
        follow only the memories after the watermark."""
        base = prior if isinstance(prior, StructuredSummary) else None
        covered = base.watermark if base is not None else None
        given = sorted(memories, key=memory_sort_key)
        new = [m for m in given if covered is None or covered.after(m)]

        # A legacy prior has no items: merge_pass carries its text, verbatim, as legacy_text.
        carried = {title: base.sections[title] if base else [] for title in HISTORY_SECTIONS}
        sections = {title: _Section(items) for title, items in carried.items()}
        for memory in given:
            _extract_into(sections, memory)
        memory_count = (base.memory_count if base else 0) + len(new)

        category: Category = base.category if base else "other"
        if new:  # the vote sees the requests so far and the new prompts
            votes = [i.text for i in carried[REQUESTS]] + [m.prompt for m in new]
            category = _category(votes, category)

        if isinstance(prior, LegacySummary) and prior.title and title_problem(prior.title) is None:
            # merge_pass still refuses it if it reads as an instruction
            plain = _UNWANTED.sub(" ", prior.title).replace("\u2019", "'")
            title = shorten(" ".join(plain.split()), TITLE_MAX)
        else:
            title = _title(sections[REQUESTS].items, session_id)

        update = PassUpdate(
            **{key: sections[title].proposed() for title, key in HISTORY_KEYS.items()},
            current_state=_current_state(new, base, memory_count) if new else None,
            title=title,
            category=category,
            technologies=sorted(_technologies(new)),
            **_scores(sections, category, new, base, memory_count),
        )
        return Proposal(update)


EXTRACTIVE = ExtractiveSummarizer()
