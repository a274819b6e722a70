"""Every summaryctl command line the docs show names a subcommand's own flags: a flag the
docs teach and the parser refuses (`remember --agent`, once) fails here, not for a user."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from controller.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
COMMAND = re.compile(r"summaryctl ([a-z][a-z-]*)([^`\n]*)")
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def shown_commands() -> list[tuple[str, int, str, str]]:
    """(doc, line, subcommand, the rest of its line up to a closing backtick or a comment)."""
    found = []
    for doc in DOCS:
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            for match in COMMAND.finditer(line):
                rest = match.group(2).split(" #")[0]
                found.append((doc.name, number, match.group(1), rest))
    return found


def test_every_flag_the_docs_show_is_one_the_subcommand_takes() -> None:
    parsers = subcommands()
    shown = [c for c in shown_commands() if c[2] in parsers]
    assert len(shown) > 30  # the docs' command lines are found at all
    wrong = [
        f"{doc}:{number}: summaryctl {cmd} {flag}"
        for doc, number, cmd, rest in shown
        for flag in FLAG.findall(rest)
        if flag not in parsers[cmd]._option_string_actions
    ]
    assert not wrong, wrong


def test_the_check_finds_a_flag_the_parser_does_not_take() -> None:
    parsers = subcommands()
    assert "--agent" not in parsers["remember"]._option_string_actions
    assert FLAG.findall(" SESSION_ID --prompt T [--agent NAME] STORE") == ["--prompt", "--agent"]
