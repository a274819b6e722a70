"""The cue words of the extractive summarizer: what marks a decision, a design choice or a
correction, and which words point at a technology or a session category. Pure data and
token lookups."""

from __future__ import annotations

import re
from types import MappingProxyType
from typing import cast

from controller.core.summary import Category

# Cues are matched in lower-cased text. Patterns have no leading \b where a cue is long enough
# to be unambiguous: a pattern that starts with a literal is scanned much faster by `re`.

DECISION_CUES = re.compile(
    r"decided|decide to|we will\b|we'll\b|let's\b|going with\b|go with\b|\bchose|opted\b|"
    r"instead of\b|will use\b|settled on\b"
)
DESIGN_CUES = re.compile(
    r"design|architect|pattern|schema|\bapis?\b|interface|trade-?off|data model|abstraction|"
    r"endpoint|protocol|\buse [\w.-]+ (?:for|as)\b"
)
# "fix" alone is a request ("fix the login crash"); only "fix that/this/it" corrects the agent.
CORRECTION_CUES = re.compile(
    r"^(?:no|nope)\b|\b(?:actually|wrong|instead|don't|dont|do not|that's not|that is not|"
    r"revert\w*|undo|should have|shouldn't have|not what i|fix (?:that|this|it))\b"
)
# What the agent did or found: a verb of doing in the past, or a state it reports ("X now
# skips the cache"). Matched in lower-cased response sentences.
ACTION_CUES = re.compile(
    r"\b(?:add|mov|creat|fix|updat|renam|remov|delet|replac|implement|chang|refactor|extract|"
    r"merg|install|configur|enabl|disabl|migrat|convert|introduc|dropp|bump|committ|appli|"
    r"wrapp|pinn|revert|test|measur|pass|document|resolv|clean)ed\b"
    r"|\b(?:wrote|rewrote|ran|made|built|set up|split|found|now)\b"
)

# Words are matched one token at a time: one simple regex over the text instead of one per
# cue keeps a long pass fast.
TOKEN = re.compile(r"[a-z0-9][a-z0-9_.+#-]*")
CATEGORY_WORDS = re.compile(
    r"(?P<bugfix>bugs?|buggy|fix\w*|errors?|crash\w*|fail\w*|broken|regressions?)"
    r"|(?P<feature>add|adds|added|adding|implement\w*|features?|support\w*)"
    r"|(?P<refactoring>refactor\w*|cleanups?|renam\w*|extract\w*|simplif\w*|restructur\w*)"
    r"|(?P<documentation>docs?|documentation|document|readme|readme\.md|comments?|docstrings?"
    r"|changelog)"
    r"|(?P<new_app>scaffold\w*|bootstrap\w*)"
    r"|(?P<analysis>analy\w*|investigat\w*|why|explain\w*|benchmark\w*|measur\w*|profil\w*)"
)
CATEGORY_PHRASES: MappingProxyType[Category, tuple[str, ...]] = MappingProxyType(
    {
        "refactoring": ("clean up",),
        "new-app": ("new app", "new application", "new project", "new service", "from scratch"),
    }
)
# Each technology, and the words that name it; a name alone names itself.
_TECHNOLOGY_ALIASES = {
    "python": "python python2 python3", "go": "golang", "rust": "rust cargo",
    "kubernetes": "kubernetes k8s kubectl", "chroma": "chroma chromadb",
    "postgres": "postgres postgresql psql", "sqlite": "sqlite sqlite3", "mongodb": "mongo mongodb",
    "react": "reactjs react.js react-dom", "node": "node.js nodejs npm node_modules",
    "onnx": "onnx onnxruntime", **dict.fromkeys((
        "typescript", "javascript", "java", "kotlin", "helm", "mysql", "redis", "kopf", "pytest",
        "pydantic", "fastapi", "django", "flask", "numpy", "pandas", "terraform", "prometheus",
        "grafana", "graphql", "grpc", "kafka", "nginx", "openai", "ollama", "vllm", "mypy",
        "ruff"), "")}  # fmt: skip
TECHNOLOGY_WORDS: MappingProxyType[str, str] = MappingProxyType(
    {word: name for name, words in _TECHNOLOGY_ALIASES.items() for word in words.split() or [name]}
)
_FILE_EXTENSIONS = MappingProxyType({
    "py": "python", "ts": "typescript", "tsx": "typescript", "js": "javascript",
    "jsx": "javascript", "go": "go", "rs": "rust", "java": "java", "kt": "kotlin"})  # fmt: skip
# Ambiguous words count only in context: "go" as tooling, "kind" with cluster verbs, "react"
# as a library. Each pattern starts with a literal, so scanning for it is cheap.
_TECHNOLOGY_PHRASES: MappingProxyType[str, re.Pattern[str]] = MappingProxyType(
    {
        "go": re.compile(r"go (?:mod|build|test|run|vet|module|modules|toolchain)\b"),
        "kind": re.compile(r"kind (?:cluster|create|load|delete|get)\b"),
        "react": re.compile(r"react (?:native|components?|hooks?)\b"),
    }
)


def token_facts(token: str) -> tuple[str | None, Category | None]:
    """(technology, category) a single lower-cased token points at, if any. Not cached: its
    callers look each distinct word up once per pass, and a process-wide cache kept a long
    pass's one-off tokens alive, pinning the heap."""
    word = token.rstrip(".-_+#")
    technology = TECHNOLOGY_WORDS.get(word)
    if technology is None and word.startswith("docker"):
        technology = "docker"
    if technology is None and "." in word:
        stem, _, extension = word.rpartition(".")
        if stem and stem[-1].isalnum():
            technology = _FILE_EXTENSIONS.get(extension)
    match = CATEGORY_WORDS.fullmatch(word)
    category = (
        cast(Category, match.lastgroup.replace("_", "-")) if match and match.lastgroup else None
    )
    return technology, category


def phrase_technologies(text: str) -> set[str]:
    found = set()
    for name, pattern in _TECHNOLOGY_PHRASES.items():
        for match in pattern.finditer(text):
            if match.start() == 0 or not text[match.start() - 1].isalnum():
                found.add(name)
                break
    return found
