import datetime as dt

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.kube.peering import leader_of, live_peers

NOW = dt.datetime(2026, 11, 22, 12, 0, tzinfo=dt.UTC)


def seen(seconds_ago: int) -> str:
    return (NOW - dt.timedelta(seconds=seconds_ago)).isoformat()


def test_only_peers_within_their_lifetime_are_alive() -> None:
    status = {
        "a": {"priority": 5, "lifetime": 15, "lastseen": seen(3)},
        "dead": {"priority": 9, "lifetime": 15, "lastseen": seen(16)},
        "junk": "not a peer",
    }
    assert live_peers(status, NOW) == {"a": 5}


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=5,
)
_TIMES = st.datetimes(timezones=st.none() | st.just(dt.UTC)).map(dt.datetime.isoformat)


@settings(max_examples=400, deadline=None)
@given(
    records=st.dictionaries(
        st.text(min_size=1, max_size=8),
        _JSON
        | st.fixed_dictionaries(
            {},
            optional={
                "lastseen": _TIMES | _JSON,
                "lifetime": st.integers() | st.floats() | _JSON,
                "priority": st.integers() | st.floats() | _JSON,
            },
        ),
        max_size=4,
    )
)
def test_no_peering_record_stops_the_reading_of_the_others(records: dict[str, object]) -> None:
    """Whatever a KopfPeering object holds (any writer of it may write any JSON, a lastseen in
    year 9999, a lifetime or priority out of range): a record that cannot be read is no live
    peer, and the others are read as they are."""
    alive = {"peer-ok": {"priority": 3, "lifetime": 60, "lastseen": seen(1)}}
    assert live_peers({**records, **alive}, NOW)["peer-ok"] == 3


def test_the_highest_priority_live_peer_leads() -> None:
    assert leader_of({"a": 5, "b": 7, "c": 1}) == "b"


def test_a_shared_top_priority_means_no_leader() -> None:
    # kopf pauses every peer with the same top priority: nobody is active.
    assert leader_of({"a": 7, "b": 7, "c": 1}) is None
    assert leader_of({}) is None


# -- what every SessionSummarizer shows (controller.kube.peering.replica_status) --------------

from controller.api import SessionSummarizerStatus  # noqa: E402
from controller.kube.peering import (  # noqa: E402
    _apply_replica_status,
    priority_conflicts,
    replica_status,
    report_due,
)


def test_a_priority_tie_shows_no_active_replica_and_names_the_tied_replicas() -> None:
    active, cond = replica_status({"r1": 100, "r2": 100, "r3": 5}, "r1")
    assert active is None
    assert (cond.type, cond.status, cond.reason) == ("ReplicaActive", "False", "PeeringPriorityTie")
    assert "r1, r2" in cond.message and "100" in cond.message
    assert "SSO_PEERING_PRIORITY" in cond.message


def test_the_elected_leader_is_shown() -> None:
    active, cond = replica_status({"r1": 1, "r2": 9}, "r1")
    assert active == "r2"
    assert (cond.status, cond.reason) == ("True", "Elected")


def test_no_live_replica_is_said_so() -> None:
    active, cond = replica_status({}, "r1")
    assert active is None and (cond.status, cond.reason) == ("False", "NoLiveReplica")


def test_a_standalone_replica_is_active_by_configuration() -> None:
    active, cond = replica_status({}, "solo", standalone=True)
    assert active == "solo" and cond.reason == "Standalone"


def test_an_old_leader_is_cleared_when_priorities_tie() -> None:
    before = SessionSummarizerStatus(active_replica="old-leader")
    active, cond = replica_status({"a": 3, "b": 3}, "a")
    after = _apply_replica_status(active, cond, False, before)
    assert after.active_replica is None
    assert [c.reason for c in after.conditions or []] == ["PeeringPriorityTie"]


def test_two_standalone_replicas_do_not_flip_the_active_replica_back_and_forth() -> None:
    first = _apply_replica_status(
        *replica_status({}, "a", standalone=True), True, SessionSummarizerStatus()
    )
    second = _apply_replica_status(*replica_status({}, "b", standalone=True), True, first)
    assert second == first


def test_an_explicit_priority_another_live_replica_has_is_a_conflict() -> None:
    live = {"me": 7, "other": 7, "third": 2}
    assert priority_conflicts(live, "me", 7) == ["other"]
    assert priority_conflicts(live, "me", 8) == []


def test_while_no_replica_is_active_every_poll_reports_on_every_summarizer() -> None:
    """A summarizer created while replicas are paused (a tie) or none is alive says so
    within one poll: no handler runs then to nudge the reporter."""
    for live in ({"r1": 5, "r2": 5}, {}):
        now = replica_status(live, "r1")
        reported = (now[0], now[1].reason)
        assert report_due(now, reported, since_sync_s=2.0, resync_s=60.0, nudged=False)
    elected = replica_status({"r1": 9, "r2": 5}, "r1")
    reported = (elected[0], elected[1].reason)
    assert not report_due(elected, reported, since_sync_s=2.0, resync_s=60.0, nudged=False)
    assert report_due(elected, reported, since_sync_s=2.0, resync_s=60.0, nudged=True)
    assert report_due(elected, reported, since_sync_s=61.0, resync_s=60.0, nudged=False)
    assert report_due(elected, None, since_sync_s=0.0, resync_s=60.0, nudged=False)
