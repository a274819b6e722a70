"""The row as neo's readers and neo's own writer meet it, for generated summaries: a numeric
timestamp always, no key outliving what it describes, another writer's text never lost, a
bounded document that still keeps everything in the row, the embedding record checked."""

from __future__ import annotations

import json
import re
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.core.document import DOCUMENT_MAX_CHARS, LEGACY_HEADING, render_document
from controller.core.memories import (
    Watermark,
    memory_from_row,
    parse_timestamp_ms,
    trusted_time,
)
from controller.core.references import ReferenceOverflow
from controller.core.summary import SECTION_TITLES, StructuredSummary, SummaryItem
from controller.core.summary_row import (
    DIGEST_KEY,
    NEO_DERIVED_KEYS,
    NEO_WRITER,
    ROW_KEYS,
    UNKNOWN_WRITER,
    document_digest,
    from_chroma_row,
    rewritten_by,
    to_chroma_metadata,
    upsert_metadata,
)
from controller.core.visibility import (
    DEFAULT_VISIBILITY,
    SessionSources,
    VisibilityRules,
    canonical_agent,
    row_visibility,
    summary_user_id,
    union_agents,
)
from controller.store.memory_store import embedding_function_problem

JS_DATE_MAX = 8_640_000_000_000_000
TIMES = st.one_of(st.none(), st.integers(-(2**70), 2**70), st.integers(0, 2 * 10**12))
TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",)) | st.sampled_from("`~#\n-*"),
    min_size=1,
    max_size=120,
).filter(lambda t: t.strip())
ITEM = TEXT.map(lambda t: SummaryItem(text=t[:500]))


@st.composite
def summaries(draw: st.DrawFn) -> StructuredSummary:
    sections = {
        title: draw(st.lists(ITEM, max_size=draw(st.sampled_from([2, 40, 120]))))
        for title in SECTION_TITLES
    }
    refs = draw(st.lists(st.text(string.ascii_letters + "/._-", min_size=2, max_size=80)))
    legacy = draw(st.one_of(st.none(), TEXT, TEXT.map(lambda t: t * 300)))
    first, last = draw(TIMES), draw(TIMES)
    mark = draw(
        st.one_of(
            st.none(),
            st.builds(
                Watermark,
                timestamp_ms=st.integers(0, 2**40),
                memory_id=st.text(min_size=1, max_size=8),
            ),
        )
    )
    return StructuredSummary(
        session_id=draw(st.text(min_size=1, max_size=30)),
        title=draw(TEXT).replace("\n", " ")[:120].strip() or "A title",
        sections=sections,
        references=list(dict.fromkeys(refs)),
        references_overflow=ReferenceOverflow(count=draw(st.integers(0, 3))),
        first_memory_at_ms=first,
        last_memory_at_ms=last,
        watermark=mark,
        legacy_text=legacy,
    )


@given(summary=summaries(), written=st.integers(0, 2 * 10**12))
@settings(max_examples=150, deadline=None)
def test_every_row_has_a_numeric_timestamp_neos_reader_can_render(
    summary: StructuredSummary, written: int
) -> None:
    meta = to_chroma_metadata(summary, writer="w", trigger="t", summarized_at_ms=written)
    stamp = meta["timestamp"]
    assert isinstance(stamp, int) and not isinstance(stamp, bool)
    assert abs(stamp) <= JS_DATE_MAX  # new Date(timestamp).toISOString() never throws
    last = summary.last_memory_at_ms
    if last is not None:  # the newest memory's time, unless no clock could have given it
        assert stamp == (last if trusted_time(last, written) else written)
    # Read back, the fallback is never taken for the newest memory's time.
    back = from_chroma_row(summary.session_id, render_document(summary), meta)
    assert isinstance(back, StructuredSummary)
    if meta.get("timestampSource") == "fallback":
        assert back.last_memory_at_ms is None


@given(value=st.one_of(st.integers(), st.floats(), st.text(max_size=30)))
def test_a_memory_time_neos_reader_cannot_render_is_not_a_usable_time(value: object) -> None:
    parsed = parse_timestamp_ms(value)
    assert parsed is None or abs(parsed) <= JS_DATE_MAX
    row = memory_from_row("m", "doc", {"sessionId": "s", "timestamp": value})
    assert row is None or abs(row.timestamp_ms) <= JS_DATE_MAX


@given(summary=summaries())
@settings(max_examples=80, deadline=None)
def test_a_write_removes_every_key_it_does_not_set_and_neos_keys_of_the_old_text(
    summary: StructuredSummary,
) -> None:
    meta = to_chroma_metadata(summary, writer="w", trigger="t", summarized_at_ms=5)
    sent = upsert_metadata(meta)
    for key in (*ROW_KEYS, *NEO_DERIVED_KEYS):
        assert key in sent  # set, or None: chromadb 1.5 removes a key sent as None
    assert {k: v for k, v in sent.items() if v is not None} == meta
    assert all(sent[k] is None for k in NEO_DERIVED_KEYS)


@given(summary=summaries(), theirs=TEXT, neo=st.booleans())
@settings(max_examples=80, deadline=None)
def test_text_another_writer_put_over_our_row_is_carried_verbatim_with_ours(
    summary: StructuredSummary, theirs: str, neo: bool
) -> None:
    document = render_document(summary)
    meta: dict[str, object] = dict(
        to_chroma_metadata(summary, writer="w", trigger="t", summarized_at_ms=5, document=document)
    )
    assert rewritten_by(document, meta) is None
    assert from_chroma_row(summary.session_id, document, meta).other_writer is None  # type: ignore[union-attr]
    if theirs.strip() == document.strip():
        return
    # Their upsert replaces the document and the keys they know; ours stay.
    meta.update({"title": "Their title", "memoryCount": 99})
    if neo:
        meta.update({"sourceTier": "raw", "degraded": False, "rawCanonical": True})
    prior = from_chroma_row(summary.session_id, theirs, meta)
    assert isinstance(prior, StructuredSummary)
    assert prior.other_writer is not None
    assert prior.other_writer.who == (NEO_WRITER if neo else UNKNOWN_WRITER)
    assert theirs.strip() in (prior.legacy_text or "")
    if summary.legacy_text:
        assert (prior.legacy_text or "").startswith(summary.legacy_text)
    assert prior.sections == summary.sections  # our items, from our keys


def test_a_row_of_an_earlier_version_is_ours_unless_neos_summary_keys_are_on_it() -> None:
    meta = {"summaryFormat": "structured-v1"}
    assert rewritten_by("any text", meta) is None
    assert rewritten_by("any text", {**meta, "rawCanonical": True}) == NEO_WRITER
    assert rewritten_by("x", {**meta, DIGEST_KEY: document_digest("x")}) is None
    assert rewritten_by("y", {**meta, DIGEST_KEY: document_digest("x")}) == UNKNOWN_WRITER
    assert rewritten_by(None, {**meta, DIGEST_KEY: document_digest("x")}) == UNKNOWN_WRITER


@given(summary=summaries())
@settings(max_examples=120, deadline=None)
def test_the_document_is_bounded_and_the_row_keeps_all_of_the_summary(
    summary: StructuredSummary,
) -> None:
    document = render_document(summary)
    # the bound holds the operator's own part; another writer's carried text is whole after it
    own = document.split(f"\n{LEGACY_HEADING}\n")[0]
    assert len(own) <= DOCUMENT_MAX_CHARS
    whole = render_document(summary, max_chars=None)
    meta = to_chroma_metadata(summary, writer="w", trigger="t", summarized_at_ms=1)
    back = from_chroma_row(summary.session_id, document, meta)
    assert isinstance(back, StructuredSummary)
    assert render_document(back, max_chars=None) == whole  # nothing folded away for good
    if document != whole:
        assert "not shown here" in document
    if len(whole.split(f"\n{LEGACY_HEADING}\n")[0]) <= DOCUMENT_MAX_CHARS:
        assert document == whole
    # The newest item of every section stays in view, or every word of it does: a line
    # whose words another line shown already holds (one of no words at all, "\x1b" found by
    # this test) adds nothing and is skipped (choose_lines).
    shown = set(re.findall(r"\w+", document.lower()))
    for title in SECTION_TITLES:
        items = summary.sections[title]
        if items and len(document) < DOCUMENT_MAX_CHARS - 600 and "rest of this" not in document:
            newest = " ".join(items[-1].text.split())
            assert newest in document or set(re.findall(r"\w+", newest.lower())) <= shown


def test_a_long_section_shows_its_newest_items_and_counts_the_older_ones() -> None:
    items = [SummaryItem(text=f"Request {n}: " + "detail " * 20) for n in range(200)]
    summary = StructuredSummary(session_id="s", title="Long", sections={"User Requests": items})
    document = render_document(summary)
    assert len(document) <= DOCUMENT_MAX_CHARS
    assert "Request 199:" in document and "Request 0:" not in document
    assert "more lines not shown here: summaryctl ledger" in document


RECORDS = {
    "neo": {"type": "known", "name": "dynamic_text_embedding_service", "config": {}},
    "default": {"type": "known", "name": "default", "config": {}},
    "openai-small": {
        "type": "known",
        "name": "openai",
        "config": {"model_name": "text-embedding-3-small", "api_key_env_var": "KEY"},
    },
    "st-minilm": {
        "type": "known",
        "name": "sentence_transformer",
        "config": {"model_name": "sentence-transformers/all-MiniLM-L6-v2"},
    },
    "legacy": {"type": "legacy"},
    "none": None,
}


@pytest.mark.parametrize(
    ("record", "provider", "model", "named"),
    [
        ("neo", "local-minilm", "all-MiniLM-L6-v2", "dynamic_text_embedding_service"),
        ("neo", "openai", "text-embedding-qwen3-embedding-8b", None),
        ("default", "openai", "text-embedding-3-small", "all-MiniLM-L6-v2"),
        ("default", "local-minilm", "all-MiniLM-L6-v2", None),
        ("openai-small", "openai", "text-embedding-3-large", "text-embedding-3-small"),
        ("openai-small", "openai", "TEXT-EMBEDDING-3-SMALL", None),
        ("openai-small", "local-minilm", "all-MiniLM-L6-v2", "text-embedding-3-small"),
        ("st-minilm", "local-minilm", "all-MiniLM-L6-v2", None),
        ("legacy", "openai", "anything", None),
        ("none", "local-minilm", "all-MiniLM-L6-v2", None),
    ],
)
def test_the_embedding_record_of_a_collection_is_checked_against_our_model(
    record: str, provider: str, model: str, named: str | None
) -> None:
    problem = embedding_function_problem(RECORDS[record], "sessions", provider, model)
    if named is None:
        assert problem is None
    else:
        assert problem is not None and named in problem and "sessions" in problem
        assert "\n" not in problem


def test_row_visibility_keys_as_neo_writes_them() -> None:
    sources = SessionSources()
    sources.add("m1", {"agentIdentity": "@alice", "userId": "alice"}, 1)
    sources.add("m2", {"agentIdentity": "@bob"}, 2)
    tagged = row_visibility(sources, VisibilityRules(memory_sharing="private"))
    assert tagged == {
        "userId": "alice",
        "sourceAgentIdentities": "@alice,@bob",
        "sourceTrustTier": "unclassified",
        "provenancePolicy": "most-restrictive-source",
        "unclassifiedSourceCount": 2,
    }
    sources = SessionSources()
    sources.add("m1", {"agentIdentity": "@neo-opus-ada"}, 1)
    untagged = row_visibility(sources, DEFAULT_VISIBILITY)
    assert untagged["sourceTrustTier"] == "peer-trusted"
    assert untagged["userId"] is None and untagged["unclassifiedSourceCount"] is None
    assert json.dumps(untagged)  # plain values


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("claude-code", "claude-code"),
        ("@claude-code", "claude-code"),
        ("Claude-Code (VS Code)", "claude-code"),
        ("  Neo-GPT  ", "neo-gpt"),
        ("(only a wrapper)", ""),
    ],
)
def test_agent_names_compare_as_neo_compares_them(name: str, canonical: str) -> None:
    assert canonical_agent(name) == canonical


# The wrapper pattern as Python's re ran it, in time quadratic in a name of "(" or spaces.
BACKTRACKING_WRAPPER = r"\s*\(.*?\)\s*"
NAME_PIECES = ["(", ")", "((", " ", "  ", "\t", "\n", "\u3000", "\x1c", "a", "VS Code", "-",
               "@", "\ud800", "é", ") ("]  # fmt: skip


@settings(max_examples=5000, deadline=None)
@given(st.lists(st.sampled_from(NAME_PIECES), max_size=14).map("".join))
def test_an_agent_name_loses_the_wrappers_python_s_re_took_out(name: str) -> None:
    expected = re.sub(BACKTRACKING_WRAPPER, "", name.strip()).lower()
    assert canonical_agent(name) == expected.removeprefix("@"), name


@pytest.mark.timeout(120)
@pytest.mark.parametrize("unit", ["(", " ", "( ", "(a", " \t"])
def test_any_long_agent_name_compares_in_time_linear_in_it(unit: str) -> None:
    """A memory's agent names who wrote it, in any length: before, 16 KB of "(" took 4 s,
    and the pass compares every memory's (union_agents)."""
    name = "a" + unit * (262_144 // len(unit)) + "b"
    assert union_agents([], [name]) == [name]


def test_one_agent_under_several_spellings_is_one_participant() -> None:
    assert union_agents(["claude-code"], ["@claude-code", "Claude-Code (VS Code)", "codex"]) == [
        "claude-code",
        "codex",
    ]


def test_the_user_tag_follows_the_policy_and_the_shared_agents() -> None:
    team, private = VisibilityRules(), VisibilityRules(memory_sharing="private")
    assert summary_user_id(["claude-code"], "alice", team) is None
    assert summary_user_id(["claude-code"], "alice", private) == "alice"
    assert summary_user_id(["claude-code"], None, private) is None
    for rules in (team, private):
        assert summary_user_id(["Neo-Opus-Ada (Antigravity)"], "alice", rules) == "shared"
        assert summary_user_id(["x,neo-gpt"], "alice", rules) == "shared"


def test_the_trust_tier_is_the_most_restrictive_of_the_sessions_memories() -> None:
    sources = SessionSources()
    sources.add("m1", {"agentIdentity": "@neo-opus-ada"}, 1)
    sources.add("m2", {"agentIdentity": "@tobiu"}, 2)
    assert row_visibility(sources, DEFAULT_VISIBILITY)["sourceTrustTier"] == "peer-trusted"
    sources.add("m3", {}, 3)  # a memory without an identity is unclassified
    seen = row_visibility(sources, DEFAULT_VISIBILITY)
    assert (seen["sourceTrustTier"], seen["unclassifiedSourceCount"]) == ("unclassified", 1)
    assert seen["sourceAgentIdentities"] == "@neo-opus-ada,@tobiu"
