"""An append-only journal of store writes (holder, session, start/end), enabled by
SSO_WRITE_JOURNAL. The chaos tests read it to prove no two writers overlapped."""

from __future__ import annotations

import json
import os

from controller.config import CONFIG


def record_write(session_id: str, holder: str, start_ms: int, end_ms: int) -> None:
    if not CONFIG.write_journal:
        return
    line = (
        json.dumps({"session": session_id, "holder": holder, "start": start_ms, "end": end_ms})
        + "\n"
    )
    # One short O_APPEND write per record: atomic with respect to other processes.
    fd = os.open(CONFIG.write_journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
