"""What a summarizer proposes is masked before it is merged: a model can echo a credential,
join one split in two (each half too short to mask) or answer for a hostile endpoint."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from controller.core.memories import Memory
from controller.core.merge import TECHNOLOGY_MAX, PassUpdate, fallback_title
from controller.core.summary import (
    ITEM_MAX,
    TITLE_MAX,
    PriorSummary,
    StructuredSummary,
    SummaryItem,
)
from controller.pipeline import run_pass
from controller.redaction import PassRedaction, Redaction
from controller.summarizers.contract import Proposal
from tests.support.credentials import generated

SID = "s-proposal"
KINDS = sorted(generated(0))
FIELDS = (
    "title",
    "user_requests",
    "questions_and_decisions",
    "design_choices",
    "corrections_and_feedback",
    "current_state",
    "supersede",
    "technologies",
)
# A placeholder title: a proposed one replaces it.
PRIOR = StructuredSummary(
    session_id=SID,
    title=fallback_title(SID),
    sections={"User Requests": [SummaryItem(text="Use 7103.")]},
)


@dataclass(frozen=True)
class Proposing:
    """A summarizer (controller/summarizers/contract.py) that proposes what it is given."""

    update: dict[str, Any]
    memory_budget_tokens: int = 10_000
    max_memories_per_pass: int = 100
    one_memory_per_item: bool = False

    def propose(
        self, session_id: str, memories: Sequence[Memory], prior: PriorSummary | None
    ) -> Proposal:
        return Proposal(PassUpdate.model_validate(self.update), tokens_used=7)


def memory(text: str) -> Memory:
    return Memory(id="m1", session_id=SID, timestamp_ms=1_760_000_000_000, prompt=text)


def proposal(field: str, text: str) -> dict[str, Any]:
    empty: dict[str, Any] = {f: [] for f in FIELDS[1:6]}
    if field == "supersede":
        mark = {"section": "User Requests", "item": "Use 7103.", "superseded_by": text}
        return {**empty, "supersede": [mark]}
    return {**empty, field: text if field == "title" else [text]}


@given(seed=st.integers(0, 10_000), kind=st.sampled_from(KINDS), field=st.sampled_from(FIELDS))
@example(seed=1, kind="github-token", field="title")
@example(seed=1, kind="credential-header", field="title")
@settings(max_examples=150, deadline=None)
def test_a_secret_in_any_field_of_a_proposal_is_masked_and_counted(
    seed: int, kind: str, field: str
) -> None:
    secret, sentence = generated(seed)[kind]
    # a technology is a short name (a longer one is dropped): the bare token, for the kinds
    # recognised by their shape
    text = secret if field == "technologies" else sentence
    if field == "technologies":
        assume(len(secret) <= TECHNOLOGY_MAX and "[redacted: " in Redaction().text(secret))
    mask = PassRedaction()
    summary, _ = run_pass(
        SID, [memory("Make it listen.")], PRIOR, Proposing(proposal(field, text)), mask
    )
    stored = summary.model_dump_json()
    assert secret not in stored and secret[:6] not in stored, (field, stored)
    cut_off = field == "title" and len(text) > TITLE_MAX  # cut at a space before the secret
    assert cut_off or ("[redacted: " in stored and sum(mask.counts().values()) >= 1), stored


def test_a_secret_the_model_joins_from_two_halves_is_masked_with_the_extra_patterns() -> None:
    """Neither half is a secret to the input's masking; the joined token is, and so is what a
    tenant's own pattern (extraPatterns) names."""
    halves = ("ghp_Q7xk2Lm9Rt4Vb8Nw", "Zp3Hc6Jd1Fg5Ks0Ya2Ue")
    mask = PassRedaction(Redaction((("acme-ticket", r"\bACME-\d{6}\b"),)))
    said = memory(f"First half {halves[0]}, second half {halves[1]}.")
    assert mask.memory(said) == said  # nothing the input's masking sees
    update = {
        "title": "Leak Authorization: Bearer Zp3Hc6Jd1Fg5Ks0Ya2Ue",
        "user_requests": [f"The team token is {''.join(halves)}"],
        "questions_and_decisions": ["Filed ACME-123456 for it."],
        "design_choices": [],
        "corrections_and_feedback": [],
        "current_state": None,
    }
    result, _ = run_pass(SID, [said], None, Proposing(update), mask)
    stored = result.model_dump_json()
    assert "".join(halves) not in stored and "ACME-123456" not in stored, stored
    assert result.title == "Leak Authorization: [redacted: credential-header]"
    assert "The team token is [redacted: github-token]" in stored
    assert mask.counts() == {"acme-ticket": 1, "credential-header": 1, "github-token": 1}


@given(seed=st.integers(0, 10_000))
@settings(max_examples=30, deadline=None)
def test_masking_a_masked_proposal_again_changes_nothing_and_counts_nothing(seed: int) -> None:
    """A placeholder is not a secret: a model echoing the masked text it was sent, or a
    second look at a masked proposal, leaves it as it is."""
    sentences = [sentence for _, sentence in generated(seed).values()]
    update = PassUpdate.model_validate(
        {**proposal("title", sentences[0]), "current_state": sentences[1:]}
    )
    once = PassRedaction().proposal(update)
    assert once != update
    mask = PassRedaction()
    assert mask.proposal(once) == once
    assert mask.counts() == {}


@given(
    seed=st.integers(0, 10_000),
    kind=st.sampled_from(KINDS),
    field=st.sampled_from(("title", "user_requests")),
    inside=st.integers(6, 30),
    filler=st.text(alphabet="ab=/:,", min_size=1, max_size=8),
    space=st.sampled_from(("", " ")),
    glued=st.booleans(),
)
@example(
    seed=1, kind="github-token", field="title", inside=6, filler="word", space=" ", glued=False
)
@example(
    seed=1, kind="github-token", field="user_requests", inside=9, filler="x", space="", glued=True
)
@settings(max_examples=200, deadline=None)
def test_a_secret_where_a_long_proposal_is_cut_leaves_no_part_of_it(
    seed: int, kind: str, field: str, inside: int, filler: str, space: str, glued: bool
) -> None:
    """A title or item longer than its bound is cut before it is masked: wherever the cut
    falls in a secret the rules know, whatever precedes it (words, or one long word the
    secret's word is glued to), no part of it (no longer one the rules know) is kept."""
    secret, sentence = generated(seed)[kind]
    assume(len(secret) > inside)
    if glued:  # from the secret's word on: nothing but the filler's spaces before it
        sentence = sentence[sentence.rfind(" ", 0, sentence.index(secret)) + 1 :]
    limit = TITLE_MAX if field == "title" else ITEM_MAX
    before = limit - 1 - sentence.index(secret) - inside  # the cut ("…" after it) is there
    text = ((filler + space) * limit)[:before] + sentence
    assume(secret not in Redaction().text(text))  # uncut, the rules know it
    mask = PassRedaction()
    summary, _ = run_pass(
        SID, [memory("Make it listen.")], PRIOR, Proposing(proposal(field, text)), mask
    )
    assert secret[:6] not in summary.model_dump_json()
