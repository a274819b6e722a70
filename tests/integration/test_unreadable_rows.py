"""A stored record we cannot read (a summary row or ledger entry hand-edited or written by
another tool) is refused without quoting it, on the real Chroma server and through the
operator: the SessionSummary's condition and Event, the operator's log and summaryctl say
why, never what the record holds (it may hold a credential)."""

from __future__ import annotations

import itertools
import json
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.core.summary import SUMMARY_FORMAT, UnreadablePriorSummary
from tests.integration.harness import (
    NS,
    Harness,
    conditions_of,
    interaction,
    load,
    summarizer_yaml,
)
from tests.support.corrupt_rows import (
    CREDENTIALS,
    corrupt_entries,
    corrupt_rows,
    quotes,
    row_of,
    with_credential,
)
from tests.support.credentials import generated

_RUNS = itertools.count()
MEMORY, SESSIONS = "corrupt-memory", "corrupt-sessions"


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(secret=CREDENTIALS, data=st.data())
def test_a_stored_record_we_cannot_read_is_refused_without_quoting_it(
    harness: Harness, secret: str, data: st.DataObject
) -> None:
    """A row of ours with its sections (and at times other keys) corrupt and no document, or
    a ledger entry so and no row: a pass's read (read_prior) and summaryctl ledger's
    (stored_summary) read it, or refuse it as unreadable in words that quote none of it.
    (tests/unit/test_unreadable_rows.py corrupts every key, each in turn.)"""
    store, sid = harness.store(MEMORY, SESSIONS), f"corrupt-{next(_RUNS)}"
    if data.draw(st.booleans(), label="a row, else a ledger entry"):
        meta = data.draw(corrupt_rows(sid, "sectionsJson"))
        meta = with_credential({**meta, "summaryFormat": SUMMARY_FORMAT}, secret)
        rows = store.client.get_or_create_collection(SESSIONS)
        rows.upsert(ids=[f"summary_{sid}"], documents=[""], metadatas=[meta], embeddings=[[0.2]])
    else:
        entry = data.draw(corrupt_entries(sid, "sectionsJson"))
        ids, documents, metadatas = zip(*with_credential(entry, secret), strict=True)
        ledger = store.client.get_or_create_collection(store.location.ledger_collection)
        vectors = [[1.0]] * len(ids)
        ledger.upsert(
            ids=list(ids), documents=list(documents), metadatas=list(metadatas), embeddings=vectors
        )
    for read in (store.read_prior, store.stored_summary):
        try:
            read(sid)
        except UnreadablePriorSummary as exc:
            assert not quotes(secret, str(exc)), str(exc)


def test_the_operator_shows_a_row_it_cannot_read_without_quoting_it(harness: Harness) -> None:
    name = "corrupt-row"
    memory, sessions = f"{name}-memory", f"{name}-sessions"
    manifest = summarizer_yaml(name, harness.chroma.url, memory=memory, summary=sessions)
    harness.kubectl("apply", "-f", "-", input=manifest)
    store, sid = harness.store(memory, sessions), "corrupt-row-with-a-token"
    secret, sentence = generated(random.randrange(2**32))["github-token"]
    meta = {**row_of(sid), "sectionsJson": json.dumps({"User Requests": [[sentence]]})}
    rows = store.client.get_or_create_collection(sessions)
    rows.upsert(ids=[f"summary_{sid}"], documents=[""], metadatas=[meta], embeddings=[[0.2] * 384])
    load(store, [interaction(sid, 0, 1_770_000_000_000, "Rotate the signing keys.")])
    asked = harness.summaryctl("sunset", sid, "-n", NS, "--summarizer", name)
    assert asked.returncode == 0, asked.stderr

    cond = conditions_of(harness.wait_phase(sid, "Failed", timeout=90))["Summarized"]
    verify = harness.summaryctl("verify", sid, "-n", NS, "--summarizer", name)
    events = [e["message"] for e in harness.events(sid)]
    for shown in (cond["message"], *events, verify.stdout + verify.stderr, harness.log.read_text()):
        assert not quotes(secret, shown), shown
    # Said why, all the same: what is wrong in the row, and that it stays.
    assert cond["reason"] == "UnreadablePriorSummary"
    assert "a section item is neither text nor an object with a text" in cond["message"]
    assert "left as it is" in cond["message"]
    assert verify.returncode == 2 and "cannot be read" in verify.stderr, verify.stderr
    assert any("cannot be read" in message for message in events), events
    assert rows.get(ids=[f"summary_{sid}"])["metadatas"] == [meta]  # left as it is
