"""Sweep scaling: one sweep after 1k new memories, our watermark scan vs the old system's
full scan of the 30-day window in 2000-row pages, at three collection sizes, same run.

Real parts: a Chroma server (`chroma run`) holding S sessions x 100 memories spread over
the last 30 days, every session with an up-to-date summary; then 1,000 new memories land
in 100 sessions. Both methods must find exactly those 100 stale sessions.
- ours: controller.sweep.plan_from_store (memories after the watermark, the summaries
  of the sessions seen, and per-session counts only where timestamps look fresh);
- fullscan: page through every memory of the window (2000 rows a page), count per
  session, page through every summary, compare counts (how the old script selected).
Vectors are 8-d random: the scan cost under test is metadata, not embedding.

    .venv/bin/python -m bench.sweep_scaling [--sizes 100,1000,10000] [--quick]

Last line: sweep_scaling memories=<n> ours_s=<n> fullscan_s=<n> ratio=<n> (largest size)
"""

from __future__ import annotations

import sys
from pathlib import Path

# The repo root on the path: the benches also run as `python bench/NAME.py`.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import random
import tempfile
import time
from collections import Counter
from typing import cast

import numpy as np
from chromadb.api.models.Collection import Collection
from chromadb.api.types import Metadata, Where

from controller.api import SessionSummarizerSpec
from controller.store.connection import StoreLocation, connect
from controller.store.memory_store import MemoryStore
from controller.sweep import plan_from_store
from devenv.bench import QuickRuns, bench_chroma, parse_bench_args

# The smoke tier (tests/bench) runs `--quick` plus each argument list and checks that the
# last line has the format documented above (docs/benchmarks.md, "Quick mode").
QUICK_RUNS: QuickRuns = [([], "sweep_scaling memories=<n> ours_s=<n> fullscan_s=<n> ratio=<n>")]
PER_SESSION = 100
BATCH = 5000
PAGE = 2000
DAY = 86_400_000
NEW = 1000
STALE = 100


def vectors(n: int, rng: random.Random) -> np.ndarray:
    return np.array([[rng.random() for _ in range(8)] for _ in range(n)], dtype=np.float32)


def load(
    coll: Collection, ids: list[str], docs: list[str], metas: list[Metadata], rng: random.Random
) -> None:
    for i in range(0, len(ids), BATCH):
        coll.add(
            ids=ids[i : i + BATCH],
            documents=docs[i : i + BATCH],
            metadatas=metas[i : i + BATCH],
            embeddings=vectors(len(ids[i : i + BATCH]), rng),
        )


def populate(store: MemoryStore, sessions: int, now: int, rng: random.Random) -> None:
    mem, summ = store.create_memory_collection(), store.summaries(create=True)
    newest: dict[str, int] = {}
    ids: list[str] = []
    docs: list[str] = []
    metas: list[Metadata] = []
    for s in range(sessions):
        sid = f"s{s:05d}"
        start = now - 30 * DAY + rng.randrange(0, 29 * DAY)
        for k in range(PER_SESSION):
            ts = min(start + k * 60_000, now - 3_600_000)
            ids.append(f"{sid}-{k:03d}")
            docs.append(f"User Prompt: step {k}")
            metas.append({"sessionId": sid, "timestamp": ts, "type": "agent-interaction"})
            newest[sid] = max(newest.get(sid, 0), ts)
        if len(ids) >= 50_000:
            load(mem, ids, docs, metas, rng)
            ids, docs, metas = [], [], []
    load(mem, ids, docs, metas, rng)
    sids = sorted(newest)
    summary_metas: list[Metadata] = [
        {"sessionId": s, "timestamp": newest[s], "memoryCount": PER_SESSION} for s in sids
    ]
    load(summ, [f"summary_{s}" for s in sids], ["summary"] * len(sids), summary_metas, rng)


