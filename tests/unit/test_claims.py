"""The per-session claim decisions (controller/core/claim_rules.py): pure, no cluster."""

from hypothesis import given
from hypothesis import strategies as st

from controller.core.claim_rules import (
    Claim,
    Writer,
    abandoned_long_ago,
    claim_name,
    decide,
    parse_claim,
    still_mine,
)
from controller.core.naming import summary_object_name

NOW = 1_800_000_000_000
ME = Writer("replica-a", "uid-1", "agents/s1")
SAME_REPLICA_OTHER_OBJECT = Writer("replica-a", "uid-2", "other-ns/s1-by-hand")
OTHER_REPLICA_SAME_OBJECT = Writer("replica-b", "uid-1", "agents/s1")


def claim(writer: Writer, expires: int) -> Claim:
    return Claim("s1", "coll-uuid", writer, expires, generation=3, collection="chroma")


def test_claim_round_trips_through_its_spec() -> None:
    c = claim(ME, NOW + 60_000)
    assert parse_claim(c.spec()) == c


def test_unreadable_or_missing_claim_counts_as_free() -> None:
    assert parse_claim(None) is None
    assert parse_claim({}) is None
    assert parse_claim({"holder": "x"}) is None
    assert parse_claim({**claim(ME, NOW).spec(), "expiresAt": "soon"}) is None
    assert decide(None, ME, NOW) == "take"


def test_a_live_claim_of_another_writer_is_held() -> None:
    assert decide(claim(OTHER_REPLICA_SAME_OBJECT, NOW + 1), ME, NOW) == "held"


def test_the_same_replica_serving_another_object_of_the_session_is_another_writer() -> None:
    # Two objects naming one session, handled by one replica in two threads: one writer.
    assert decide(claim(SAME_REPLICA_OTHER_OBJECT, NOW + 10_000), ME, NOW) == "held"
    assert not still_mine(claim(SAME_REPLICA_OTHER_OBJECT, NOW + 60_000), ME, NOW, 5_000)


def test_an_expired_claim_is_abandoned_and_can_be_taken() -> None:
    assert decide(claim(OTHER_REPLICA_SAME_OBJECT, NOW), ME, NOW) == "take"
    assert decide(claim(OTHER_REPLICA_SAME_OBJECT, NOW - 5_000), ME, NOW) == "take"


def test_my_own_live_claim_is_renewed() -> None:
    assert decide(claim(ME, NOW + 10_000), ME, NOW) == "renew"


def test_before_a_write_the_claim_must_be_mine_with_margin() -> None:
    assert still_mine(claim(ME, NOW + 10_000), ME, NOW, margin_ms=5_000)
    assert not still_mine(claim(ME, NOW + 4_000), ME, NOW, margin_ms=5_000)
    assert not still_mine(claim(OTHER_REPLICA_SAME_OBJECT, NOW + 60_000), ME, NOW, 5_000)
    assert not still_mine(None, ME, NOW, margin_ms=5_000)


def test_only_claims_expired_longer_than_the_grace_are_collected() -> None:
    assert not abandoned_long_ago(claim(ME, NOW + 1), NOW, grace_ms=60_000)
    assert not abandoned_long_ago(claim(ME, NOW - 59_000), NOW, grace_ms=60_000)
    assert abandoned_long_ago(claim(ME, NOW - 61_000), NOW, grace_ms=60_000)


session_ids = st.text(min_size=1, max_size=300).filter(lambda s: s.strip())


@given(session_ids, st.uuids())
def test_every_session_id_gets_a_valid_claim_name(session_id: str, collection: object) -> None:
    name = claim_name(str(collection), session_id)
    assert len(name) <= 63
    assert name[0].isalnum() and name[-1].isalnum()
    assert all(c.isdigit() or ("a" <= c <= "z") or c == "-" for c in name)


@given(session_ids, session_ids, st.uuids(), st.uuids())
def test_one_claim_per_session_and_store_and_distinct_otherwise(
    a: str, b: str, c1: object, c2: object
) -> None:
    assert claim_name(str(c1), a) == claim_name(str(c1), a)
    if a != b:
        assert claim_name(str(c1), a) != claim_name(str(c1), b)
    if c1 != c2:
        assert claim_name(str(c1), a) != claim_name(str(c2), a)


def test_the_claim_name_is_readable_as_the_session() -> None:
    slug = summary_object_name("Fix-Login-42").rsplit("-", 1)[0]
    assert claim_name("coll", "Fix-Login-42").startswith(slug + "-")
