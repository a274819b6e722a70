"""Boot read: what neo's own boot read costs over the operator's rows and over neo's own.

An agent boots with neo's SummaryService.listSummaries({limit: 5}) (get_all_summaries):
it fetches the metadata of every summary row (include metadatas, in pages of neo's
summarizationBatchLimit, 2,000 rows), sorts by timestamp, then fetches the 5 newest rows
whole. Every byte of every row's metadata is paid at every boot (docs/benchmarks.md).

Real parts: a Chroma server; neo's memory-core (neo.mjs from npm, run by
tests/neo/driver.mjs as tests/support/neo.py does, at neo's configured 4096 dimensions) as
the reader and as the writer of neo's own rows; the operator's write path
(controller.pipeline.summarize_session, the extractive summarizer, the local MiniLM
embedding); the OpenAI-compatible test server as neo's embeddings and chat endpoint.

Rows. --sessions sessions (20) of --memories turns (200) each are written by neo's own
MemoryService.addMemory and its embed daemon's drain into neo's memory collection.
Ours: the same memory rows (ids, documents, metadata as neo wrote them) are copied into a
memory collection of ours --every (20) at a time, each chunk followed by summarize_session,
so a row carries the state of its incremental passes. neo's: neo's own writer,
SessionService.summarizeSession, summarizes each whole session once; its chat model is the
test server, whose reply is a summary made of the session's user prompts (about 1 KB, a
stand-in for a model's text: listSummaries reads the documents of 5 rows only). Each
summary collection (ours and neo's are separate) is then filled to N rows by cloning its
written rows: document, metadata and embedding, a new session id (row id summary_<sid>,
metadata sessionId), the timestamp one minute older per clone, nothing else changed.
Both collections hold the same session ids.

Per size N (--sizes, 1,000 and 10,000; the collections grow from one size to the next):
- ms: one node process per collection runs listSummaries({limit: 5}) once untimed (it
  opens the collection, as a boot does), then --repeats (7) times timed inside that
  process (node's start-up is not counted); the median.
- bytes: another node process runs one listSummaries through a loopback HTTP proxy (in this
  process) that forwards to Chroma and counts each response body as sent (not
  decompressed, headers not counted); the figure is the sum over Chroma's collection `get`
  responses (the metadata pages and the 5 whole rows).
- ratio and bytes_ratio: ours / neo's (goal: ratio <= 1.2).

Before the figure lines, `row_metadata ours_mean_bytes=<n> neo_mean_bytes=<n>`: the mean
compact-JSON length of a written (not cloned) row's metadata, as Python's client reads it.

    .venv/bin/python -m bench.boot_read [--sizes 1000 10000] [--sessions 20] [--quick]

Last line (one per size, the largest last):
boot_read rows=<n> ours_ms=<n> neo_ms=<n> ratio=<x> ours_bytes=<n> neo_bytes=<n> bytes_ratio=<x>
"""

from __future__ import annotations

import sys
from pathlib import Path

# The repo root on the path: the benches also run as `python bench/NAME.py`.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import asyncio
import contextlib
import json
import re
import shutil
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
from aiohttp import ClientSession, ClientTimeout, web
from chromadb.api import ClientAPI

from controller.embeddings.minilm import LocalMiniLMEmbedding
from controller.pipeline import Backends, summarize_session
from controller.store.connection import StoreLocation, connect
from controller.store.memory_store import MemoryStore
from devenv.bench import QuickRuns, bench_chroma, parse_bench_args
from tests.support.neo import NEO_DIMENSION, NEO_EMBEDDING_MODEL, NeoClient, neo_client_dir
from tests.support.openai_server import running_openai_server

# The smoke tier (tests/bench) runs `--quick` plus each argument list and checks that the
# last line has the format documented above (docs/benchmarks.md, "Quick mode").
QUICK_RUNS: QuickRuns = [
    (
        [],
        "boot_read rows=<n> ours_ms=<n> neo_ms=<n> ratio=<x> ours_bytes=<n> neo_bytes=<n> "
        "bytes_ratio=<x>",
    )
]
NEO_MEMORY = "boot-read-neo-memory"  # neo's memory collection (neo writes the turns)
NEO_ROWS = "boot-read-neo-sessions"  # neo's summary rows (SessionService.summarizeSession)
OURS_MEMORY = "boot-read-memory"  # the same turns, copied for the operator to read
OURS_ROWS = "boot-read-sessions"  # the operator's summary rows (summarize_session)
BOOT_LIMIT = 5  # get_all_summaries({limit: 5}), what an agent reads at boot
MINILM_DIMENSION = 384
CLONE_BATCH = 100
COMPONENTS = ("exporter", "scheduler", "gateway", "indexer", "cache", "router", "billing")
TOOLS = ("Edit", "Read", "Bash", "Grep", "Write")


