"""The contract between bench/ and the smoke tier (tests/support/bench_contract.py,
devenv.bench): every bench has a quick mode and documents the figure lines it prints; a
printed line is checked for its format, never its values. Read from the sources, no bench
is run here (tests/bench runs them)."""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devenv.bench import parse_bench_args
from tests.support.bench_contract import (
    TEXT,
    ContractError,
    FigureFormat,
    FigureLineMismatch,
    bench_scripts,
    documented,
    parse_figure_line,
    parse_format,
    quick_runs,
)

# -- every bench in bench/ -------------------------------------------------------------------


@pytest.mark.parametrize("script", bench_scripts(), ids=lambda p: p.stem)
def test_every_bench_has_a_quick_mode_and_documents_its_figure_lines(script: Path) -> None:
    runs = quick_runs(script)
    assert runs, script


def test_every_script_in_bench_is_a_bench_but_packages_and_private_helpers(
    tmp_path: Path,
) -> None:
    for name in ("__init__.py", "_shared.py", "new_bench.py", "notes.txt"):
        (tmp_path / name).write_text("")
    assert [p.name for p in bench_scripts(tmp_path)] == ["new_bench.py"]


# -- a bench that breaks the contract is refused, by name ------------------------------------

GOOD = '''
"""A bench.

Last line: demo items=<n> rate=<x>
"""
from devenv.bench import QuickRuns, parse_bench_args

QUICK_RUNS: QuickRuns = [([], "demo items=<n> rate=<x>")]


def main():
    args = parse_bench_args(parser, items=2)
'''


def write(tmp_path: Path, source: str) -> Path:
    path = tmp_path / "bench" / "demo.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text(textwrap.dedent(source))
    return path


def test_a_bench_that_keeps_the_contract_yields_its_runs(tmp_path: Path) -> None:
    (run,) = quick_runs(write(tmp_path, GOOD))
    assert (run.bench, run.args, str(run.figure)) == ("demo", (), "demo items=<n> rate=<x>")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("QUICK_RUNS: QuickRuns = [([], \"demo items=<n> rate=<x>\")]", ""), "no quick mode"),
        (("parse_bench_args(parser, items=2)", "parser.parse_args()"), "no quick mode"),
        (("[([], \"demo items=<n> rate=<x>\")]", "RUNS"), "must be a literal"),
        (("[([], \"demo items=<n> rate=<x>\")]", "[]"), "non-empty list"),
        (("[([], \"demo items=<n> rate=<x>\")]", "[\"demo items=<n>\"]"), "is not ([arguments]"),
        (("([], \"demo items=<n> rate=<x>\")", "([\"--quick\"], \"demo items=<n> rate=<x>\")"),
         "--quick is always passed"),
        (("([], \"demo items=<n> rate=<x>\")", "([], \"demo items=<n>\")"),
         "docstring does not show"),
        (("([], \"demo items=<n> rate=<x>\")", "([], \"demo items=n\")"), "is not key=<what>"),
    ],
)  # fmt: skip
def test_a_bench_that_breaks_the_contract_is_refused_by_name(
    tmp_path: Path, change: tuple[str, str], message: str
) -> None:
    old, new = change
    assert old in GOOD
    with pytest.raises(ContractError, match=r"bench/demo\.py") as refused:
        quick_runs(write(tmp_path, GOOD.replace(old, new)))
    assert message in str(refused.value)


@pytest.mark.parametrize(
    ("doc", "shown"),
    [
        ("Last line: demo items=<n> rate=<x>", True),
        ("Last line:\ndemo items=<n> rate=<x>\n\nmore", True),
        ("Last line: demo items=<n> rate=<x>   (medians)", True),
        ("Last line: demo items=<n> rate=<x> extra=<n>", False),  # a longer line
        ("Last line: my_demo items=<n> rate=<x>", False),  # another figure
        ("Last line: demo items=<n> rate=<x>s", False),
        ("Last line: demo items=<n>", False),
    ],
)
def test_a_format_is_documented_only_where_the_docstring_shows_it_whole(
    doc: str, shown: bool
) -> None:
    assert documented("demo items=<n> rate=<x>", doc) is shown


# -- figure lines ------------------------------------------------------------------------------

names = st.from_regex(r"[a-z][a-z0-9_]{0,15}", fullmatch=True)
placeholders = st.sampled_from(["<n>", "<x>", "<pct>", "<ms>", TEXT])
formats = st.builds(
    lambda name, fields: FigureFormat(name, tuple(fields.items())),
    names,
    st.dictionaries(names, placeholders, min_size=1, max_size=6),
)
numbers = st.one_of(
    st.integers(-(10**9), 10**12).map(str),
    st.floats(-1e9, 1e9, allow_nan=False).map(lambda v: f"{v:.2f}"),
)
texts = st.text(
    st.characters(blacklist_categories=["Cs", "Cc", "Z"], blacklist_characters="="),
    min_size=1,
    max_size=30,
).filter(lambda t: not any(c.isspace() for c in t))


