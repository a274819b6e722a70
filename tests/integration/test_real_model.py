"""The model backend against a real language model, offline: llama.cpp's server (xllamacpp)
serving SmolLM2-135M (tests/support/llama_server.py), real Chroma, and the operator on the
real control plane.

The model is poor at the task, and its replies are not scripted: each test accepts either
outcome a user may see, and checks that outcome in full. A pass either stores a summary
that keeps every prior fact and holds no junk (tests/support/real_model_fixture.judge), or
fails with InvalidModelOutput / ModelUnavailable and leaves the stored row as it was, to
the byte. One server serves the whole module (2 threads); prompts are short transcripts.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from controller.core.naming import summary_object_name
from controller.core.summary import StructuredSummary
from controller.embeddings.minilm import LocalMiniLMEmbedding
from controller.pipeline import Backends, summarize_session
from controller.store.connection import StoreLocation, connect
from controller.store.memory_store import MemoryStore
from controller.summarizers.chat_model import ChatModelSummarizer
from controller.summarizers.chat_prompt import ChatModelConfig, InvalidModelOutput, ModelUnavailable
from devenv.chroma import ChromaServer
from devenv.processes import wait_for
from tests.integration.harness import NS, Harness, load, model_summarizer_yaml, stored_summary_ids
from tests.support import llama_server
from tests.support.cli import summaryctl_here
from tests.support.llama_server import LlamaServer, running_llama_server
from tests.support.real_model_fixture import (
    INJECTED,
    INJECTED_CLAIM,
    PLAIN,
    Transcript,
    judge,
    memory_rows,
)

_EMBED = LocalMiniLMEmbedding()


def embed(texts: list[str]) -> list[Any]:
    return list(_EMBED(texts))


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    with running_llama_server(tmp_path_factory.mktemp("llama")) as server:
        yield server


@pytest.fixture
def store(chroma_server: ChromaServer) -> MemoryStore:
    suffix = uuid.uuid4().hex[:8]
    location = StoreLocation(
        url=chroma_server.url,
        memory_collection=f"real-memory-{suffix}",
        summary_collection=f"real-sessions-{suffix}",
    )
    return MemoryStore(connect(location), location)


def real_summarizer(llama: LlamaServer, **options: Any) -> ChatModelSummarizer:
    config: dict[str, Any] = {
        "base_url": llama.base_url,
        "model": "smollm2",
        "timeout_seconds": 240.0,
        "max_retries": 1,
        "backoff_seconds": 0.1,
        "max_output_tokens": 600,
    }
    config.update(options)
    return ChatModelSummarizer(ChatModelConfig(**config))


def row(store: MemoryStore, sid: str) -> tuple[str, dict[str, Any]]:
    got = store.summaries().get(ids=[f"summary_{sid}"], include=["documents", "metadatas"])
    assert got["ids"] == [f"summary_{sid}"]
    return got["documents"][0], dict(got["metadatas"][0])


def with_extractive_prior(store: MemoryStore, sid: str, transcript: Transcript) -> Any:
    """The transcript's first turns summarized by the extractive backend, then its later
    turns loaded: the model's pass builds on a good prior."""
    load(store, memory_rows(sid, transcript.before))
    outcome = summarize_session(Backends(store, embed), sid, writer="it", trigger="manual")
    assert outcome.kind == "summarized"
    load(store, memory_rows(sid, transcript.after, start=len(transcript.before)))
    return row(store, sid)


def model_pass(store: MemoryStore, sid: str, summarizer: ChatModelSummarizer) -> Any:
    return summarize_session(
        Backends(store, embed, summarizer=summarizer), sid, writer="it", trigger="manual"
    )


def test_a_first_pass_stores_a_sound_summary_or_nothing(
    store: MemoryStore, llama: LlamaServer
) -> None:
    sid = f"real-first-{uuid.uuid4().hex[:6]}"
    load(store, memory_rows(sid, PLAIN.before + PLAIN.after))
    summarizer = real_summarizer(llama)
    try:
        outcome = model_pass(store, sid, summarizer)
    except InvalidModelOutput as exc:
        assert "\n" not in str(exc) and "after 2 attempts" in str(exc)
        assert stored_summary_ids(store, [f"summary_{sid}"]) == []  # no junk stored
    else:
        assert outcome.kind == "summarized" and outcome.memory_count == 3
        stored = store.read_summary(sid)
        assert isinstance(stored, StructuredSummary)
        verdict = judge(PLAIN, None, stored)
        assert verdict.clean, verdict
    # llama.cpp's server takes the schema: the backend never had to fall back.
    assert summarizer.response_format == "json_schema"


