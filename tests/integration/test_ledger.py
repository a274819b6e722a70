"""The reader's row and the writer's ledger (issue 33), on a real Chroma server.

- A row agents read carries the document and neo's keys, and stays about the size of neo's
  own row whatever the session's length; the writer's state is in the ledger.
- A row of the previous release (every key of the writer's state on the row itself, its
  fence as `claimFence`) is read, slimmed and moved on the first write: no fact lost, no
  other writer reported, and neo's keys never missing from the row in between.
- A row deleted while its ledger entry stays comes back with every fact of the entry.
"""

from __future__ import annotations

import itertools
import json
import re
import time
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from controller.core.summary_row import READER_ROW_KEYS
from controller.embeddings.minilm import LocalMiniLMEmbedding
from controller.pipeline import Backends, summarize_session
from controller.store.memory_store import MemoryStore
from devenv.processes import wait_for
from tests.integration.harness import Harness, interaction, load, summarizer_yaml
from tests.support.ledger import ledger_of
from tests.support.previous_release import LEGACY_FENCE_KEY, rewrite_as_previous_release

_EMBED = LocalMiniLMEmbedding()
_RUNS = itertools.count()
MEMORY, SESSIONS = "ledger-memory", "ledger-sessions"
BASE = 1_770_000_000_000
# neo's own writer leaves about 0.5-0.6 KB of metadata per row (bench/boot_read.py measures
# it with neo's code): the row of a session of any length stays within 1.2 times that.
ROW_BYTES_MAX = int(1.2 * 700)


def embed(texts: list[str]) -> list[Any]:
    return list(_EMBED(texts))


def fact(sid: str, k: int) -> str:
    return f"Fact {sid}-{k}: the exporter's batch {k} moved to port {7000 + k}"


def summarize(store: MemoryStore, sid: str, chunk_size: int | None = None) -> Any:
    return summarize_session(
        Backends(store, embed), sid, writer="ledger-test", trigger="test", chunk_size=chunk_size
    )


def row(store: MemoryStore, sid: str) -> tuple[str, dict[str, Any]]:
    got = store.summaries().get(ids=[f"summary_{sid}"], include=["documents", "metadatas"])
    assert got["ids"], f"no row of {sid}"
    return (got["documents"] or [""])[0] or "", dict((got["metadatas"] or [{}])[0] or {})


def everything(store: MemoryStore, sid: str) -> str:
    stored = store.stored_summary(sid)
    assert stored is not None
    return stored[0] + json.dumps(stored[1], ensure_ascii=False)


@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # each example is a real pass
)
@given(
    memories=st.integers(min_value=1, max_value=240), step=st.integers(min_value=1, max_value=60)
)
def test_the_row_stays_as_small_as_neos_whatever_the_sessions_length(
    harness: Harness, memories: int, step: int
) -> None:
    """Summarized in steps, a session of any length leaves a row whose metadata holds only
    the readers' keys and stays within the bound; every fact is in the ledger."""
    sid = f"lean-{next(_RUNS)}"
    store = harness.store(MEMORY, SESSIONS)
    rows = [interaction(sid, k, BASE + k, fact(sid, k)) for k in range(memories)]
    for start in range(0, memories, step):
        load(store, rows[start : start + step])
        summarize(store, sid)
    _, meta = row(store, sid)
    assert set(meta) <= READER_ROW_KEYS, sorted(set(meta) - READER_ROW_KEYS)
    size = len(json.dumps(meta, separators=(",", ":"), ensure_ascii=False))
    assert size <= ROW_BYTES_MAX, f"{size} bytes of row metadata: {meta}"
    assert meta["memoryCount"] == memories and isinstance(meta["timestamp"], int)
    kept = everything(store, sid)
    lost = [k for k in range(memories) if fact(sid, k) not in kept]
    assert not lost, f"facts of memories {lost[:5]} are neither in the row nor in the ledger"


def write_previous_release_row(store: MemoryStore, sid: str, fence: int) -> None:
    summarize(store, sid)
    rewrite_as_previous_release(store, sid, fence)


@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # each example is a real pass
)
@given(before=st.integers(min_value=1, max_value=30), after=st.integers(min_value=0, max_value=10))
def test_a_previous_release_row_is_slimmed_on_the_first_write_and_keeps_every_fact(
    harness: Harness, before: int, after: int
) -> None:
    sid = f"upgrade-{next(_RUNS)}"
    store = harness.store(MEMORY, SESSIONS)
    load(store, [interaction(sid, k, BASE + k, fact(sid, k)) for k in range(before)])
    write_previous_release_row(store, sid, fence=10**12)  # a fence from the old release
    _, heavy = row(store, sid)
    assert "sectionsJson" in heavy and LEGACY_FENCE_KEY in heavy
    # Read as ours (structured, not another writer's text) before anything is written.
    prior = store.read_summary(sid)
    assert prior is not None and getattr(prior, "other_writer", "legacy") is None
    new = [
        interaction(sid, before + k, BASE + before + k, fact(sid, before + k)) for k in range(after)
    ]
    load(store, new)
    outcome = summarize(store, sid)
    assert outcome.other_writer is None
    if after == 0:
        assert outcome.kind == "up-to-date"
        return
    assert outcome.kind == "summarized" and outcome.new_memories == after
    _, meta = row(store, sid)
    assert set(meta) <= READER_ROW_KEYS, sorted(set(meta) - READER_ROW_KEYS)
    kept = everything(store, sid)
    lost = [k for k in range(before + after) if fact(sid, k) not in kept]
    assert not lost, f"facts of memories {lost[:5]} lost in the upgrade"


