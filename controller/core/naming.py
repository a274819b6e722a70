"""Deterministic Kubernetes object names from arbitrary session ids: a readable slug and a
hash of the exact id, so repeated sunsets of a session patch the same object."""

from __future__ import annotations

import hashlib
import re
import unicodedata

SLUG_MAX = 40
HASH_LEN = 10
_NOT_ALLOWED = re.compile(r"[^a-z0-9]+")
# The CRD's rule, self.trim().size() > 0: CEL's trim() removes Unicode White_Space, which
# is str.isspace() less the separators \x1c-\x1f.
_BLANK = re.compile(r"[^\S\x1c-\x1f]*")


def blank_session_id(session_id: str) -> bool:
    """Whether the CRD refuses this spec.sessionId as blank (memories never carry one)."""
    return _BLANK.fullmatch(session_id) is not None


def summary_object_name(session_id: str) -> str:
    """A DNS-1123 subdomain (and label: at most 63 chars) for the session's SessionSummary."""
    if not session_id:
        raise ValueError("session id must not be empty")
    ascii_id = unicodedata.normalize("NFKD", session_id).encode("ascii", "ignore").decode()
    slug = _NOT_ALLOWED.sub("-", ascii_id.lower()).strip("-")[:SLUG_MAX].strip("-") or "session"
    digest = hashlib.sha256(session_id.encode("utf-8")).hexdigest()[:HASH_LEN]
    return f"{slug}-{digest}"


def claim_name(collection_id: str, session_id: str) -> str:
    """The SessionClaim's, one per (summary collection, session): the slug, an exact-id hash."""
    digest = hashlib.sha256(f"{collection_id}\0{session_id}".encode()).hexdigest()
    return f"{summary_object_name(session_id).rsplit('-', 1)[0]}-{digest[:20]}"


def summary_row_id(session_id: str) -> str:
    return f"summary_{session_id}"
