"""The smoke tier's contract with the scripts in bench/ (docs/benchmarks.md, "Quick mode").

Every `bench/*.py` but `__init__.py` and `_*.py` is a bench. A bench takes `--quick`
(devenv.bench.parse_bench_args) and declares, as a literal at module level,

    QUICK_RUNS: QuickRuns = [([], "name key=<n> key=<x>"), (["--mode"], "other key=<n>")]

each run's arguments after `--quick` and the format of the last line it prints, which its
module docstring shows word for word. A format is the figure's name, then `key=<what>`
fields separated by spaces; a printed value is a decimal number, except where the
placeholder is `<text>` (any text without spaces).

QUICK_RUNS is read from the source (ast), not imported: importing a bench may load models.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from devenv.controlplane import REPO_ROOT

BENCH_DIR = REPO_ROOT / "bench"
TEXT = "<text>"
_NAME = re.compile(r"[a-z][a-z0-9_]*")
_FIELD = re.compile(r"([a-z][a-z0-9_]*)=(<[^<>\s]+>)")
_NUMBER = re.compile(r"-?\d+(\.\d+)?")


class ContractError(Exception):
    """A bench does not keep the contract; the message says what to change."""


class FigureLineMismatch(AssertionError):
    """A printed line does not have the documented format; the message says how."""


@dataclass(frozen=True)
class FigureFormat:
    name: str
    fields: tuple[tuple[str, str], ...]  # (key, placeholder), in printed order

    def __str__(self) -> str:
        return " ".join([self.name, *(f"{k}={p}" for k, p in self.fields)])


@dataclass(frozen=True)
class QuickRun:
    bench: str  # the module: python -m bench.<bench>
    args: tuple[str, ...]  # after --quick
    figure: FigureFormat

    @property
    def id(self) -> str:
        return " ".join([self.bench, *self.args])


def bench_scripts(bench_dir: Path = BENCH_DIR) -> list[Path]:
    return sorted(
        p for p in bench_dir.glob("*.py") if p.name != "__init__.py" and not p.name.startswith("_")
    )


def parse_format(text: str) -> FigureFormat:
    """`name key=<what> ...` as a FigureFormat; ContractError if it is not one."""
    if not text.split():
        raise ContractError("an empty figure line format")
    name, *fields = text.split()
    if not _NAME.fullmatch(name):
        raise ContractError(f"{text!r}: the figure's name {name!r} is not [a-z][a-z0-9_]*")
    if not fields:
        raise ContractError(f"{text!r}: a figure line needs at least one key=<what> field")
    parsed = []
    for field in fields:
        match = _FIELD.fullmatch(field)
        if not match:
            raise ContractError(f"{text!r}: {field!r} is not key=<what>")
        parsed.append((match.group(1), match.group(2)))
    keys = [k for k, _ in parsed]
    if len(set(keys)) != len(keys):
        raise ContractError(f"{text!r}: a key appears twice")
    return FigureFormat(name, tuple(parsed))


def parse_figure_line(figure: FigureFormat, line: str) -> dict[str, str]:
    """The values of a printed line of this format, by key; FigureLineMismatch if the line
    has another name, other keys or another order of keys, or a value that is not a number
    where the format wants one."""
    name, *tokens = line.split() or [""]
    if name != figure.name:
        raise FigureLineMismatch(f"expected a line `{figure}`, got {line!r}")
    pairs = [t.partition("=") for t in tokens]
    keys = [k for k, eq, _ in pairs if eq]
    if len(keys) != len(tokens) or keys != [k for k, _ in figure.fields]:
        raise FigureLineMismatch(f"expected the fields of `{figure}`, got {line!r}")
    values = {k: v for k, _, v in pairs}
    for key, placeholder in figure.fields:
        value = values[key]
        if not value or (placeholder != TEXT and not _NUMBER.fullmatch(value)):
            raise FigureLineMismatch(f"{key}={value!r} is not {placeholder} in {line!r}")
    return values


def documented(text: str, doc: str) -> bool:
    """The docstring shows this format whole: not a part of a longer name or line."""
    return re.search(rf"(?<![\w=<]){re.escape(text)}(?!\S)(?![ \t]*\w+=<)", doc) is not None


def quick_runs(script: Path) -> list[QuickRun]:
    """The runs a bench declares in QUICK_RUNS; ContractError naming the script and what
    is missing or wrong."""
    where = f"{script.parent.name}/{script.name}"
    source = script.read_text()
    tree = ast.parse(source, filename=str(script))
    doc = ast.get_docstring(tree) or ""
    value: ast.expr | None = None
    for node in tree.body:
        assigned: ast.expr | None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, assigned = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, assigned = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id == "QUICK_RUNS":
            value = assigned
    hint = "docs/benchmarks.md, 'Quick mode'"
    takes_quick = "parse_bench_args(" in source or '"--quick"' in source
    if value is None or not takes_quick:
        raise ContractError(
            f"{where} has no quick mode: it must take --quick (devenv.bench.parse_bench_args) "
            f"and declare QUICK_RUNS at module level ({hint})"
        )
    try:
        declared = ast.literal_eval(value)
    except ValueError:
        raise ContractError(f"{where}: QUICK_RUNS must be a literal ({hint})") from None
    if not isinstance(declared, list) or not declared:
        raise ContractError(f"{where}: QUICK_RUNS must be a non-empty list ({hint})")
    runs = []
    for entry in declared:
        if not (
            isinstance(entry, tuple)
            and len(entry) == 2
            and isinstance(entry[0], list)
            and all(isinstance(a, str) for a in entry[0])
            and isinstance(entry[1], str)
        ):
            raise ContractError(f"{where}: {entry!r} is not ([arguments], 'figure line format')")
        args, text = entry
        if "--quick" in args:
            raise ContractError(f"{where}: {args!r}: --quick is always passed, list the rest")
        try:
            figure = parse_format(text)
        except ContractError as exc:
            raise ContractError(f"{where}: {exc}") from None
        if not documented(text, doc):
            raise ContractError(
                f"{where}: its docstring does not show the figure line {text!r} ({hint})"
            )
        runs.append(QuickRun(script.stem, tuple(args), figure))
    return runs
