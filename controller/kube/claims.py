"""The session's SessionClaim: granted, renewed by a thread for the whole pass, fenced and
released; and the claims of writers that died, deleted (blocking; the decisions are in
core/claim_rules.py and, for fences, core/ledger.py)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from controller import metrics
from controller.api import API_VERSION, CLAIM_KIND, CLAIM_PLURAL, GROUP, VERSION
from controller.core.claim_rules import (
    Claim,
    Sighting,
    abandoned,
    held_for_s,
    holder_may_write,
    parse_claim,
    sighted,
)
from controller.core.ledger import (
    AuthorityConflict,
    AuthorityRecord,
    Fence,
    admission,
    conflict_message,
    fence_of,
    still_writing,
    takeover_message,
)
from controller.core.naming import claim_name
from controller.core.text import one_line
from controller.kube import client as kube

CONFLICT_RETRIES = 5
log = logging.getLogger(__name__)


class ClaimHeld(Exception):
    """Another live writer holds the claim; retry after retry_after_s."""

    def __init__(self, claim: Claim, retry_after_s: float, lost_races: int = 0) -> None:
        self.claim = claim
        self.retry_after_s = max(0.5, retry_after_s)
        w = claim.writer
        times = f"{lost_races} time{'s' if lost_races != 1 else ''}"
        raced = f"; the claim changed under us {times} first" if lost_races else ""
        super().__init__(
            f"session {claim.session_id!r} is being summarized by SessionSummary {w.owner} "
            f"on replica {w.replica} (its claim lapses {self.retry_after_s:.0f}s after it "
            f"stops renewing it{raced})"
        )


class ClaimLost(Exception):
    """Our claim lapsed, was taken or fenced, or was never got; nothing was written."""


class ClaimContended(Exception):
    """The claim changed under us on every attempt, no live holder left to name: a wait."""


def answer(exc: Exception) -> str:
    """A failed call in one line: the API server's status and answer, or why none came."""
    if isinstance(exc, ApiException):
        return f"{exc.status} {exc.reason}: {kube.api_message(exc)}"
    return one_line(exc, 300)


def _api() -> client.CustomObjectsApi:
    return kube.custom()


@dataclass
class Sightings:
    """What a writer remembers between attempts (kopf's memo), on its own clock."""

    claim: Sighting | None = None
    authority: Sighting | None = None


