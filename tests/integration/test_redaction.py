"""No credential reaches the model, the row or the ledger: generated credentials of every
kind the rules know, in prompts, thoughts, responses, tool lists and references, summarized
on a real Chroma through both backends (the scripted model server records what it got)."""

from __future__ import annotations

import hashlib
import json
import random
import string
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from controller.core.memories import render_interaction_document
from controller.core.merge import PassUpdate
from controller.core.naming import summary_object_name, summary_row_id
from controller.pipeline import Backends, summarize_session
from controller.redaction import DEFAULT_REDACTION, Redaction
from controller.store.connection import StoreLocation, connect
from controller.store.memory_store import MemoryStore
from controller.summarizers.chat_model import ChatModelSummarizer
from controller.summarizers.chat_prompt import ChatModelConfig
from controller.summarizers.contract import Proposal
from controller.summarizers.extractive import EXTRACTIVE
from devenv.chroma import ChromaServer
from devenv.operator import start_operator
from devenv.processes import stop, tail, wait_for
from tests.integration.harness import (
    NS,
    Harness,
    conditions_of,
    interaction,
    load,
    model_summarizer_yaml,
    summaries_in,
)
from tests.integration.test_model_backend import FIRST, embed
from tests.support.credentials import CONTEXT_SHAPES, Shape, generated, reference_sentences
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
    """One memory per kind, the credential in a different field each time, a tool list and
    a reference URL carrying a token too, a command line and prose carrying a password and a
    bearer token, and a provider's token as a memory's model."""
    creds, rng = generated(seed), random.Random(seed)
    rows, secrets = [], {secret for secret, _ in creds.values()}
    model = "sk-ant-api03-" + "".join(rng.choices(string.ascii_letters, k=93)) + "AA"
    password, bearer = ("".join(rng.sample(string.ascii_letters, 14)) + "7q" for _ in "ab")
    secrets |= {model, password, bearer}
    for i, (kind, (secret, sentence)) in enumerate(creds.items()):
        parts = ["Make the exporter listen on port 7103.", "Decided to keep it.", "Done."]
        parts[i % 3] = f"{parts[i % 3]} {sentence}"
        if kind == "github-token":
            parts[1] += f" Decided to clone https://bot:{secret}@github.com/acme/api.git there."
            parts[2] += f" Ran sqlcmd -S db -U sa -P {password} -Q x; I sent Bearer {bearer}."
        meta = {
            "sessionId": sid,
            "timestamp": 1_760_000_000_000 + i,
            "type": "agent-interaction",
            "prompt": parts[0],
            "thought": parts[1],
            "response": parts[2],
            "agent": "claude-code",
            "model": model if kind == "github-token" else "claude-sonnet",
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
        Backends(store, embed, summarizer=summarizer), sid, writer="it", trigger="manual"
    )
    assert outcome.kind == "summarized"
    assert sum(outcome.redactions.values()) >= len(secrets)
    assert set(outcome.redactions) >= set(generated(7))
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

    def settled(self, text: str, found: Any = None) -> tuple[str, bool]:
        return text, True  # what Redaction.text and a pass's masking both go through

    def source_meta(self, meta: Any) -> Any:
        return meta


def test_secrets_stored_by_an_earlier_release_are_masked_by_the_next_pass(
    store: MemoryStore,
) -> None:
    sid = "secrets-stored-before"
    rows, secrets = session_with_secrets(sid, seed=11)
    load(store, rows)
    kwargs: dict[str, Any] = {"writer": "it", "trigger": "manual"}
    summarize_session(Backends(store, embed, redaction=_Unmasked()), sid, **kwargs)
    assert leaked(secrets, everything_stored(store, sid))  # the old release's row
    # A piece the old release listed bare as a reference (a key's line read as a path) has
    # lost what made it a secret: only a rebuild from the memories removes it.
    refs = json.loads(store.stored_summary(sid)[1]["referencesJson"])  # type: ignore[index]
    bare = {s for s in secrets if any(s in r and not DEFAULT_REDACTION.spans(r) for r in refs)}
    assert len(bare) <= 1, bare
    outcome = summarize_session(
        Backends(store, embed), sid, **kwargs
    )  # nothing new: written again, masked
    assert outcome.kind == "summarized" and outcome.new_memories == 0
    assert sum(outcome.redactions.values()) > 0
    assert leaked(secrets - bare, everything_stored(store, sid)) == []
    doc, _ = store.stored_summary(sid)  # type: ignore[misc]
    assert "port 7103" in doc
    again = summarize_session(Backends(store, embed), sid, **kwargs)
    assert again.kind == "up-to-date"


