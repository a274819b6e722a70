"""The embedded default summarizer: extractive, deterministic, no model. Pure.

It picks sentences from the memories by cue words into the structured sections. It is
incremental like the model backend: the prior summary's history items come first,
verbatim; new items are appended (deduplicated); Current State is replaced. When a section
reaches its cap, new items are dropped, never prior ones.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from controller.memories import Memory, Watermark, memory_sort_key
from controller.summary import (
    HISTORY_SECTIONS,
    ITEM_MAX,
    LegacySummary,
    StructuredSummary,
    SummaryItem,
)

SENTENCE_MAX = 200
LEGACY_ITEMS_MAX = 10
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_CODE_BLOCK = re.compile(r"```.*?```", re.S)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(\[])|\n+")

_DECISION = (
    "decided",
    "we will",
    "we'll",
    "let's",
    "going with",
    "chose",
    "instead of",
    "will use",
)
_DESIGN = (
    "design",
    "architecture",
    "pattern",
    "schema",
    " api",
    "interface",
    "trade-off",
    "tradeoff",
    "watermark",
    "idempotent",
    "module",
    "adapter",
)
_CORRECTION = (
    "no,",
    "no.",
    "actually",
    "wrong",
    "instead",
    "don't",
    "do not",
    "that's not",
    "revert",
    "should have",
    "not what",
)
_CATEGORY_CUES: dict[str, tuple[str, ...]] = {
    "bugfix": ("bug", "fix", "error", "crash", "fail", "broken", "regression"),
    "feature": ("add", "implement", "feature", "support", "new endpoint", "introduce"),
    "refactoring": ("refactor", "clean up", "cleanup", "rename", "extract", "simplify"),
    "documentation": ("doc", "readme", "comment", "guide", "tutorial"),
    "new-app": ("new app", "scaffold", "bootstrap", "from scratch", "new project"),
    "analysis": ("analy", "investigate", "why", "explain", "benchmark", "measure"),
}
_TECHNOLOGIES = (
    "python",
    "typescript",
    "javascript",
    "go",
    "golang",
    "rust",
    "java",
    "kotlin",
    "c++",
    "kubernetes",
    "helm",
    "docker",
    "kind",
    "chroma",
    "chromadb",
    "postgres",
    "postgresql",
    "redis",
    "react",
    "vue",
    "kopf",
    "pytest",
    "fastapi",
    "django",
    "flask",
    "node",
    "npm",
    "terraform",
    "prometheus",
    "grafana",
    "sql",
    "sqlite",
    "graphql",
    "grpc",
    "kafka",
    "openai",
    "ollama",
    "vllm",
    "numpy",
    "pandas",
    "pydantic",
    "mypy",
    "ruff",
    "safari",
)
_WORD = re.compile(r"[a-z][a-z0-9+#.-]*")


def clean(text: str) -> str:
    return " ".join(_CONTROL.sub(" ", text).split())


def sentences(text: str) -> list[str]:
    """Sentences of a text, code blocks dropped, each cut to SENTENCE_MAX characters."""
    text = _CODE_BLOCK.sub(" ", text or "")
    out = []
    for raw in _SENTENCE_END.split(text):
        sentence = clean(raw)
        if len(sentence) < 3:
            continue
        if len(sentence) > SENTENCE_MAX:
            sentence = sentence[: SENTENCE_MAX - 1].rstrip() + "…"
        out.append(sentence)
    return out


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def _has(sentence: str, cues: Iterable[str]) -> bool:
    low = f" {sentence.lower()}"
    return any(cue in low for cue in cues)


def _extract(memories: Sequence[Memory]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {title: [] for title in HISTORY_SECTIONS}
    for m in memories:
        prompt_sentences = sentences(m.prompt)
        if prompt_sentences:
            first = prompt_sentences[0]
            if _has(first, _CORRECTION):
                found["Corrections & Feedback"].append(first)
            else:
                found["User Requests"].append(first)
        for s in prompt_sentences:
            if s.endswith("?"):
                found["Questions & Decisions"].append(s)
            elif s is not prompt_sentences[0] and _has(s, _CORRECTION):
                found["Corrections & Feedback"].append(s)
        for s in sentences(m.thought) + sentences(m.response):
            if _has(s, _DECISION):
                found["Questions & Decisions"].append(s)
            elif _has(s, _DESIGN):
                found["Design Choices"].append(s)
    return found


def _merge_section(
    prior: list[SummaryItem], new_texts: Iterable[str], cap: int
) -> list[SummaryItem]:
    """Prior items verbatim and in order, then new ones not already present, up to cap."""
    items = list(prior)
    seen = {_norm(i.text) for i in items}
    for text in new_texts:
        key = _norm(text)
        if not key or key in seen or len(items) >= max(cap, len(prior)):
            continue
        seen.add(key)
        items.append(SummaryItem(text=text[:ITEM_MAX]))
    return items


def _category(memories: Sequence[Memory], fallback: str) -> str:
    votes = dict.fromkeys(_CATEGORY_CUES, 0)
    for m in memories:
        low = m.prompt.lower()
        for category, cues in _CATEGORY_CUES.items():
            votes[category] += sum(low.count(cue) for cue in cues)
    best = max(votes.values(), default=0)
    if best == 0:
        return fallback
    winners = [c for c, v in votes.items() if v == best]
    return winners[0] if len(winners) == 1 else (fallback if fallback in winners else winners[0])


def _technologies(memories: Sequence[Memory]) -> set[str]:
    found: set[str] = set()
    vocabulary = set(_TECHNOLOGIES)
    for m in memories:
        for word in _WORD.findall(f"{m.prompt} {m.thought} {m.response}".lower()):
            word = word.rstrip(".-")
            if word in vocabulary:
                found.add(
                    {"golang": "go", "chromadb": "chroma", "postgresql": "postgres"}.get(word, word)
                )
    return found


def _title(first_request: str | None, session_id: str) -> str:
    if not first_request:
        return f"Session {session_id[:12]}"
    title = first_request.rstrip(" .!?…:;")
    if len(title) > 80:
        title = title[:80].rsplit(" ", 1)[0] + "…"
    return title or f"Session {session_id[:12]}"


def _clamp(value: float) -> int:
    return max(0, min(100, round(value)))


def _legacy_items(prior: LegacySummary) -> list[str]:
    """A legacy free-text summary is carried forward as items of Questions & Decisions."""
    return sentences(prior.text)[:LEGACY_ITEMS_MAX]


def summarize_extractive(
    session_id: str,
    memories: Sequence[Memory],
    prior: StructuredSummary | LegacySummary | None = None,
    *,
    max_items_per_section: int = 12,
) -> StructuredSummary:
    """One incremental pass: prior summary + the memories after its watermark."""
    new = sorted(memories, key=memory_sort_key)
    base = prior if isinstance(prior, StructuredSummary) else None
    found = _extract(new)
    if isinstance(prior, LegacySummary):
        found["Questions & Decisions"] = _legacy_items(prior) + found["Questions & Decisions"]
    sections = {
        title: _merge_section(
            base.sections[title] if base else [], found[title], max_items_per_section
        )
        for title in HISTORY_SECTIONS
    }
    last_response = next((m for m in reversed(new) if m.response.strip()), None)
    if last_response is not None:
        state = sentences(last_response.response)[:3]
        sections["Current State"] = [SummaryItem(text=s) for s in state]
    else:
        sections["Current State"] = list(base.sections["Current State"]) if base else []

    all_memories_count = (base.memory_count if base else 0) + len(new)
    tools = sorted({t for m in new for t in m.tools_used} | set(base.tools_used if base else []))
    agents = sorted(
        {a for m in new for a in (m.agent, m.agent_identity) if a}
        | set(base.participating_agents if base else [])
    )
    models = sorted({m.model for m in new if m.model} | set(base.models if base else []))
    technologies = sorted(_technologies(new) | set(base.technologies if base else []))
    tool_calls = (base.total_tool_calls if base else 0) + sum(m.tool_calls for m in new)
    first_request = sections["User Requests"][0].text if sections["User Requests"] else None
    title = (
        base.title
        if base
        else (
            prior.title
            if isinstance(prior, LegacySummary) and prior.title
            else _title(first_request, session_id)
        )
    )
    category = _category(new, base.category if base else "other")
    requests = max(1, len(sections["User Requests"]))
    total_corrections = len(sections["Corrections & Feedback"])
    first_ms = base.first_memory_at_ms if base and base.first_memory_at_ms else None
    if new and (first_ms is None or new[0].timestamp_ms < first_ms):
        first_ms = new[0].timestamp_ms
    return StructuredSummary(
        session_id=session_id,
        title=title,
        category=category,
        quality=_clamp(100 - 10 * total_corrections),
        productivity=_clamp(
            40 + 60 * min(1.0, len(sections["Design Choices"]) / requests) if requests else 40
        ),
        impact=_clamp(30 + 5 * requests + (20 if category in ("feature", "new-app") else 0)),
        complexity=_clamp(10 + 8 * len(tools) + 2 * min(all_memories_count, 20)),
        sections=sections,
        technologies=technologies,
        participating_agents=agents,
        models=models,
        tools_used=tools,
        total_tool_calls=tool_calls,
        memory_count=all_memories_count,
        first_memory_at_ms=first_ms,
        last_memory_at_ms=new[-1].timestamp_ms
        if new
        else (base.last_memory_at_ms if base else None),
        watermark=Watermark.of(new[-1]) if new else (base.watermark if base else None),
        user_id=next((m.user_id for m in new if m.user_id), base.user_id if base else None),
    )
