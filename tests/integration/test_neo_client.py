"""The real-client tier: neo's memory-core (neo.mjs 13.1.0 from the npm registry, run by
tests/neo/driver.mjs) writes the memories and reads the summaries, against a real Chroma, an
OpenAI-compatible embeddings server over real HTTP at neo's 4096 dimensions, and the
operator on the real control plane. Nothing of neo is imitated here: its addMemory, its
embed daemon's drain, its get_all_summaries / query_summaries and its own summary writer
are the code agents run.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from controller.core.naming import summary_row_id
from controller.core.summary_row import NEO_DERIVED_KEYS, READER_ROW_KEYS
from controller.core.visibility import (
    DEFAULT_VISIBILITY,
    NEO_IDENTITY_TRUST_TIERS,
    NEO_SHARED_AGENTS,
    TRUST_TIER_ORDER,
    SessionSources,
    VisibilityRules,
    canonical_agent,
    row_visibility,
    summary_user_id,
)
from devenv.chroma import ChromaServer
from devenv.processes import wait_for
from tests.integration.harness import NS, Harness
from tests.support.cli import summaryctl_here
from tests.support.neo import NEO_DIMENSION, NEO_EMBEDDING_MODEL, NeoClient, neo_client_dir
from tests.support.openai_server import OpenAIServer, Reply, running_openai_server
from tests.support.previous_release import rewrite_as_previous_release


@pytest.fixture(scope="module")
def neo_package() -> Path:
    return neo_client_dir()


@pytest.fixture(scope="module")
def neo_model() -> Iterator[OpenAIServer]:
    """neo's embedding endpoint (and its chat model, for neo's own summary writer)."""
    with running_openai_server(
        embedding_dimension=NEO_DIMENSION, embedding_model=NEO_EMBEDDING_MODEL
    ) as server:
        yield server


@dataclass
class NeoStore:
    """One neo deployment's collections, the neo client on them and the SessionSummarizer
    the operator uses for them."""

    neo: NeoClient
    summarizer: str
    harness: Harness

    def memories(self) -> Any:
        return self.harness.store(self.neo.memory_collection).client.get_collection(
            self.neo.memory_collection
        )

    def summary_row(self, session_id: str) -> tuple[str, dict[str, Any]]:
        coll = self.harness.store().client.get_collection(self.neo.summary_collection)
        got = coll.get(ids=[summary_row_id(session_id)], include=["documents", "metadatas"])
        assert got["ids"], f"no summary row for {session_id}"
        return got["documents"][0], dict(got["metadatas"][0])

    def sunset(self, session_id: str) -> dict[str, Any]:
        res = summaryctl_here(
            "sunset", session_id, "-n", NS, "--summarizer", self.summarizer, "--wait", "90"
        )
        assert res.returncode == 0, res.stdout + res.stderr
        return self.harness.obj(session_id)


def summarizer_manifest(
    name: str, harness: Harness, neo: NeoClient, model: OpenAIServer, **spec: Any
) -> str:
    """A SessionSummarizer for a neo store: neo's collections and neo's embedding model
    through its OpenAI-compatible endpoint (docs/migrating-from-neo.md)."""
    return json.dumps(
        {
            "apiVersion": "memorycore.io/v1alpha1",
            "kind": "SessionSummarizer",
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "store": {
                    "url": harness.chroma.url,
                    "memoryCollection": neo.memory_collection,
                    "summaryCollection": neo.summary_collection,
                },
                "embedding": {
                    "provider": "openai",
                    "baseUrl": model.base_url,
                    "model": NEO_EMBEDDING_MODEL,
                },
                "sweep": {"enabled": False},
                "reconcile": {"enabled": False},
                **spec,
            },
        }
    )


@pytest.fixture
def neo_store(
    harness: Harness, neo_package: Path, neo_model: OpenAIServer, tmp_path: Path
) -> Iterator[NeoStore]:
    tag = uuid.uuid4().hex[:8]
    neo = NeoClient(
        neo_package,
        harness.chroma.url,
        neo_model.base_url.removesuffix("/v1"),
        tmp_path / "neo",
        memory_collection=f"neo-memory-{tag}",
        summary_collection=f"neo-sessions-{tag}",
    )
    name = f"neo-{tag}"
    yield NeoStore(neo, name, harness)
    harness.kubectl("delete", "ssumr", name, "--ignore-not-found", "--wait=false")


def apply_summarizer(target: NeoStore, model: OpenAIServer, **spec: Any) -> None:
    manifest = summarizer_manifest(target.summarizer, target.harness, target.neo, model, **spec)
    target.harness.kubectl("apply", "-f", "-", input=manifest)


def turn(session_id: str, prompt: str, **extra: Any) -> dict[str, Any]:
    """One agent turn as an agent saves it with neo's add_memory."""
    return {
        "sessionId": session_id,
        "prompt": prompt,
        "thought": f"Thinking about: {prompt}",
        "response": f"Done: {prompt}",
        "agent": "claude-code",
        "model": "claude-opus",
        "amountToolCalls": 1,
        "toolsUsed": [{"name": "Edit"}],
        **extra,
    }