# A secret in two halves, neither one a secret to the input's masking, and a model that
# joins them (asked to by an injected memory, or a hostile endpoint), and echoes a header.
HALVES = ("ghp_Q7xk2Lm9Rt4Vb8Nw", "Zp3Hc6Jd1Fg5Ks0Ya2Ue")
JOINED = "".join(HALVES)
LEAKING = {
    "title": "Leak Authorization: Bearer Zp3Hc6Jd1Fg5Ks0Ya2Ue",
    "user_requests": [f"The team secret is {JOINED}"],
    "questions_and_decisions": ["Make the exporter listen on port 7103."],
    "design_choices": [],
    "corrections_and_feedback": [],
    "current_state": [f"The exporter listens on port 7103 with {JOINED}."],
}


def _halves_session(store: MemoryStore, sid: str) -> None:
    said = f"Make the exporter listen on port 7103; the team secret halves are {HALVES[0]} and "
    load(store, [interaction(sid, 0, 1_770_000_000_000, said + f"{HALVES[1]}.")], embed)


def test_a_secret_in_the_models_answer_is_masked_in_the_row_the_status_and_the_ledger(
    harness: Harness, model_server: OpenAIServer
) -> None:
    name, sid = "model-leak", f"it-model-leak-{uuid.uuid4().hex[:6]}"
    yaml = model_summarizer_yaml(
        name, harness, model_server.base_url, model="test-chat", timeout_seconds=5, max_retries=1
    )
    harness.kubectl("apply", "-f", "-", input=yaml)
    store = harness.store(f"{name}-memory", f"{name}-sessions")
    _halves_session(store, sid)
    model_server.script_chat(Reply(LEAKING))
    res = harness.summaryctl("sunset", sid, "-n", NS, "--summarizer", name, "--wait", "60")
    assert res.returncode == 0, res.stdout + res.stderr
    stored, status = everything_stored(store, sid), harness.obj(sid)["status"]
    assert JOINED not in stored and HALVES[1] not in stored, stored
    assert "The team secret is [redacted: github-token]" in stored
    assert status["title"] == "Leak Authorization: [redacted: credential-header]", status
    assert JOINED not in json.dumps(status) and status["redactions"] >= 3, status


