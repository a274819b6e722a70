"""Deletes the SessionClaims of writers that died (decision: core/claim_rules.py:abandoned)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from controller import metrics
from controller.api import CLAIM_PLURAL, GROUP, VERSION
from controller.core.claim_rules import Sighting, abandoned, parse_claim, sighted
from controller.kube import client as kube


def _api() -> client.CustomObjectsApi:
    return kube.custom()


def _claim_pages(page_size: int) -> Iterator[list[dict[str, Any]]]:
    token: str | None = None
    while True:
        kwargs: dict[str, Any] = {"limit": page_size}
        if token:
            kwargs["_continue"] = token
        page = cast(
            dict[str, Any],
            _api().list_cluster_custom_object(GROUP, VERSION, CLAIM_PLURAL, **kwargs),
        )
        yield list(page.get("items") or [])
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return


@dataclass
class ClaimCollector:
    """Deletes claims unchanged, by our clock, for their duration plus a grace. Runs on its
    own timer (controller/operator.py), also when sweeps are off; each delete is
    conditional on the resourceVersion seen, so a claim renewed meanwhile stays."""

    default_duration_s: float
    grace_s: float
    page_size: int = 500
    sightings: dict[str, Sighting] = field(default_factory=dict)

    def collect(self) -> int:
        """One round; returns how many claims it deleted."""
        now = time.monotonic()
        seen: dict[str, Sighting] = {}
        deleted = 0
        for page in _claim_pages(self.page_size):
            for obj in page:
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
            metrics.claims_collected(deleted)
        return deleted

    def _delete(self, name: str, version: str) -> bool:
        try:
            _api().delete_cluster_custom_object(
                GROUP,
                VERSION,
                CLAIM_PLURAL,
                name,
                body=client.V1DeleteOptions(
                    preconditions=client.V1Preconditions(resource_version=version)
                ),
            )
        except ApiException as exc:
            if exc.status in (404, 409):
                return False
            raise
        return True
