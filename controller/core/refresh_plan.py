"""Refresh by size: which *active* sessions the sweep summarizes anyway. Pure.

A session still active is summarized when it grew past `refreshAfterTokens` estimated
tokens since its last summary, at most once per `minRefreshSeconds` (docs/summaries.md).
The sweep asks `may_refresh` first, so it measures the growth only of a session that may refresh.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from controller.core.sweep_plan import Candidate, SweepPlan


@dataclass(frozen=True)
class RefreshPolicy:
    after_tokens: int  # 0: refreshing is off
    min_interval_ms: int

    @property
    def enabled(self) -> bool:
        return self.after_tokens > 0


@dataclass(frozen=True)
class Growth:
    """What an active session added since its stored summary."""

    session_id: str
    newest_ms: int
    tokens: int  # estimated tokens of the summarizable memories after the summary's watermark
    summarized_at_ms: int | None  # when its summary was written; None: it has none


def may_refresh(summarized_at_ms: int | None, policy: RefreshPolicy, now_ms: int) -> bool:
    """False while the minimum interval since the last summary has not passed."""
    if not policy.enabled:
        return False
    return summarized_at_ms is None or now_ms - summarized_at_ms >= policy.min_interval_ms


def plan_refresh(
    plan: SweepPlan,
    growth: Iterable[Growth],
    policy: RefreshPolicy,
    *,
    now_ms: int,
    max_sessions: int,
) -> SweepPlan:
    """Moves the due sessions from still_active to refresh, most grown first, within what
    the per-sweep cap leaves after the idle stale sessions; the rest stay still_active (the
    sweep's watermark stays behind them, so a later sweep measures them again)."""
    due = sorted(
        (g for g in growth if g.session_id in plan.still_active and g.tokens > policy.after_tokens),
        key=lambda g: (-g.tokens, g.session_id),
    )
    room = max(0, max_sessions - len(plan.candidates))
    chosen = [g for g in due if may_refresh(g.summarized_at_ms, policy, now_ms)][:room]
    plan.refresh = [Candidate(g.session_id, g.newest_ms, "refresh") for g in chosen]
    picked = {g.session_id for g in chosen}
    plan.still_active = [sid for sid in plan.still_active if sid not in picked]
    return plan
