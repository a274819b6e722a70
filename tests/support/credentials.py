"""Generated credentials, one of each kind the redaction rules know (redaction.py),
each fresh per call, so a test never passes because a fixed example string was allowed."""

from __future__ import annotations

import base64
import json
import random
import string

_ALNUM = string.ascii_letters + string.digits


def _pick(rng: random.Random, chars: str, n: int) -> str:
    return "".join(rng.choice(chars) for _ in range(n))


def _b64url(data: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


def generated(seed: int) -> dict[str, tuple[str, str]]:
    """kind -> (the secret, a sentence carrying it)."""
    rng = random.Random(seed)
    aws = "AKIA" + _pick(rng, string.ascii_uppercase + string.digits, 16)
    github = "ghp_" + _pick(rng, _ALNUM, 36)
    slack = f"xoxb-{_pick(rng, string.digits, 12)}-{_pick(rng, string.digits, 13)}-" + _pick(
        rng, _ALNUM, 24
    )
    stripe = "sk_live_" + _pick(rng, _ALNUM, 24)
    jwt = ".".join(
        [
            _b64url({"alg": "HS256", "typ": "JWT"}),
            _b64url({"sub": _pick(rng, string.digits, 10)}),
            _pick(rng, _ALNUM + "-_", 43),
        ]
    )
    password = _pick(rng, _ALNUM, 18)
    api_key = "sk-proj-" + _pick(rng, _ALNUM, 40)
    hex_secret = _pick(rng, "0123456789abcdef", 40)
    body = "\n".join(_pick(rng, _ALNUM + "+/", 64) for _ in range(4))
    private_key = f"-----BEGIN RSA PRIVATE KEY-----\n{body}\n-----END RSA PRIVATE KEY-----"
    return {
        "aws-access-key": (aws, f"Uploaded with access key {aws} to the bucket."),
        "github-token": (github, f"Pushed using token {github} as the bot."),
        "slack-token": (slack, f"The alert bot posts with {slack} each night."),
        "stripe-access-key": (stripe, f"Charged the card through {stripe} in staging."),
        "json-web-token": (jwt, f"The session cookie was {jwt} when it failed."),
        "basic-auth-credentials": (
            password,
            f"Connected to postgres://admin:{password}@db.internal.example:5432/orders fine.",
        ),
        "secret-keyword": (api_key, f"Set OPENAI_API_KEY={api_key} in the shell first."),
        "hex-high-entropy-string": (hex_secret, f'The signing salt is "{hex_secret}" for now.'),
        "private-key": (body.splitlines()[1], f"Deploy key:\n{private_key}\nthen restart."),
    }
