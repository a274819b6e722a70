"""Endpoint base URLs (the model's and the embedding's): which are accepted. Pure."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

# An OpenAI-compatible endpoint: http(s), a host, no user:password@ (credentials belong in a
# Secret: a URL is printed in conditions and Events), no whitespace. The same pattern is in
# the CRD (model.baseUrl, embedding.baseUrl) and the chart's values schema.
ENDPOINT_URL_MAX = 2048
ENDPOINT_URL_PATTERN = r"^https?://[^\s/?#@]+([/?#]\S*)?$"
ENDPOINT_URL_MESSAGE = (
    "must be an http(s) URL with a host and no user:password@ (put the key in a Secret: "
    "apiKeySecretRef)"
)


def endpoint_url_problem(url: str) -> str | None:
    """Why an endpoint base URL is refused; None when accepted. Never repeats the URL."""
    if len(url) > ENDPOINT_URL_MAX:
        return f"must be at most {ENDPOINT_URL_MAX} characters"
    if not re.fullmatch(ENDPOINT_URL_PATTERN, url):
        return ENDPOINT_URL_MESSAGE
    try:
        parsed = urlsplit(url)
        parsed.port  # noqa: B018 - raises on a port out of range or an invalid IPv6 address
    except ValueError as exc:
        return f"has an invalid host or port ({exc})"
    if not parsed.hostname:
        return ENDPOINT_URL_MESSAGE
    return None


def checked_endpoint_url(value: str | None) -> str | None:
    if value is not None and (problem := endpoint_url_problem(value)):
        raise ValueError(f"baseUrl {problem}")
    return value
