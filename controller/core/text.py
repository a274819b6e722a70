"""Small text and time helpers every layer shares. Pure."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def one_line(text: object, limit: int | None = None) -> str:
    """str(text) on one line, whitespace collapsed, at most limit characters."""
    flat = " ".join(str(text).split())
    return flat if limit is None else flat[:limit]


def ms_to_rfc3339(ms: int) -> str:
    """Milliseconds since the epoch as RFC 3339 seconds in UTC; a timestamp out of range is
    shown as the number it is, never an error."""
    try:
        when = EPOCH + dt.timedelta(milliseconds=ms)
    except OverflowError:
        return f"{ms} ms after the epoch"
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def json_value(text: str | bytes, **options: Any) -> Any:
    """json.loads for what others wrote (rows, ledger entries, replies, error bodies): JSON
    nested past Python's stack is a ValueError, as any other text that is not JSON."""
    try:
        return json.loads(text, **options)
    except RecursionError:
        raise ValueError("JSON nested too deep to read") from None
