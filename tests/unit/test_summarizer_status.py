"""A SessionSummarizer's status from its inputs (controller/core/summarizer_status.py): each
writer changes only its own conditions, whatever order the writes come in."""

import itertools

from controller.api import Condition, SessionSummarizerStatus
from controller.core.summarizer_status import (
    SweepReport,
    store_reachable,
    sweep_failure,
    with_conditions,
)
from controller.store.errors import StoreUnavailable

MODEL = Condition(type="ModelReady", status="True", reason="Extractive", message="")
EMBED = Condition(type="EmbeddingReady", status="False", reason="EmbeddingMismatch", message="x")


def report() -> SweepReport:
    return SweepReport(
        at="2026-11-23T10:00:00Z",
        duration_s=0.1234,
        found=3,
        deferred=0,
        created=2,
        patched=1,
        scanned=40,
        deleted=0,
        watermark=123,
        message="scanned 40",
        store_url="http://chroma:8000",
    )


def types(status: SessionSummarizerStatus) -> dict[str, str]:
    return {c.type: c.reason for c in status.conditions or []}


def test_a_sweep_keeps_the_health_probes_conditions() -> None:
    status = with_conditions(SessionSummarizerStatus(), [MODEL, EMBED])
    after = report().apply(status)
    assert types(after) == {
        "EmbeddingReady": "EmbeddingMismatch",
        "ModelReady": "Extractive",
        "StoreReachable": "HeartbeatOK",
        "Swept": "SweepOK",
    }
    assert after.watermark == 123 and after.last_sweep_duration_seconds == 0.123


def test_every_order_of_writers_ends_with_every_writers_conditions() -> None:
    writers = [
        lambda s: with_conditions(s, [MODEL]),
        lambda s: with_conditions(s, [EMBED]),
        report().apply,
        lambda s: sweep_failure(StoreUnavailable("down"), "u").apply(s, "t"),
    ]
    for order in itertools.permutations(writers):
        status = SessionSummarizerStatus()
        for write in order:
            status = write(status)
        assert {"ModelReady", "EmbeddingReady", "Swept", "StoreReachable"} <= set(types(status))


def test_a_missing_memory_collection_fails_the_sweep_but_not_the_store_probe() -> None:
    class CollectionNotFound(RuntimeError):
        role = "memory"

    failure = sweep_failure(CollectionNotFound("memory collection 'x' does not exist"), "u")
    status = failure.apply(with_conditions(SessionSummarizerStatus(), [store_reachable("u")]), "t")
    assert types(status) == {"StoreReachable": "HeartbeatOK", "Swept": "MemoryCollectionNotFound"}
    assert status.message == "sweep failed: memory collection 'x' does not exist"


def test_a_failure_with_an_empty_message_still_says_what_failed() -> None:
    failure = sweep_failure(StoreUnavailable(""), "http://chroma:8000")
    assert failure.message and failure.reason == "StoreUnavailable"