def listed(result: dict[str, Any]) -> list[str]:
    return [s["sessionId"] for s in result["summaries"]]


def conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


# -- an agent's boot read ------------------------------------------------------------------------


def test_neo_agents_boot_read_lists_a_sunset_session_first_with_its_title_time_and_text(
    neo_store: NeoStore, neo_model: OpenAIServer
) -> None:
    neo = neo_store.neo
    old, new = f"older-{uuid.uuid4().hex[:6]}", f"ended-{uuid.uuid4().hex[:6]}"
    neo.add_memories([turn(old, "Rename the billing module.")])
    added = neo.add_memories(
        [
            turn(new, "Make the cache key the sha256 of the tenant id."),
            turn(new, "Why does the warm-up job time out after 30 seconds?"),
            turn(new, "Record the outcome: warm-up now streams in pages of 500."),
        ]
    )
    apply_summarizer(neo_store, neo_model)
    neo_store.sunset(old)
    obj = neo_store.sunset(new)
    assert obj["status"]["phase"] == "Summarized"

    boot = neo.list_summaries(limit=5)  # get_all_summaries({limit: 5}), as an agent boots
    assert listed(boot)[:2] == [new, old]
    first = boot["summaries"][0]
    assert first["title"] and first["title"] != "undefined"
    assert first["timestamp"] == added[-1]["timestamp"]  # ISO time of the newest memory
    assert "sha256 of the tenant id" in first["summary"]
    assert first["memoryCount"] == 3
    # The operator created the summary collection as neo creates its collections (neo's
    # function recorded, l2), so neo's readers open it as their own.
    config = (
        neo_store.harness.store().client.get_collection(neo.summary_collection).configuration_json
    )
    assert config["embedding_function"]["name"] == "dynamic_text_embedding_service"
    assert config["hnsw"]["space"] == "l2"
    # The vector is neo's model's, at neo's dimension: neo's semantic search finds it.
    found = neo.query_summaries(query="cache key sha256 tenant", nResults=2)
    assert "degraded" not in found and new in [r["sessionId"] for r in found["results"]]
    assert all(len(r["embedding"]) == NEO_DIMENSION for r in embeddings_of(neo_store, new))


def test_neos_boot_read_and_search_no_longer_find_a_forgotten_session(
    neo_store: NeoStore, neo_model: OpenAIServer
) -> None:
    neo = neo_store.neo
    kept, gone = f"kept-{uuid.uuid4().hex[:6]}", f"gone-{uuid.uuid4().hex[:6]}"
    neo.add_memories([turn(kept, "Rename the billing module.")])
    neo.add_memories([turn(gone, "Store the customer's home address in the CRM notes.")])
    apply_summarizer(neo_store, neo_model)
    neo_store.sunset(kept)
    neo_store.sunset(gone)
    assert set(listed(neo.list_summaries(limit=5))) == {kept, gone}
    res = summaryctl_here(
        "forget", gone, "-n", NS, "--summarizer", neo_store.summarizer, "--wait", "90"
    )
    assert res.returncode == 0, res.stdout + res.stderr
    # neo's own readers: the boot read and the semantic search.
    assert listed(neo.list_summaries(limit=5)) == [kept]
    found = neo.query_summaries(query="customer home address CRM", nResults=5)
    assert gone not in [r["sessionId"] for r in found.get("results", [])]


def embeddings_of(store: NeoStore, session_id: str) -> list[dict[str, Any]]:
    coll = store.harness.store().client.get_collection(store.neo.summary_collection)
    got = coll.get(ids=[summary_row_id(session_id)], include=["embeddings"])
    return [{"embedding": list(e)} for e in got["embeddings"]]


# -- who can see it: neo's tenancy and provenance filters ----------------------------------------


def test_under_neos_team_policy_every_user_and_the_authors_identity_read_the_summary(
    neo_store: NeoStore, neo_model: OpenAIServer
) -> None:
    neo, sid = neo_store.neo, f"alice-{uuid.uuid4().hex[:6]}"
    neo.add_memories([turn(sid, "Add retries to the exporter.", userId="alice")])
    apply_summarizer(neo_store, neo_model)
    neo_store.sunset(sid)
    _, meta = neo_store.summary_row(sid)
    assert "userId" not in meta  # untagged, as neo's own summary task leaves it
    assert meta["sourceAgentIdentities"] == "@alice"
    for reader in ("alice", "bob", None):
        assert sid in listed(neo.list_summaries(limit=5, userId=reader)), reader
    assert sid in listed(neo.list_summaries(limit=5, agentIdentity="@alice"))
    assert sid in listed(neo.list_summaries(limit=5, agentIdentity="alice"))
    assert sid not in listed(neo.list_summaries(limit=5, agentIdentity="@bob"))


