"""Next agent: how many answers about a real session its stored summary document holds.

Data (bench/_next_agent_sets.py, with its provenance, licences, checksums and split): real
sessions nobody here wrote, with questions whose answers are in them. **longmemeval**: a
user and a chat assistant (LongMemEval, MIT, all 500 questions in their evidence-session
form; 440 asked, 282 reported). **aider**: a coding assistant's sessions editing real
repositories (aider's example transcripts, Apache-2.0), and **aider_history**, the same
assistant's chat logs as four open-source repositories commit them; their questions are
what the assistant recorded: the files it edited, the commits it made, the commands the
user ran (91 reported in all: fewer than 200, see bench/_next_agent_sets.py).
Cases and split were fixed and committed before tuning; the figures of record are the
reported split's, run once at the end.

Each session goes through the whole write path (summarize_session into a real Chroma,
extractive backend, one pass), once per document budget. Scorer (fixed): text is
lower-cased with every run of non-alphanumerics one space; `exact` = the gold answer so
normalised occurs, word-bounded, in the text; `recall` = the share of the answer's words
(stop words out) found among the text's words. Each is measured on the stored document,
the raw session cut to the document's length from its start (head) and from its end
(tail), and the whole raw session (`User: ...` / `Assistant: ...` turns). `half` is a
budget of half the session's text, at most 8,000 characters: the issue's goal is
exact >= 1.5x the better of head and tail, and recall >= 80 % of the raw session's, there
(`quarter`: a quarter). `--ceiling` prints what no document can beat: per set, split and
length, the answers the whole session holds against the better cut's, with no summary made.

`--backend model` summarizes with the chat-model backend instead, against the real model
tier's model: llama.cpp's server with SmolLM2-135M-Instruct (tests/support/llama_server.py,
2 threads), at the backend's defaults but `--max-retries` and `--max-output-tokens`. That
model is tiny and poor at the task: its lines are labelled `backend=model` and say how many
passes stored a summary (a refused reply stores nothing, so its case counts as not found).

`--before REF` runs the same cases at the same budgets in the same run with `controller/`
as it was at REF (git archive into a temporary directory, in a subprocess): its lines are
prefixed `before`. `--split tune` reads the tuning split only (for tuning).

    .venv/bin/python -m bench.next_agent [--budgets half,1000,2000,4000,8000] [--split tune]
    .venv/bin/python -m bench.next_agent --backend model --budgets half --limit 4 --before ''
    .venv/bin/python -m bench.next_agent --ceiling --split tune

A line per budget, data set or kind (coding, conversational), split (and question type);
then the goal's figures (the first budget, reported split): per data set
(`next_agent_set set=<name> cases=<n> ...`), the coding sessions' (aider and aider_history)
and, last, the conversations' (with `--backend model`, first a `next_agent_model
stored=<n>/<m>` line):
next_agent_coding exact_ratio=<x> recall_share=<pct> length_share=<pct> goal=<text>
next_agent exact_ratio=<x> recall_share=<pct> length_share=<pct> goal=<text> before_exact_ratio=<x>
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._next_agent_sets import DATASETS, MIRRORS, Case, Unavailable
from controller.core.memories import render_interaction_document
from controller.pipeline import summarize_session
from controller.store.connection import StoreLocation, connect
from controller.store.memory_store import MemoryStore
from controller.summarizers.contract import Summarizer
from devenv.bench import SHARED_CHROMA_URL, QuickRuns, bench_chroma, parse_bench_args

QUICK_RUNS: QuickRuns = [
    (
        [],
        "next_agent exact_ratio=<x> recall_share=<pct> length_share=<pct> goal=<text> "
        "before_exact_ratio=<x>",
    ),
]
BASE_REF = "b04b779"  # main before issue 47: the summarizer the issue measured
DOCUMENT_BOUND = 8000
_STOP_WORDS = "a an the of in on at to for and or is was were be been i my me you your it its this "
STOP = frozenset(f"{_STOP_WORDS}that with by from as are do did have has had".split(" "))
_NON_WORD = re.compile(r"[^0-9a-z]+")
KIND = {"longmemeval": "conversational", "aider": "coding", "aider_history": "coding"}


def raw_text(session: dict[str, Any]) -> str:
    return "\n".join(f"{t['role'].title()}: {t['content']}" for t in session["turns"])


def session_rows(sid: str, session: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """One memory per user turn and the assistant's reply to it, oldest first."""
    pairs: list[list[str]] = []
    for turn in session["turns"]:
        if turn["role"] == "user" or not pairs:
            pairs.append(["", ""])
        pairs[-1][0 if turn["role"] == "user" else 1] += turn["content"]
    rows = []
    for n, (prompt, response) in enumerate(pairs):
        meta = {
            "sessionId": sid,
            "timestamp": 1_700_000_000_000 + n * 1000,
            "type": "agent-interaction",
            "prompt": prompt,
            "thought": "",
            "response": response,
        }
        rows.append((f"{sid}-{n:04d}", render_interaction_document(prompt, "", response), meta))
    return rows


