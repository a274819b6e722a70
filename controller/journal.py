"""An append-only journal of store writes, enabled by SSO_WRITE_JOURNAL. Each write logs a
"begin" line before the claim re-check and an "end" line after the upsert returns, so a
writer killed in between still shows its write as begun. A writer is a replica (holder)
serving one object: the same replica serving two objects of one session is two writers.
The chaos tests read it to prove no two writers wrote one session at overlapping times."""

from __future__ import annotations

import json
import os

from controller.config import CONFIG


def _append(record: dict[str, object]) -> None:
    if not CONFIG.write_journal:
        return
    line = json.dumps(record, separators=(",", ":")) + "\n"
    # One short O_APPEND write per record: atomic with respect to other processes.
    fd = os.open(CONFIG.write_journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def write_begins(session_id: str, holder: str, at_ms: int, obj: str = "") -> None:
    _append({"event": "begin", "session": session_id, "holder": holder, "object": obj, "t": at_ms})


def write_ends(session_id: str, holder: str, began_ms: int, at_ms: int, obj: str = "") -> None:
    _append(
        {
            "event": "end",
            "session": session_id,
            "holder": holder,
            "object": obj,
            "began": began_ms,
            "t": at_ms,
        }
    )