def test_under_neos_private_policy_only_the_sessions_owner_reads_the_summary(
    neo_store: NeoStore, neo_model: OpenAIServer
) -> None:
    neo, sid = neo_store.neo, f"private-{uuid.uuid4().hex[:6]}"
    neo.policy = "private"
    neo.add_memories([turn(sid, "Rotate the signing key.", userId="alice")])
    apply_summarizer(neo_store, neo_model, visibility={"memorySharing": "private"})
    neo_store.sunset(sid)
    _, meta = neo_store.summary_row(sid)
    assert meta["userId"] == "alice"
    assert sid in listed(neo.list_summaries(limit=5, userId="alice"))
    assert sid not in listed(neo.list_summaries(limit=5, userId="bob"))
    found = neo.query_summaries(query="signing key", nResults=3, userId="bob")
    assert sid not in [r["sessionId"] for r in found["results"]]


def test_a_core_swarm_session_is_shared_and_carries_its_trust_tier_for_query_summaries(
    neo_store: NeoStore, neo_model: OpenAIServer
) -> None:
    neo = neo_store.neo
    swarm, outside = f"swarm-{uuid.uuid4().hex[:6]}", f"outside-{uuid.uuid4().hex[:6]}"
    neo.add_memories(
        [
            turn(swarm, "Plan the graph compaction.", agent="neo-opus-ada"),
            turn(swarm, "Review the compaction plan.", agent="neo-gpt"),
            turn(outside, "Plan the graph compaction differently.", userId="mallory"),
        ]
    )
    apply_summarizer(neo_store, neo_model)
    neo_store.sunset(swarm)
    neo_store.sunset(outside)
    _, meta = neo_store.summary_row(swarm)
    assert meta["userId"] == "shared"
    assert meta["sourceTrustTier"] == "peer-trusted"
    assert meta["provenancePolicy"] == "most-restrictive-source"
    assert set(meta["sourceAgentIdentities"].split(",")) == {"@neo-opus-ada", "@neo-gpt"}
    assert neo_store.summary_row(outside)[1]["sourceTrustTier"] == "unclassified"
    trusted = neo.query_summaries(query="graph compaction", nResults=5, minTrustTier="peer-trusted")
    assert [r["sessionId"] for r in trusted["results"]] == [swarm]
    anyone = neo.query_summaries(query="graph compaction", nResults=5, minTrustTier="unclassified")
    assert {r["sessionId"] for r in anyone["results"]} == {swarm, outside}
    assert swarm in listed(neo.list_summaries(limit=5, userId="bob"))


# -- another writer on the same rows -------------------------------------------------------------


def neo_summary_reply(text: str) -> Reply:
    """What neo's summary writer asks its model for (SessionService.summarizeSession)."""
    return Reply(
        {
            "summary": text,
            "title": "Neo's own title",
            "category": "bugfix",
            "quality": 90,
            "productivity": 80,
            "impact": 40,
            "complexity": 30,
            "technologies": ["nodejs"],
        }
    )


