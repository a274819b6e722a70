"""Every memory reaches its summary, whenever it arrives and whatever its timestamp: generated
sessions with generated arrival orders (timestamps behind the summary's watermark by
seconds to hours, ties with lower ids, every timestamp shape neo has written, rows landing
while a pass runs), each memory carrying a fact no other has, through the operator on the
real control plane and a real Chroma. After a sunset, and separately with no sunset at all
after the sweeps the docs promise, every fact is in the summary and `summaryctl verify`
finds no memory uncovered."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import textwrap
import time
import uuid
from collections.abc import Sequence
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.core.memories import Memory, render_interaction_document
from controller.core.naming import summary_object_name
from controller.core.summary import PriorSummary
from controller.core.summary_row import RowChangedDuringPass
from controller.pipeline import Backends, summarize_session
from controller.store.memory_store import MemoryStore
from controller.summarizers.contract import Proposal
from controller.summarizers.extractive import EXTRACTIVE
from devenv.operator import LOOPBACK_MODELS
from devenv.processes import wait_for
from tests.integration.harness import NS, Harness
from tests.support.cli import summaryctl_here

SHAPES = (
    "ms",
    "ms_float",
    "seconds",
    "seconds_float",
    "digits",
    "iso_z",
    "iso_offset",
    "iso_naive",
    "micros",  # time.time_ns() // 1000
    "micros_digits",
    "nanos",
    "nanos_digits",
)
# Times no parser reads (a missing one is UNTIMED's None): Date.toUTCString(), a number as
# scientific text, words. Such a row is summarized at the end of the session's order,
# counted in memoryCount, and named by `summaryctl verify`.
UNTIMED = (
    "Thu, 26 Nov 2026 10:00:00 GMT",
    "1.7e12",
    "yesterday",
    "",
    None,
)
NOW = int(time.time() * 1000)


def shaped(ts_ms: int, shape: str) -> object:
    """A timestamp as some writer of the memory collection stored it."""
    when = dt.datetime.fromtimestamp(ts_ms / 1000, dt.UTC)
    return {
        "ms": ts_ms,
        "ms_float": ts_ms + 0.25,  # plan rows' mtimeMs
        "seconds": ts_ms // 1000,
        "seconds_float": ts_ms / 1000,
        "digits": str(ts_ms),
        "iso_z": when.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
        "iso_offset": when.astimezone(dt.timezone(dt.timedelta(hours=2))).isoformat(),
        "iso_naive": when.replace(tzinfo=None).isoformat(),
        "micros": ts_ms * 1000 + 123,
        "micros_digits": str(ts_ms * 1000 + 456),
        "nanos": ts_ms * 1_000_000 + 789_012,
        "nanos_digits": str(ts_ms * 1_000_000 + 345_678),
    }[shape]


def fact() -> str:
    return f"FACT{uuid.uuid4().hex[:12].upper()}"


def row(sid: str, ts: object, fact_token: str, row_id: str | None = None) -> tuple[str, str, dict]:
    prompt = f"Keep {fact_token} in the notes."
    meta = {
        "sessionId": sid,
        "timestamp": ts,
        "type": "agent-interaction",
        "prompt": prompt,
        "thought": "noted",
        "response": "Kept.",
    }
    if ts is None:
        del meta["timestamp"]
    return (
        row_id or str(uuid.uuid4()),
        render_interaction_document(prompt, "noted", "Kept."),
        meta,
    )


def load(store: MemoryStore, rows: Sequence[tuple[str, str, dict]]) -> None:
    store.add_memories(
        [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], create=True
    )


def stored_row(store: MemoryStore, sid: str) -> tuple[str, dict[str, Any]]:
    # The row and its ledger entry's keys. The ledger entry is written first, and its keys
    # alone lack the row's (memoryCount among them): the row is there when memoryCount is.
    stored = store.stored_summary(sid)
    assert stored is not None and "memoryCount" in stored[1], f"no summary row of {sid}"
    return stored


def assert_every_fact_kept(store: MemoryStore, sid: str, facts: Sequence[str]) -> None:
    _, meta = stored_row(store, sid)
    sections = meta["sectionsJson"]
    missing = [f for f in facts if f not in sections]
    assert missing == [], f"facts not in the summary of {sid}: {missing}"


def summaryctl(harness: Harness, *args: str) -> subprocess.CompletedProcess[str]:
    """summaryctl in this process with harness.summaryctl's environment (tests/support/cli.py):
    the hypothesis test below makes some 40 calls, a few seconds of imports each as processes."""
    return summaryctl_here(
        *args, env={"SSO_ALLOWED_MODEL_URLS": LOOPBACK_MODELS, **harness.cp.env()}
    )


def verify(harness: Harness, sid: str, memory: str, summary: str) -> dict[str, Any]:
    res = summaryctl(
        harness,
        "verify", sid, "--json", "--chroma-url", harness.chroma.url,
        "--memory-collection", memory, "--summary-collection", summary,
    )  # fmt: skip
    report = json.loads(res.stdout)[0]
    assert res.returncode == (1 if report["uncovered"] else 0), res.stderr
    return dict(report)


def summarizer(name: str, harness: Harness, memory: str, summary: str, sweep: str) -> str:
    return textwrap.dedent(f"""
        apiVersion: memorycore.io/v1alpha1
        kind: SessionSummarizer
        metadata: {{name: {name}, namespace: {NS}}}
        spec:
          store:
            url: "{harness.chroma.url}"
            memoryCollection: {memory}
            summaryCollection: {summary}
          sweep: {{{sweep}}}
    """)


ARRIVAL = st.tuples(
    st.sampled_from(("late", "late", "tie", "newer", "untimed")),
    st.sampled_from(SHAPES),
    st.integers(1, 6 * 3600),  # skew in seconds: one second to six hours
)


@given(
    first=st.integers(1, 5), arrivals=st.lists(ARRIVAL, min_size=1, max_size=7), third=st.booleans()
)
@settings(
    max_examples=10,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_every_memory_reaches_the_summary_after_a_sunset_whatever_its_arrival(
    harness: Harness, first: int, arrivals: list[tuple[str, str, int]], third: bool
) -> None:
    memory, summary = "every-memory", "every-sessions"
    harness.kubectl(
        "apply", "-f", "-",
        input=summarizer("every", harness, memory, summary, "enabled: false"),
    )  # fmt: skip
    store = harness.store(memory, summary)
    sid = f"every-{uuid.uuid4().hex[:8]}"
    base = NOW - 86_400_000
    facts: list[str] = []
    rounds: list[list[tuple[str, str, dict]]] = [[]]
    for i in range(first):
        facts.append(fact())
        rounds[0].append(
            row(sid, base + i * 60_000, facts[-1], f"m-{i:03d}-{uuid.uuid4().hex[:6]}")
        )
    mark_ts = base + (first - 1) * 60_000
    assert rounds[0][-1][0] > "a-"  # a tie's id ("a-...") sorts before the watermark's
    later: list[tuple[str, str, dict]] = []
    untimed: list[str] = []
    for kind, shape, skew in arrivals:
        facts.append(fact())
        if kind == "untimed":
            later.append(row(sid, UNTIMED[skew % len(UNTIMED)], facts[-1]))
            untimed.append(later[-1][0])
            continue
        if kind == "tie":  # the watermark's own time, an id that sorts before it
            later.append(row(sid, mark_ts, facts[-1], f"a-{uuid.uuid4().hex[:8]}"))
            continue
        ts = mark_ts - skew * 1000 if kind == "late" else mark_ts + skew * 1000
        later.append(row(sid, shaped(ts, shape), facts[-1]))
    rounds.append(later)
    if third:  # one more late row after the second summary
        facts.append(fact())
        rounds.append([row(sid, shaped(base - 7_200_000, "iso_z"), facts[-1])])
    for batch in rounds:
        load(store, batch)
        res = summaryctl(harness, "sunset", sid, "-n", NS, "--summarizer", "every", "--wait", "60")
        assert res.returncode == 0, res.stdout + res.stderr
    assert_every_fact_kept(store, sid, facts)
    report = verify(harness, sid, memory, summary)
    assert report["uncovered"] == 0, report
    assert sorted(r["id"] for r in report["unreadableTimes"]) == sorted(untimed), report
    _, meta = stored_row(store, sid)
    assert meta["memoryCount"] == sum(len(b) for b in rounds)
    status = json.loads(
        harness.kubectl("get", "sessionsummary", summary_object_name(sid), "-n", NS, "-o", "json")
    )
    assert status["status"].get("skippedMemories", 0) == len(untimed), status["status"]
    times = {c["type"]: c for c in status["status"]["conditions"]}["MemoryTimesReadable"]
    assert times["status"] == ("False" if untimed else "True"), times


def test_a_memory_that_lands_while_a_pass_runs_is_covered_by_the_next_pass(
    harness: Harness,
) -> None:
    """Rows written while the pass runs (one newer, one older than everything it read) are
    not claimed by what it writes: verify names them, and the next pass covers them."""
    memory, summary = "during-memory", "during-sessions"
    store = harness.store(memory, summary)
    sid = f"during-{uuid.uuid4().hex[:8]}"
    base = NOW - 3_600_000
    facts = [fact() for _ in range(3)]
    load(store, [row(sid, base + i * 1000, f) for i, f in enumerate(facts)])
    landing = [row(sid, base + 10_000, fact()), row(sid, base - 50_000, fact())]

    class WritesMeanwhile:
        memory_budget_tokens = EXTRACTIVE.memory_budget_tokens
        max_memories_per_pass = EXTRACTIVE.max_memories_per_pass
        one_memory_per_item = False

        def propose(
            self, session_id: str, memories: Sequence[Memory], prior: PriorSummary | None
        ) -> Proposal:
            if landing:
                load(store, landing)
                landing.clear()
            return EXTRACTIVE.propose(session_id, memories, prior)

    late_facts = [r[2]["prompt"].split()[1] for r in landing]
    embed = _embedder()
    first = summarize_session(
        Backends(store, embed, summarizer=WritesMeanwhile()), sid, writer="t", trigger="manual"
    )
    assert first.kind == "summarized" and first.memory_count == 3  # never the rows it missed
    report = verify(harness, sid, memory, summary)
    assert report["uncovered"] == 2
    assert {r["why"] for r in report["rows"]} == {
        "newer than the summary",
        "landed behind the summary",
    }
    again = summarize_session(Backends(store, embed), sid, writer="t", trigger="manual")
    assert again.kind == "summarized" and again.memory_count == 5 and again.late_memories == 1
    assert_every_fact_kept(store, sid, facts + late_facts)
    assert verify(harness, sid, memory, summary)["uncovered"] == 0


def _embedder() -> Any:
    from controller.embeddings.minilm import LocalMiniLMEmbedding

    ef = LocalMiniLMEmbedding()
    return lambda texts: list(ef(texts))


def test_with_no_sunset_the_sweeps_find_late_and_iso_stamped_memories(harness: Harness) -> None:
    """Sunsets off: memories that land behind a summary, or with ISO or seconds timestamps
    the sweep's range query cannot compare, are summarized within the sweeps the docs
    promise (the appended-rows scan of the next sweep after they are idle)."""
    memory, summary = "nosunset-memory", "nosunset-sessions"
    harness.kubectl(
        "apply", "-f", "-",
        input=summarizer(
            "nosunset", harness, memory, summary,
            "enabled: true, intervalSeconds: 5, idleSeconds: 1, lookbackDays: 3",
        ),
    )  # fmt: skip
    store = harness.store(memory, summary)
    sid = f"nosunset-{uuid.uuid4().hex[:8]}"
    base = NOW - 7_200_000
    facts = [fact() for _ in range(3)]
    load(store, [row(sid, base + i * 1000, f) for i, f in enumerate(facts)])

    def summarized_count() -> int | None:
        try:
            return int(stored_row(store, sid)[1]["memoryCount"])
        except AssertionError:
            return None
        except Exception:
            return None

    wait_for(lambda: summarized_count() == 3, 60, 0.5, message="the sweep's first summary")
    late = [fact() for _ in SHAPES]
    load(
        store,
        [
            row(sid, shaped(base - (i + 1) * 600_000, shape), f)
            for i, (shape, f) in enumerate(zip(SHAPES, late, strict=True))
        ],
    )
    untimed = [fact() for _ in UNTIMED]
    load(store, [row(sid, ts, f) for ts, f in zip(UNTIMED, untimed, strict=True)])
    # One sweep interval (5 s) after the rows landed, plus the pass: well within 30 s. The
    # untimed rows are summarized and counted.
    wait_for(
        lambda: summarized_count() == 3 + len(late) + len(UNTIMED), 30, 0.5,
        message="late and untimed rows swept",
    )  # fmt: skip
    wait_for(
        lambda: all(f in stored_row(store, sid)[1]["sectionsJson"] for f in untimed),
        30,
        0.5,
        message="the untimed rows summarized",
    )
    assert_every_fact_kept(store, sid, facts + late + untimed)
    report = verify(harness, sid, memory, summary)
    assert report["uncovered"] == 0
    assert len(report["unreadableTimes"]) == len(UNTIMED), report


def test_a_bad_clock_neither_keeps_a_session_active_nor_sorts_its_summary_first(
    harness: Harness,
) -> None:
    """Sunsets off: a session idle for two hours but for one row stamped a year ahead (and
    one in 1990) is summarized by the sweep; its row's timestamp is not the bad clock's,
    and a Warning Event names the row."""
    memory, summary = "clock-memory", "clock-sessions"
    harness.kubectl(
        "apply", "-f", "-",
        input=summarizer(
            "clock", harness, memory, summary,
            "enabled: true, intervalSeconds: 5, idleSeconds: 60, lookbackDays: 3",
        ),
    )  # fmt: skip
    store = harness.store(memory, summary)
    sid = f"clock-{uuid.uuid4().hex[:8]}"
    facts = [fact() for _ in range(4)]
    ahead = row(sid, int(time.time() * 1000) + 365 * 86_400_000, facts[2], "m-future")
    past = row(sid, 631_152_000_000, facts[3], "m-1990")
    rows = [row(sid, NOW - 7_200_000 + i, f) for i, f in enumerate(facts[:2])]
    load(store, [*rows, ahead, past])

    def written() -> dict[str, Any] | None:
        try:
            return stored_row(store, sid)[1]
        except AssertionError:
            return None

    meta = wait_for(written, 120, 0.5, message="the sweep's summary despite a bad clock")
    assert meta["memoryCount"] == 4
    # neither the future row's time nor 1990's: its newest placed memory's (or the write's)
    assert NOW - 7_200_000 <= meta["timestamp"] <= time.time() * 1000
    assert_every_fact_kept(store, sid, facts)
    field = f"involvedObject.name={summary_object_name(sid)},reason=UntrustedMemoryTime"

    def warned() -> list[str]:
        out = harness.kubectl("get", "events", "--field-selector", field, "-o", "json")
        return [e["message"] for e in json.loads(out)["items"]]

    messages = wait_for(warned, 60, 0.5, message="UntrustedMemoryTime Event")
    assert "m-future" in messages[0] and "m-1990" in messages[0], messages
    # The object's lastMemoryAt states the bad clock as now: a later sunset marker is not
    # taken for one its last pass saw.
    obj = json.loads(harness.kubectl("get", "ssum", summary_object_name(sid), "-o", "json"))
    seen = dt.datetime.fromisoformat(obj["status"]["lastMemoryAt"].replace("Z", "+00:00"))
    assert seen.timestamp() <= time.time() + 1


def test_after_a_deletion_the_reconciliation_finds_what_the_cursor_cannot(
    harness: Harness,
) -> None:
    """A deletion shifts the offsets the appended-rows scan counts on: the sweep notices,
    and the reconciliation walks the collection at once, finding the row that landed
    behind the summary meanwhile."""
    memory, summary = "reconcile-memory", "reconcile-sessions"
    harness.kubectl(
        "apply", "-f", "-",
        input=summarizer(
            "reconcile", harness, memory, summary,
            "enabled: true, intervalSeconds: 5, idleSeconds: 1, lookbackDays: 3",
        ),
    )  # fmt: skip
    store = harness.store(memory, summary)
    sid, other = f"recon-{uuid.uuid4().hex[:8]}", f"doomed-{uuid.uuid4().hex[:8]}"
    base = NOW - 7_200_000
    facts = [fact() for _ in range(2)]
    doomed = row(other, base, fact())
    load(store, [doomed, *(row(sid, base + i * 1000, f) for i, f in enumerate(facts))])

    def count(session: str) -> int | None:
        try:
            return int(stored_row(store, session)[1]["memoryCount"])
        except Exception:
            return None

    wait_for(lambda: count(sid) == 2 and count(other) == 1, 60, 0.5, message="first summaries")
    late = fact()
    store.memories().delete(ids=[doomed[0]])
    load(store, [row(sid, base - 600_000, late)])
    wait_for(lambda: count(sid) == 3, 60, 0.5, message="the late row, found by reconciling")
    assert_every_fact_kept(store, sid, [*facts, late])
    status = json.loads(harness.kubectl("get", "ssumr", "reconcile", "-o", "json"))["status"]
    assert status["reconciledAt"] and status["reconciledRows"] >= 2
    assert status["uncoveredFound"] >= 1  # the walk, not the cursor, found it
    assert verify(harness, sid, memory, summary)["uncovered"] == 0


def test_with_sweeps_off_the_reconciliation_finds_a_late_row_after_a_deletion(
    harness: Harness,
) -> None:
    """Sweeps off, the reconciliation on (its own setting): one memory of a summarized
    session is deleted and another lands behind the summary, so the session's count is
    what the summary says; a walk tells the ids apart by the ledger's digest and asks for
    the pass that summarizes the late row. The walk is the first after the reconciliation
    is turned on (at once, not reconcileIntervalSeconds after an earlier one: the wait for
    a next walk is test_erasure.py's
    test_with_no_sunset_the_reconciliation_drops_the_facts_of_deleted_memories)."""
    memory, summary = "idwalk-memory", "idwalk-sessions"
    manifest = summarizer(
        "idwalk", harness, memory, summary,
        "enabled: false, idleSeconds: 1, reconcileIntervalSeconds: 60",
    )  # fmt: skip
    harness.kubectl("apply", "-f", "-", input=manifest + "  reconcile: {enabled: false}\n")
    store = harness.store(memory, summary)
    sid = f"idwalk-{uuid.uuid4().hex[:8]}"
    base = NOW - 7_200_000
    facts = [fact() for _ in range(3)]
    rows = [row(sid, base + i * 1000, f) for i, f in enumerate(facts)]
    load(store, rows)
    res = summaryctl(harness, "sunset", sid, "-n", NS, "--summarizer", "idwalk", "--wait", "60")
    assert res.returncode == 0, res.stdout + res.stderr

    def reconciled_at() -> str | None:
        status = json.loads(harness.kubectl("get", "ssumr", "idwalk", "-o", "json"))["status"]
        return status.get("reconciledAt")

    store.memories().delete(ids=[rows[1][0]])
    late = fact()
    load(store, [row(sid, base - 600_000, late)])
    assert stored_row(store, sid)[1]["memoryCount"] == 3 == len(store.session_ids(sid))
    time.sleep(2)  # ticks with nothing on: no walk, no pass
    assert reconciled_at() is None
    harness.kubectl("apply", "-f", "-", input=manifest + "  reconcile: {enabled: true}\n")

    def summarized_late() -> bool:
        try:
            assert_every_fact_kept(store, sid, [late])
        except AssertionError:
            return False
        return True

    wait_for(summarized_late, 90, 1.0, message="the late row, found by the walk's ids")
    wait_for(reconciled_at, 10, 0.5, message="the walk's reconciledAt")
    assert_every_fact_kept(store, sid, [facts[0], facts[2], late])
    assert verify(harness, sid, memory, summary)["uncovered"] == 0


def test_a_row_another_writer_rewrites_during_a_pass_is_not_overwritten(
    harness: Harness,
) -> None:
    """Another writer (neo's own summary task, say) upserts the row while our pass runs:
    the write right after is refused (the row is not the one the pass started from), and
    the next pass carries the other writer's text and says so."""
    memory, summary = "rewritten-memory", "rewritten-sessions"
    store = harness.store(memory, summary)
    sid = f"rewritten-{uuid.uuid4().hex[:8]}"
    facts = [fact() for _ in range(2)]
    load(store, [row(sid, NOW - 60_000 + i * 1000, f) for i, f in enumerate(facts)])
    embed = _embedder()
    assert summarize_session(Backends(store, embed), sid, writer="t", trigger="manual").kind == (
        "summarized"
    )
    theirs = "THEIR-TEXT: written by another writer during the pass."

    class RewrittenMeanwhile:
        memory_budget_tokens = EXTRACTIVE.memory_budget_tokens
        max_memories_per_pass = EXTRACTIVE.max_memories_per_pass
        one_memory_per_item = False

        def propose(
            self, session_id: str, memories: Sequence[Memory], prior: PriorSummary | None
        ) -> Proposal:
            store.summaries().upsert(
                ids=[f"summary_{sid}"],
                documents=[theirs],
                metadatas=[{"sessionId": sid, "timestamp": NOW, "memoryCount": 3}],
                embeddings=[[0.1] * 384],
            )
            return EXTRACTIVE.propose(session_id, memories, prior)

    load(store, [row(sid, NOW - 1000, late := fact())])
    try:
        summarize_session(
            Backends(store, embed, summarizer=RewrittenMeanwhile()),
            sid,
            writer="t",
            trigger="manual",
        )
    except RowChangedDuringPass:
        pass
    else:
        raise AssertionError("the pass wrote over the other writer's row")
    assert stored_row(store, sid)[0] == theirs  # left as the other writer wrote it
    again = summarize_session(Backends(store, embed), sid, writer="t", trigger="manual")
    assert again.other_writer is not None and again.kind == "summarized"
    document, _ = stored_row(store, sid)
    assert theirs in render_document_of(store, sid)
    assert_every_fact_kept(store, sid, [*facts, late])
    assert document.startswith("# ")


def render_document_of(store: MemoryStore, sid: str) -> str:
    """The summary whole, as its row keeps it (summaryctl summaries --full)."""
    from controller.core.document import render_document
    from controller.core.summary import StructuredSummary

    prior = store.read_summary(sid)
    assert isinstance(prior, StructuredSummary)
    return render_document(prior, max_chars=None)
