"""What the operator process holds while it runs, made once by `controller.operator.run`
and handed to every handler in kopf's memo (memo.runtime), so no module keeps it.

- events: the EventRecorder every Event goes through (one per state change, repeats
  counted on it: controller/kube/events.py);
- stopping: set when the operator begins to stop (SIGTERM); a running pass writes a
  checkpoint at its next chunk boundary and releases its claim (controller/pipeline.py);
- leader: the active replica as this replica last saw it (controller/kube/peering.py);
  the process stops with its finalizers released only when it led;
- summarizers_changed: set when a SessionSummarizer is created, so the peering reporter
  writes its activeReplica at its next poll rather than at its next resync.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from controller.kube.events import EventRecorder


@dataclass
class Runtime:
    events: EventRecorder
    stopping: threading.Event = field(default_factory=threading.Event)
    leader: str | None = None
    summarizers_changed: threading.Event = field(default_factory=threading.Event)

    @classmethod
    def of(cls, memo: Any) -> Runtime:
        runtime = memo.get("runtime") if hasattr(memo, "get") else None
        if not isinstance(runtime, Runtime):
            raise RuntimeError("the operator's runtime is missing from kopf's memo (see run())")
        return runtime