def session_id(index: int) -> str:
    """Written and cloned sessions alike: ids of one length, so no row is larger by its id."""
    return f"boot-read-{index:06d}"


def turns(session: int, count: int) -> list[dict[str, Any]]:
    """One session's turns as an agent saves them with neo's add_memory (a few hundred
    bytes each, every one distinct)."""
    sid = session_id(session)
    out = []
    for n in range(count):
        part = COMPONENTS[(session + n) % len(COMPONENTS)]
        port, limit = 7000 + (session * 37 + n) % 900, 100 + (n * 13) % 400
        prompt = (
            f"Make the {part} retry failed batches at most {n % 5 + 2} times and listen on "
            f"port {port}; session {session} step {n}."
        )
        thought = (
            f"The {part} reads rows in pages of {limit}; the retry belongs in the page loop, "
            f"not around the whole batch, or one bad page repeats {limit} rows."
        )
        response = (
            f"Changed {part}/worker.py: each page is retried up to {n % 5 + 2} times with "
            f"backoff, the listener moved to port {port}. Tests pass ({40 + n % 9} passed)."
        )
        out.append(
            {
                "sessionId": sid,
                "prompt": prompt,
                "thought": thought,
                "response": response,
                "agent": "claude-code",
                "model": "claude-sonnet",
                "amountToolCalls": n % 4 + 1,
                "toolsUsed": [{"name": TOOLS[(n + k) % len(TOOLS)]} for k in range(n % 3 + 1)],
            }
        )
    return out


PROMPT_LINE = re.compile(r"^User Prompt: (.+)$", re.MULTILINE)


def neo_model_reply(body: Any) -> dict[str, Any]:
    """The chat reply neo's writer gets: its JSON schema, a summary made of the user prompts
    it was sent (about 1 KB)."""
    text = " ".join(str(m.get("content", "")) for m in body.get("messages", []))
    prompts = PROMPT_LINE.findall(text)
    summary = "The session changed retries and listeners: " + " ".join(prompts)
    return {
        "summary": summary[:1000],
        "title": " ".join((prompts[0] if prompts else "Session").split()[:8]),
        "category": "feature",
        "quality": 80,
        "productivity": 85,
        "impact": 40,
        "complexity": 35,
        "technologies": ["python", "chromadb", "kubernetes"],
    }


# -- the byte counter --------------------------------------------------------------------------


