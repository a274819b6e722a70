"""The operator's Prometheus metrics, each replica's own on SSO_METRICS_PORT (docs/operations.md
lists them and the alerts); the helpers observe figures that go together."""

from __future__ import annotations

import importlib.metadata
import platform

from prometheus_client import Counter, Gauge, Histogram

SUMMARIES = Counter(
    "session_summary_summaries_total",
    "Summarization passes finished by this replica, by result "
    "(summarized, up-to-date, not-found, empty, failed).",
    ["result"],
)
FAILURES = Counter(
    "session_summary_failures_total",
    "Failed summarization passes by condition reason (StoreUnavailable, InvalidSummary, ...).",
    ["reason"],
)
SUMMARIZE_SECONDS = Histogram(
    "session_summary_summarize_duration_seconds",
    "Wall time of one summarization pass: claim, read, summarize, embed, upsert.",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
)
QUEUE_WAIT_SECONDS = Histogram(
    "session_summary_queue_wait_seconds",
    "Time a summarization waited for a worker thread, by scheduling class (first: a "
    "first summary; again: a re-summary; background: sweep and refresh).",
    ["class"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)
PHASE_SECONDS = Histogram(
    "session_summary_pass_phase_seconds",
    "Each phase of a pass's own time (controller/tracing.py): delivered, queued, claimed, "
    "read, summarized, embedded, written, status.",
    ["phase"],
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
OTHER_WRITERS = Counter(
    "session_summary_other_writer_rewrites_total",
    "Summary rows of ours found rewritten by another writer (their text was carried).",
)
RECONCILE_ROWS = Counter(
    "session_summary_reconcile_rows_total",
    "Memory rows the reconciliation walked (docs/summaries.md, every memory reaches its summary).",
)
UNCOVERED_FOUND = Counter(
    "session_summary_uncovered_rows_found_total",
    "Rows a finished reconciliation found that no summary accounted for.",
)
UNCOVERED = Gauge(
    "session_summary_uncovered_rows",
    "Rows the last finished reconciliation of this replica found no summary accounting for.",
)
UNTIMED_MEMORIES = Counter(
    "session_summary_untimed_memories_total",
    "Memories whose time could not be read, summarized at the end of their session's order "
    "and left out of memoryCount (summaryctl verify names them).",
)
LATE_MEMORIES = Counter(
    "session_summary_late_memories_total",
    "Memories a pass found behind its summary's watermark (landed late) and summarized.",
)
REDACTIONS = Counter(
    "session_summary_redactions_total",
    "Secrets masked before summarizing (memories read, prior summaries carried), by kind.",
    ["kind"],
)
SWEEPS = Counter(
    "session_summary_sweeps_total",
    "Sweeps run by this replica (only the active replica sweeps).",
)
SWEEP_SECONDS = Histogram(
    "session_summary_sweep_duration_seconds",
    "Wall time of one sweep over new memories.",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)
SWEEP_CANDIDATES = Gauge(
    "session_summary_sweep_candidates",
    "Sessions the last sweep of this replica found needing a summary (queue depth).",
)
SWEEP_CANDIDATES_FOUND = Counter(
    "session_summary_sweep_candidates_found_total",
    "Sessions found needing a summary, summed over all sweeps of this replica.",
)
CLAIM_CONFLICTS = Counter(
    "session_summary_claim_conflicts_total",
    "Per-session claims this replica could not take or keep (held by another writer, or a "
    "resourceVersion conflict).",
)
CLAIM_RENEWALS = Counter(
    "session_summary_claim_renewals_total",
    "Per-session claims renewed by this replica during a pass (one per renew period of a "
    "pass that outlasts it).",
)
CLAIM_RELEASE_FAILURES = Counter(
    "session_summary_claim_release_failures_total",
    "Claims this replica could not delete when its pass ended (they lapse by themselves).",
)
CLAIMS_COLLECTED = Counter(
    "session_summary_claims_collected_total",
    "Abandoned per-session claims (their writer died) deleted by this replica's collector.",
)
ACTIVE_REPLICA = Gauge(
    "session_summary_active_replica",
    "1 if this replica is the active one (kopf peering), else 0.",
    ["replica"],
)
MODEL_TOKENS = Counter(
    "session_summary_model_tokens_total",
    "Tokens used by the model backend (prompt + completion), as reported by the endpoint.",
)

WRITTEN_BY_TRIGGER = Counter(
    "session_summary_written_total",
    "Summaries written by this replica, by what asked for them "
    "(sunset, sweep, refresh, manual, sunset-marker).",
    ["trigger"],
)
REFRESH_REQUESTS = Counter(
    "session_summary_refresh_requests_total",
    "Active sessions the sweep of this replica asked to refresh (grown past "
    "spec.sweep.refreshAfterTokens).",
)
PASS_TOKENS = Counter(
    "session_summary_pass_tokens_total",
    "Estimated tokens of written summarizations, by direction: in (memory text the passes "
    "read), out (text the passes added to the summary).",
    ["direction"],
)
COMPACTION_RATIO = Histogram(
    "session_summary_compaction_ratio",
    "Tokens in / tokens out of one written summarization (memory tokens per summary token).",
    buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000),
)

QUEUE_DEPTH = Gauge(
    "session_summary_queue_depth",
    "Summarizations waiting for a worker thread now, by pool (foreground: sunsets, markers, "
    "manual; background: sweep and refresh).",
    ["pool"],
)
IN_FLIGHT = Gauge(
    "session_summary_in_flight",
    "Summarization passes running on a worker thread now, by pool.",
    ["pool"],
)
BUILD_INFO = Gauge(
    "session_summary_build_info",
    "Always 1; its labels say which operator version runs, on which Python and kopf.",
    ["version", "python", "kopf"],
)
WAITS = Counter(
    "session_summary_claim_waits_total",
    "Looks at a session claim held by another writer (each is followed by a backed-off "
    'wait: docs/operations.md, "Waiting for another writer").',
)


RUNTIME_PARTS = Gauge(
    "session_summary_runtime_parts",
    "What the operator holds for SessionSummarizers now, by part (controller/runtime.py): "
    "summarizers, clients (Chroma), embedders, model_clients, semaphores, secret_values, "
    "store_queues.",
    ["part"],
)


def observe_summary(result: str, seconds: float) -> None:
    SUMMARIES.labels(result=result).inc()
    SUMMARIZE_SECONDS.observe(max(seconds, 0.0))


def observe_sweep(seconds: float, candidates: int) -> None:
    SWEEPS.inc()
    SWEEP_SECONDS.observe(max(seconds, 0.0))
    SWEEP_CANDIDATES.set(candidates)
    SWEEP_CANDIDATES_FOUND.inc(max(candidates, 0))


def observe_written(trigger: str, tokens_in: int, tokens_out: int, ratio: float | None) -> None:
    """A summary written: what asked for it, and its provenance figures."""
    WRITTEN_BY_TRIGGER.labels(trigger=trigger).inc()
    PASS_TOKENS.labels(direction="in").inc(max(tokens_in, 0))
    PASS_TOKENS.labels(direction="out").inc(max(tokens_out, 0))
    if ratio is not None:
        COMPACTION_RATIO.observe(ratio)


def observe_reconcile(rows: int, uncovered: int | None) -> None:
    """Rows walked this step; uncovered: what a walk that finished found (None: unfinished)."""
    RECONCILE_ROWS.inc(rows)
    if uncovered is not None:
        UNCOVERED_FOUND.inc(uncovered)
        UNCOVERED.set(uncovered)


def set_build_info() -> None:
    def version(dist: str) -> str:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return "unknown"

    BUILD_INFO.labels(
        version=version("session-summary-operator"),
        python=platform.python_version(),
        kopf=version("kopf"),
    ).set(1)
