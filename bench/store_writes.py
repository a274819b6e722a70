"""Store writes: what a summary row's upsert costs Chroma, one row per request or a group.

Why the operator writes the rows of the passes waiting to write to one collection as a
group (controller/store/memory_store.py): Chroma applies the writes to a database one after
the other, each request at about the same cost whatever it carries.

Real parts: a Chroma server (or the shared one) and chromadb's HTTP client, as the operator
uses them. Rows shaped like the operator's: a summary document of --doc-chars characters,
neo's keys, a --dim-dimensional vector (4,096: neo's qwen3 embedding). Per group size G
(--groups, 1 2 4 8 16): --rows rows upserted G per request into a fresh collection, from
one thread, then the same from --threads threads at once (G=1 only: whether Chroma runs
writes side by side). Printed per G: rows/s, ms per request, and the Chroma server's CPU
ms per row (its process's user+system time, from /proc; only with its own server).

    .venv/bin/python -m bench.store_writes [--groups 1 2 4 8 16] [--rows 160] [--quick]

Last line: store_writes rows_per_s_alone=<x> rows_per_s_grouped=<x> ratio=<x> group=<n>
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import os
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from controller.store.connection import StoreLocation, connect
from devenv.bench import SHARED_CHROMA_URL, QuickRuns, parse_bench_args
from devenv.chroma import running_chroma

QUICK_RUNS: QuickRuns = [
    ([], "store_writes rows_per_s_alone=<x> rows_per_s_grouped=<x> ratio=<x> group=<n>")
]


def cpu_ms(pid: int | None) -> float:
    """The process's CPU time so far (all its threads), in ms; 0 without a pid."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def rows(n: int, args: argparse.Namespace, rng: np.random.Generator) -> dict[str, object]:
    ids = [f"summary_{uuid.uuid4().hex}" for _ in range(n)]
    sentence = "decided to keep port 8080 in src/app/server.py after the test failed. "
    text = (sentence * (args.doc_chars // len(sentence) + 1))[: args.doc_chars]
    return {
        "ids": ids,
        "documents": [text] * n,
        "metadatas": [
            {"sessionId": i[8:], "title": "A session", "timestamp": 1.7e12, "summaryFormat": 4}
            for i in ids
        ],
        "embeddings": rng.random((n, args.dim), dtype=np.float32),
    }


def run(url: str, pid: int | None, args: argparse.Namespace) -> tuple[float, float, int]:
    """(rows/s of the first group size, of the fastest, the fastest size)."""
    location = StoreLocation(url=url, summary_collection="bench-store-writes")
    client = connect(location)
    rng = np.random.default_rng(7)
    per_group: dict[int, float] = {}
    print("# group rows_per_s ms_per_request chroma_cpu_ms_per_row")
    for group in args.groups:
        coll = client.create_collection(f"bench-store-writes-{uuid.uuid4().hex[:8]}")
        batches = [rows(group, args, rng) for _ in range(max(1, args.rows // group))]
        began, cpu = time.perf_counter(), cpu_ms(pid)
        for batch in batches:
            coll.upsert(**batch)  # type: ignore[arg-type]
        took, used = time.perf_counter() - began, cpu_ms(pid) - cpu
        written = len(batches) * group
        per_group[group] = written / took
        print(
            f"{group} {written / took:.1f} {1000 * took / len(batches):.1f} "
            f"{used / written:.1f}" + ("" if pid else " (shared server: no CPU)"),
            flush=True,
        )
    coll = client.create_collection(f"bench-store-writes-{uuid.uuid4().hex[:8]}")
    batches = [rows(1, args, rng) for _ in range(args.rows)]
    local = threading.local()

    def upsert(batch: dict[str, object]) -> None:
        if not hasattr(local, "coll"):
            local.coll = connect(location).get_collection(coll.name)
        local.coll.upsert(**batch)

    began = time.perf_counter()
    with ThreadPoolExecutor(args.threads) as pool:
        list(pool.map(upsert, batches))
    side_by_side = args.rows / (time.perf_counter() - began)
    print(f"# 1 row per request from {args.threads} threads at once: {side_by_side:.1f} rows/s")
    best = max(per_group, key=lambda g: per_group[g])
    return per_group[args.groups[0]], per_group[best], best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--rows", type=int, default=160, help="rows per group size")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--doc-chars", type=int, default=1500)
    parser.add_argument("--dim", type=int, default=4096)
    args = parse_bench_args(parser, groups=[1, 4], rows=8, dim=8)
    shared = os.environ.get(SHARED_CHROMA_URL)
    if shared:
        alone, grouped, best = run(shared, None, args)
    else:
        with (
            tempfile.TemporaryDirectory(prefix="sso-bench-writes-") as tmp,
            running_chroma(Path(tmp) / "chroma") as chroma,
        ):
            assert chroma.proc is not None
            alone, grouped, best = run(chroma.url, chroma.proc.pid, args)
    print(
        f"store_writes rows_per_s_alone={alone:.1f} rows_per_s_grouped={grouped:.1f} "
        f"ratio={grouped / alone:.2f} group={best}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