def _norm(text: str) -> str:
    return f" {_NON_WORD.sub(' ', text.lower()).strip()} "


def score(answer: str, text: str) -> tuple[bool, float]:
    """(the whole answer is in the text, the share of the answer's words that are)."""
    gold, body = _norm(answer), _norm(text)
    words = [w for w in gold.split() if w not in STOP] or gold.split()
    present = set(body.split())
    recall = sum(1 for w in words if w in present) / len(words) if words else 0.0
    return gold.strip() != "" and gold in body, recall


def budget_for(budget: str, raw: str) -> int | None:
    if budget == "own":
        return None
    shares = {"half": 2, "quarter": 4}  # of the session's text, at most DOCUMENT_BOUND
    return min(DOCUMENT_BOUND, len(raw) // shares[budget]) if budget in shares else int(budget)


@dataclass
class Backend:
    """What summarizes (None: the extractive default) and how many of its passes stored."""

    summarizer: Summarizer | None = None
    passes: int = 0
    stored: int = 0
    in_process: bool = False


def in_process(sid: str, session: dict[str, Any], chars: int | None) -> str:
    """The document of one extractive pass, rendered at the budget, without a store: for
    tuning only (the figures of record go through summarize_session)."""
    from controller.core.document import DOCUMENT_MAX_CHARS, render_document
    from controller.core.memories import memory_from_row
    from controller.pipeline import run_pass
    from controller.summarizers.extractive import EXTRACTIVE

    rows = [memory_from_row(i, d, m) for i, d, m in session_rows(sid, session)]
    memories = [m for m in rows if m is not None]
    summary, _ = run_pass(sid, memories, None, EXTRACTIVE)
    return render_document(summary, max_chars=chars or DOCUMENT_MAX_CHARS)


def summarize_all(
    chroma_url: str,
    sessions: dict[str, dict[str, Any]],
    sids: list[str],
    budget: str,
    tag: str,
    backend: Backend,
) -> dict[str, str]:
    """Each session through summarize_session with this budget: the stored documents ("" when
    the backend's pass stored nothing)."""
    has_budget = "document_max_chars" in {f.name for f in fields(StoreLocation)}
    documents = {}
    for sid in sids:
        extra: dict[str, Any] = {}
        chars = budget_for(budget, raw_text(sessions[sid]))
        if backend.in_process:
            documents[sid] = in_process(sid, sessions[sid], chars)
            continue
        if chars is not None and has_budget:
            extra["document_max_chars"] = chars
        location = StoreLocation(
            url=chroma_url,
            memory_collection=f"next-agent-{tag}-memory",
            summary_collection=f"next-agent-{tag}-{budget}",
            **extra,
        )
        store = MemoryStore(connect(location), location)
        rows = session_rows(sid, sessions[sid])
        memories = store.create_memory_collection()  # one per run, read by every budget
        if not memories.get(ids=[rows[0][0]])["ids"]:
            memories.add(  # memory vectors are never read: placeholders
                ids=[r[0] for r in rows],
                documents=[r[1] for r in rows],
                metadatas=[r[2] for r in rows],
                embeddings=np.ones((len(rows), 2), dtype=np.float32),
            )
        backend.passes += 1
        if not _summarize(store, sid, backend.summarizer):
            documents[sid] = ""
            continue
        backend.stored += 1
        got = store.summaries().get(ids=[f"summary_{sid}"], include=["documents"])
        documents[sid] = (got["documents"] or [""])[0] or ""
    return documents


def _summarize(store: MemoryStore, sid: str, summarizer: Summarizer | None) -> bool:
    """One pass; False when the model backend refused its replies or was unavailable."""
    if summarizer is None:
        outcome = _pass(store, sid)
        assert outcome.kind == "summarized", outcome
        return True
    from controller.summarizers.chat_prompt import InvalidModelOutput, ModelUnavailable

    try:
        outcome = _pass(store, sid, summarizer=summarizer)
    except (InvalidModelOutput, ModelUnavailable) as failed:
        print(f"# {sid}: nothing stored: {str(failed)[:160]}", flush=True)
        return False
    return outcome.kind == "summarized"


def _pass(store: MemoryStore, sid: str, **parts: Any) -> Any:
    """summarize_session as this tree takes it, or as --before's older one (parts as keywords)."""
    try:
        from controller.pipeline import Backends
    except ImportError:
        older: Any = summarize_session  # the older tree's signature, not this one's
        return older(store, sid, embed=_embed, writer="bench", trigger="manual", **parts)
    return summarize_session(
        Backends(store, _embed, **parts), sid, writer="bench", trigger="manual"
    )


@contextlib.contextmanager
def model_backend(args: argparse.Namespace, work: Path) -> Iterator[Backend]:
    """The extractive default, or the chat-model backend against the real model tier's
    llama.cpp server (started here, stopped by PID when the block exits)."""
    if args.backend != "model":
        yield Backend(in_process=args.in_process)
        return
    from controller.summarizers.chat_model import ChatModelSummarizer
    from controller.summarizers.chat_prompt import ChatModelConfig
    from tests.support.llama_server import MODEL_NAME, SERVER_VERSION, running_llama_server

    with running_llama_server(work / "llama") as llama:
        print(f"# backend=model: llama.cpp server (xllamacpp {SERVER_VERSION}), {MODEL_NAME}")
        config = ChatModelConfig(
            base_url=llama.base_url,
            model=MODEL_NAME,
            timeout_seconds=args.timeout,
            max_retries=args.max_retries,
            max_output_tokens=args.max_output_tokens,
            max_concurrency=1,
        )
        yield Backend(ChatModelSummarizer(config))


def _embed(texts: list[str]) -> list[Any]:
    """Deterministic vectors: what a summary is embedded with does not change what it says."""
    return [
        np.frombuffer(hashlib.sha256(t.encode()).digest(), dtype=np.uint8) / 255.0 for t in texts
    ]


@dataclass
class Tally:
    n: int = 0
    doc_chars: float = 0.0
    raw_chars: float = 0.0
    exact: dict[str, int] | None = None
    recall: dict[str, float] | None = None

    def add(self, case: Case, document: str, raw: str) -> None:
        self.exact = self.exact or defaultdict(int)
        self.recall = self.recall or defaultdict(float)
        length = len(document)
        tail = raw[len(raw) - length :]  # raw[-0:] would be all of it
        texts = {"doc": document, "head": raw[:length], "tail": tail, "raw": raw}
        for name, text in texts.items():
            exact, recall = score(case.answer, text)
            self.exact[name] += exact
            self.recall[name] += recall
        self.n += 1
        self.doc_chars += length / len(raw)

    def line(self, label: str) -> str:
        assert self.exact is not None and self.recall is not None and self.n
        pct = {k: 100 * v / self.n for k, v in self.exact.items()}
        rec = {k: 100 * v / self.n for k, v in self.recall.items()}
        return (
            f"{label} cases={self.n} length_share={100 * self.doc_chars / self.n:.1f} "
            + " ".join(f"exact_{k}={pct[k]:.1f}" for k in ("doc", "head", "tail", "raw"))
            + " "
            + " ".join(f"recall_{k}={rec[k]:.1f}" for k in ("doc", "head", "tail", "raw"))
        )

    def ratios(self) -> tuple[float, float, float]:
        """(exact doc / the better cut, floor one case; recall doc / raw; length share);
        zeros without a case."""
        if self.exact is None or self.recall is None or not self.n:
            return 0.0, 0.0, 0.0
        best = max(self.exact["head"], self.exact["tail"], 1)
        share = 100 * self.recall["doc"] / self.recall["raw"] if self.recall["raw"] else 0.0
        return self.exact["doc"] / best, share, 100 * self.doc_chars / self.n


def measure(
    chroma_url: str,
    cases: list[Case],
    sessions: dict[str, Any],
    budgets: list[str],
    tag: str,
    backend: Backend,
) -> dict[str, Tally]:
    """Tallies per (budget, split, question type) and per (budget, split)."""
    tallies: dict[str, Tally] = defaultdict(Tally)
    sids = sorted({c.session_id for c in cases})
    for budget in budgets:
        documents = summarize_all(chroma_url, sessions, sids, budget, tag, backend)
        for case in cases:
            raw = raw_text(sessions[case.session_id])
            where = f"{budget} {case.dataset} {case.split}"
            kind = f"{budget} {KIND[case.dataset]} {case.split}"
            for key in (where, f"{where} {case.kind}", kind):
                tallies[key].add(case, documents[case.session_id], raw)
    return tallies


def run_before(ref: str, args: argparse.Namespace, chroma_url: str, work: Path) -> list[str]:
    """This bench in a subprocess over controller/ as it was at ref, same cases and budgets:
    its printed lines."""
    root = Path(__file__).resolve().parents[1]
    old = work / "before"
    old.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "-C", str(root), "archive", ref, "controller"], check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(old, filter="data")
    env = {**os.environ, "PYTHONPATH": f"{old}{os.pathsep}{root}", SHARED_CHROMA_URL: chroma_url}
    argv = ["--before", "", "--budgets", args.budgets, "--limit", str(args.limit)]
    argv += ["--cache", args.cache, "--mirrors", args.mirrors, "--tag", "before"]
    argv += ["--split", args.split] + (["--in-process"] if args.in_process else [])
    done = subprocess.run(
        [sys.executable, "-m", "bench.next_agent", *argv],
        cwd=old,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=7200,
    )
    return done.stdout.splitlines()


