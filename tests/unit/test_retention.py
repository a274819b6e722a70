import datetime as dt

from controller.core.retention import expired

NOW = dt.datetime(2026, 11, 22, 12, 0, tzinfo=dt.UTC)


def obj(
    name: str,
    *,
    phase: str = "Summarized",
    age_s: int = 100,
    ref: str = "default",
    generation: int = 1,
    observed: int = 1,
) -> dict:  # type: ignore[type-arg]
    at = (NOW - dt.timedelta(seconds=age_s)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "metadata": {"name": name, "resourceVersion": f"rv-{name}", "generation": generation},
        "spec": {"sessionId": name, "summarizerRef": ref},
        "status": {"phase": phase, "summarizedAt": at, "observedGeneration": observed},
    }


def test_summarized_objects_older_than_the_ttl_expire() -> None:
    objs = [obj("old", age_s=100), obj("young", age_s=10)]
    assert expired(objs, summarizer="default", now=NOW, ttl_seconds=60) == [("old", "rv-old")]


def test_unfinished_failed_or_foreign_objects_are_kept() -> None:
    objs = [
        obj("failed", phase="Failed"),
        obj("pending", phase="Pending"),
        obj("rerequested", generation=2, observed=1),
        obj("other-summarizer", ref="other"),
        {"metadata": {"name": "fresh", "resourceVersion": "1", "generation": 1}, "spec": {}},
    ]
    assert expired(objs, summarizer="default", now=NOW, ttl_seconds=60) == []


def test_a_zero_ttl_keeps_everything() -> None:
    assert expired([obj("old", age_s=10**6)], summarizer="default", now=NOW, ttl_seconds=0) == []
