"""An append-only journal of store writes, for the chaos tests. Each write logs a "begin"
line before the claim re-check and an "end" line after the upsert returns, so a writer
killed in between still shows its write as begun. A writer is a replica (holder) serving
one object: the same replica serving two objects of one session is two writers. The tests
read it to prove no two writers wrote one session at overlapping times. Installed by
devenv.operator as an observer of controller.pipeline's writes; never in the product."""

from __future__ import annotations

import json
import os
from pathlib import Path

from controller.pipeline import WriteEvent


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __call__(self, event: WriteEvent) -> None:
        record: dict[str, object] = {
            "event": event.phase,
            "session": event.session_id,
            "holder": event.writer,
            "object": event.writer_object,
            "t": event.at_ms,
        }
        if event.phase == "end":
            record["began"] = event.began_ms
        line = json.dumps(record, separators=(",", ":")) + "\n"
        # One short O_APPEND write per record: atomic with respect to other processes.
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
