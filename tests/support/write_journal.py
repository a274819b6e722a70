"""Reading the write journal (devenv/journal.py) of several operator processes: in the
order its lines were appended, which is the order things happened across the processes
(their clocks may disagree: the clock-skew test sets them minutes apart)."""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

OPEN = 2**62  # a write that never ended (its process was killed or is still stopped)


@dataclass(frozen=True)
class Write:
    session: str
    holder: str  # the replica
    obj: str  # the SessionSummary it serves
    fence: int | None  # its pass's claim grant
    begun: int  # line numbers in the journal
    admitted: int | None  # None: refused or failed before the upsert
    ended: int
    outcome: str  # written, refused, failed; "" if it never ended

    @property
    def writer(self) -> tuple[str, str]:
        return (self.holder, self.obj)

    @property
    def landed(self) -> bool:
        """Upserted, or may have been (admitted, never ended: killed or stopped mid-upsert)."""
        return self.outcome == "written" or (self.admitted is not None and self.outcome == "")


def read_writes(journal: Path) -> list[Write]:
    """Every write of the journal, in the order begun. A write is matched across its lines
    by (replica, object, session, the time its begin line carries)."""
    if not journal.exists():
        return []
    lines = [json.loads(line) for line in journal.read_text().splitlines() if line]
    found: dict[tuple[str, str, str, int], dict[str, Any]] = {}
    for n, r in enumerate(lines):
        began = r["t"] if r["event"] == "begin" else r["began"]
        key = (r["holder"], r.get("object", ""), r["session"], began)
        if r["event"] == "begin":
            found[key] = {"begun": n, "admitted": None, "ended": OPEN, "outcome": "", **r}
        elif key in found:
            found[key]["admitted" if r["event"] == "admitted" else "ended"] = n
            if r["event"] == "end":
                found[key]["outcome"] = r.get("outcome", "written")
    return [
        Write(
            session=w["session"],
            holder=w["holder"],
            obj=w.get("object", ""),
            fence=w.get("fence"),
            begun=w["begun"],
            admitted=w["admitted"],
            ended=w["ended"],
            outcome=w["outcome"],
        )
        for w in sorted(found.values(), key=lambda w: int(w["begun"]))
    ]


def by_session(writes: list[Write]) -> dict[str, list[Write]]:
    grouped: dict[str, list[Write]] = defaultdict(list)
    for w in writes:
        grouped[w.session].append(w)
    return grouped


def stale_writes(writes: list[Write]) -> list[Write]:
    """Writes that landed after a write of a newer claim grant to the same session had
    landed: a deposed writer's late row (the window fencing cannot close)."""
    stale = []
    for items in by_session(writes).values():
        landed = [w for w in items if w.landed]
        for w in landed:
            if any(
                (o.fence or 0) > (w.fence or 0) and o.ended < w.ended and o.outcome == "written"
                for o in landed
            ):
                stale.append(w)
    return stale


def overlapping_writes(writes: list[Write]) -> list[tuple[Write, Write]]:
    """Pairs of upserts to one session by different writers under live claims (stale writes
    aside) whose intervals, from admission to end, overlap in the journal's order."""
    stale = {id(w) for w in stale_writes(writes)}
    pairs = []
    for items in by_session(writes).values():
        live = sorted(
            (w for w in items if w.landed and id(w) not in stale),
            key=lambda w: w.admitted or 0,
        )
        for i, a in enumerate(live):
            for b in live[i + 1 :]:
                if a.writer != b.writer and (b.admitted or 0) < a.ended:
                    pairs.append((a, b))
    return pairs


def interleaved_passes(writes: list[Write]) -> dict[str, list[int | None]]:
    """Sessions whose landed writes interleave two passes (claim grants): once another
    pass wrote the session, an earlier pass wrote it again (a-b-a). Each session's grant
    sequence, for the ones that do."""
    found = {}
    for session, items in by_session(writes).items():
        sequence = [w.fence for w in sorted(items, key=lambda w: w.ended) if w.landed]
        finished: set[int | None] = set()
        for prev, cur in itertools.pairwise(sequence):
            if cur != prev:
                finished.add(prev)
                if cur in finished:
                    found[session] = sequence
                    break
    return found
