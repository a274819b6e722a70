"""Model tokens over a session's life: neo's own summary writer against ours, same model.

Real parts: a Chroma server; neo's memory-core from npm (hack/install-neo.sh), driven by
tests/neo/driver.mjs: its MemoryService.addMemory and embed drain write the memories, its
SessionService.summarizeSession is neo's writer; ours is summarize_session with the
`openai` chat-model backend (ChatModelSummarizer), reading the same memory rows and
writing its own summary collection. Both talk over real HTTP to one scripted
OpenAI-compatible server (tests/support/openai_server.py), which counts each chat
request's prompt and completion tokens (words; the same count for both).

The session: `--memories` memories (200), a planted fact in every other one (bench/
fact_retention.py: a port the user asks for, a timeout the agent decides), each memory
`--memory-words` words long (113: the median memory of the aider sessions of
bench/next_agent.py). Each writer summarizes it after every `--every` new memories (20)
and once more at its sunset, as each would be run: neo re-reads and sends the whole
session each time; ours sends its prior summary and the new memories, and asks the model
nothing when nothing is new. The scripted model follows the prompt it is given and keeps
every planted fact in front of it: for neo, a summary restating each fact in the session
text; for ours, the new items of the facts in its <memories> block (the prior's items are
carried by the merge).

Fact retention (bench.fact_retention's scorer: a fact is kept when its marker is in the
text): of neo's final stored document; of ours, in the summary it stores (the ledger's
items: every item of every pass) and in its bounded document (what a boot shows).

    .venv/bin/python -m bench.model_tokens [--memories 200] [--every 20] [--quick]

A line per pass and writer (tokens: prompt, completion), then the totals.
Last line: model_tokens ours=<n> neo=<n> ratio=<x> ours_kept=<pct> ours_shown=<pct> neo_kept=<pct>
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.fact_retention import Fact, chunk_facts, retained
from controller.embeddings.remote import OpenAICompatibleEmbedding
from controller.pipeline import Backends, summarize_session
from controller.store.connection import StoreLocation, connect
from controller.store.memory_store import MemoryStore
from controller.summarizers.chat_model import ChatModelSummarizer
from controller.summarizers.chat_prompt import ChatModelConfig
from devenv.bench import QuickRuns, bench_chroma, parse_bench_args
from tests.support.neo import NEO_DIMENSION, NEO_EMBEDDING_MODEL, NeoClient, neo_client_dir
from tests.support.openai_server import OpenAIServer, running_openai_server

QUICK_RUNS: QuickRuns = [
    (
        [],
        "model_tokens ours=<n> neo=<n> ratio=<x> ours_kept=<pct> ours_shown=<pct> neo_kept=<pct>",
    ),
]
ROUTINE = (
    "Read the module and its tests before changing anything.",
    "Ran the unit tests after the change; the suite is green.",
    "Checked the logs of the last run for warnings and found none worth a change.",
    "Kept the public interface as it was so that no caller has to change.",
    "Looked at how the configuration is loaded and where its defaults live.",
    "Formatted the files and ran the linter, which reports nothing.",
)
PLANTED = re.compile(
    r"Please make the \w+ listen on port \d+\.|We decided to set the \w+ timeout to \d+ ms\."
)
OURS_MARK = "You maintain the structured summary"


def padded(text: str, words: int, seed: int) -> str:
    """text, then routine sentences until it has about `words` words."""
    out = [text] if text else []
    n = seed
    while len(" ".join(out).split()) < words:
        out.append(ROUTINE[n % len(ROUTINE)])
        n += 1
    return " ".join(out)


def session_memories(sid: str, count: int, words: int) -> tuple[list[dict[str, Any]], list[Fact]]:
    """The session's memories as an agent saves them with neo's add_memory, and the facts
    planted in them (two per four memories)."""
    memories, facts = [], []
    for n in range(count):
        step, turn = divmod(n, 4)
        request, decision = chunk_facts(0, step)
        prompt = request.request if turn == 0 else ""
        said = decision.decision if turn == 1 else ""
        facts += [f for f, planted in ((request, prompt), (decision, said)) if planted]
        memories.append(
            {
                "sessionId": sid,
                "prompt": prompt or "Go on.",
                "thought": "Working through the next step.",
                "response": padded(said or "", words - 8, n),
                "agent": "claude-code",
                "model": "claude-sonnet",
            }
        )
    return memories, facts


def reply_for(body: dict[str, Any]) -> dict[str, Any]:
    """The scripted model: every planted fact in what it was asked to summarize, once."""
    messages = body.get("messages") or []
    text = "\n".join(str(m.get("content", "")) for m in messages)
    if OURS_MARK in text:
        start = text.find("<memories")
        new = list(dict.fromkeys(PLANTED.findall(text[start:] if start >= 0 else "")))
        return {
            "title": "Service configuration",
            "category": "feature",
            "user_requests": [f for f in new if f.startswith("Please")],
            "questions_and_decisions": [f for f in new if f.startswith("We decided")],
            "design_choices": [],
            "corrections_and_feedback": [],
            "current_state": ["Configuration updated; the tests pass."],
            "technologies": [],
            "quality": 80,
            "productivity": 80,
            "impact": 40,
            "complexity": 30,
        }
    found = list(dict.fromkeys(PLANTED.findall(text)))
    return {
        "summary": " ".join(["The session configured the services.", *found]),
        "title": "Service configuration",
        "category": "feature",
        "quality": 80,
        "productivity": 80,
        "impact": 40,
        "complexity": 30,
        "technologies": [],
    }


@dataclass
class Meter:
    """The chat requests of one writer, pass by pass: (prompt, completion) tokens."""

    passes: list[tuple[int, int]] = field(default_factory=list)

    def take(self, server: OpenAIServer, since: int) -> int:
        """Counts the chat requests made since request number `since`; the new mark."""
        chats = [r for r in server.requests[since:] if r.path.endswith("/chat/completions")]
        counted = [r.usage or {} for r in chats]
        prompt = sum(u.get("prompt_tokens", 0) for u in counted)
        completion = sum(u.get("completion_tokens", 0) for u in counted)
        self.passes.append((prompt, completion))
        return len(server.requests)

    @property
    def total(self) -> int:
        return sum(p + c for p, c in self.passes)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=200)
    parser.add_argument("--every", type=int, default=20, help="new memories between passes")
    parser.add_argument("--memory-words", type=int, default=113)
    args = parse_bench_args(parser, memories=40)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    sid = "model-tokens-0"
    memories, facts = session_memories(sid, args.memories, args.memory_words)
    work = Path(tempfile.mkdtemp(prefix="sso-bench-model-tokens-"))
    options = {"embedding_dimension": NEO_DIMENSION, "embedding_model": NEO_EMBEDDING_MODEL}
    with bench_chroma(work / "chroma") as chroma_url, running_openai_server(**options) as server:
        server.responder = reply_for
        neo = NeoClient(
            neo_client_dir(),
            chroma_url,
            server.base_url.removesuffix("/v1"),
            work / "neo",
            memory_collection="model-tokens-memory",
            summary_collection="model-tokens-neo",
        )
        location = StoreLocation(
            url=chroma_url,
            memory_collection=neo.memory_collection,
            summary_collection="model-tokens-ours",
            embedding_provider="openai",  # neo's endpoint and model (docs/migrating-from-neo.md)
            embedding_model=NEO_EMBEDDING_MODEL,
        )
        store = MemoryStore(connect(location), location)
        encoder = OpenAICompatibleEmbedding(base_url=server.base_url, model=NEO_EMBEDDING_MODEL)
        ours = ChatModelSummarizer(
            ChatModelConfig(base_url=server.base_url, model="test-chat", backoff_seconds=0.1)
        )
        meters = {"neo": Meter(), "ours": Meter()}
        checkpoints = list(range(args.every, args.memories + 1, args.every))
        if not checkpoints or checkpoints[-1] != args.memories:
            checkpoints.append(args.memories)
        added = 0
        for label, upto in [*(("pass", c) for c in checkpoints), ("sunset", args.memories)]:
            if upto > added:
                neo.add_memories(memories[added:upto])
                added = upto
            mark = len(server.requests)
            neo.summarize(sid)
            mark = meters["neo"].take(server, mark)
            trigger = "sunset" if label == "sunset" else "sweep"
            summarize_session(
                Backends(store, lambda texts: list(encoder(texts)), summarizer=ours),
                sid,
                writer="bench",
                trigger=trigger,
            )
            meters["ours"].take(server, mark)
            for name, meter in meters.items():
                prompt, completion = meter.passes[-1]
                print(
                    f"{label} memories={upto} writer={name} prompt_tokens={prompt} "
                    f"completion_tokens={completion}",
                    flush=True,
                )
        neo_row = store.client.get_collection(neo.summary_collection).get(
            ids=[f"summary_{sid}"], include=["documents"]
        )
        neo_doc = (neo_row["documents"] or [""])[0]
        stored = store.stored_summary(sid)
        assert stored is not None
        ours_doc, keys = stored
    ledger = str(keys["sectionsJson"])
    kept = {
        "ours_kept": retained(ledger, facts),
        "ours_shown": retained(ours_doc, facts),
        "neo_kept": retained(neo_doc or "", facts),
    }
    for name, meter in meters.items():
        prompt = sum(p for p, _ in meter.passes)
        completion = sum(c for _, c in meter.passes)
        print(f"writer={name} passes={len(meter.passes)} prompt={prompt} completion={completion}")
    ratio = meters["ours"].total / max(1, meters["neo"].total)
    pct = {k: 100 * v / len(facts) for k, v in kept.items()}
    print(
        f"model_tokens ours={meters['ours'].total} neo={meters['neo'].total} ratio={ratio:.3f} "
        f"ours_kept={pct['ours_kept']:.1f} ours_shown={pct['ours_shown']:.1f} "
        f"neo_kept={pct['neo_kept']:.1f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
