import datetime as dt

from controller.peering import leader_of, live_peers

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


def test_the_highest_priority_live_peer_leads() -> None:
    assert leader_of({"a": 5, "b": 7, "c": 1}) == "b"


def test_a_shared_top_priority_means_no_leader() -> None:
    # kopf pauses every peer with the same top priority: nobody is active.
    assert leader_of({"a": 7, "b": 7, "c": 1}) is None
    assert leader_of({}) is None