@dataclass
class SessionClaimHandle:
    """One writer's claim on one session's row, for one pass (`claim`: the spec asked for,
    each grant stamps its times); check() and admit() are the pipeline's WriteGuard."""

    claim: Claim
    margin_s: float
    renew_s: float
    seen: Sightings = field(default_factory=Sightings)
    authority: str = ""  # the cluster that issues our fences (Runtime.fence_authority)
    fence: Fence | None = None  # the grant's fence (core/ledger.py)
    authorities: Callable[[str], AuthorityRecord | None] = lambda uid: None  # in the store
    took_over: str | None = None  # what the object says of a row taken over from a history
    _grant: Claim | None = field(default=None, repr=False)  # claim, as last granted
    _version: str | None = field(default=None, repr=False)
    _uid: str | None = field(default=None, repr=False)  # the claim object's, as granted
    _renewed_at_s: float = field(default=0.0, repr=False)
    _lost: str | None = field(default=None, repr=False)
    _failed: str = field(default="", repr=False)  # why the last renewal failed, if it did
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _renewer: threading.Thread | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def name(self) -> str:
        return claim_name(self.claim.collection_id, self.claim.session_id)

    def _call(
        self, missing: tuple[int, ...], call: Callable[..., Any], *args: Any, **kw: Any
    ) -> dict[str, Any] | None:
        return kube.unless(missing, call, GROUP, VERSION, CLAIM_PLURAL, *args, **kw)

    def _write(
        self, claim: Claim, version: str | None, timeout: tuple[float, float] | None = None
    ) -> dict[str, Any] | None:
        """Creates the claim (version None) or replaces that version of it: the object
        written, or None if it exists, or changed or went since that version."""
        meta = {
            "name": self.name,
            "labels": {"app.kubernetes.io/managed-by": "session-summary-operator"},
        }
        body = {
            "apiVersion": API_VERSION,
            "kind": CLAIM_KIND,
            "metadata": meta,
            "spec": claim.spec(),
        }
        if version is None:
            return self._call((409,), _api().create_cluster_custom_object, body)
        meta["resourceVersion"] = version
        update = _api().replace_cluster_custom_object
        return self._call((404, 409), update, self.name, body, _request_timeout=timeout)

    def _get(self) -> dict[str, Any] | None:
        return self._call((404,), _api().get_cluster_custom_object, self.name)

    def acquire(self) -> Claim:
        """Takes the claim; ClaimHeld if another's is live by our clock, ClaimLost if refused."""
        try:
            for lost_races in range(CONFLICT_RETRIES):
                if (claim := self._take(None)) is not None:
                    return claim
                obj = self._get()  # None: released between our create and read: create again
                if obj is not None and (claim := self._take(self._unless_held(obj, lost_races))):
                    return claim
            obj = self._get()  # every race lost: ClaimHeld naming a live holder, or below
            if obj is not None:
                self._unless_held(obj, CONFLICT_RETRIES)
        except ApiException as exc:
            raise ClaimLost(
                f"could not take the claim on session {self.claim.session_id!r} (SessionClaim "
                f"{self.name}): {answer(exc)}; nothing written"
            ) from exc
        raise ClaimContended(
            f"the claim on session {self.claim.session_id!r} changed under us {CONFLICT_RETRIES} "
            "times while we tried to take it, and no other live writer held it when we last "
            "read it; nothing written"
        )

    def _take(self, version: str | None) -> Claim | None:
        """Creates the claim, or replaces this version of it; None if the API refuses. Ours
        from when the request left, on our clock."""
        now_ms, sent = int(time.time() * 1000), time.monotonic()
        claim = replace(self.claim, acquired_at_ms=now_ms, renewed_at_ms=now_ms)
        if (made := self._write(claim, version)) is None:
            return None
        version = str(made["metadata"]["resourceVersion"])
        with self._lock:
            self._grant, self._version, self._renewed_at_s = claim, version, sent
            self._lost, self._uid = None, made["metadata"].get("uid")
        try:
            self.fence = Fence(fence_of(version), self.authority)
        except ValueError:
            self.release()
            raise
        self._stop.clear()
        self._renewer = threading.Thread(
            target=self._renew_loop, name=f"claim-renewer-{self.claim.session_id[:40]}", daemon=True
        )
        self._renewer.start()
        return claim

    def _unless_held(self, obj: dict[str, Any], lost_races: int) -> str:
        """The claim's resourceVersion; raises ClaimHeld if another writer's is live."""
        version, now = str(obj["metadata"]["resourceVersion"]), time.monotonic()
        self.seen.claim = sighted(self.seen.claim, self.name, version, now)
        holder = parse_claim(obj.get("spec"), self.claim.duration_s)
        wait = held_for_s(holder, self.seen.claim, self.claim.writer, now)
        if holder is not None and wait:  # 0: free, ours, or lapsed on our clock
            raise ClaimHeld(holder, wait, lost_races=lost_races)
        return version

    def _renew_loop(self) -> None:
        wait = self.renew_s
        while not self._stop.wait(wait):
            sent = time.monotonic()
            if not holder_may_write(self._renewed_at_s, sent, self.claim.duration_s, self.margin_s):
                self._lose(self._lapsed())
                return
            with self._lock:
                claim, version = self._grant, self._version
            if claim is None or version is None:
                return
            renewed = replace(claim, renewed_at_ms=int(time.time() * 1000))
            try:
                # A renewal that outlives the period is useless: bounded by it.
                made = self._write(renewed, version, timeout=(5.0, max(1.0, self.renew_s)))
            except Exception as exc:  # maybe transient (API down, timeout): retry until too late
                self._failed = why = answer(exc)
                log.info(
                    "session %s: claim renewal failed, retrying: %s", self.claim.session_id, why
                )
                wait = min(self.renew_s, 2.0)
                continue
            if made is None and (current := self._still_ours(claim)) is not None:
                # Our renewal applied but its answer was lost: renew again at once.
                with self._lock:
                    self._version = current
                wait = 0.0
                continue
            if made is None:
                self._lose(
                    f"the claim on session {self.claim.session_id!r} was deleted or taken by "
                    "another writer; nothing more is written"
                )
                return
            with self._lock:
                if self._stop.is_set():
                    return
                self._grant, self._version = renewed, str(made["metadata"]["resourceVersion"])
                self._renewed_at_s = sent
            self._failed = ""
            metrics.CLAIM_RENEWALS.inc()
            wait = self.renew_s

    def _lose(self, why: str) -> str:
        with self._lock:
            self._lost = self._lost or why
            return self._lost

    def _lapsed(self) -> str:
        why = self._failed or "none answered: this process paused, or the API server slow"
        return (
            f"the claim on session {self.claim.session_id!r} (SessionClaim {self.name}) was not "
            f"renewed within {self.claim.duration_s - self.margin_s:.0f}s (last renewal: {why}); "
            "nothing more is written"
        )

    def check(self) -> None:
        """Raises ClaimLost if the claim was deleted, taken or not renewed in time. No I/O."""
        with self._lock:
            lost, granted, renewed_at = self._lost, self._grant is not None, self._renewed_at_s
        if lost is not None:
            raise ClaimLost(lost)
        if not granted:
            raise ClaimLost("no claim taken; nothing written")
        if not holder_may_write(renewed_at, time.monotonic(), self.claim.duration_s, self.margin_s):
            raise ClaimLost(self._lose(self._lapsed()))

    def admit(self, found: Fence | None) -> dict[str, int | str]:
        """Right before an upsert, given the row's fence: raises ClaimLost or
        AuthorityConflict, else returns our fence's keys (`took_over` says of a takeover)."""
        self.check()
        mine = self.fence
        assert mine is not None
        verdict = admission(found, mine, grant_is_current=False)
        if verdict == "write" or found is None:
            return dict(mine.metadata())
        if verdict == "other-authority":
            record = self.authorities(found.authority)
            self.seen.authority, live = still_writing(record, self.seen.authority, time.monotonic())
            if live and record is not None:
                raise AuthorityConflict(
                    conflict_message(self.claim.session_id, found, mine, record)
                )
        if verdict == "newer-grant" and self._still_ours(self._grant) is not None:
            verdict = admission(found, mine, grant_is_current=True)
        if verdict == "newer-grant":
            self._lose(
                f"the row of session {self.claim.session_id!r} was written under a newer claim "
                f"(fence {found.number} > ours {mine.number}); nothing written"
            )
            raise ClaimLost(self._lost or "fenced")
        self.took_over = takeover_message(self.claim.session_id, found, mine, verdict)
        return dict(mine.metadata())

    def _still_ours(self, claim: Claim | None) -> str | None:
        """The claim's resourceVersion if it is still our grant of `claim`, else None."""
        obj = self._get() if claim is not None else None
        if obj is None or claim is None or obj["metadata"].get("uid") != self._uid:
            return None
        spec, mine = obj.get("spec") or {}, claim.spec()
        same = all(spec.get(key) == mine[key] for key in ("holder", "ownerUid", "acquireTime"))
        return str(obj["metadata"]["resourceVersion"]) if same else None

    def release(self) -> None:
        """Stops the renewer and deletes the claim if still ours. Never raises: it lapses."""
        self._stop.set()
        if self._renewer is not None:  # never this thread: the renewer never releases
            self._renewer.join(timeout=kube.REQUEST_TIMEOUT[0] + max(1.0, self.renew_s) + 1)
        with self._lock:
            version, claim = self._version, self._grant
            self._grant = self._version = None
        failure: Exception | None = None
        for _ in range(CONFLICT_RETRIES):
            if version is None:
                return  # never taken, gone, or no longer ours
            pre = kube.unless_changed(version)
            try:  # at our version; gone (404) is released too
                self._call((404,), _api().delete_cluster_custom_object, self.name, body=pre)
                return
            except Exception as exc:
                failure = exc
            # A conflict or no answer: it may have moved on under our name, or be gone.
            try:
                version = self._still_ours(claim)
            except Exception as exc:
                failure = exc
                break
        metrics.CLAIM_RELEASE_FAILURES.inc()
        log.warning(
            "session %s: could not release the claim %s (it lapses after %.0fs): %s",
            self.claim.session_id, self.name, self.claim.duration_s, failure,
        )  # fmt: skip


@dataclass
class ClaimCollector:
    """Deletes claims unchanged, by our clock, for their duration plus ours (a grace); each
    delete is conditional on the resourceVersion seen, so a claim renewed meanwhile stays."""

    default_duration_s: float
    sightings: dict[str, Sighting] = field(default_factory=dict)

    def collect(self) -> int:
        now = time.monotonic()
        seen: dict[str, Sighting] = {}
        deleted = 0
        for obj in kube.list_pages(_api().list_cluster_custom_object, CLAIM_PLURAL):
            meta = obj["metadata"]
            name, version = str(meta["name"]), str(meta["resourceVersion"])
            sighting = seen[name] = sighted(self.sightings.get(name), name, version, now)
            claim = parse_claim(obj.get("spec"), self.default_duration_s)
            duration = claim.duration_s if claim else self.default_duration_s
            if not abandoned(sighting, duration, self.default_duration_s, now):
                continue
            delete, options = _api().delete_cluster_custom_object, kube.unless_changed(version)
            if kube.applied((404, 409), delete, CLAIM_PLURAL, name, body=options):
                deleted += 1
                seen.pop(name)
        self.sightings = seen  # claims gone since are forgotten
        metrics.CLAIMS_COLLECTED.inc(deleted)
        return deleted
