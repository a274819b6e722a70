"""A model for tests that must see every fact kept: it answers each pass with the facts of
the memories it was sent, one item per "Fact <id>: ..." sentence, so a summary's document
holds a memory's fact exactly when a pass read that memory. Served by
tests/support/openai_server.py (responder=echo_facts), usually with a latency: a slow model.
"""

from __future__ import annotations

import re
from typing import Any

from controller.core.memories import render_interaction_document

_MEMORY = re.compile(r"<memory [^>]*>(.*?)</memory>", re.DOTALL)
_FACT = re.compile(r"Fact [\w.-]+: [^.<\n]*\.")


def fact(session_id: str, k: int) -> str:
    """The one fact of memory k of a session: findable verbatim in a summary's document."""
    return f"Fact {session_id}-{k}: the exporter of {session_id} listens on port {7000 + k}."


def fact_memory(session_id: str, k: int, timestamp_ms: int) -> tuple[str, str, dict[str, Any]]:
    """A memory carrying fact(session_id, k), padded to about 120 tokens: with a model's
    maxInputTokens of 256, each pass reads one memory."""
    prompt = f"{fact(session_id, k)} " + "Details of the change follow. " * 14
    response = "Done."
    meta = {
        "sessionId": session_id,
        "timestamp": timestamp_ms,
        "type": "agent-interaction",
        "prompt": prompt,
        "response": response,
    }
    doc = render_interaction_document(prompt, "", response)
    return (f"{session_id}-{k:04d}", doc, meta)


def echo_facts(body: Any) -> dict[str, Any]:
    """The reply to one chat request: every fact sentence of its <memory> blocks."""
    user = " ".join(str(m.get("content", "")) for m in body.get("messages", []))
    facts: list[str] = []
    for block in _MEMORY.findall(user):
        facts += [f for f in _FACT.findall(block) if f not in facts]
    return {
        "title": "Exporter ports",
        "category": "feature",
        "user_requests": facts,
        "questions_and_decisions": [],
        "design_choices": [],
        "corrections_and_feedback": [],
        "current_state": facts[-1:],
        "technologies": [],
    }