def test_a_deleted_row_comes_back_whole_from_its_ledger_entry(harness: Harness) -> None:
    """neo's garbage collection deletes summary rows: the next pass writes the row again,
    with nothing new to summarize, and with what only the row used to show (the title,
    category, scores, technologies)."""
    sid = f"deleted-row-{next(_RUNS)}"
    store = harness.store(MEMORY, SESSIONS)
    load(store, [interaction(sid, k, BASE + k, fact(sid, k)) for k in range(3)])
    summarize(store, sid)
    _, before = row(store, sid)
    store.summaries().delete(ids=[f"summary_{sid}"])
    outcome = summarize(store, sid)
    assert outcome.kind == "summarized" and outcome.new_memories == 0  # all was covered
    document, after = row(store, sid)
    assert all(fact(sid, k) in document for k in range(3))
    assert not after["title"].startswith("Session ")
    assert {k: after.get(k) for k in before if k != "timestamp"} == {
        k: v for k, v in before.items() if k != "timestamp"
    }


def test_an_unreadable_ledger_entry_stops_the_pass_and_a_rebuild_replaces_it(
    harness: Harness,
) -> None:
    from controller.core.summary import UnreadablePriorSummary

    sid = f"bad-ledger-{next(_RUNS)}"
    store = harness.store(MEMORY, SESSIONS)
    load(store, [interaction(sid, 0, BASE, fact(sid, 0))])
    summarize(store, sid)
    ledger_of(store).update(ids=[f"summary_{sid}"], documents=["{not json"], embeddings=[[1.0]])
    before = row(store, sid)
    load(store, [interaction(sid, 1, BASE + 1, fact(sid, 1))])
    try:
        summarize(store, sid)
    except UnreadablePriorSummary as exc:
        assert "ledger entry" in str(exc)
    else:
        raise AssertionError("a pass wrote over an unreadable ledger entry")
    assert row(store, sid) == before
    got = ledger_of(store).get(ids=[f"summary_{sid}"], include=["documents"])
    assert got["documents"] == ["{not json"]
    rebuilt = summarize_session(
        Backends(store, embed), sid, writer="ledger-test", trigger="test", rebuild=True
    )
    assert rebuilt.kind == "summarized"
    assert all(fact(sid, k) in everything(store, sid) for k in range(2))


def test_summaryctl_ledger_shows_a_sessions_entry_and_says_when_there_is_none(
    harness: Harness,
) -> None:
    sid = f"shown-{next(_RUNS)}"
    store = harness.store(MEMORY, SESSIONS)
    load(store, [interaction(sid, k, BASE + k, fact(sid, k)) for k in range(5)])
    summarize(store, sid)
    where = ["--chroma-url", harness.chroma.url, "--memory-collection", MEMORY]
    where += ["--summary-collection", SESSIONS]
    shown = harness.summaryctl("ledger", sid, *where)
    assert shown.returncode == 0, shown.stderr
    assert f"session:        {sid}" in shown.stdout
    assert "memories:       5;" in shown.stdout and "User Requests: " in shown.stdout
    # Times as times, the fence as what it is: never raw epoch milliseconds or bare jargon.
    assert not re.search(r"\b1\d{12}\b", shown.stdout), shown.stdout
    assert re.search(r"written:        \d{4}-\d\d-\d\dT\S+Z by ", shown.stdout), shown.stdout
    assert "written under:  (none: written without the operator's claim)" in shown.stdout
    as_json = harness.summaryctl("ledger", sid, "--json", *where)
    assert as_json.returncode == 0, as_json.stderr
    keys = json.loads(as_json.stdout)["keys"]
    assert keys["memoryCount"] == 5 and fact(sid, 4) in keys["sectionsJson"]
    assert keys["ledger.segments"] >= 1 and "ledger.lists" in keys
    assert keys["ledger.rowDigest"] == keys["documentDigest"]
    missing = harness.summaryctl("ledger", "no-such-session", *where)
    assert missing.returncode == 2
    assert "no summary or ledger entry of session 'no-such-session'" in missing.stderr


def test_with_every_memory_deleted_the_reconciliation_deletes_the_row_and_its_entry(
    harness: Harness,
) -> None:
    """No sunset: the walk finds a session with a ledger entry and no memory left, and its
    pass deletes the row and the entry (what the memories said, nothing else left)."""
    memory, summary = "all-gone-memory", "all-gone-sessions"
    sweep = "enabled: true, intervalSeconds: 5, idleSeconds: 1, reconcileIntervalSeconds: 60"
    yaml = summarizer_yaml(
        "all-gone", harness.chroma.url, memory=memory, summary=summary, sweep=sweep
    )
    harness.kubectl("apply", "-f", "-", input=yaml)
    store = harness.store(memory, summary)
    sid, now = f"all-gone-{next(_RUNS)}", int(time.time() * 1000) - 60_000
    rows = [interaction(sid, k, now + k, fact(sid, k)) for k in range(2)]
    load(store, rows)

    def kept() -> bool:
        return store.stored_summary(sid) is not None

    wait_for(kept, 60, 0.5, message="the sweep's summary", log=harness.log)
    store.memories().delete(ids=[r[0] for r in rows])
    # The next walk starts at most 60 s after the last one ended, and asks for a pass.
    wait_for(lambda: not kept(), 120, 1, message="the walk's pass", log=harness.log)
    assert ledger_of(store).get(where={"sessionId": sid})["ids"] == []
    harness.kubectl("delete", "ssumr", "all-gone", "--wait=false")
