"""Refresh by size on the real control plane and Chroma: an active session that keeps growing
is summarized once per threshold and never more often than the minimum interval; an active
session below the threshold is not; a sunset still summarizes at once. The rows carry the
trigger, the References section and the provenance."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

from controller.core.naming import summary_object_name
from controller.core.summary_row import document_digest
from devenv.processes import wait_for
from tests.integration.harness import NS, Harness, interaction, load, summarizer_yaml
from tests.support.cli import summaryctl_here

MEMORY, SESSIONS = "refresh-memory", "refresh-sessions"
THRESHOLD = 300  # refreshAfterTokens
# Past the sweep's interval (the CRD's least, 5 s): a refresh at the sweep after the first
# (5 s) is too soon, the one after it (10 s) is due.
MIN_REFRESH_S = 8
SWEEP_S = 5


def grow(harness: Harness, sid: str, first: int, count: int) -> None:
    """count memories of ~140 estimated tokens each, timestamped now (the session is active)."""
    now = int(time.time() * 1000)
    rows = []
    for i in range(first, first + count):
        prompt = f"Step {i}: edit src/refresh/step_{i}.py and check issue #{700 + i}. " + (
            "Keep the exporter's batches bounded and the retries idempotent. " * 6
        )
        rows.append(interaction(sid, i, now - (first + count - i), prompt))
    load(harness.store(MEMORY, SESSIONS), rows)


def row(harness: Harness, sid: str) -> tuple[str, dict[str, Any]] | None:
    # The row and its ledger entry's keys (the writer's state is in the ledger); None until
    # both are of one write. The ledger entry is written first: read between the two
    # upserts, its keys (summarizedAt) are the new write's and the row's (memoryCount) the
    # previous one's, or absent. The ledger head names the digest of the row it goes with.
    stored = harness.store(MEMORY, SESSIONS).stored_summary(sid)
    if stored is None or stored[1].get("ledger.rowDigest") != document_digest(stored[0]):
        return None
    return stored


def exists(harness: Harness, sid: str) -> bool:
    out = harness.kubectl("get", "ssum", summary_object_name(sid), "--ignore-not-found")
    return out.strip() != ""


def metric_samples(harness: Harness) -> dict[str, float]:
    text = urllib.request.urlopen(harness.metrics_url, timeout=5).read().decode()
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


def test_a_growing_active_session_is_refreshed_once_per_threshold_never_faster_than_the_interval(
    harness: Harness,
) -> None:
    busy, quiet, ending = "rf-busy", "rf-quiet", "rf-ending"
    grow(harness, busy, 0, 3)  # ~420 tokens: past the threshold
    grow(harness, quiet, 0, 1)  # ~140 tokens: below it
    grow(harness, ending, 0, 1)
    harness.kubectl(
        "apply",
        "-f",
        "-",
        input=summarizer_yaml(
            "refresher",
            harness.chroma.url,
            memory=MEMORY,
            summary=SESSIONS,
            sweep=(
                f"enabled: true, intervalSeconds: {SWEEP_S}, idleSeconds: 3600, "
                f"refreshAfterTokens: {THRESHOLD}, minRefreshSeconds: {MIN_REFRESH_S}"
            ),
        ),
    )

    # 1. The first sweep refreshes the busy session although it is active.
    first = wait_for(lambda: row(harness, busy), 60, 0.3, message="refresh", log=harness.log)
    document, meta = first
    assert meta["triggerSource"] == "refresh" and meta["memoryCount"] == 3
    assert "## References" in document and "`src/refresh/step_2.py`" in document
    assert "`#702`" in document
    assert meta["passTokensIn"] > THRESHOLD and meta["passTokensOut"] > 0
    assert meta["compactionRatio"] > 1 and meta["firstMemoryAt"] <= meta["watermarkTimestamp"]
    obj = harness.wait_phase(busy, "Summarized")
    assert obj["spec"]["trigger"] == "refresh"
    assert obj["status"]["triggerSource"] == "refresh"
    provenance = obj["status"]["provenance"]
    assert provenance["memoryCount"] == 3 and provenance["tokensIn"] == meta["passTokensIn"]
    assert provenance["watermarkMemoryId"] == meta["watermarkMemoryId"] == f"{busy}-0002"
    first_at = meta["summarizedAt"]

    # 2. It grows past the threshold again at once: no refresh before the minimum interval,
    #    one after it, and none while it stays below the threshold afterwards.
    grow(harness, busy, 3, 3)

    def refreshed_again() -> dict[str, Any] | None:
        got = row(harness, busy)
        if got is not None and got[1]["summarizedAt"] != first_at:
            return got[1]
        return None

    second = wait_for(refreshed_again, 60, 0.2, message="second refresh", log=harness.log)
    assert second["triggerSource"] == "refresh" and second["memoryCount"] == 6
    assert second["summarizedAt"] - first_at >= MIN_REFRESH_S * 1000
    # Every reference of the first summary is still there, the new ones after them.
    second_doc = (row(harness, busy) or ("", {}))[0]
    assert "`src/refresh/step_0.py`" in second_doc and "`src/refresh/step_5.py`" in second_doc
    time.sleep(MIN_REFRESH_S + 2 * SWEEP_S)  # quiet now: no further refresh
    after = row(harness, busy)
    assert after is not None and after[1]["summarizedAt"] == second["summarizedAt"]

    # 3. The session below the threshold was never summarized, nor given an object.
    assert row(harness, quiet) is None and not exists(harness, quiet)

    # 4. A sunset summarizes at once, whatever the refresh schedule says (how fast is
    #    bench/'s question: a loaded machine took 13 s for these two).
    grow(harness, busy, 6, 1)
    for sid in (ending, busy):
        result = summaryctl_here(
            "sunset", sid, "-n", NS, "--summarizer", "refresher", "--wait", "60"
        )
        assert result.returncode == 0, result.stderr
    for sid, count in ((ending, 1), (busy, 7)):
        got = row(harness, sid)
        assert got is not None
        assert got[1]["triggerSource"] == "sunset" and got[1]["memoryCount"] == count
    assert harness.obj(busy)["status"]["triggerSource"] == "sunset"

    samples = metric_samples(harness)
    assert samples['session_summary_written_total{trigger="refresh"}'] >= 2
    assert samples["session_summary_refresh_requests_total"] >= 2
    assert samples["session_summary_compaction_ratio_count"] >= 3
    assert samples['session_summary_pass_tokens_total{direction="in"}'] > 3 * THRESHOLD
    status = json.loads(harness.kubectl("get", "ssumr", "refresher", "-o", "json"))["status"]
    assert "refreshed" in status["message"]