@st.composite
def printed(draw: st.DrawFn) -> tuple[FigureFormat, dict[str, str]]:
    figure = draw(formats)
    values = {k: draw(texts if p == TEXT else numbers) for k, p in figure.fields}
    return figure, values


def render(name: str, values: list[tuple[str, str]]) -> str:
    return " ".join([name, *(f"{k}={v}" for k, v in values)])


@given(formats)
def test_a_format_reads_back_as_written(figure: FigureFormat) -> None:
    assert parse_format(str(figure)) == figure


@given(printed(), st.sampled_from(["", " ", "  \t"]))
def test_a_line_printed_in_its_format_parses_to_its_values(
    case: tuple[FigureFormat, dict[str, str]], pad: str
) -> None:
    figure, values = case
    line = pad + render(figure.name, list(values.items())) + pad
    assert parse_figure_line(figure, line) == values


@given(printed(), st.data())
def test_a_line_with_a_field_missing_added_or_moved_is_refused(
    case: tuple[FigureFormat, dict[str, str]], data: st.DataObject
) -> None:
    figure, values = case
    fields = list(values.items())
    variants = [fields[1:], [*fields, ("extra_" + fields[0][0], "1")], fields[:-1]]
    if len(fields) > 1:
        variants.append([fields[-1], *fields[1:-1], fields[0]])
    changed = data.draw(st.sampled_from([v for v in variants if v != fields]))
    with pytest.raises(FigureLineMismatch):
        parse_figure_line(figure, render(figure.name, changed))


@given(printed(), names)
def test_a_line_of_another_figure_is_refused(
    case: tuple[FigureFormat, dict[str, str]], other: str
) -> None:
    figure, values = case
    if other != figure.name:
        with pytest.raises(FigureLineMismatch):
            parse_figure_line(figure, render(other, list(values.items())))


@given(printed(), st.data())
def test_a_value_that_is_not_a_number_is_refused_where_one_is_due(
    case: tuple[FigureFormat, dict[str, str]], data: st.DataObject
) -> None:
    figure, values = case
    numeric = [k for k, p in figure.fields if p != TEXT]
    if not numeric:
        return
    key = data.draw(st.sampled_from(numeric))
    bad = data.draw(st.sampled_from(["", "nan", "None", "inf", "12ms", "1e5", "1.", "--1", "n/a"]))
    with pytest.raises(FigureLineMismatch, match=key):
        parse_figure_line(figure, render(figure.name, list({**values, key: bad}.items())))


@pytest.mark.parametrize(
    "text",
    ["", "Name k=<n>", "name", "name k=n", "name k=<n> k=<x>", "name k=<a b>", "name =<n>"],
)
def test_a_text_that_is_no_figure_line_format_is_refused(text: str) -> None:
    with pytest.raises(ContractError):
        parse_format(text)


# -- --quick ------------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    p.add_argument("--sessions", type=int, default=100)
    p.add_argument("--levels", default="1,4,16")
    p.add_argument("--under-load", action="store_true")
    return p


@pytest.mark.parametrize(
    ("argv", "sessions", "levels", "quick"),
    [
        ([], 100, "1,4,16", False),
        (["--sessions", "7"], 7, "1,4,16", False),
        (["--quick"], 2, "16", True),
        (["--quick", "--sessions", "7"], 7, "16", True),
        (["--sessions", "7", "--quick", "--under-load"], 7, "16", True),
    ],
)
def test_quick_makes_its_values_the_defaults_and_an_option_given_still_wins(
    argv: list[str], sessions: int, levels: str, quick: bool
) -> None:
    args = parse_bench_args(parser(), argv, sessions=2, levels="16")
    assert (args.sessions, args.levels, args.quick) == (sessions, levels, quick)


def test_a_quick_value_for_an_option_the_bench_does_not_have_is_an_error() -> None:
    with pytest.raises(ValueError, match="sesions"):
        parse_bench_args(parser(), [], sesions=2)


def test_help_says_quick_is_not_a_measurement_and_lists_its_values(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        parse_bench_args(parser(), ["--help"], sessions=2, levels="16")
    shown = " ".join(capsys.readouterr().out.split())
    assert "not a measurement" in shown
    assert "--sessions 2, --levels 16" in shown
