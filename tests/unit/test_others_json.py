"""JSON that another writer, an endpoint or an older release wrote is read, or refused, as any
text that is not JSON is: nested past Python's stack too (json raises RecursionError there,
not a ValueError, which no reader caught)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from controller.core.coverage import Coverage
from controller.core.ledger import read_entry
from controller.core.memories import tool_names
from controller.core.naming import summary_row_id
from controller.core.summary import StructuredSummary, SummaryItem
from controller.core.summary_row import from_chroma_row, to_chroma_metadata
from controller.core.visibility import SessionSources
from controller.summarizers.chat_model import parse_update

ROW = to_chroma_metadata(
    StructuredSummary(
        session_id="s", title="Exporter", sections={"User Requests": [SummaryItem(text="Go.")]}
    ),
    writer="w",
    trigger="sunset",
    summarized_at_ms=1_700_000_000_000,
)
HEAD = summary_row_id("s")


def _row(key: str) -> Callable[[str], object]:
    return lambda text: from_chroma_row("s", "doc", {**ROW, key: text})


READERS: dict[str, Callable[[str], object]] = {
    **{f"row {k}": _row(k) for k in ROW if isinstance(k, str) and k.endswith("Json")},
    "coverage": Coverage.from_json,
    "sources": SessionSources.from_json,
    "model reply": parse_update,
    "toolsUsed": tool_names,
    "ledger head": lambda text: read_entry("s", [(HEAD, text, {})], {}),
    "ledger head lists": lambda text: read_entry("s", [(HEAD, "{}", {"lists": text})], {}),
}
DEEP = ["[" * 100_000 + "]" * 100_000, '{"a":' * 100_000 + "1" + "}" * 100_000]


def _outcome(read: Callable[[str], object], text: str) -> tuple[str, str]:
    try:
        return "returned", repr(read(text))
    except ValueError:  # json's JSONDecodeError and the readers' own are ValueErrors
        return "raised", "ValueError"
    except Exception as exc:
        return "raised", type(exc).__name__


@pytest.mark.parametrize("deep", DEEP, ids=["array", "object"])
@pytest.mark.parametrize("reader", READERS)
def test_json_nested_past_the_stack_is_read_as_text_that_is_not_json(
    reader: str, deep: str
) -> None:
    read = READERS[reader]
    kind, what = _outcome(read, deep)
    assert kind == "returned" or what in ("ValueError", "BadReply"), what  # each one refuses
    assert kind == _outcome(read, "x" + deep)[0]  # "x": not JSON from its first character
