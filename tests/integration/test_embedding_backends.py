"""Summaries embedded through an OpenAI-compatible /v1/embeddings endpoint over real HTTP,
and the failures a user can cause with the embedding config: reported, never overwriting."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator

import pytest

from controller.store.errors import EmbeddingMismatch
from controller.store.memory_store import RowWrite, recorded_function, write_alone
from devenv.processes import wait_for
from tests.integration.harness import NS, Harness, interaction, load, stored_summary_ids
from tests.support.openai_server import OpenAIServer, Status, hash_embedding, running_openai_server


@pytest.fixture
def embed_server() -> Iterator[OpenAIServer]:
    with running_openai_server(embedding_model="test-embedding") as server:
        yield server


def remote_summarizer(name: str, url: str, base_url: str, summary: str) -> str:
    return json.dumps(
        {
            "apiVersion": "memorycore.io/v1alpha1",
            "kind": "SessionSummarizer",
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "store": {"url": url, "summaryCollection": summary},
                "embedding": {"provider": "openai", "model": "test-embedding", "baseUrl": base_url},
                "sweep": {"enabled": False},
                "reconcile": {"enabled": False},
            },
        }
    )


def condition(harness: Harness, session_id: str) -> dict[str, str]:
    st = harness.obj(session_id).get("status") or {}
    return {c["type"]: c for c in st.get("conditions") or []}.get("Summarized", {})


def test_summaries_are_embedded_by_the_configured_http_endpoint(
    harness: Harness, embed_server: OpenAIServer
) -> None:
    sid = "it-remote-embed"
    load(harness.store(), [interaction(sid, 0, 1_760_000_000_000, "Add a dark mode toggle.")])
    manifest = remote_summarizer(
        "remote", harness.chroma.url, embed_server.base_url, "remote-sessions"
    )
    harness.kubectl("apply", "-f", "-", input=manifest)
    res = harness.summaryctl("sunset", sid, "-n", NS, "--summarizer", "remote", "--wait", "60")
    assert res.returncode == 0, res.stdout + res.stderr
    calls = embed_server.requests_to("/embeddings")
    assert calls and calls[-1].body["model"] == "test-embedding"
    summarizer = json.loads(harness.kubectl("get", "ssumr", "remote", "-n", NS, "-o", "json"))
    ready = {c["type"]: c for c in summarizer["status"]["conditions"]}["EmbeddingReady"]
    assert ready["status"] == "True" and "openai produces 384-d vectors" in ready["message"]
    got = (
        harness.store(summary="remote-sessions")
        .summaries()
        .get(ids=[f"summary_{sid}"], include=["documents", "embeddings"])
    )
    expected = hash_embedding(got["documents"][0])
    stored = [float(x) for x in got["embeddings"][0]]
    assert math.isclose(
        sum(a * b for a, b in zip(stored, expected, strict=True)), 1.0, rel_tol=1e-4
    )


def test_embedding_endpoint_outage_is_reported_then_recovers(
    harness: Harness, embed_server: OpenAIServer
) -> None:
    sid = "it-embed-outage"
    load(harness.store(), [interaction(sid, 0, 1_760_000_000_000, "Write the changelog.")])
    # The outage lasts until the test has seen it (the probe is retried every 2 s here).
    embed_server.script_embeddings(*[Status(500)] * 300)
    manifest = remote_summarizer(
        "remote-flaky", harness.chroma.url, embed_server.base_url, "flaky-sessions"
    )
    harness.kubectl("apply", "-f", "-", input=manifest)

    # The summarizer's own probe meets the outage first and reports it.
    def summarizer_condition() -> dict[str, str] | None:
        got = json.loads(harness.kubectl("get", "ssumr", "remote-flaky", "-n", NS, "-o", "json"))
        conds = {c["type"]: c for c in (got.get("status") or {}).get("conditions") or []}
        return conds.get("EmbeddingReady")

    probe = wait_for(summarizer_condition, 60, 0.3, message="EmbeddingReady on the summarizer")
    assert probe["status"] == "False" and probe["reason"] == "EmbeddingUnavailable"
    assert "500" in probe["message"]
    # It probes again while False, and reports the recovery once the endpoint answers.
    embed_server.end_embedding_script()
    wait_for(
        lambda: (summarizer_condition() or {}).get("status") == "True",
        60,
        0.3,
        message="EmbeddingReady True again",
    )

    # A session pass that meets an outage fails, says why, and recovers by itself. The
    # outage lasts until the test has looked (a retry follows within 0.5 s here: an outage
    # of one attempt could end before the store is read).
    embed_server.script_embeddings(*[Status(500)] * 300)
    harness.summaryctl("sunset", sid, "-n", NS, "--summarizer", "remote-flaky")
    wait_for(
        lambda: condition(harness, sid).get("reason") == "EmbeddingUnavailable",
        60,
        0.2,
        message="EmbeddingUnavailable",
    )
    assert "500" in condition(harness, sid)["message"]
    assert stored_summary_ids(harness.store(summary="flaky-sessions"), [f"summary_{sid}"]) == []
    embed_server.end_embedding_script()
    harness.wait_phase(sid, "Summarized", timeout=60)


def test_dimension_mismatch_fails_and_keeps_the_good_summary(
    harness: Harness, embed_server: OpenAIServer
) -> None:
    sid = "it-dim-mismatch"
    store = harness.store(summary="mismatch-sessions")
    load(store, [interaction(sid, 0, 1_760_000_000_000, "Plan the database migration.")])
    local = json.loads(remote_summarizer("mismatch", harness.chroma.url, "", "mismatch-sessions"))
    local["spec"]["embedding"] = {"provider": "local-minilm"}
    harness.kubectl("apply", "-f", "-", input=json.dumps(local))
    assert (
        harness.summaryctl(
            "sunset", sid, "-n", NS, "--summarizer", "mismatch", "--wait", "60"
        ).returncode
        == 0
    )
    good = store.summaries().get(ids=[f"summary_{sid}"], include=["documents", "metadatas"])

    # The summarizer is switched to a model of another dimension; new memories arrive.
    embed_server.embedding_dimension = 8
    harness.kubectl(
        "apply",
        "-f",
        "-",
        input=remote_summarizer(
            "mismatch", harness.chroma.url, embed_server.base_url, "mismatch-sessions"
        ),
    )
    load(store, [interaction(sid, 1, 1_760_000_100_000, "Add a rollback step.")])
    harness.summaryctl("sunset", sid, "-n", NS, "--summarizer", "mismatch")
    obj = harness.wait_phase(sid, "Failed")
    cond = condition(harness, sid)
    assert cond["reason"] == "EmbeddingMismatch"
    assert "384-d" in cond["message"] and "8-d" in cond["message"]
    assert "EmbeddingMismatch" in [e["reason"] for e in harness.events(sid)]
    assert obj["status"]["memoryCount"] == 1
    after = store.summaries().get(ids=[f"summary_{sid}"], include=["documents", "metadatas"])
    assert after == good

    # The summarizer itself says so, before any session is tried.
    def embedding_condition() -> dict[str, str] | None:
        got = json.loads(harness.kubectl("get", "ssumr", "mismatch", "-n", NS, "-o", "json"))
        conds = {c["type"]: c for c in (got.get("status") or {}).get("conditions") or []}
        cond = conds.get("EmbeddingReady")
        return cond if cond and cond["status"] == "False" else None

    ready = wait_for(embedding_condition, 60, 0.3, message="EmbeddingReady False")
    assert ready["reason"] == "EmbeddingMismatch" and "8-d" in ready["message"]


def test_the_store_refuses_vectors_of_another_dimension_even_without_the_sample(
    harness: Harness,
) -> None:
    """The pre-write sample is kept once it matched, and skipped while a new collection is
    still being indexed; Chroma's own check on the upsert is then the guard, reported as
    the same EmbeddingMismatch, and the stored row is untouched."""
    store = harness.store(summary="dimension-guard-sessions")
    write_alone(store, RowWrite("s1", "first", {"sessionId": "s1"}, [0.5] * 8))
    store.check_embedding(8)
    store.check_embedding(8)  # kept: no second sample needed
    with pytest.raises(EmbeddingMismatch, match=r"holds 8-d .* produces 4-d"):
        store.check_embedding(4)
    with pytest.raises(EmbeddingMismatch, match=r"holds 8-d .* produces 4-d"):
        write_alone(store, RowWrite("s1", "second", {"sessionId": "s1"}, [0.5] * 4))
    row = store.summaries().get(ids=["summary_s1"], include=["documents", "embeddings"])
    assert row["documents"] == ["first"] and len(row["embeddings"][0]) == 8


def test_the_same_dimension_from_another_model_is_refused_naming_both_models(
    harness: Harness, embed_server: OpenAIServer
) -> None:
    """A summary collection that records another model (here an `openai` function with
    text-embedding-3-small, 384-d like ours) gets no vector of ours: Chroma's dimension
    check would pass, and every agent's semantic search over it would be wrong."""
    sid, summaries = "it-same-dim", "same-dim-sessions"
    store = harness.store(summary=summaries)
    load(store, [interaction(sid, 0, 1_760_000_000_000, "Tune the ranking weights.")])
    agents_function = recorded_function(
        {"name": "openai", "config": {"model_name": "text-embedding-3-small"}}
    )
    coll = store.client.create_collection(summaries, embedding_function=agents_function)
    coll.add(ids=["summary_other"], documents=["x"], embeddings=[[0.1] * 384])
    harness.kubectl(
        "apply",
        "-f",
        "-",
        input=remote_summarizer("same-dim", harness.chroma.url, embed_server.base_url, summaries),
    )
    harness.summaryctl("sunset", sid, "-n", NS, "--summarizer", "same-dim")
    harness.wait_phase(sid, "Failed")
    cond = condition(harness, sid)
    assert cond["reason"] == "EmbeddingMismatch"
    assert "text-embedding-3-small" in cond["message"] and "test-embedding" in cond["message"]
    assert "EmbeddingMismatch" in [e["reason"] for e in harness.events(sid)]
    assert stored_summary_ids(store, [f"summary_{sid}"]) == []
