from controller.claims import CLAIM_ANNOTATION, Claim, decide, parse_claim, still_mine

NOW = 1_800_000_000_000


def annotated(claim: Claim) -> dict[str, str]:
    return {CLAIM_ANNOTATION: claim.encode()}


def test_claim_round_trips_through_its_annotation() -> None:
    claim = Claim("replica-a", NOW + 60_000, 7)
    assert parse_claim(annotated(claim)) == claim


def test_unreadable_or_missing_claim_counts_as_free() -> None:
    assert parse_claim(None) is None
    assert parse_claim({CLAIM_ANNOTATION: "{not json"}) is None
    assert parse_claim({CLAIM_ANNOTATION: '{"holder": "x"}'}) is None
    assert decide(None, "me", NOW) == "take"


def test_a_live_claim_of_another_writer_is_held() -> None:
    assert decide(Claim("other", NOW + 1, 1), "me", NOW) == "held"


def test_an_expired_claim_is_abandoned_and_can_be_taken() -> None:
    assert decide(Claim("other", NOW, 1), "me", NOW) == "take"
    assert decide(Claim("other", NOW - 5_000, 1), "me", NOW) == "take"


def test_my_own_live_claim_is_renewed() -> None:
    assert decide(Claim("me", NOW + 10_000, 1), "me", NOW) == "renew"


def test_before_a_write_the_claim_must_be_mine_with_margin() -> None:
    assert still_mine(Claim("me", NOW + 10_000, 1), "me", NOW, margin_ms=5_000)
    assert not still_mine(Claim("me", NOW + 4_000, 1), "me", NOW, margin_ms=5_000)
    assert not still_mine(Claim("other", NOW + 60_000, 1), "me", NOW, margin_ms=5_000)
    assert not still_mine(None, "me", NOW, margin_ms=5_000)
