"""One retention run of a SessionSummarizer (handlers/session_summarizer._retention): one list
of the namespace's SessionSummaries, a page at a time, feeds both the deletes past a TTL and
the tell: a Summarized object whose session was forgotten since turns Forgotten, a Forgotten
one whose session was summarized again since is asked for a pass (as the sweep asks)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import Iterator
from typing import Any, cast
from unittest import mock

import kopf
from hypothesis import given
from hypothesis import strategies as st
from kubernetes.client.exceptions import ApiException

from controller.api import SessionSummarizerSpec
from controller.config import CONFIG
from controller.core.ledger import FORGOTTEN_KEY
from controller.core.retention import RetentionPolicy, expired
from controller.handlers.session_summarizer import _retention, _Tick
from controller.runtime import Runtime
from controller.store.errors import StoreUnavailable
from tests.unit.test_invalid_summary_spec import Recorded

HEADS = {"none": None, "tombstone": {FORGOTTEN_KEY: 1_770_000_000_000}, "summary": {"fence": 3}}


class _Api:
    """The API server's SessionSummaries: pages of the list's snapshot (a continue token reads
    the version the list began at), resourceVersion preconditions."""

    def __init__(self, objs: list[dict[str, Any]]) -> None:
        self.listed, self.live = objs, {o["metadata"]["name"]: o for o in objs}
        self.requests: list[str | None] = []  # each list request's continue token
        self.status: dict[str, str] = {}  # name -> phase patched
        self.asked: dict[str, dict[str, Any]] = {}  # name -> spec patched
        self.deleted: set[str] = set()

    def list_namespaced_custom_object(self, *args: Any, **kw: Any) -> dict[str, Any]:
        self.requests.append(kw.get("_continue"))
        at, limit = int(kw.get("_continue") or 0), kw.get("limit") or len(self.listed)
        items, more = self.listed[at : at + limit], at + limit < len(self.listed)
        return {"items": items, "metadata": {"continue": str(at + limit) if more else None}}

    def _unchanged(self, name: str, version: str) -> None:
        if name not in self.live:
            raise ApiException(status=404)
        if self.live[name]["metadata"]["resourceVersion"] != version:
            raise ApiException(status=409)

    def patch_namespaced_custom_object_status(self, *args: Any) -> dict[str, Any]:
        name, body = args[-2:]
        self._unchanged(name, body["metadata"]["resourceVersion"])
        self.status[name] = body["status"]["phase"]
        return body

    def patch_namespaced_custom_object(self, *args: Any) -> dict[str, Any]:
        name, body = args[-2:]
        self._unchanged(name, body["metadata"]["resourceVersion"])
        self.asked[name] = body["spec"]
        return body

    def delete_namespaced_custom_object(self, *args: Any, body: Any) -> dict[str, Any]:
        self._unchanged(args[-1], body["preconditions"]["resourceVersion"])
        self.deleted.add(args[-1])
        return self.live.pop(args[-1])


class _Store:
    def __init__(self, heads: dict[str, dict[str, Any]]) -> None:
        self.heads = heads

    def ledger_heads(self, session_ids: list[str]) -> dict[str, dict[str, Any]]:
        return {s: self.heads[s] for s in session_ids if s in self.heads}


class _Parts:
    def __init__(self, store: _Store) -> None:
        self.got = store

    @contextlib.contextmanager
    def store(self, *args: Any) -> Iterator[_Store]:
        yield self.got


class _Scheduler:
    @contextlib.contextmanager
    def background(self) -> Iterator[Any]:
        yield lambda: 0.0


def summary(i: int, phase: str, ref: str, done: bool, old: bool) -> dict[str, Any]:
    since = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=10_000 if old else 0)
    status = {
        "phase": phase,
        "observedGeneration": 2 if done else 1,
        "lastPhaseTransitionTime": since.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    return {
        "metadata": {
            "namespace": "ns",
            "name": f"o{i}",
            "resourceVersion": f"v{i}",
            "generation": 2,
        },
        "spec": {"sessionId": f"s{i}", "summarizerRef": ref},
        "status": status,
    }


def run_retention(
    made: list[dict[str, Any]], store: Any, spec: SessionSummarizerSpec, page: int = 0
) -> tuple[_Api, Recorded]:
    """One _retention of summarizer "default" over these objects and this store."""
    api, events = _Api(made), Recorded()
    runtime = Runtime(CONFIG, events, *cast(Any, (_Scheduler(), _Parts(store))))
    body = kopf.Body({"metadata": {"name": "default", "namespace": "ns"}, "spec": spec.to_api()})
    tick = _Tick(body, spec, "ns", "default", cast(Any, logging.getLogger("t")), runtime, 1)
    with (
        mock.patch("controller.kube.client.custom", lambda: api),
        mock.patch("controller.kube.client.update_summarizer_status"),
        mock.patch(
            "controller.handlers.session_summarizer.CONFIG",
            CONFIG.model_copy(update={"list_chunk_size": page}),
        ),
    ):
        asyncio.run(_retention(tick))
    return api, events


@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from(["Summarized", "Forgotten", "Empty", "NotFound", "Failed", "Pending"]),
            st.sampled_from(["default", "other"]),
            st.booleans(),  # its pass of the current generation is done
            st.booleans(),  # past a TTL of 3600 s
            st.sampled_from(sorted(HEADS)),
        ),
        max_size=9,
    ),
    ttl=st.sampled_from([0, 3600]),
    page=st.sampled_from([0, 2]),  # SSO_LIST_CHUNK_SIZE; 0: one page
)
def test_one_list_feeds_the_deletes_and_tells_each_object_what_its_ledger_head_says(
    rows: list[tuple[str, str, bool, bool, str]], ttl: int, page: int
) -> None:
    made = [summary(i, *row[:4]) for i, row in enumerate(rows)]
    heads = {f"s{i}": head for i, row in enumerate(rows) if (head := HEADS[row[4]]) is not None}
    spec = SessionSummarizerSpec.model_validate(
        {
            "store": {"url": "http://chroma:8000"},
            "sweep": {"enabled": False},
            "retention": {
                "summarizedTTLSeconds": ttl,
                "emptyTTLSeconds": ttl,
                "notFoundTTLSeconds": ttl,
                "failedTTLSeconds": ttl,
            },
        }
    )
    policy = RetentionPolicy(ttl, ttl, ttl, ttl)
    doomed = {n for n, _ in expired(made, summarizer="default", now=dt.datetime.now(dt.UTC),
                                    policy=policy)}  # fmt: skip
    api, events = run_retention(made, _Store(heads), spec, page)

    # One list, page by page: the first request without a continue token, each next with one.
    pages_after_the_first = range(page, len(made), page) if page else []
    assert api.requests == [None, *map(str, pages_after_the_first)]
    assert api.deleted == doomed
    told = {
        f"o{i}": (phase, kind)
        for i, (phase, ref, done, _, kind) in enumerate(rows)
        if ref == "default" and done and f"o{i}" not in doomed
    }
    assert api.status == {
        n: "Forgotten" for n, seen in told.items() if seen == ("Summarized", "tombstone")
    }
    assert {n: (s["action"], s["trigger"]) for n, s in api.asked.items()} == {
        n: ("Summarize", "sweep") for n, seen in told.items() if seen == ("Forgotten", "summary")
    }
    assert [reason for _, reason, _ in events.posted] == ["Forgotten"] * len(api.status)


def test_a_store_failure_of_the_tell_is_a_warning_event_and_the_deletes_still_happen() -> None:
    """The tell's read is no sweep's: its failure shows on the SessionSummarizer itself."""

    class Refusing:
        def ledger_heads(self, session_ids: list[str]) -> dict[str, dict[str, Any]]:
            raise StoreUnavailable("Chroma error while reading the ledger metadata: refused")

    made = [
        summary(0, "Summarized", "default", True, False),
        summary(1, "Empty", "default", True, True),
    ]
    spec = SessionSummarizerSpec.model_validate(
        {"store": {"url": "http://chroma:8000"}, "sweep": {"enabled": False},
         "retention": {"emptyTTLSeconds": 3600}}
    )  # fmt: skip
    api, events = run_retention(made, Refusing(), spec)
    assert api.deleted == {"o1"} and not api.status
    assert events.posted == [
        (
            "Warning",
            "StoreUnavailable",
            "retention could not check finished SessionSummaries against the ledger (retried at "
            "the next retention): Chroma error while reading the ledger metadata: refused",
        )
    ]