@dataclass
class CountingProxy:
    """Forwards HTTP to Chroma and records (path, body bytes as sent) of every response."""

    target: str
    url: str = ""
    responses: list[tuple[str, int]] = field(default_factory=list)

    async def forward(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {
            k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")
        }
        session: ClientSession = request.app["session"]
        async with session.request(
            request.method, self.target + request.path_qs, data=body, headers=headers
        ) as upstream:
            payload = await upstream.read()  # auto_decompress=False: the bytes as sent
            self.responses.append((request.path, len(payload)))
            keep = ("content-type", "content-encoding")
            return web.Response(
                status=upstream.status,
                body=payload,
                headers={k: v for k, v in upstream.headers.items() if k.lower() in keep},
            )

    def get_bytes(self) -> int:
        """Bytes of Chroma's collection `get` responses recorded so far."""
        return sum(size for path, size in self.responses if path.endswith("/get"))


@contextlib.contextmanager
def counting_proxy(target: str) -> Iterator[CountingProxy]:
    proxy = CountingProxy(target.rstrip("/"))
    loop = asyncio.new_event_loop()

    async def start() -> web.AppRunner:
        app = web.Application(client_max_size=1 << 31)
        app["session"] = ClientSession(auto_decompress=False, timeout=ClientTimeout(total=600))
        app.router.add_route("*", "/{tail:.*}", proxy.forward)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.SockSite(runner, sock).start()
        return runner

    async def close(runner: web.AppRunner) -> None:
        await runner.app["session"].close()
        await runner.cleanup()

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    proxy.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    runner = loop.run_until_complete(start())
    thread = threading.Thread(target=loop.run_forever, name="boot-read-proxy", daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        asyncio.run_coroutine_threadsafe(close(runner), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


# -- writing the rows --------------------------------------------------------------------------


def write_neo_rows(neo: NeoClient, sessions: int, memories: int) -> None:
    """neo's own agents' turns (addMemory, the embed drain), then neo's own summary writer."""
    for session in range(sessions):
        added, drained = neo.run(
            {"op": "add", "memories": turns(session, memories)}, {"op": "drain"}, timeout=600
        )
        refused = [a for a in added if a.get("error")]
        if refused or drained["failed"] or drained["embedded"] != memories:
            raise RuntimeError(f"neo did not store session {session}: {refused[:1]} {drained}")
    written = neo.run(
        *({"op": "summarize", "sessionId": session_id(s)} for s in range(sessions)), timeout=600
    )
    for session, result in enumerate(written):
        if not result or result.get("memoryCount") != memories:
            raise RuntimeError(f"neo's writer did not summarize session {session}: {result}")


def write_our_rows(
    client: ClientAPI, chroma_url: str, sessions: int, memories: int, every: int
) -> int:
    """The operator's write path over the same memory rows neo stored, `every` at a time."""
    location = StoreLocation(
        url=chroma_url, memory_collection=OURS_MEMORY, summary_collection=OURS_ROWS
    )
    store = MemoryStore(connect(location), location)
    embed = LocalMiniLMEmbedding()
    ours = store.create_memory_collection()
    theirs = client.get_collection(NEO_MEMORY)
    passes = 0
    for sid in map(session_id, range(sessions)):
        got = theirs.get(where={"sessionId": sid}, include=["documents", "metadatas"])
        rows = [
            (meta["timestamp"], rid, doc, dict(meta))
            for rid, doc, meta in zip(
                got["ids"], got["documents"] or [], got["metadatas"] or [], strict=True
            )
        ]
        if len(rows) != memories:
            raise RuntimeError(f"{sid}: {len(rows)} memory rows in neo's collection")
        rows.sort(key=lambda r: (r[0], r[1]))
        for first in range(0, len(rows), every):
            chunk = rows[first : first + every]
            ours.add(  # the pass never reads a memory's vector: placeholders
                ids=[r[1] for r in chunk],
                documents=[r[2] for r in chunk],
                metadatas=[cast(Any, r[3]) for r in chunk],
                embeddings=np.full((len(chunk), MINILM_DIMENSION), 0.05, dtype=np.float32),
            )
            outcome = summarize_session(
                Backends(store, embed), sid, writer="bench", trigger="manual"
            )
            if outcome.kind != "summarized":
                raise RuntimeError(f"{sid}: pass over memories {first}..: {outcome.kind}")
            passes += 1
    return passes


@dataclass
class Rows:
    """One summary collection's written rows, the sources of its clones."""

    name: str
    ids: list[str]
    documents: list[str]
    metadatas: list[dict[str, Any]]
    embeddings: list[Any]

    @classmethod
    def read(cls, client: ClientAPI, name: str) -> Rows:
        got = client.get_collection(name).get(include=["documents", "metadatas", "embeddings"])
        order = sorted(range(len(got["ids"])), key=lambda i: got["ids"][i])
        return cls(
            name,
            [got["ids"][i] for i in order],
            [(got["documents"] or [])[i] or "" for i in order],
            [dict((got["metadatas"] or [])[i] or {}) for i in order],
            [cast(Any, got["embeddings"])[i] for i in order],
        )

    def mean_metadata_bytes(self) -> float:
        return statistics.fmean(
            len(json.dumps(m, separators=(",", ":")).encode()) for m in self.metadatas
        )

    def fill(self, client: ClientAPI, rows: int) -> None:
        """Clones the written rows into the collection until it holds `rows` rows."""
        coll = client.get_collection(self.name)
        have = coll.count()
        for first in range(have, rows, CLONE_BATCH):
            batch = range(first, min(first + CLONE_BATCH, rows))
            metas = []
            for index in batch:
                source = index % len(self.ids)
                meta = dict(self.metadatas[source], sessionId=session_id(index))
                if isinstance(meta.get("timestamp"), int | float):
                    meta["timestamp"] = int(meta["timestamp"]) - index * 60_000
                metas.append(meta)
            sources = [index % len(self.ids) for index in batch]
            coll.add(
                ids=[f"summary_{session_id(index)}" for index in batch],
                documents=[self.documents[s] for s in sources],
                metadatas=cast(Any, metas),
                embeddings=cast(Any, np.asarray([self.embeddings[s] for s in sources])),
            )
        if coll.count() != rows:
            raise RuntimeError(f"{self.name} holds {coll.count()} rows, not {rows}")


# -- reading them as an agent boots ------------------------------------------------------------


def reader(base: NeoClient, rows: str, chroma_url: str, workdir: Path) -> NeoClient:
    """neo as an agent runs it, reading the summary collection `rows` on this Chroma."""
    return NeoClient(
        base.package,
        chroma_url,
        base.model_host,
        workdir,
        memory_collection=NEO_MEMORY,
        summary_collection=rows,
    )


def boot_ms(neo: NeoClient, rows: int, repeats: int) -> float:
    """The median of `repeats` listSummaries({limit: 5}) in one node process."""
    (timed,) = neo.run({"op": "timedList", "limit": BOOT_LIMIT, "repeats": repeats}, timeout=900)
    if timed.get("error") or timed["total"] != rows or timed["count"] != BOOT_LIMIT:
        raise RuntimeError(f"listSummaries over {neo.summary_collection}: {timed}")
    return float(statistics.median(timed["ms"]))


def boot_bytes(neo: NeoClient, proxy: CountingProxy, rows: int) -> int:
    """Bytes of Chroma's `get` responses for one listSummaries({limit: 5}) through the proxy."""
    before = proxy.get_bytes()
    (listed,) = neo.run({"op": "timedList", "limit": BOOT_LIMIT, "repeats": 0}, timeout=900)
    if listed.get("error") or listed["total"] != rows:
        raise RuntimeError(f"listSummaries over {neo.summary_collection}: {listed}")
    return proxy.get_bytes() - before


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000])
    parser.add_argument("--sessions", type=int, default=20, help="sessions written, not cloned")
    parser.add_argument("--memories", type=int, default=200, help="turns per session")
    parser.add_argument("--every", type=int, default=20, help="turns per pass of ours")
    parser.add_argument("--repeats", type=int, default=7, help="timed boot reads per size")
    args = parse_bench_args(parser, sizes=[50], sessions=2, memories=40, repeats=3)
    sizes = sorted(args.sizes)
    if sizes[0] < max(args.sessions, BOOT_LIMIT):
        parser.error("every size must hold the written sessions and at least 5 rows")
    package = neo_client_dir()
    work = Path(tempfile.mkdtemp(prefix="sso-bench-boot-read-"))
    try:
        with (
            bench_chroma(work / "chroma") as chroma_url,
            running_openai_server(
                embedding_dimension=NEO_DIMENSION,
                embedding_model=NEO_EMBEDDING_MODEL,
                responder=neo_model_reply,
            ) as model,
            counting_proxy(chroma_url) as proxy,
        ):
            client = connect(StoreLocation(url=chroma_url))
            host = model.base_url.removesuffix("/v1")
            writer = NeoClient(
                package,
                chroma_url,
                host,
                work / "neo-writer",
                memory_collection=NEO_MEMORY,
                summary_collection=NEO_ROWS,
            )
            started = time.monotonic()
            write_neo_rows(writer, args.sessions, args.memories)
            print(
                f"neo wrote {args.sessions} sessions of {args.memories} turns and their "
                f"summaries in {time.monotonic() - started:.0f}s",
                flush=True,
            )
            started = time.monotonic()
            passes = write_our_rows(client, chroma_url, args.sessions, args.memories, args.every)
            print(
                f"the operator wrote the same sessions in {passes} passes in "
                f"{time.monotonic() - started:.0f}s",
                flush=True,
            )
            ours, theirs = Rows.read(client, OURS_ROWS), Rows.read(client, NEO_ROWS)
            if ours.ids != theirs.ids:
                raise RuntimeError(f"different sessions: {ours.ids} / {theirs.ids}")
            print(
                f"row_metadata ours_mean_bytes={ours.mean_metadata_bytes():.0f} "
                f"neo_mean_bytes={theirs.mean_metadata_bytes():.0f}",
                flush=True,
            )
            readers = {
                name: reader(writer, name, chroma_url, work / f"reader-{name}")
                for name in (OURS_ROWS, NEO_ROWS)
            }
            counted = {
                name: reader(writer, name, proxy.url, work / f"counted-{name}")
                for name in (OURS_ROWS, NEO_ROWS)
            }
            for rows in sizes:
                started = time.monotonic()
                ours.fill(client, rows)
                theirs.fill(client, rows)
                print(f"filled to {rows} rows in {time.monotonic() - started:.0f}s", flush=True)
                ms = {name: boot_ms(neo, rows, args.repeats) for name, neo in readers.items()}
                sent = {name: boot_bytes(neo, proxy, rows) for name, neo in counted.items()}
                ours_ms, neo_ms = ms[OURS_ROWS], ms[NEO_ROWS]
                ours_b, neo_b = sent[OURS_ROWS], sent[NEO_ROWS]
                print(
                    f"boot_read rows={rows} ours_ms={ours_ms:.1f} neo_ms={neo_ms:.1f} "
                    f"ratio={ours_ms / neo_ms:.2f} ours_bytes={ours_b} neo_bytes={neo_b} "
                    f"bytes_ratio={ours_b / neo_b:.2f}",
                    flush=True,
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
