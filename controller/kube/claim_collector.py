"""Deletes the SessionClaims of writers that died (decision: core/claim_rules.py:abandoned)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from controller import metrics
from controller.api import CLAIM_PLURAL
from controller.core.claim_rules import Sighting, abandoned, parse_claim, sighted
from controller.kube import client as kube


@dataclass
class ClaimCollector:
    """Deletes claims unchanged, by our clock, for their duration plus a grace; each delete
    is conditional on the resourceVersion seen, so a claim renewed meanwhile stays."""

    default_duration_s: float
    grace_s: float
    page_size: int = 500
    sightings: dict[str, Sighting] = field(default_factory=dict)

    def collect(self) -> int:
        now = time.monotonic()
        seen: dict[str, Sighting] = {}
        deleted = 0
        list_call = kube.custom().list_cluster_custom_object
        for obj in kube.list_pages(list_call, CLAIM_PLURAL, page_size=self.page_size):
            meta = obj["metadata"]
            name, version = str(meta["name"]), str(meta["resourceVersion"])
            sighting = sighted(self.sightings.get(name), name, version, now)
            seen[name] = sighting
            claim = parse_claim(obj.get("spec"), self.default_duration_s)
            duration = claim.duration_s if claim else self.default_duration_s
            if abandoned(sighting, duration, self.grace_s, now) and self._delete(name, version):
                deleted += 1
                seen.pop(name)
        self.sightings = seen  # claims gone since are forgotten
        if deleted:
            metrics.CLAIMS_COLLECTED.inc(deleted)
        return deleted

    def _delete(self, name: str, version: str) -> bool:
        delete = kube.custom().delete_cluster_custom_object
        return kube.applied(
            (404, 409), delete, CLAIM_PLURAL, name, body=kube.unless_changed(version)
        )