def label(key: str) -> str:
    parts = key.split()
    names = ("budget", "set", "split", "type")  # a set or a kind of set
    return " ".join(f"{k}={v}" for k, v in zip(names, parts, strict=False))


def goal_line(name: str, tally: Tally) -> str:
    exact_ratio, recall_share, length_share = tally.ratios()
    met = exact_ratio >= 1.5 and recall_share >= 80 and length_share <= 50
    return (
        f"{name} exact_ratio={exact_ratio:.2f} recall_share={recall_share:.1f} "
        f"length_share={length_share:.1f} goal={'met' if met else 'not_met'}"
    )


CEILING_FRACTIONS = (0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5)


def ceiling_lines(cases: list[Case], sessions: dict[str, Any]) -> list[str]:
    """What no document can beat, per set and split: at each length (a share of the session),
    the answers the whole session holds against the better cut's (the exact goal's ratio
    for a document that held every one of them)."""
    lines = []
    for dataset, split in sorted({(c.dataset, c.split) for c in cases}):
        chosen = [c for c in cases if (c.dataset, c.split) == (dataset, split)]
        raws = {c.session_id: raw_text(sessions[c.session_id]) for c in chosen}
        whole = sum(score(c.answer, raws[c.session_id])[0] for c in chosen)
        for share in CEILING_FRACTIONS:
            found = {"head": 0, "tail": 0}
            for c in chosen:
                raw = raws[c.session_id]
                cut = int(len(raw) * share)
                found["head"] += score(c.answer, raw[:cut])[0]
                found["tail"] += score(c.answer, raw[len(raw) - cut :])[0]
            pct = {k: f"{100 * v / len(chosen):.1f}" for k, v in {"whole": whole, **found}.items()}
            lines.append(
                f"next_agent_ceiling set={dataset} split={split} cases={len(chosen)} "
                f"length_share={100 * share:.0f} exact_whole={pct['whole']} "
                f"exact_head={pct['head']} exact_tail={pct['tail']} "
                f"exact_ratio_max={whole / max(*found.values(), 1):.2f}"
            )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", default="half,1000,2000,4000,8000")
    parser.add_argument("--before", default=BASE_REF, help="git ref of the 'before' (''=skip)")
    parser.add_argument("--limit", type=int, default=0, help="at most this many cases (0=all)")
    parser.add_argument("--cache", default=str(Path.home() / ".cache" / "sso-bench"))
    parser.add_argument("--mirrors", default=MIRRORS, help="git directories of the data's repos")
    parser.add_argument("--split", choices=("tune", "report", "both"), default="both")
    parser.add_argument("--backend", choices=("extractive", "model"), default="extractive")
    parser.add_argument("--max-retries", type=int, default=1, help="model backend only")
    parser.add_argument("--max-output-tokens", type=int, default=2048, help="model backend only")
    parser.add_argument("--timeout", type=float, default=600, help="model: seconds a request")
    parser.add_argument("--in-process", action="store_true", help="no store: for tuning only")
    parser.add_argument(
        "--ceiling", action="store_true", help="only the cuts' figures: no summary can beat them"
    )
    parser.add_argument("--tag", default="after", help=argparse.SUPPRESS)
    args = parse_bench_args(parser, budgets="half", limit=4)
    cases: list[Case] = []
    sessions: dict[str, Any] = {}
    for name, load in DATASETS.items():
        try:
            found, more = load(Path(args.cache), Path(args.mirrors))
        except Unavailable as missing:
            print(f"# set={name} left out: {missing}", flush=True)
            continue
        found = [c for c in found if args.split in ("both", c.split)]
        if args.limit:  # per data set
            found = sorted(found, key=lambda c: (c.split != "report", c.question_id))
            found = found[: args.limit]
        cases += found
        sessions.update(more)
    if args.ceiling:
        print("\n".join(ceiling_lines(cases, sessions)))
        return 0
    budgets = args.budgets.split(",")
    work = Path(tempfile.mkdtemp(prefix="sso-bench-next-agent-"))
    with bench_chroma(work / "chroma") as chroma_url, model_backend(args, work) as backend:
        before = run_before(args.before, args, chroma_url, work) if args.before else []
        for line in before:
            print(f"before {line}")
        tallies = measure(chroma_url, cases, sessions, budgets, args.tag, backend)
    prefix = "backend=model " if backend.summarizer else ""
    for key in sorted(tallies, key=lambda k: (k.split()[0] != "half", k)):
        print(prefix + tallies[key].line(label(key)))

    def goal(dataset: str) -> Tally:
        found = tallies.get(f"{budgets[0]} {dataset} report")
        return found or tallies.get(f"{budgets[0]} {dataset} tune") or Tally()

    if backend.summarizer:
        print(f"next_agent_model stored={backend.stored}/{backend.passes}")
    for dataset in DATASETS:
        print(goal_line(f"next_agent_set set={dataset} cases={goal(dataset).n}", goal(dataset)))
    print(goal_line("next_agent_coding", goal("coding")))
    before_ratio = next(
        (float(x.split()[1].split("=")[1]) for x in before if x.startswith("next_agent ")), 0.0
    )
    line = goal_line("next_agent", goal("conversational"))
    print(line if args.tag == "before" else f"{line} before_exact_ratio={before_ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