def add_new(store: MemoryStore, sessions: int, now: int, rng: random.Random) -> set[str]:
    stale = {f"s{s:05d}" for s in rng.sample(range(sessions), min(STALE, sessions))}
    ids: list[str] = []
    docs: list[str] = []
    metas: list[Metadata] = []
    per = NEW // len(stale)
    for sid in sorted(stale):
        for k in range(per):
            ids.append(f"{sid}-new-{k:03d}")
            docs.append("User Prompt: new work")
            metas.append(
                {"sessionId": sid, "timestamp": now - 30_000 + k, "type": "agent-interaction"}
            )
    load(store.memories(), ids, docs, metas, rng)
    return stale


def full_scan(store: MemoryStore, now: int) -> tuple[set[str], int]:
    mem, summ = store.memories(), store.summaries()
    counts: Counter[str] = Counter()
    read = offset = 0
    while True:
        got = mem.get(
            where=cast(Where, {"timestamp": {"$gte": now - 30 * DAY}}),
            include=["metadatas"],
            limit=PAGE,
            offset=offset,
        )
        for meta in got["metadatas"] or []:
            counts[str(meta["sessionId"])] += 1
        read += len(got["ids"])
        if len(got["ids"]) < PAGE:
            break
        offset += PAGE
    stored: dict[str, int] = {}
    offset = 0
    while True:
        got = summ.get(include=["metadatas"], limit=PAGE, offset=offset)
        for meta in got["metadatas"] or []:
            stored[str(meta["sessionId"])] = int(meta.get("memoryCount", -1))  # type: ignore[arg-type]
        if len(got["ids"]) < PAGE:
            break
        offset += PAGE
    return {sid for sid, n in counts.items() if stored.get(sid) != n}, read


def measure(url: str, sessions: int) -> tuple[int, float, float]:
    rng = random.Random(sessions)
    loc = StoreLocation(
        url=url,
        memory_collection=f"scale-{sessions}-memory",
        summary_collection=f"scale-{sessions}-sessions",
    )
    store = MemoryStore(connect(loc), loc)
    now = int(time.time() * 1000)
    t = time.monotonic()
    populate(store, sessions, now, rng)
    print(
        f"  loaded {sessions * PER_SESSION} memories in {time.monotonic() - t:.0f}s",
        file=sys.stderr,
    )
    watermark = now - 60_000  # the previous sweep ran a minute ago
    _, cursor, _ = store.scan_appended(None)  # where that sweep's appended-rows scan stopped
    stale = add_new(store, sessions, now, rng)
    spec = SessionSummarizerSpec.model_validate(
        {"sweep": {"idleSeconds": 0, "maxSessionsPerSweep": 10_000}}
    )
    t = time.monotonic()
    swept = plan_from_store(store, spec, watermark_ms=watermark, now_ms=now + 1, cursor=cursor)
    assert swept.aligned, "the appended-rows cursor lost its place"
    plan, scanned = swept.plan, swept.scanned + swept.appended
    ours = time.monotonic() - t
    assert set(plan.candidates) == stale, "watermark scan missed sessions"
    t = time.monotonic()
    found, read = full_scan(store, now + 1)
    full = time.monotonic() - t
    assert found == stale, "full scan disagrees"
    memories = sessions * PER_SESSION + NEW
    print(
        f"  sessions={sessions} memories={memories} ours: read {scanned} rows in {ours:.3f}s; "
        f"fullscan: read {read} rows in {full:.2f}s",
        file=sys.stderr,
    )
    return memories, ours, full


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes", default="100,1000,10000", help="sessions per size (x100 memories)"
    )
    args = parse_bench_args(parser, sizes="2,20")  # 20: the full scan reads two pages
    results = []
    with bench_chroma(Path(tempfile.mkdtemp(prefix="sso-scale-"))) as chroma_url:
        for sessions in (int(x) for x in args.sizes.split(",")):
            memories, ours, full = measure(chroma_url, sessions)
            results.append((memories, ours, full))
            print(
                f"sweep_scaling memories={memories} ours_s={ours:.3f} fullscan_s={full:.2f} "
                f"ratio={full / ours:.0f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
