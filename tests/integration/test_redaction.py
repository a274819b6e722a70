"""No credential reaches the model, the row or the ledger: generated credentials of every
kind the rules know, in prompts, thoughts, responses, tool lists and references, summarized
on a real Chroma through both backends (the scripted model server records what it got)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from controller.core.memories import render_interaction_document
from controller.pipeline import summarize_session
from controller.redaction import Redaction
from controller.store.connection import StoreLocation, connect
from controller.store.memory_store import MemoryStore
from controller.summarizers.chat_model import ChatModelSummarizer
from controller.summarizers.chat_prompt import ChatModelConfig
from controller.summarizers.extractive import EXTRACTIVE
from devenv.chroma import ChromaServer
from tests.integration.harness import load
from tests.integration.test_model_backend import FIRST, embed
from tests.support.credentials import generated
from tests.support.openai_server import OpenAIServer, Reply, running_openai_server

SHAPED = ("aws-access-key", "github-token", "slack-token", "stripe-access-key", "json-web-token")
FACTS = ("port 7103", "db.internal.example", "orders")


@pytest.fixture(scope="module")
def model_server() -> Iterator[OpenAIServer]:
    with running_openai_server(default_reply=json.dumps(FIRST)) as server:
        yield server


@pytest.fixture
def store(chroma_server: ChromaServer) -> MemoryStore:
    suffix = uuid.uuid4().hex[:8]
    location = StoreLocation(
        url=chroma_server.url,
        memory_collection=f"redact-memory-{suffix}",
        summary_collection=f"redact-sessions-{suffix}",
    )
    return MemoryStore(connect(location), location)


def session_with_secrets(
    sid: str, seed: int
) -> tuple[list[tuple[str, str, dict[str, Any]]], set[str]]:
    """One memory per kind, the credential in a different field each time, and a tool list
    and a reference URL carrying a token too."""
    creds = generated(seed)
    rows, secrets = [], {secret for secret, _ in creds.values()}
    for i, (kind, (secret, sentence)) in enumerate(creds.items()):
        parts = ["Make the exporter listen on port 7103.", "Decided to keep it.", "Done."]
        parts[i % 3] = f"{parts[i % 3]} {sentence}"
        if kind == "github-token":
            parts[1] += f" Decided to clone https://bot:{secret}@github.com/acme/api.git there."
        meta = {
            "sessionId": sid,
            "timestamp": 1_760_000_000_000 + i,
            "type": "agent-interaction",
            "prompt": parts[0],
            "thought": parts[1],
            "response": parts[2],
            "agent": "claude-code",
            "model": "claude-sonnet",
            "amountToolCalls": 1,
            "toolsUsed": json.dumps([f"auth {secret}"] if kind in SHAPED else ["edit_file"]),
        }
        rows.append((f"{sid}-{i}", render_interaction_document(*parts), meta))
    return rows, secrets


def everything_stored(store: MemoryStore, sid: str) -> str:
    """The row (document and metadata) and every record of the ledger, as one text."""
    client = connect(store.location)
    texts = []
    for name in (store.location.summary_collection, store.location.ledger_collection):
        got = client.get_collection(name).get(include=["documents", "metadatas"])
        texts.append(json.dumps([got["ids"], got["documents"], got["metadatas"]]))
    return "\n".join(texts)


def leaked(secrets: set[str], text: str) -> list[str]:
    return [s for s in secrets if s in text or json.dumps(s)[1:-1] in text]


@pytest.mark.parametrize("backend", ["extractive", "model"])
def test_no_credential_reaches_the_model_the_row_or_the_ledger(
    store: MemoryStore, model_server: OpenAIServer, backend: str
) -> None:
    sid = f"secrets-{backend}"
    rows, secrets = session_with_secrets(sid, seed=7)
    load(store, rows)
    summarizer: Any = EXTRACTIVE
    if backend == "model":
        summarizer = ChatModelSummarizer(
            ChatModelConfig(base_url=model_server.base_url, model="test-chat", max_retries=1)
        )
        model_server.script_chat(Reply(FIRST))
        sent_before = len(model_server.requests_to("/chat/completions"))
    outcome = summarize_session(
        store, sid, embed=embed, writer="it", trigger="manual", summarizer=summarizer
    )
    assert outcome.kind == "summarized"
    assert sum(outcome.redactions.values()) >= len(secrets)
    assert set(outcome.redactions) >= set(generated(7)) - {"hex-high-entropy-string"}
    stored = everything_stored(store, sid)
    assert leaked(secrets, stored) == []
    if backend == "model":
        sent = json.dumps(
            [r.body for r in model_server.requests_to("/chat/completions")[sent_before:]]
        )
        assert leaked(secrets, sent) == [] and "[redacted: aws-access-key]" in sent
        assert all(fact in sent for fact in FACTS)
    else:
        doc, meta = store.stored_summary(sid)  # type: ignore[misc]
        assert "port 7103" in doc and "[redacted: " in doc
        assert "https://bot:[redacted: basic-auth-credentials]@github.com/acme/api.git" in doc
        assert "auth [redacted: github-token]" in meta["toolsUsed"]


class _Unmasked(Redaction):
    """What a release before redaction stored: everything verbatim (and no masking of its
    own to name: its fingerprint is not the rules')."""

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "fingerprint", "unmasked")

    def text(self, text: str, found: Any = None) -> str:
        return text

    def source_meta(self, meta: Any) -> Any:
        return meta


def test_secrets_stored_by_an_earlier_release_are_masked_by_the_next_pass(
    store: MemoryStore,
) -> None:
    sid = "secrets-stored-before"
    rows, secrets = session_with_secrets(sid, seed=11)
    load(store, rows)
    kwargs: dict[str, Any] = {"embed": embed, "writer": "it", "trigger": "manual"}
    summarize_session(store, sid, redaction=_Unmasked(), **kwargs)
    assert leaked(secrets, everything_stored(store, sid))  # the old release's row
    outcome = summarize_session(store, sid, **kwargs)  # nothing new: written again, masked
    assert outcome.kind == "summarized" and outcome.new_memories == 0
    assert sum(outcome.redactions.values()) > 0
    # A quoted random string the old release listed bare (as a commit-hash reference) has
    # lost the quotes that made it a secret: only a rebuild from the memories removes it.
    bare = generated(11)["hex-high-entropy-string"][0]
    assert leaked(secrets - {bare}, everything_stored(store, sid)) == []
    doc, _ = store.stored_summary(sid)  # type: ignore[misc]
    assert "port 7103" in doc
    again = summarize_session(store, sid, **kwargs)
    assert again.kind == "up-to-date"
