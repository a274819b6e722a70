"""Sample agent sessions in the neo memory-core schema, for the demo and tests."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from controller.core.memories import render_interaction_document

Turn = tuple[str, str, str]  # prompt, thought, response


@dataclass(frozen=True)
class SampleSession:
    session_id: str
    agent: str
    model: str
    turns: tuple[Turn, ...]
    tools: tuple[str, ...] = ("read_file", "run_tests")


SAMPLE_SESSIONS: tuple[SampleSession, ...] = (
    SampleSession(
        "demo-login-bug-7f3a",
        "claude-code",
        "claude-sonnet",
        (
            (
                "Fix the login crash when the password field is empty.",
                "The handler dereferences a null password. We will validate input first.",
                "Added a guard in auth/login.py and a pytest case for the empty password.",
            ),
            (
                "Why did the crash only happen on Safari?",
                "Safari submits the form without the field when it is empty.",
                "Safari omits empty fields, so request.form has no password key.",
            ),
            (
                "No, don't return 500 there, return a 400 with a message instead.",
                "The user wants a client error. Decided to raise a ValidationError.",
                "Now the endpoint answers 400 'password is required'. Tests pass.",
            ),
        ),
    ),
    SampleSession(
        "demo-chroma-sweep-21c9",
        "codex",
        "gpt-5",
        (
            (
                "Add a periodic sweep that finds sessions without a summary in Chroma.",
                "Design choice: keep a watermark so the scan follows new memories only.",
                "Implemented the sweep with a timestamp watermark; it pages 2000 rows at a time.",
            ),
            (
                "Use kopf timers for the schedule, not a cron job.",
                "Going with a kopf timer on the SessionSummarizer resource.",
                "The sweep now runs from a kopf timer; interval comes from the spec.",
            ),
            (
                "What happens if two replicas sweep at once?",
                "We will create objects only if absent and patch only when needed.",
                "Sweeps are idempotent: create-if-absent, and in-flight objects are skipped.",
            ),
            (
                "Actually, skip sessions that are still active.",
                "Instead of summarizing everything, respect an idle threshold.",
                "Sessions whose newest memory is younger than idleSeconds are skipped.",
            ),
        ),
        tools=("edit_file", "run_tests", "kubectl"),
    ),
    SampleSession(
        "demo-docs-readme-9b10",
        "gemini-cli",
        "gemini-2.5-pro",
        (
            (
                "Write the README section on installing with helm.",
                "The docs should show helm install and the kind quickstart.",
                "Added docs/install.md with helm install and kind steps.",
            ),
            (
                "Document every value of the chart in a table.",
                "A configuration reference table generated from values.yaml.",
                "docs/configuration.md now lists every chart value with its default.",
            ),
        ),
        tools=("write_file",),
    ),
    SampleSession(
        "demo-refactor-store-44de",
        "claude-code",
        "claude-opus",
        (
            (
                "Refactor the Chroma access into one store adapter module.",
                "Extract a MemoryStore class; the interface hides HttpClient details.",
                "Moved all Chroma calls into controller/store.py behind MemoryStore.",
            ),
            (
                "Rename read_rows to session_rows and add type hints.",
                "Renaming keeps callers readable; mypy should pass.",
                "Renamed and typed; mypy is clean.",
            ),
        ),
        tools=("edit_file", "mypy"),
    ),
)


def memory_rows(
    session: SampleSession, start_ms: int, step_ms: int = 60_000
) -> list[tuple[str, str, dict[str, Any]]]:
    """(id, document, metadata) rows for one session, one agent-interaction per turn."""
    rows = []
    for i, (prompt, thought, response) in enumerate(session.turns):
        meta: dict[str, Any] = {
            "sessionId": session.session_id,
            "timestamp": start_ms + i * step_ms,
            "type": "agent-interaction",
            "prompt": prompt,
            "thought": thought,
            "response": response,
            "agent": session.agent,
            "model": session.model,
            "amountToolCalls": len(session.tools),
            "toolsUsed": json.dumps(list(session.tools)),
            "userId": "demo-user",
        }
        doc = render_interaction_document(prompt, thought, response)
        rows.append((f"{session.session_id}-{i:04d}", doc, meta))
    return rows