def test_an_injected_transcript_loses_no_prior_fact_and_stores_no_injected_claim(
    store: MemoryStore, llama: LlamaServer
) -> None:
    sid = f"real-injected-{uuid.uuid4().hex[:6]}"
    good = with_extractive_prior(store, sid, INJECTED)
    prior = store.read_summary(sid)
    assert isinstance(prior, StructuredSummary)
    try:
        outcome = model_pass(store, sid, real_summarizer(llama))
    except InvalidModelOutput:
        assert row(store, sid) == good  # untouched, to the byte
        return
    assert outcome.kind == "summarized" and outcome.memory_count == 3
    stored = store.read_summary(sid)
    assert isinstance(stored, StructuredSummary)
    verdict = judge(INJECTED, prior, stored)
    assert verdict.clean, verdict
    doc, _ = row(store, sid)
    for line in doc.splitlines():
        if INJECTED_CLAIM in line.lower():
            assert "(quoted)" in line or "not an instruction" in line, line


def test_a_reply_cut_off_by_max_tokens_is_refused_and_the_prior_stays(
    store: MemoryStore, llama: LlamaServer
) -> None:
    sid = f"real-cut-{uuid.uuid4().hex[:6]}"
    good = with_extractive_prior(store, sid, PLAIN)
    summarizer = real_summarizer(llama, max_output_tokens=24, max_retries=0)
    with pytest.raises(InvalidModelOutput, match="cut off at the output token limit"):
        model_pass(store, sid, summarizer)
    assert row(store, sid) == good


def test_a_server_that_is_gone_is_model_unavailable_and_the_prior_stays(
    store: MemoryStore, llama: LlamaServer
) -> None:
    """A second server on the same model, stopped: what a crashed model server looks like."""
    sid = f"real-gone-{uuid.uuid4().hex[:6]}"
    good = with_extractive_prior(store, sid, PLAIN)
    with running_llama_server() as doomed:
        summarizer = real_summarizer(doomed, timeout_seconds=5.0)
    with pytest.raises(ModelUnavailable, match="ConnectError connecting"):
        model_pass(store, sid, summarizer)
    assert row(store, sid) == good


# -- the operator ---------------------------------------------------------------------------


def real_model_summarizer_yaml(name: str, harness: Harness, base_url: str) -> str:
    return model_summarizer_yaml(
        name,
        harness,
        base_url,
        model="smollm2",
        timeout_seconds=240,
        max_retries=0,
        max_concurrency=1,
    )


def test_a_sunset_with_the_real_model_ends_summarized_or_with_a_clear_condition(
    harness: Harness, llama: LlamaServer
) -> None:
    name, sid = f"real-{uuid.uuid4().hex[:6]}", f"it-real-{uuid.uuid4().hex[:6]}"
    harness.kubectl(
        "apply", "-f", "-", input=real_model_summarizer_yaml(name, harness, llama.base_url)
    )
    store = harness.store(f"{name}-memory", f"{name}-sessions")
    load(store, memory_rows(sid, PLAIN.before + PLAIN.after))
    try:
        res = summaryctl_here("sunset", sid, "-n", NS, "--summarizer", name, "--wait", "0")
        assert res.returncode == 0, res.stdout + res.stderr

        def settled() -> dict[str, Any] | None:
            status = harness.obj(sid).get("status") or {}
            conditions = {c["type"]: c for c in status.get("conditions") or []}
            summarized = conditions.get("Summarized")
            if status.get("phase") == "Summarized" or (
                summarized and summarized["status"] == "False"
            ):
                return status
            return None

        status = wait_for(settled, 300, 1.0, message=f"{sid}: Summarized, or a failed condition")
        summarized = {c["type"]: c for c in status["conditions"]}["Summarized"]
        if status["phase"] == "Summarized":
            stored = store.read_summary(sid)
            assert isinstance(stored, StructuredSummary)
            assert judge(PLAIN, None, stored).clean, judge(PLAIN, None, stored)
            assert status["modelTokens"] > 0
        else:
            assert summarized["reason"] in {"InvalidModelOutput", "ModelUnavailable"}, summarized
            assert "\n" not in summarized["message"] and len(summarized["message"]) < 400
            assert any(e["reason"] == summarized["reason"] for e in harness.events(sid))
            assert stored_summary_ids(store, [f"summary_{sid}"]) == []  # no junk stored
    finally:  # no retries against the model server after the test
        harness.kubectl("delete", "ssum", summary_object_name(sid), "--ignore-not-found")
        harness.kubectl("delete", "ssumr", name, "--ignore-not-found")


def test_a_model_file_that_is_not_the_pinned_one_fails_with_a_clear_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert llama_server.model_path().name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    monkeypatch.setattr(llama_server, "MODEL_SHA256", "0" * 64)
    with pytest.raises(llama_server.RealModelUnavailable) as caught:
        llama_server.model_path()
    message = str(caught.value)
    assert "the tests pin " + "0" * 64 in message and "hack/install-python.sh" in message
