"""Which memories a summary covers, whatever their time and whenever they landed (docs/
summaries.md, "What a summary covers"). Pure. Rows sit in time buckets, each a count and two
sums of id hashes (and their squares) mod a prime: a pass re-reads only buckets that differ,
and the sums name one or two rows missing from a bucket (`summaryctl verify`).
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import itertools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from controller.core.text import json_value

MAX_BUCKETS = 128
P = (1 << 61) - 1  # the sums are taken mod this prime (a Mersenne prime)
_INVERSE_TWO = (P + 1) // 2
COVERAGE_FORMAT = 1


def id_hash(row_id: str) -> int:
    """A row id's hash in [1, p): what the sums add up."""
    digest = hashlib.blake2b(row_id.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % (P - 1) + 1


@dataclass(frozen=True)
class Bucket:
    """Rows with a timestamp from `start` (inclusive) to the next bucket's start."""

    start: int
    count: int = 0
    sum1: int = 0  # sum of the id hashes, mod p
    sum2: int = 0  # sum of their squares, mod p

    def add(self, h: int) -> Bucket:
        return Bucket(self.start, self.count + 1, (self.sum1 + h) % P, (self.sum2 + h * h) % P)


@dataclass(frozen=True)
class Coverage:
    """The rows a summary covers, in buckets ordered by start."""

    buckets: tuple[Bucket, ...] = ()

    @property
    def count(self) -> int:
        return sum(b.count for b in self.buckets)

    def to_json(self) -> str:
        rows = [[b.start, b.count, f"{b.sum1:x}", f"{b.sum2:x}"] for b in self.buckets]
        return json.dumps({"v": COVERAGE_FORMAT, "b": rows}, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Coverage:
        data = json_value(text)
        if not isinstance(data, dict) or data.get("v") != COVERAGE_FORMAT:
            raise ValueError("not a coverage of format 1")
        buckets = []
        for row in data["b"]:
            start, count, s1, s2 = row
            if not isinstance(start, int) or not isinstance(count, int) or count < 0:
                raise ValueError(f"bad coverage bucket {row!r:.80}")
            buckets.append(Bucket(start, count, int(s1, 16) % P, int(s2, 16) % P))
        starts = [b.start for b in buckets]
        if starts != sorted(set(starts)):
            raise ValueError("coverage buckets out of order")
        return cls(tuple(buckets))


def build(keys: Iterable[tuple[int, str]], max_buckets: int = MAX_BUCKETS) -> Coverage:
    """At most max_buckets of about equal counts, split only where the timestamp changes."""
    rows = sorted((ts, id_hash(row_id)) for ts, row_id in keys)
    per_bucket = -(-len(rows) // max_buckets)
    buckets: list[Bucket] = []
    for ts, same_time in itertools.groupby(rows, key=lambda row: row[0]):
        if not buckets or buckets[-1].count >= per_bucket:
            buckets.append(Bucket(ts))
        buckets[-1] = functools.reduce(Bucket.add, (h for _, h in same_time), buckets[-1])
    return Coverage(tuple(buckets))


def extend(
    coverage: Coverage,
    keys: Iterable[tuple[int, str]],
    covered_upto_ms: int,
    max_buckets: int = MAX_BUCKETS,
) -> Coverage:
    """With a pass's new rows: up to covered_upto_ms in the last bucket, later in a new one."""
    buckets = list(coverage.buckets)
    fresh: Bucket | None = None
    for ts, row_id in sorted(keys):
        h = id_hash(row_id)
        if buckets and ts <= covered_upto_ms:
            buckets[-1] = buckets[-1].add(h)
        else:
            fresh = (fresh or Bucket(ts)).add(h)
    if fresh is not None:
        buckets.append(fresh)
    while len(buckets) > max_buckets:
        i = min(range(len(buckets) - 1), key=lambda j: buckets[j].count + buckets[j + 1].count)
        a, b = buckets[i], buckets[i + 1]
        joined = Bucket(a.start, a.count + b.count, (a.sum1 + b.sum1) % P, (a.sum2 + b.sum2) % P)
        buckets[i : i + 2] = [joined]
    return Coverage(tuple(buckets))


def digest(row_ids: Iterable[str]) -> Bucket:
    """Every row of a session as one bucket: tells a pass no row went or landed behind it."""
    return functools.reduce(Bucket.add, map(id_hash, row_ids), Bucket(0))


def digest_text(bucket: Bucket) -> str:
    return f"{bucket.count}:{bucket.sum1:x}:{bucket.sum2:x}"


def digest_of_text(text: object) -> Bucket | None:
    """A digest as stored; None for anything else."""
    try:
        count, s1, s2 = str(text).split(":")
        return Bucket(0, int(count), int(s1, 16) % P, int(s2, 16) % P)
    except ValueError:
        return None


def partition(keys: Iterable[tuple[int, str]], starts: Sequence[int]) -> list[Bucket]:
    """These rows in the buckets these starts define, after one (index 0) for older rows."""
    found = [Bucket(starts[0] - 1 if starts else 0)] + [Bucket(s) for s in starts]
    for ts, row_id in keys:
        index = bisect.bisect_right(starts, ts)  # 0: older than every bucket
        found[index] = found[index].add(id_hash(row_id))
    return found


@dataclass(frozen=True)
class Dirty:
    """A time range whose rows differ from what the summary covers."""

    start: int | None  # None: from the beginning of time
    end: int | None  # exclusive; None: to the watermark
    stored: Bucket | None  # what the summary covers there (None: nothing)
    current: Bucket

    def holds(self, ts: int) -> bool:
        return (self.start is None or ts >= self.start) and (self.end is None or ts < self.end)

    @property
    def uncovered(self) -> int:
        """Rows here no summary covers, if none was deleted meanwhile."""
        return max(0, self.current.count - (self.stored.count if self.stored else 0))


def missing_rows(dirty: Dirty, candidates: Iterable[tuple[int, str]]) -> list[str] | None:
    """The ids of a dirty bucket's rows beyond the stored ones, when one or two and none was
    removed (the sums then give their hashes); None when the sums cannot tell."""
    k, base = dirty.uncovered, dirty.stored or Bucket(0)  # k: current.count - base.count
    if not 0 < k <= 2:
        return None
    d1 = (dirty.current.sum1 - base.sum1) % P
    e2 = (d1 * d1 - dirty.current.sum2 + base.sum2) * _INVERSE_TWO % P
    if k == 1 and e2:  # one row: its hash is d1, its square d2
        return None
    # x^2 - d1 x + e2 has the missing hashes as roots (one row: d1 and 0, which is no hash)
    found = [
        row_id
        for ts, row_id in candidates
        if dirty.holds(ts) and ((h := id_hash(row_id)) * h - d1 * h + e2) % P == 0
    ]
    return found if len(found) == k else None


@dataclass(frozen=True)
class PriorCoverage:
    """What a pass knows of what the prior summary covers."""

    watermark_key: tuple[int, str] | None = None  # the newest memory covered
    coverage: Coverage | None = None  # None: a row of an earlier version (or a watermark only)
    memory_count: int | None = None  # the prior's memoryCount, for a row without coverage
    # every row the prior accounted for, who wrote them, which had no readable time
    digest: Bucket | None = None
    sources_json: str | None = None
    untimed: frozenset[str] = frozenset()


def to_reread(
    prior: PriorCoverage, covered_keys: Iterable[tuple[int, str]], count: int
) -> list[Dirty]:
    """The ranges where the rows at or before the prior's watermark (covered_keys) are not
    exactly the rows it covers: what a pass must read again."""
    if prior.watermark_key is None:
        return []
    if prior.coverage is None:  # a count only: everything, if it fell short
        short = prior.memory_count is not None and prior.memory_count < count
        return [Dirty(None, None, None, partition(covered_keys, [])[0])] if short else []
    starts = [b.start for b in prior.coverage.buckets]
    current = partition(covered_keys, starts)
    dirty: list[Dirty] = []
    if current[0].count:  # older than every bucket: covered by nothing
        dirty.append(Dirty(None, starts[0] if starts else None, None, current[0]))
    for i, bucket in enumerate(prior.coverage.buckets):
        if current[i + 1] != bucket:  # partition gave it the bucket's start: the rows differ
            end = starts[i + 1] if i + 1 < len(starts) else None
            dirty.append(Dirty(bucket.start, end, bucket, current[i + 1]))
    return dirty


@dataclass(frozen=True)
class Uncovered:
    """What `summaryctl verify` reports of one session: the memories no summary covers."""

    rows: tuple[tuple[int, str, str], ...]  # (timestamp, id, why) of each one named
    unnamed: tuple[tuple[Dirty, tuple[tuple[int, str], ...]], ...]  # ranges: how many, of which

    @property
    def count(self) -> int:
        return len(self.rows) + sum(d.uncovered for d, _ in self.unnamed)


def uncovered(keys: Sequence[tuple[int, str]], prior: PriorCoverage) -> Uncovered:
    """The memories of sorted `keys` the summary does not cover: named when the sums tell
    which, else the range and how many."""
    mark = prior.watermark_key
    if mark is None:
        return Uncovered(tuple((ts, i, "no summary covers it") for ts, i in keys), ())
    behind = [k for k in keys if k <= mark]
    after = tuple((ts, i, "newer than the summary") for ts, i in keys if (ts, i) > mark)
    named: list[tuple[int, str, str]] = []
    unnamed: list[tuple[Dirty, tuple[tuple[int, str], ...]]] = []
    for dirty in to_reread(prior, behind, len(behind)):
        if dirty.uncovered == 0:
            continue  # rows were removed there: nothing is missing from the summary
        if (ids := missing_rows(dirty, behind)) is not None:
            named += [(ts, i, "landed behind the summary") for ts, i in behind if i in ids]
        else:
            unnamed.append((dirty, tuple(k for k in behind if dirty.holds(k[0]))))
    return Uncovered(tuple(named) + after, tuple(unnamed))