def test_a_row_neo_rewrites_is_carried_not_lost_and_the_object_says_so(
    neo_store: NeoStore, neo_model: OpenAIServer
) -> None:
    neo, sid = neo_store.neo, f"rewritten-{uuid.uuid4().hex[:6]}"
    neo.add_memories([turn(sid, "Pin the exporter to version 3.")])
    apply_summarizer(neo_store, neo_model)
    neo_store.sunset(sid)
    ours_before, _ = neo_store.summary_row(sid)
    assert "Pin the exporter to version 3" in ours_before

    # neo's own summary task (still switched on) rewrites the row with its model's text.
    neo_model.script_chat(neo_summary_reply("NEO-ONLY FACT: the exporter flakes on Mondays."))
    assert neo.summarize(sid)["summaryId"] == summary_row_id(sid)
    theirs, meta = neo_store.summary_row(sid)
    assert theirs == "NEO-ONLY FACT: the exporter flakes on Mondays."
    assert meta["rawCanonical"] is True and meta["summaryFormat"] == "structured-v1"
    # neo's graph digests the text it sees (DreamService marks the row, metadata only).
    coll = neo_store.harness.store().client.get_collection(neo.summary_collection)
    coll.update(
        ids=[summary_row_id(sid)], metadatas=[{"graphDigested": True, "digestState": "digested"}]
    )

    neo.add_memories([turn(sid, "Also pin the importer to version 2.")])
    obj = neo_store.sunset(sid)
    document, meta = neo_store.summary_row(sid)
    # Nothing lost: neo's text verbatim, our earlier items and the new memory.
    assert "NEO-ONLY FACT: the exporter flakes on Mondays." in document
    assert "Pin the exporter to version 3" in document
    assert "pin the importer to version 2" in document.lower()
    # No key is left describing a text it did not see.
    for key in NEO_DERIVED_KEYS:
        assert key not in meta, key
    single = conditions(obj)["SingleWriter"]
    assert (single["status"], single["reason"]) == ("False", "OtherWriterDetected")
    assert "neo memory-core's summary task" in single["message"]
    assert "migrating-from-neo.md" in single["message"]
    reasons = [e["reason"] for e in neo_store.harness.events(sid)]
    assert "OtherWriterDetected" in reasons
    # neo's readers list our row again, with neo's text in it.
    boot = neo.list_summaries(limit=5)["summaries"]
    assert boot[0]["sessionId"] == sid and "NEO-ONLY FACT" in boot[0]["summary"]

    # The next pass finds the row as it left it.
    neo.add_memories([turn(sid, "Document both pins in the README.")])
    again = conditions(neo_store.sunset(sid))["SingleWriter"]
    assert (again["status"], again["reason"]) == ("True", "NoOtherWriter")
    assert neo_store.summary_row(sid)[0].count("NEO-ONLY FACT") == 1


def test_a_long_summary_neo_wrote_stays_whole_for_neos_readers_after_the_takeover(
    neo_store: NeoStore, neo_model: OpenAIServer
) -> None:
    """neo's own summary of a long session (300 facts, about 16.5k characters) taken over
    by the operator: neo's readers cannot read the ledger, so its text stays whole in the
    document they read, after the operator's own part (which keeps its bound)."""
    neo, sid = neo_store.neo, f"long-neo-{uuid.uuid4().hex[:6]}"
    neo.add_memories([turn(sid, f"Tune the exporter's batch {k}.") for k in range(3)])
    facts = [f"- Fact {k}: the exporter batch {k} moved to port {7000 + k}." for k in range(300)]
    text = "\n".join(facts)
    assert 15_000 < len(text) < 18_000
    neo_model.script_chat(neo_summary_reply(text))
    assert neo.summarize(sid)["summaryId"] == summary_row_id(sid)
    assert neo_store.summary_row(sid)[0] == text
    apply_summarizer(neo_store, neo_model)
    neo_store.sunset(sid)
    document, _ = neo_store.summary_row(sid)
    assert text in document
    own = document.split(text)[0]
    assert len(own) <= 8000 and "Tune the exporter" in own
    boot = neo.list_summaries(limit=5)["summaries"]
    shown = next(s["summary"] for s in boot if s["sessionId"] == sid)
    assert [f for f in facts if f not in shown] == []


# -- our rules against neo's own code, for generated inputs -------------------------------------

NOT_TEXT = st.one_of(st.booleans(), st.integers(-(2**53), 2**53), st.floats(-1e6, 1e6))
IDENTITIES = st.sampled_from(
    [*NEO_IDENTITY_TRUST_TIERS, "@alice", "@Neo-Opus-Ada", "neo-gpt", "AGENT:*", "@", " "]
)
AGENTS = st.sampled_from(
    [
        "neo-opus-ada",
        "Neo-GPT (Codex)",
        "@neo-gemini-pro",
        " neo-opus-vega ",
        "claude-code",
        "@claude-code",
        "x,neo-gpt",
        "neo-fable",
        "(wrapped) ",
        "",
    ]
)


@st.composite
def memory_metadata(draw: st.DrawFn) -> dict[str, Any]:
    meta: dict[str, Any] = {"sessionId": "s", "timestamp": draw(st.integers(0, 10**13))}
    for key, values in (
        ("agentIdentity", st.one_of(IDENTITIES, st.text(max_size=12), NOT_TEXT)),
        ("agent", st.one_of(AGENTS, st.text(max_size=12))),
        ("userId", st.sampled_from(["alice", "@bob", "shared", "  ", ""])),
    ):
        if draw(st.booleans()):
            meta[key] = draw(values)
    return meta


SESSIONS = st.lists(st.lists(memory_metadata(), max_size=8), min_size=40, max_size=40)


def our_view(metadatas: list[dict[str, Any]], rules: VisibilityRules) -> dict[str, Any]:
    sources = SessionSources()
    for n, meta in enumerate(metadatas):
        sources.add(f"m{n}", meta, meta["timestamp"])
    return row_visibility(sources, rules)


