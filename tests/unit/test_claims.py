"""The per-session claim decisions (controller/core/claim_rules.py) and the fencing rules
(controller/core/ledger.py): pure, no cluster.

The lease property is checked on a simulated cluster: writers whose monotonic clocks have
arbitrary offsets and rates within the documented drift bound take, renew, lose and release
one claim in any order hypothesis finds, and at no moment may two of them write."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.core.claim_rules import (
    Claim,
    Sighting,
    Writer,
    abandoned,
    held_for_s,
    holder_may_write,
    parse_claim,
    sighted,
)
from controller.core.ledger import (
    AUTHORITY_KEY,
    FENCE_KEY,
    AuthorityRecord,
    Fence,
    FenceUnavailable,
    admission,
    conflict_message,
    fence_of,
    recorded_fence,
    still_writing,
)
from controller.core.naming import claim_name, summary_object_name
from controller.store.connection import StoreLocation

ME = Writer("replica-a", "uid-1", "agents/s1")
SAME_REPLICA_OTHER_OBJECT = Writer("replica-a", "uid-2", "other-ns/s1-by-hand")
OTHER_REPLICA_SAME_OBJECT = Writer("replica-b", "uid-1", "agents/s1")
D = 60.0


def claim(writer: Writer, duration_s: float = D) -> Claim:
    return Claim("s1", "coll-uuid", writer, duration_s, generation=3, collection="chroma")


def test_claim_round_trips_through_its_spec() -> None:
    c = claim(ME)
    assert parse_claim(c.spec(), default_duration_s=1.0) == replace(c, generation=0, collection="")


def test_a_claim_of_an_earlier_version_gets_our_duration() -> None:
    old = {k: v for k, v in claim(ME).spec().items() if k != "leaseDurationSeconds"}
    parsed = parse_claim(old, default_duration_s=42.0)
    assert parsed is not None and parsed.duration_s == 42.0


def test_unreadable_or_missing_claim_counts_as_free() -> None:
    assert parse_claim(None, D) is None
    assert parse_claim({}, D) is None
    assert parse_claim({"holder": "x"}, D) is None
    assert parse_claim({**claim(ME).spec(), "leaseDurationSeconds": "soon"}, D) is None
    assert parse_claim({**claim(ME).spec(), "leaseDurationSeconds": 0}, D) is None
    assert held_for_s(None, Sighting("n", "1", 0.0), ME, 0.0) == 0


def test_a_live_claim_of_another_writer_is_held_for_its_duration_from_our_first_sighting() -> None:
    seen = sighted(None, "n", "7", now_s=100.0)
    for other in (OTHER_REPLICA_SAME_OBJECT, SAME_REPLICA_OTHER_OBJECT):
        assert held_for_s(claim(other), seen, ME, 100.0) > 0
        assert held_for_s(claim(other), seen, ME, 159.9) > 0
        assert held_for_s(claim(other), seen, ME, 130.0) == pytest.approx(30.0)
        assert held_for_s(claim(other), seen, ME, 160.0) == 0


def test_a_claim_seen_for_the_first_time_gets_a_whole_duration_however_old_it_is() -> None:
    # Whatever times the object carries (another host's clock), we wait from our sighting.
    ancient = {**claim(OTHER_REPLICA_SAME_OBJECT).spec(), "expiresAt": 0, "renewTime": "1970"}
    parsed = parse_claim(ancient, D)
    seen = sighted(None, "n", "7", now_s=5.0)
    assert held_for_s(parsed, seen, ME, 5.0) > 0
    assert held_for_s(parsed, seen, ME, 64.9) > 0


def test_every_change_of_the_claim_restarts_the_contenders_wait() -> None:
    first = sighted(None, "n", "7", now_s=0.0)
    assert sighted(first, "n", "7", now_s=50.0) is first  # unchanged: the wait goes on
    renewed = sighted(first, "n", "8", now_s=50.0)  # the holder renewed it
    assert renewed.seen_at_s == 50.0
    assert held_for_s(claim(OTHER_REPLICA_SAME_OBJECT), renewed, ME, 100.0) > 0
    assert sighted(renewed, "other-claim", "8", now_s=60.0).seen_at_s == 60.0


def test_our_own_claim_is_taken_again_at_once() -> None:
    assert held_for_s(claim(ME), sighted(None, "n", "1", 0.0), ME, 0.0) == 0


def test_the_holder_stops_writing_before_the_duration_less_the_margin() -> None:
    assert holder_may_write(renewed_at_s=10.0, now_s=64.9, duration_s=D, margin_s=5.0)
    assert not holder_may_write(renewed_at_s=10.0, now_s=65.0, duration_s=D, margin_s=5.0)


def test_only_claims_unchanged_for_their_duration_and_a_grace_are_collected() -> None:
    seen = Sighting("n", "1", 100.0)
    assert not abandoned(seen, D, grace_s=D, now_s=100.0 + D)
    assert not abandoned(seen, D, grace_s=D, now_s=219.0)
    assert abandoned(seen, D, grace_s=D, now_s=220.0)


# -- the lease on a simulated cluster ----------------------------------------------------------

MARGIN = 5.0
# The drift bound the docs state: rates may differ by up to margin / (2 * duration - margin).
DRIFT = MARGIN / (2 * D - MARGIN)


@dataclass
class SimWriter:
    writer: Writer
    offset: float  # monotonic clocks of different hosts share no origin
    rate: float  # and tick at slightly different rates
    sighting: Sighting | None = None
    version: int | None = None  # of the claim as we last wrote it; None: not holding
    renewed_at: float = 0.0  # our clock, when we sent the last successful write
    lost: bool = False

    def clock(self, t: float) -> float:
        return self.offset + self.rate * t


class SimCluster:
    """One claim object on an API server: create/replace with a resourceVersion precondition."""

    def __init__(self) -> None:
        self.holder: int | None = None
        self.version = 0
        self.duration = D

    def write(self, holder: int | None) -> int:
        self.version += 1
        self.holder = holder
        return self.version


def step(cluster: SimCluster, writers: list[SimWriter], i: int, action: str, t: float) -> None:
    w = writers[i]
    now = w.clock(t)
    if action == "acquire" and w.version is None:
        if cluster.holder is None:
            w.version, w.renewed_at, w.lost = cluster.write(i), now, False
            return
        w.sighting = sighted(w.sighting, "c", str(cluster.version), now)
        existing = claim(writers[cluster.holder].writer)
        if held_for_s(existing, w.sighting, w.writer, now) == 0:
            w.version, w.renewed_at, w.lost = cluster.write(i), now, False
    elif action == "renew" and w.version is not None and not w.lost:
        if not holder_may_write(w.renewed_at, now, D, MARGIN):
            w.lost = True  # the renewer gives up
        elif cluster.holder == i and cluster.version == w.version:
            w.version, w.renewed_at = cluster.write(i), now
        else:
            w.lost = True  # 409: taken or deleted
    elif action == "release" and w.version is not None:
        if cluster.holder == i and cluster.version == w.version:
            cluster.write(None)  # deleted
        w.version, w.lost = None, False


def may_write(w: SimWriter, t: float) -> bool:
    return (
        w.version is not None
        and not w.lost
        and holder_may_write(w.renewed_at, w.clock(t), D, MARGIN)
    )


events = st.lists(
    st.tuples(
        st.floats(min_value=0, max_value=3 * D, allow_nan=False),  # real time passing first
        st.integers(min_value=0, max_value=2),
        st.sampled_from(["acquire", "acquire", "renew", "renew", "release"]),
    ),
    min_size=1,
    max_size=60,
)
clocks = st.tuples(
    st.floats(min_value=-1e9, max_value=1e9, allow_nan=False),
    st.floats(min_value=1 - DRIFT / 2, max_value=1 + DRIFT / 2),
)


@settings(max_examples=400, deadline=None)
@given(events, st.lists(clocks, min_size=3, max_size=3))
def test_no_two_writers_may_write_at_once_whatever_their_clocks_read(
    schedule: list[tuple[float, int, str]], clock_of: list[tuple[float, float]]
) -> None:
    names = [ME, OTHER_REPLICA_SAME_OBJECT, SAME_REPLICA_OTHER_OBJECT]
    writers = [SimWriter(n, off, rate) for n, (off, rate) in zip(names, clock_of, strict=True)]
    cluster, t = SimCluster(), 0.0
    for dt, i, action in schedule:
        t += dt
        step(cluster, writers, i, action, t)
        # Validity only decays between events, so checking right after each is enough.
        assert sum(may_write(w, t) for w in writers) <= 1


def test_clocks_drifting_apart_beyond_the_bound_can_break_the_lease() -> None:
    # The one assumption left, shown: a holder whose clock runs 10% slow keeps writing
    # after a contender whose clock runs 10% fast has taken over.
    slow, fast = SimWriter(ME, 0.0, 0.9), SimWriter(OTHER_REPLICA_SAME_OBJECT, 0.0, 1.1)
    writers, cluster = [slow, fast], SimCluster()
    step(cluster, writers, 0, "acquire", 0.0)
    step(cluster, writers, 1, "acquire", 0.0)  # first sighting
    step(cluster, writers, 1, "acquire", 55.0)  # 60.5 s on its clock: taken
    assert may_write(fast, 55.0) and may_write(slow, 55.0)


# -- fencing -----------------------------------------------------------------------------------


@given(st.integers(min_value=1, max_value=10**30))
def test_a_grant_is_fenced_by_its_resource_version(version: int) -> None:
    assert fence_of(str(version)) == version


@pytest.mark.parametrize("version", ["", "0", "007", "12a", "-3", "1.5", " 12", "abc"])
def test_a_resource_version_that_is_not_a_comparable_integer_cannot_fence(version: str) -> None:
    with pytest.raises(FenceUnavailable, match="comparable integer"):
        fence_of(version)


authorities = st.sampled_from(["", "cluster-a", "cluster-b"])


@given(
    st.one_of(st.none(), st.integers(min_value=1, max_value=2**62)),
    st.integers(1, 2**62),
    authorities,
    st.booleans(),
)
def test_a_writer_writes_over_its_own_or_older_grants_never_a_newer_one(
    found: int | None, mine: int, authority: str, current: bool
) -> None:
    """Within one authority a newer grant's row is refused unless our grant is still the
    current one; any other authority's fence (one recorded without an authority too) is
    another history, whatever its number."""
    seen = Fence(found, authority) if found is not None else None
    verdict = admission(seen, Fence(mine, "cluster-a"), current)
    if found is not None and authority != "cluster-a":
        assert verdict == "other-authority"
    elif found is None or found <= mine:
        assert verdict == "write"
    else:
        assert verdict == ("ahead-of-authority" if current else "newer-grant")


@pytest.mark.parametrize(
    ("ledger", "expected"),
    [
        (None, None),
        ({}, None),
        ({FENCE_KEY: 42, AUTHORITY_KEY: "a"}, Fence(42, "a")),
        ({FENCE_KEY: 42}, Fence(42, "")),
        ({FENCE_KEY: 42, AUTHORITY_KEY: 7}, Fence(42, "")),
        ({FENCE_KEY: True}, None),
        ({FENCE_KEY: 4.2}, None),
        ({FENCE_KEY: "42"}, None),
        ({"claimFence": 7}, None),
    ],
)
def test_the_rows_fence_is_read_only_when_it_is_one(
    ledger: dict[str, object] | None, expected: Fence | None
) -> None:
    assert recorded_fence(ledger) == expected


def record(version: int, duration_s: float = D) -> AuthorityRecord:
    return AuthorityRecord("cluster-b", "operator-b-0", version, duration_s)


@given(
    st.builds(
        AuthorityRecord,
        st.text(min_size=1, max_size=40),
        st.text(max_size=40),
        st.integers(0, 2**53),
        st.floats(0.001, 1e6),
    )
)
def test_an_authority_record_reads_back_as_written(written: AuthorityRecord) -> None:
    assert AuthorityRecord.parse(written.metadata()) == written


@pytest.mark.parametrize(
    "meta",
    [
        {},
        {**record(1).metadata(), "renewTime": "soon"},
        {**record(1).metadata(), "leaseDurationSeconds": 0},
    ],
)
def test_an_unreadable_authority_record_is_none(meta: dict[str, object]) -> None:
    assert AuthorityRecord.parse(meta) is None


def test_a_refusal_names_both_clusters_and_the_way_out() -> None:
    said = conflict_message("s1", Fence(9, "cluster-b"), Fence(3, "cluster-a"), record(1))
    assert "cluster-b" in said and "cluster-a" in said and "operator-b-0" in said
    assert "summaryctl handover" in said


def test_a_fence_of_a_cluster_without_a_record_is_history_at_once() -> None:
    """A cluster that never renewed a record (an older release's), or whose record an admin
    removed (summaryctl handover): its rows are taken over at the first look."""
    assert still_writing(None, None, 123.0) == (None, False)


@settings(max_examples=300)
@given(
    gaps=st.lists(st.floats(0.0, D / 2), min_size=1, max_size=40),
    looks=st.lists(st.floats(0.0, 3 * D), min_size=1, max_size=40),
    offset=st.floats(-1e9, 1e9),
    rate=st.floats(0.9, 1.1),
)
def test_a_cluster_renewing_its_record_is_never_taken_for_history_and_a_stopped_one_is(
    gaps: list[float], looks: list[float], offset: float, rate: float
) -> None:
    """Cluster B's operator renews its record at least every D/2 (real time) until it stops;
    cluster A's operator looks at it at any times, on a monotonic clock with any offset and
    a rate within 10 % of B's. While B renews, A never sees history; once B has stopped, A
    sees history at its first look a whole lease after it first saw B's last record."""
    renewals = [sum(gaps[: i + 1]) for i in range(len(gaps))]
    stopped = renewals[-1]
    sighting, first_of_last = None, None
    real = 0.0
    for gap in looks:
        real += gap
        version = sum(1 for t in renewals if t <= real)
        now = offset + rate * real
        sighting, live = still_writing(record(version), sighting, now)
        if real < stopped + 1e-6:
            assert live, (renewals, real)
        if version == len(renewals) and first_of_last is None:
            first_of_last = now
        if first_of_last is not None and now - first_of_last >= D:
            assert not live
        elif version < len(renewals) or now - first_of_last < D:  # type: ignore[operator]
            assert live


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


@given(
    st.sampled_from(["neo-agent-memory", "team-a-memory", "imported-memory"]),
    st.sampled_from(["neo-agent-memory", "team-b-memory"]),
    st.sampled_from(["http://chroma:8000", "http://10.0.0.7:8000"]),
    session_ids,
)
def test_one_row_has_one_claim_whatever_memory_collection_or_address_names_it(
    memory_a: str, memory_b: str, url: str, session_id: str
) -> None:
    """Two SessionSummarizers reading different memory collections (or one store by two
    addresses) that write one summary row share its claim; another row has another."""
    a = StoreLocation(url="http://chroma:8000", memory_collection=memory_a)
    b = StoreLocation(url=url, memory_collection=memory_b)
    assert claim_name(a.row_scope, session_id) == claim_name(b.row_scope, session_id)
    elsewhere = StoreLocation(url=url, summary_collection="other-sessions")
    assert claim_name(elsewhere.row_scope, session_id) != claim_name(a.row_scope, session_id)
    other_db = StoreLocation(url=url, database="team-b")
    assert claim_name(other_db.row_scope, session_id) != claim_name(a.row_scope, session_id)
