"""Item sources: the size of the record of which memories said each item, and what keeping
it costs a pass, by the session's size (issue 36, docs/privacy.md "When a memory is
deleted").

In process, no store: a generated coding session of N memories (requests, values, file
names; some repeated) is summarized by the extractive summarizer through the pipeline's
own pass (`controller.pipeline.run_pass`: summarizer, merge, validation) in chunks of 400,
as the operator does a backlog. Then the summary's item count, its `item_sources` entries
and their JSON bytes (what the ledger stores), and, `--reps` times, one pass of 20 new
memories into it timed twice in the same run: as it is, and with the recording of sources
replaced by a copy of the prior's entries (the baseline without item sources). The figure
is the medians' difference.

    .venv/bin/python -m bench.item_sources [--sizes 1000,10000,50000] [--reps 5] [--quick]

Last line (per size, slash-joined: entries, bytes, and ms a pass spends recording):
item_sources sizes=<text> entries=<text> bytes=<text> record_ms=<text>
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # `python bench/item_sources.py` from the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from controller.core import merge
from controller.core.memories import Memory, render_interaction_document
from controller.core.summary import StructuredSummary
from controller.pipeline import run_pass
from controller.summarizers.extractive import EXTRACTIVE
from devenv.bench import QuickRuns, parse_bench_args
from tests.support.passes import chunks_for

QUICK_RUNS: QuickRuns = [
    ([], "item_sources sizes=<text> entries=<text> bytes=<text> record_ms=<text>")
]
VERBS = ("Fix", "Add", "Rename", "Move", "Test", "Document", "Refactor", "Remove")
THINGS: tuple[str, ...] = ("the exporter", "the cache key", "port 7103", "the retry flag")
THINGS += ("billing module", "src/app/main.py", "the login test", "the CSV writer")


def interaction(i: int, prompt: str, response: str, at_ms: int, prefix: str = "mem") -> Memory:
    return Memory(
        id=f"{prefix}-{i:06d}",
        session_id="bench",
        timestamp_ms=at_ms,
        prompt=prompt,
        response=response,
        document=render_interaction_document(prompt, "", response),
    )


def session(n: int) -> list[Memory]:
    rng = random.Random(n)
    memories = []
    for i in range(n):
        value = rng.randint(0, 10**6) if rng.random() < 0.9 else 7  # a tenth repeat a request
        prompt = f"{rng.choice(VERBS)} {rng.choice(THINGS)} with value {value}."
        response = f"Done: changed {rng.choice(THINGS)}."
        memories.append(interaction(i, prompt, response, 1_770_000_000_000 + i * 1000))
    return memories


def summarized(memories: list[Memory]) -> StructuredSummary:
    current = None
    for chunk in chunks_for(EXTRACTIVE, memories, chunk_size=400):
        current, _ = run_pass("bench", chunk, current, EXTRACTIVE)
    assert isinstance(current, StructuredSummary)
    return current


def pass_ms(summary: StructuredSummary, reps: int) -> float:
    new = [
        interaction(i, f"Add feature {i} to the exporter.", "Done.", 1_780_000_000_000 + i, "new")
        for i in range(20)
    ]
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        run_pass("bench", new, summary, EXTRACTIVE)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,50000", help="memories per session")
    parser.add_argument("--reps", type=int, default=5, help="timed passes per size and way")
    args = parse_bench_args(parser, sizes="200", reps=1)
    sizes = [int(s) for s in args.sizes.split(",")]
    entries, sizes_bytes, record_ms = [], [], []
    for n in sizes:
        summary = summarized(session(n))
        items = sum(len(v) for v in summary.sections.values())
        with_sources = pass_ms(summary, args.reps)
        recording = merge.record
        merge.record = lambda prior, proposed, given: list(prior.item_sources) if prior else []  # type: ignore[assignment]
        try:
            without = pass_ms(summary, args.reps)
        finally:
            merge.record = recording
        size = len(json.dumps(summary.item_sources))
        print(
            f"size={n} items={items} entries={len(summary.item_sources)} bytes={size} "
            f"pass_ms={with_sources:.1f} without_sources_ms={without:.1f}"
        )
        entries.append(str(len(summary.item_sources)))
        sizes_bytes.append(str(size))
        record_ms.append(f"{with_sources - without:.1f}")
    print(
        f"item_sources sizes={'/'.join(map(str, sizes))} entries={'/'.join(entries)} "
        f"bytes={'/'.join(sizes_bytes)} record_ms={'/'.join(record_ms)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