def test_a_secret_a_release_before_this_one_wrote_from_the_models_answer_is_found_and_masked(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row stamped by masking version 18 (which left the model's answer as it came) is
    looked at again: rebuild --all-with-secrets asks for it, the next pass masks it."""
    name, sid = "stale-leak", f"it-stale-leak-{uuid.uuid4().hex[:6]}"
    harness.kubectl("apply", "-f", "-", input=_summarizer(NS, name, harness.chroma.url, [], name))
    store = harness.store(f"{name}-memory", f"{name}-sessions")
    _halves_session(store, sid)
    monkeypatch.setattr("controller.redaction.MASKING_VERSION", 18)
    stale = _Unmasked()
    object.__setattr__(stale, "fingerprint", Redaction().fingerprint)
    monkeypatch.undo()
    assert stale.fingerprint != DEFAULT_REDACTION.fingerprint

    class Leaking:
        memory_budget_tokens, max_memories_per_pass, one_memory_per_item = 10_000, 100, False

        def propose(self, session_id: str, memories: Any, prior: Any) -> Proposal:
            return Proposal(PassUpdate.model_validate(LEAKING))

    backends = Backends(store, embed, summarizer=Leaking(), redaction=stale)
    summarize_session(backends, sid, writer="it", trigger="manual")
    assert JOINED in everything_stored(store, sid)  # what version 18 wrote
    found = summarize_session(Backends(store, embed), sid, writer="it", trigger="manual")
    assert found.kind == "summarized" and found.redactions.get("github-token"), found
    assert JOINED not in everything_stored(store, sid)

    summarize_session(backends, sid, writer="it", trigger="manual", rebuild=True)
    assert JOINED in everything_stored(store, sid)
    try:
        res = harness.summaryctl("rebuild", "--all-with-secrets", "--summarizer", name, "-n", NS)
        assert res.returncode == 0 and f"rebuild asked: {sid}" in res.stdout, res.stdout
        wait_for(lambda: JOINED not in everything_stored(store, sid), 60, 0.3, message=sid)
    finally:
        harness.kubectl("delete", "ssum", summary_object_name(sid), "--ignore-not-found")


def _legacy_row(store: MemoryStore, sid: str, title: str, text: str) -> None:
    """A summary another writer left (neo's own, or a release before this one)."""
    store.client.get_or_create_collection(store.location.summary_collection).upsert(
        ids=[summary_row_id(sid)],
        documents=[text],
        metadatas=[{"sessionId": sid, "timestamp": 1_760_000_000_000, "title": title}],
        embeddings=embed([text]),
    )


def _memory(sid: str, i: int, prompt: str, thought: str, response: str) -> Any:
    meta = {
        "sessionId": sid,
        "timestamp": 1_760_000_000_000 + i,
        "type": "agent-interaction",
        "prompt": prompt,
        "thought": thought,
        "response": response,
    }
    return (f"{sid}-{i}", render_interaction_document(prompt, thought, response), meta)


HYPOTHESIS = settings(
    max_examples=12,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.generate],  # a real pass per example: no slow shrinking
)


@given(shape=CONTEXT_SHAPES, legacy=st.booleans())
@HYPOTHESIS
def test_a_credential_for_where_it_stands_leaves_no_trace_in_any_position(
    store: MemoryStore, shape: Shape, legacy: bool
) -> None:
    """Through a real pass: in a prompt (the title when no other writer's title comes
    first), a response, a reference (a code span), another writer's title and text."""
    secret, spaced, compact = shape
    sid = f"shape-{uuid.uuid4().hex[:8]}"
    reference = f"`{compact}`" if compact else spaced
    load(
        store,
        [
            _memory(sid, 0, f"Rotate {spaced} for the deploy", "Plan it.", "Rotated."),
            _memory(sid, 1, "Check the store.", "Look.", f"Ran {spaced} and it answered."),
            _memory(sid, 2, "Note it.", f"Keep {reference} in mind.", "Noted."),
        ],
    )
    if legacy:
        _legacy_row(store, sid, f"Deploy with {spaced}", f"Earlier: {spaced} worked.")
    outcome = summarize_session(Backends(store, embed), sid, writer="it", trigger="manual")
    assert outcome.kind == "summarized"
    assert leaked({secret}, everything_stored(store, sid)) == []
    doc, meta = store.stored_summary(sid)  # type: ignore[misc]
    assert "[redacted: " in doc
    if "\n" not in spaced:  # a title is a first line: `[auth]\nkey = ...` leaves it the section
        assert "[redacted: " in meta["title"], meta["title"]
    if compact is not None:
        references = json.loads(meta["referencesJson"])
        assert any("[redacted: " in r for r in references), references


@given(found=st.lists(reference_sentences(), min_size=1, max_size=4), legacy=st.booleans())
@HYPOTHESIS
def test_an_identifier_that_looks_random_survives_a_real_pass_in_any_position(
    store: MemoryStore, found: list[tuple[str, str]], legacy: bool
) -> None:
    """Commits, UUIDs and digests in a prompt (the title), a response, a reference and
    another writer's title and text: each stored verbatim, nothing masked."""
    refs, sentences = zip(*found, strict=True)
    sid = f"refs-{uuid.uuid4().hex[:8]}"
    rows = [_memory(sid, 0, f"Ship {refs[0]} to production", "Plan it.", "Shipped.")]
    for i, sentence in enumerate(sentences, start=1):
        ref = refs[i - 1]
        rows.append(_memory(sid, i, "Go on.", f"Saw {sentence}", f"{sentence} See `{ref}`."))
    load(store, rows)
    if legacy:
        _legacy_row(store, sid, f"Release {refs[-1]}", " ".join(sentences))
    outcome = summarize_session(Backends(store, embed), sid, writer="it", trigger="manual")
    assert outcome.kind == "summarized" and outcome.redactions == {}
    doc, meta = store.stored_summary(sid)  # type: ignore[misc]
    assert "[redacted: " not in doc + json.dumps(meta)
    assert refs[-1 if legacy else 0][:40] in meta["title"], meta["title"]  # titles are bounded
    assert all(ref in json.loads(meta["referencesJson"]) for ref in refs)


def _summarizer(
    namespace: str, name: str, url: str, patterns: list[dict[str, str]], collections: str = ""
) -> str:
    return json.dumps(
        {
            "apiVersion": "memorycore.io/v1alpha1",
            "kind": "SessionSummarizer",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "store": {
                    "url": url,
                    "memoryCollection": f"{collections or namespace}-memory",
                    "summaryCollection": f"{collections or namespace}-sessions",
                },
                "sweep": {"enabled": False},
                "reconcile": {"enabled": False},
                "redaction": {"extraPatterns": patterns},
            },
        }
    )


def test_rebuild_all_with_secrets_asks_only_for_sessions_whose_text_holds_one(
    harness: Harness,
) -> None:
    """Not the ledger's digests (a tenant's pattern for 24-hex keys matches them), nor
    another writer's text naming a commit: only the row that carries a key."""
    name = "rescan"
    patterns = [{"name": "acme-key", "pattern": r"\b[0-9a-f]{24}\b"}]
    harness.kubectl("apply", "-f", "-", input=_summarizer(NS, name, harness.chroma.url, patterns))
    store = harness.store(f"{NS}-memory", f"{NS}-sessions")
    ours, leaky, theirs = (f"{k}-{uuid.uuid4().hex[:6]}" for k in ("ours", "leaky", "theirs"))
    load(store, [interaction(sid, 0, 1_770_000_000_000, "Rename the billing module.")
                 for sid in (ours, leaky, theirs)])  # fmt: skip
    res = harness.summaryctl("sunset", ours, "-n", NS, "--summarizer", name, "--wait", "60")
    assert res.returncode == 0, res.stdout + res.stderr
    lists = json.loads(store.stored_summary(ours)[1]["ledger.lists"])  # type: ignore[index]
    assert any(isinstance(v, list) and len(v[1]) == 24 for v in lists.values()), lists
    key = "AKIA" + uuid.uuid4().hex[:16].upper()
    commit = hashlib.sha1(leaky.encode()).hexdigest()
    _legacy_row(store, leaky, "Deploy", f"Deployed with {key} as the access key.")
    _legacy_row(store, theirs, "Revert", f"Reverted '{commit}' and renamed the module.")
    res = harness.summaryctl("rebuild", "--all-with-secrets", "--summarizer", name, "-n", NS)
    assert res.returncode == 0, res.stdout + res.stderr
    asked = {line.split(": ", 1)[1] for line in res.stdout.splitlines() if "rebuild asked" in line}
    assert asked == {leaky}, res.stdout
    wait_for(lambda: key not in json.dumps(store.stored_summary(leaky)), 60, 0.3, message=key)
    assert store.stored_summary(theirs)[0] == f"Reverted '{commit}' and renamed the module."  # type: ignore[index]


@given(ticket=st.integers(0, 999_999), prior=st.sampled_from((None, "shared", "own")))
@example(ticket=123_456, prior="shared").via("the object names a summarizer on the same store")
@example(ticket=654_321, prior="own").via("the object names a summarizer on another store")
@example(ticket=7, prior=None).via("no object yet")
@settings(HYPOTHESIS, max_examples=2)
def test_rebuild_all_with_secrets_rebuilds_under_the_summarizer_that_found_the_secret(
    harness: Harness, ticket: int, prior: str | None
) -> None:
    """--summarizer B finds a secret by B's patterns in B's store: the rebuild runs under B
    (summarizerRef set to B) whether the session's SessionSummary is new or names another
    summarizer A, on B's store or its own, so B's store keeps no unmasked secret."""
    suffix = uuid.uuid4().hex[:6]
    a, b = f"rb-a-{suffix}", f"rb-b-{suffix}"
    patterns = [{"name": "acme-ticket", "pattern": r"\bACME-\d{6}\b"}]
    url, secret = harness.chroma.url, f"ACME-{ticket:06d}"
    own = a if prior == "own" else b  # A's collections
    harness.kubectl("apply", "-f", "-", input=_summarizer(NS, b, url, patterns, b))
    harness.kubectl("apply", "-f", "-", input=_summarizer(NS, a, url, [], own))
    sid = f"rb-{suffix}"
    turn = [interaction(sid, 0, 1_770_000_000_000, f"Deploy with {secret} as the ticket.")]
    for name in {b, own}:
        load(harness.store(f"{name}-memory"), turn)
    store = harness.store(f"{b}-memory", f"{b}-sessions")
    try:
        if prior is not None:
            res = harness.summaryctl("sunset", sid, "-n", NS, "--summarizer", a, "--wait", "60")
            assert res.returncode == 0, res.stdout + res.stderr
        if prior != "shared":  # the row B's store holds: another writer's, with the secret
            _legacy_row(store, sid, "Deploy", f"Deployed with {secret} as the ticket.")
        assert secret in json.dumps(store.stored_summary(sid))
        res = harness.summaryctl("rebuild", "--all-with-secrets", "--summarizer", b, "-n", NS)
        assert res.returncode == 0 and f"rebuild asked: {sid}" in res.stdout, (
            res.stdout + res.stderr
        )
        obj = harness.wait_phase(sid, "Summarized")
        stored = json.dumps(store.stored_summary(sid))
        assert secret not in stored and "[redacted: acme-ticket]" in stored, stored
        assert obj["spec"]["summarizerRef"] == b, obj["spec"]
    finally:
        harness.kubectl("delete", "ssum", summary_object_name(sid), "--ignore-not-found")
        harness.kubectl("delete", "ssumr", a, b, "--ignore-not-found", "--wait=false")


def test_one_tenants_patterns_never_stall_another_tenants_sunset(harness: Harness) -> None:
    """Two namespaces, one operator: a pattern that backtracks for ever under Python's re
    runs in linear time; one RE2 refuses is refused by the apiserver, or shown on its
    SessionSummarizer (SpecValid False, InvalidSpec, a Warning Event) and fails only the
    passes that use it; the other namespace's sunset is summarized meanwhile."""
    cp, url = harness.cp, harness.chroma.url
    slow, other = f"tenant-{uuid.uuid4().hex[:5]}", f"tenant-{uuid.uuid4().hex[:5]}"
    for ns in (slow, other):
        cp.kubectl_run("create", "namespace", ns)

    def apply(ns: str, name: str, patterns: list[dict[str, str]], check: bool = True) -> Any:
        return cp.kubectl_run(
            "apply", "-f", "-", input=_summarizer(ns, name, url, patterns), check=check
        )

    refused = apply(slow, "lookbehind", [{"name": "x", "pattern": r"(?<=key=)\w+"}], check=False)
    assert refused.returncode != 0 and "must be an RE2 regular expression" in refused.stderr
    apply(slow, "runaway", [{"name": "runaway", "pattern": "(a+)+$"}])
    apply(slow, "oversized", [{"name": "letters", "pattern": r"\pL{1000}"}])  # over RE2's bound
    apply(other, "plain", [])
    a, b, c = (f"{k}-{uuid.uuid4().hex[:6]}" for k in "abc")
    load(harness.store(f"{slow}-memory", f"{slow}-sessions"),
         [interaction(a, 0, 1_770_000_000_000, "a" * 40 + "!"),
          interaction(c, 0, 1_770_000_000_000, "Rename the billing module.")])  # fmt: skip
    load(harness.store(f"{other}-memory", f"{other}-sessions"),
         [interaction(b, 0, 1_770_000_000_000, "Rename the billing module.")])  # fmt: skip
    log = harness.log.with_name(f"{slow}.log")
    env = dict(cp.env(), SSO_REPLICA_ID="tenants", SSO_FAILURE_GATE="2",
               SSO_RETRY_BASE_SECONDS="0.5", SSO_RETRY_MAX_SECONDS="1")  # fmt: skip
    proc = start_operator(log, env, "--standalone", "--namespace", slow, "--namespace", other)
    try:
        started = time.monotonic()
        for ns, sid, name in ((slow, a, "runaway"), (slow, c, "oversized")):
            res = harness.summaryctl("sunset", sid, "-n", ns, "--summarizer", name)
            assert res.returncode == 0, res.stdout + res.stderr
        res = harness.summaryctl("sunset", b, "-n", other, "--summarizer", "plain", "--wait", "90")
        assert res.returncode == 0, res.stdout + res.stderr + tail(log)
        print(f"the other tenant's sunset: {time.monotonic() - started:.1f}s")
        res = harness.summaryctl("sunset", a, "-n", slow, "--summarizer", "runaway", "--wait", "60")
        assert res.returncode == 0, res.stdout + res.stderr + tail(log)

        def shown() -> dict[str, Any] | None:
            out = cp.kubectl_run("-n", slow, "get", "ssumr", "oversized", "-o", "json").stdout
            cond = conditions_of(json.loads(out)).get("SpecValid")
            return cond if cond and cond["status"] == "False" else None

        cond = wait_for(shown, 60, 0.3, log=log)
        assert cond["reason"] == "InvalidSpec" and "pattern too large" in cond["message"], cond
        assert "spec.redaction.extraPatterns.0.pattern" in cond["message"], cond
        selector = "involvedObject.name=oversized,reason=InvalidSpec"
        events = cp.kubectl_run(
            "-n", slow, "get", "events", "-o", "json", "--field-selector", selector
        ).stdout
        assert json.loads(events)["items"], events
        summary = summary_object_name(c)
        wait_for(
            lambda: "InvalidSummarizer" in json.dumps(summaries_in(slow).get(summary)),
            60,
            0.3,
            log=log,
        )
    finally:
        stop(proc)


_UNSEEN = "\u00ad\u200e\u034f\u180e\u2065\ufe0f\U000e0041"  # default-ignorable code points
_SEPARATOR = st.sampled_from([": ", "=", "\uff1a", "\uff1d", "\ufe55 "])  # NFKC: `:`, `=`
_MARKDOWN = st.sampled_from(["{n}{s}{v}", "**{n}**{s}{v}", "**{n}{s}** {v}", "| {n} | `{v}` |"])


@given(
    name=st.sampled_from(["password", "DB_PASSWORD", "API key", "token", "client_secret"]),
    value=st.text("abcdefghjkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ", min_size=6, max_size=12),
    digits=st.integers(10, 99_999),
    unseen=st.tuples(st.integers(1, 12), st.sampled_from(_UNSEEN)),
    separator=_SEPARATOR,
    form=_MARKDOWN,
)
@HYPOTHESIS
def test_a_credential_written_in_markdown_unseen_or_fullwidth_characters_leaves_no_trace(
    store: MemoryStore, name: str, value: str, digits: int, unseen: tuple[int, str],
    separator: str, form: str,
) -> None:  # fmt: skip
    """`**Password**: x`, `| DB_PASSWORD | `x` |`, `pass\\u00adword: x`, `password：x`: through
    a real pass, neither the row nor the ledger holds the secret as a reader sees it."""
    secret = f"{value}{digits}"
    at = unseen[0] % len(name)
    odd = name[:at] + unseen[1] + name[at:]
    sid = f"markdown-{uuid.uuid4().hex[:8]}"
    line = form.format(n=odd, s=separator, v=secret)
    load(store, [_memory(sid, 0, "Set up the db.", "Plan it.", f"Done.\n{line}\nRestarted.")])
    outcome = summarize_session(Backends(store, embed), sid, writer="it", trigger="manual")
    assert outcome.kind == "summarized"
    client = connect(store.location)
    for collection in (store.location.summary_collection, store.location.ledger_collection):
        got = client.get_collection(collection).get(include=["documents", "metadatas"])
        stored = json.dumps([got["documents"], got["metadatas"]], ensure_ascii=False)
        assert secret not in stored, line