@pytest.fixture(scope="module")
def neo_rules(
    chroma_server: ChromaServer,
    neo_package: Path,
    neo_model: OpenAIServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> NeoClient:
    """neo's code for its pure rules (no collection is touched)."""
    host = neo_model.base_url.removesuffix("/v1")
    return NeoClient(neo_package, chroma_server.url, host, tmp_path_factory.mktemp("neo-rules"))


def test_our_defaults_are_neos_roster_core_swarm_and_tier_order(neo_rules: NeoClient) -> None:
    neo = neo_rules.one({"op": "constants"})
    assert list(NEO_SHARED_AGENTS) == neo["coreSwarmUserIds"]
    assert neo["identityTrustTiers"] == NEO_IDENTITY_TRUST_TIERS
    assert list(TRUST_TIER_ORDER) == neo["trustTierOrder"]
    assert neo["sharedUserId"] == "shared"


# Each example is one node process over 40 sessions; a failure names its case (shrinking
# would start a node process per step).
NEO_EXAMPLES = settings(max_examples=4, deadline=None, database=None, phases=[Phase.generate])


@given(sessions=SESSIONS)
@NEO_EXAMPLES
def test_source_provenance_is_computed_as_neos_summary_writer_computes_it(
    neo_rules: NeoClient, sessions: list[list[dict[str, Any]]]
) -> None:
    theirs = neo_rules.one({"op": "provenance", "cases": sessions})
    for metadatas, expected in zip(sessions, theirs, strict=True):
        ours = our_view(metadatas, DEFAULT_VISIBILITY)
        got = {
            "sourceAgentIdentities": ours["sourceAgentIdentities"],
            "sourceTrustTier": ours["sourceTrustTier"],
            "unclassifiedSourceCount": ours["unclassifiedSourceCount"] or 0,
        }
        expected["sourceAgentIdentities"] = ",".join(expected["sourceAgentIdentities"])
        assert got == expected, f"memories: {metadatas}"


@given(sessions=SESSIONS)
@NEO_EXAMPLES
def test_the_user_tag_is_neos_for_its_background_writer_and_for_a_private_owner(
    neo_rules: NeoClient, sessions: list[list[dict[str, Any]]]
) -> None:
    """neo's writer tags with resolveSummaryVisibilityUserId({userId, participatingAgents}):
    its background task has no user (team/legacy: ours leaves the row untagged the same
    way); under private the user is the session's owner."""
    cases, ours = [], []
    for metadatas in sessions:
        agents = list(dict.fromkeys(m["agent"] for m in metadatas if m.get("agent")))
        owner = our_view(metadatas, DEFAULT_VISIBILITY)
        sources = SessionSources()
        for n, meta in enumerate(metadatas):
            sources.add(f"m{n}", meta, meta["timestamp"])
        user_id = sources.owner[2] if sources.owner else None
        for policy, user in (("team", None), ("private", user_id)):
            cases.append({"userId": user, "participatingAgents": ",".join(agents)})
            rules = VisibilityRules(memory_sharing=policy)  # type: ignore[arg-type]
            ours.append(summary_user_id(agents, user_id, rules))
        assert owner["userId"] == ours[-2]
    theirs = neo_rules.one({"op": "visibility", "cases": cases})
    for case, mine, neos in zip(cases, ours, theirs, strict=True):
        assert mine == neos, f"case: {case}"


# -- memory shapes: read as neo's own summary writer reads them -----------------------------------

TOOL_SHAPES: list[tuple[Any, Any]] = [
    ([{"name": "Edit"}, {"toolAction": "Bash"}, {"toolSummary": "grep for x"}, {}], 3),
    (["Read", '{"name": "Grep"}', "null", "123", ""], "4.7"),
    ("Write,Delete", "12 calls"),
    ("not json [", "abc"),
    ("x" * 70, 0),
    ('"quoted"', 2),
    ([{"name": "a" * 60}, {"name": ["left", "right"]}], 1),
    ([1, True, None], 5),
    ("\U0001f600" * 30, 1e21),
]

NUMBER_SOURCES = [(42, 7), (True, 2.5), (1.5, True)]


def test_tools_agents_and_counts_are_read_as_neos_summary_writer_reads_them(
    neo_store: NeoStore, neo_model: OpenAIServer
) -> None:
    neo, sid = neo_store.neo, f"shapes-{uuid.uuid4().hex[:6]}"
    agents = ["claude-code", "@claude-code", "Claude-Code (VS Code)"]
    neo.add_memories(
        [
            turn(sid, f"Step {n}.", toolsUsed=tools, amountToolCalls=calls, agent=agents[n % 3])
            for n, (tools, calls) in enumerate(TOOL_SHAPES)
        ]
        # A number or boolean agent or model (a tenant's save: neo reads agent.startsWith
        # only without one).
        + [turn(sid, "Odd.", userId="alice", agent=a, model=m) for a, m in NUMBER_SOURCES]
    )
    neo_model.script_chat(neo_summary_reply("neo's summary of the shapes session"))
    neo.summarize(sid)  # neo's own writer, into neo's summary collection
    _, theirs = neo_store.summary_row(sid)
    ours_collection = f"{neo.summary_collection}-ours"
    apply_summarizer(
        neo_store,
        neo_model,
        store={
            "url": neo_store.harness.chroma.url,
            "memoryCollection": neo.memory_collection,
            "summaryCollection": ours_collection,
        },
    )
    neo_store.sunset(sid)
    coll = neo_store.harness.store().client.get_collection(ours_collection)
    ours = dict(coll.get(ids=[summary_row_id(sid)], include=["metadatas"])["metadatas"][0])

    def names(meta: dict[str, Any], key: str) -> set[str]:
        return {n.strip() for n in str(meta[key]).split(",") if n.strip()}

    assert names(ours, "toolsUsed") == names(theirs, "toolsUsed")
    assert ours["totalToolCalls"] == theirs["totalToolCalls"]
    assert names(ours, "models") == names(theirs, "models")
    assert (ours["memoryCount"], ours["timestamp"]) == (theirs["memoryCount"], theirs["timestamp"])
    # neo lists each spelling of one agent; ours lists the agent once (as neo compares them).
    agents = {"claude-code", "42", "true", "1.5"}
    assert {canonical_agent(a) for a in names(theirs, "participatingAgents")} == agents
    assert names(ours, "participatingAgents") == agents


# -- the embedding model: neo's, or a condition before any write -------------------------------


def test_the_local_model_on_a_neo_store_is_refused_before_any_write_naming_both_models(
    neo_store: NeoStore, neo_model: OpenAIServer
) -> None:
    neo = neo_store.neo
    theirs, ours = f"neo-wrote-{uuid.uuid4().hex[:6]}", f"local-{uuid.uuid4().hex[:6]}"
    neo.add_memories([turn(theirs, "Summarized by neo."), turn(ours, "Never summarized.")])
    neo_model.script_chat(neo_summary_reply("neo's own summary"))
    neo.summarize(theirs)  # neo creates its summary collection, recording its function
    apply_summarizer(neo_store, neo_model, embedding={"provider": "local-minilm"})
    res = summaryctl_here(
        "sunset", ours, "-n", NS, "--summarizer", neo_store.summarizer, "--wait", "60"
    )
    assert res.returncode != 0
    summarized = conditions(neo_store.harness.obj(ours))["Summarized"]
    assert summarized["reason"] == "EmbeddingMismatch"
    assert "dynamic_text_embedding_service" in summarized["message"]
    assert "all-MiniLM-L6-v2" in summarized["message"]
    coll = neo_store.harness.store().client.get_collection(neo.summary_collection)
    assert coll.get(ids=[summary_row_id(ours)])["ids"] == []

    def probe() -> dict[str, Any] | None:
        obj = json.loads(
            neo_store.harness.kubectl("get", "ssumr", neo_store.summarizer, "-o", "json")
        )
        ready = conditions(obj).get("EmbeddingReady")
        return ready if ready and ready["reason"] == "EmbeddingMismatch" else None

    assert "dynamic_text_embedding_service" in wait_for(probe, 60, 0.5)["message"]


def test_the_recovery_path_writes_with_a_summarizers_settings_from_its_manifest(
    neo_store: NeoStore, neo_model: OpenAIServer, tmp_path: Path
) -> None:
    """summaryctl summarize (no operator) embeds with neo's model from the same manifest the
    operator uses, and tags the row the same way."""
    neo, sid = neo_store.neo, f"recovered-{uuid.uuid4().hex[:6]}"
    neo.add_memories([turn(sid, "Recover the lost summary of the audit.", agent="neo-gpt")])
    manifest = tmp_path / "summarizer.yaml"
    manifest.write_text(
        summarizer_manifest(neo_store.summarizer, neo_store.harness, neo, neo_model)
    )
    res = neo_store.harness.summaryctl(
        "summarize", sid, "--bypass-claim", "--summarizer-file", str(manifest)
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "summarized" in res.stdout
    _, meta = neo_store.summary_row(sid)
    assert meta["userId"] == "shared" and meta["sourceTrustTier"] == "peer-trusted"
    assert len(embeddings_of(neo_store, sid)[0]["embedding"]) == NEO_DIMENSION
    assert listed(neo.list_summaries(limit=5))[0] == sid
    # Without the summarizer's settings it is the local model: refused, naming both.
    neo.add_memories([turn(sid, "Check the audit again.", agent="neo-gpt")])
    res = summaryctl_here(
        "summarize",
        sid,
        "--bypass-claim",
        "--chroma-url",
        neo_store.harness.chroma.url,
        "--memory-collection",
        neo.memory_collection,
        "--summary-collection",
        neo.summary_collection,
    )
    assert res.returncode != 0
    assert "dynamic_text_embedding_service" in res.stderr


def test_a_plan_row_neo_ingests_with_a_float_timestamp_is_counted_and_summarized(
    neo_store: NeoStore, neo_model: OpenAIServer
) -> None:
    """neo's summary writer ingests an agent's implementation plan as a memory row of type
    implementation_plan whose timestamp is the file's float mtimeMs: the operator counts it
    as neo does and reads its text."""
    neo, sid = neo_store.neo, f"planned-{uuid.uuid4().hex[:6]}"
    neo.add_memories([turn(sid, "Plan the migration of the ledger service.")])
    plan = neo.workdir / "home/.gemini/antigravity/brain/conv-ledger/implementation_plan.md"
    plan.parent.mkdir(parents=True)
    plan.write_text("# Plan\n\nMove `services/ledger/migrate.py` to batches of 500 rows.\n")
    neo_model.script_chat(neo_summary_reply("neo's summary of the plan session"))
    neo.summarize(sid)  # ingests the plan (ingestAntigravityArtifacts), then we take over
    rows = neo_store.memories().get(where={"sessionId": sid}, include=["metadatas"])
    plan_meta = [m for m in rows["metadatas"] if m.get("type") == "implementation_plan"]
    assert len(plan_meta) == 1 and isinstance(plan_meta[0]["timestamp"], float)
    apply_summarizer(neo_store, neo_model)
    neo.add_memories([turn(sid, "Start with the ledger batches.")])
    obj = neo_store.sunset(sid)
    assert obj["status"]["memoryCount"] == 3  # two turns and the plan, as neo counts them
    document, meta = neo_store.summary_row(sid)
    assert meta["memoryCount"] == 3
    assert "services/ledger/migrate.py" in document


# -- the previous release's rows ---------------------------------------------------------------


def test_a_previous_release_row_is_listed_by_neo_before_and_after_its_first_write_slims_it(
    neo_store: NeoStore, neo_model: OpenAIServer
) -> None:
    """A row as the previous release wrote it (the writer's whole state on the row, its
    fence as claimFence, no ledger entry) is listed by neo's reader; the next sunset moves
    the state into the ledger and leaves a row of neo's keys that neo still lists, with
    every fact kept and no other writer reported."""
    neo, store = (
        neo_store.neo,
        neo_store.harness.store(neo_store.neo.memory_collection, neo_store.neo.summary_collection),
    )
    sid = f"upgraded-{uuid.uuid4().hex[:6]}"
    neo.add_memories([turn(sid, "Pin the exporter to port 7443."), turn(sid, "Use gzip level 6.")])
    apply_summarizer(neo_store, neo_model)
    neo_store.sunset(sid)
    rewrite_as_previous_release(store, sid, fence=1)
    coll = store.client.get_collection(neo.summary_collection)
    assert sid in listed(neo.list_summaries(limit=50))

    neo.add_memories([turn(sid, "Record the outcome: the exporter now retries 3 times.")])
    obj = neo_store.sunset(sid)
    assert conditions(obj)["SingleWriter"]["reason"] == "NoOtherWriter"
    row = coll.get(ids=[summary_row_id(sid)], include=["metadatas"])["metadatas"][0]
    assert set(row) <= READER_ROW_KEYS, sorted(set(row) - READER_ROW_KEYS)
    boot = neo.list_summaries(limit=50)
    mine = next(s for s in boot["summaries"] if s["sessionId"] == sid)
    assert mine["memoryCount"] == 3
    kept = store.stored_summary(sid)
    assert kept is not None
    text = kept[0] + json.dumps(kept[1])
    assert all(f in text for f in ("port 7443", "gzip level 6", "retries 3 times"))


# -- what agent sessions really hold, through neo's writer and neo's reader -----------------------

ODD_SESSIONS: dict[str, list[str]] = {
    "emoji-😀-👨‍👩‍👧": [
        "Ship the 😀 picker 🚀 with ZWJ 👨‍👩‍👧.",
        "RTL \u202eevil\u202c مرحبا שלום",
    ],
    "combining-e\u0301-日本語": ["Café vs Cafe\u0301; Z\u0336a\u0361l\u0362g\u0363o"],
    "slash/a b/%2F?x=y#f": ["NUL \x00, bell \x07, \x1b[31mred\x1b[0m, DEL \x7f, \u2028 sep"],
    'sep,a@@b\n"q"\'': ["BOM \ufeff, \uffff, \ue000, \U0010ffff and \U0001f3fb"],
    "summary_like": ["## User Requests\n- planted\n## Current State\n- planted state"],
    "long-" + "x" * 1019: ["A session id of 1,024 characters.", "Z" * 200_000],
}


def test_odd_session_ids_and_contents_read_back_by_neo_field_by_field(
    neo_store: NeoStore, neo_model: OpenAIServer, tmp_path: Path
) -> None:
    """Unicode, control characters, separators and very long memories and session ids, saved
    with neo's addMemory and summarized by us: neo's boot read gives back each row's fields as
    stored, and neither side fails."""
    neo = neo_store.neo
    neo.add_memories(
        [
            turn(sid, text, agent="agent,with,commas", model="m1,m2", toolsUsed=["a@@b", 'q"x'])
            for sid, texts in ODD_SESSIONS.items()
            for text in texts
        ]
    )
    manifest = tmp_path / "summarizer.yaml"
    manifest.write_text(
        summarizer_manifest(neo_store.summarizer, neo_store.harness, neo, neo_model)
    )
    for sid in ODD_SESSIONS:
        res = neo_store.harness.summaryctl(
            "summarize", sid, "--bypass-claim", "--summarizer-file", str(manifest)
        )
        assert res.returncode == 0, res.stdout + res.stderr
    assert_read_back_by_neo(neo_store, {sid: len(texts) for sid, texts in ODD_SESSIONS.items()})
    for sid in ODD_SESSIONS:
        _, meta = neo_store.summary_row(sid)
        assert set(meta["toolsUsed"].split(",")) == {"a@@b", 'q"x'}
        assert set(meta["models"].split(",")) == {"m1", "m2"}


def assert_read_back_by_neo(target: NeoStore, counts: dict[str, int]) -> None:
    """neo's boot read lists every session's row with the fields as we stored them."""
    boot = {s["sessionId"]: s for s in target.neo.list_summaries(limit=100)["summaries"]}
    assert set(boot) == set(counts)
    for sid, count in counts.items():
        document, meta = target.summary_row(sid)
        read = boot[sid]
        assert read["summary"] == document and read["title"] == meta["title"], sid
        assert read["memoryCount"] == meta["memoryCount"] == count, sid
        assert read["timestamp"] == datetime.fromtimestamp(meta["timestamp"] / 1000, UTC).isoformat(
            timespec="milliseconds"
        ).replace("+00:00", "Z")
        for key in ("quality", "productivity", "impact", "complexity"):
            assert read[key] == meta[key], (sid, key)
        assert read["technologies"] == [t for t in meta.get("technologies", "").split(",") if t]


# Any text but lone surrogates (the test's embedding server cannot encode them; neo's fetch
# sends them as U+FFFD); session ids also without NUL, which no command line can carry.
ANY_TEXT = st.characters(blacklist_categories=("Cs",))
ANY_ID = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
ODD_SESSION = st.tuples(
    st.text(ANY_ID, min_size=1, max_size=60).filter(str.strip),
    st.lists(
        st.text(ANY_TEXT, min_size=3, max_size=400).filter(lambda t: len(t.strip()) >= 3),
        min_size=1,
        max_size=3,
    ),
    st.text(ANY_TEXT, min_size=1, max_size=30),
    st.lists(st.text(ANY_TEXT, min_size=1, max_size=30), max_size=4),
)


@given(sessions=st.lists(ODD_SESSION, min_size=30, max_size=30, unique_by=lambda s: s[0]))
@settings(
    max_examples=2,
    deadline=None,
    database=None,
    phases=[Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture],  # fresh collections per example
)
def test_any_text_neo_saves_is_summarized_and_read_back_by_neo_as_stored(
    neo_store: NeoStore,
    neo_model: OpenAIServer,
    tmp_path: Path,
    sessions: list[tuple[str, list[str], str, list[str]]],
) -> None:
    neo = neo_store.neo
    neo.summary_collection = f"neo-sessions-{uuid.uuid4().hex[:8]}"
    neo.memory_collection = f"neo-memory-{uuid.uuid4().hex[:8]}"
    neo.add_memories(
        [
            {**turn(sid, text, agent=agent, toolsUsed=tools), "thought": text[::-1]}
            for sid, texts, agent, tools in sessions
            for text in texts
        ]
    )
    manifest = tmp_path / f"{neo.summary_collection}.yaml"
    manifest.write_text(
        summarizer_manifest(neo_store.summarizer, neo_store.harness, neo, neo_model)
    )
    ids = [sid for sid, *_ in sessions]
    res = neo_store.harness.summaryctl(
        "summarize", "--bypass-claim", "--summarizer-file", str(manifest), "--", *ids
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert_read_back_by_neo(neo_store, {sid: len(texts) for sid, texts, *_ in sessions})
