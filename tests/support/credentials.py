"""Generated credentials, one of each kind the redaction rules know (redaction.py),
each fresh per call, so a test never passes because a fixed example string was allowed."""

from __future__ import annotations

import base64
import json
import random
import string
import uuid

from hypothesis import assume
from hypothesis import strategies as st

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
    opaque = [_pick(rng, _ALNUM, rng.randint(12, 40)) for _ in range(3)]
    header = rng.choice(["Authorization: Bearer", "X-Chroma-Token:", "X-Api-Key:"])
    variable = rng.choice(["CHROMA_TOKEN", "HF_TOKEN", "VAULT_TOKEN"])
    flag = rng.choice(["--password ", "--token=", "--api-key ", "-p"])
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
        "credential-header": (opaque[0], f"Sent -H '{header} {opaque[0]}' to the store."),
        "credential-variable": (opaque[1], f"Ran {variable}={opaque[1]} make test there."),
        "credential-flag": (opaque[2], f"Loaded it with mysql -u app {flag}{opaque[2]} orders."),
        "private-key": (body.splitlines()[1], f"Deploy key:\n{private_key}\nthen restart."),
    }


# Generated shapes of the credentials masked for where they stand (redaction.CONTEXT_RULES):
# (the secret, a spelling with spaces as people write it, a compact one that is a single
# token, a code span's or a URL's reference, or None where the shape has none).
Shape = tuple[str, str, str | None]
# With a digit: a word of letters after `Authorization:` may be its scheme, and is then
# masked with the word after it (the safe side); and no digit-free placeholder contains it.
SECRET = st.text(_ALNUM + "._~+/=-", min_size=12, max_size=40).filter(
    lambda s: (
        len(set(s)) >= 4
        and any(c.isdigit() for c in s)
        and not s.startswith(("-", "/", "="))
        and not s.endswith("=")
    )
)
_WORD = st.text(string.ascii_lowercase, min_size=1, max_size=7)


def _cased(name: str, how: int) -> str:
    return (name.lower(), name.upper(), name.title())[how]


@st.composite
def header_shapes(draw: st.DrawFn) -> Shape:
    """Authorization with any scheme or none, or any *-Token/-Key/-Secret/-Password header."""
    secret = draw(SECRET)
    if draw(st.booleans()):
        name = draw(st.sampled_from(["Authorization", "Proxy-Authorization"]))
        scheme = draw(
            st.sampled_from(["Bearer ", "Basic ", "token ", "Digest ", ""])
            | _WORD.map(lambda w: w.title() + " ")
        )
    else:
        word = draw(st.sampled_from(["token", "key", "secret", "password", "api-key"]))
        words = [*draw(st.lists(_WORD, min_size=1, max_size=2)), word]
        name, scheme = "-".join(["x", *words] if draw(st.booleans()) else words), ""
    name = _cased(name, draw(st.integers(0, 2)))
    quote = draw(st.sampled_from(["'", '"']))
    spaced = f"curl -H {quote}{name}: {scheme}{secret}{quote} https://api.example.test/v1"
    return secret, spaced, None if scheme else f"{name}:{secret}"


@st.composite
def variable_shapes(draw: st.DrawFn) -> Shape:
    """An env-style NAME that says it holds a credential, with any value, quoted or not."""
    secret = draw(SECRET)
    word = draw(st.sampled_from(["TOKEN", "SECRET", "PASSWORD", "PASSWD", "API_KEY", "KEY"]))
    prefix = draw(st.lists(_WORD.map(str.upper), min_size=0 if word != "KEY" else 1, max_size=2))
    name = "_".join([*prefix, word])
    quote = draw(st.sampled_from(["", "'", '"']))
    spaced = draw(
        st.sampled_from(
            [
                f"export {name}={quote}{secret}{quote}",
                f"{name}={quote}{secret}{quote} make test",
                f'{{"{name}": "{secret}"}}',
                f"{name}: {quote}{secret}{quote}",
            ]
        )
    )
    return secret, spaced, f"{name}={secret}"


@st.composite
def flag_shapes(draw: st.DrawFn) -> Shape:
    """A command-line flag that passes a credential: --password x, --token=x, mysql's -pX."""
    secret = draw(SECRET)
    if draw(st.booleans()):
        tool = draw(st.sampled_from(["mysql", "mysqldump", "mysqladmin", "mariadb"]))
        return secret, f"{tool} -u app -h db.internal -p{secret} orders", None
    words = draw(st.lists(_WORD, max_size=2))
    word = draw(st.sampled_from(["password", "passwd", "token", "secret", "api-key", "apikey"]))
    flag = "--" + "-".join([*words, word])
    joined = draw(st.sampled_from(["=", " "]))
    return secret, f"deploy {flag}{joined}{secret} --verbose", f"{flag}={secret}"


def _random_value(seed: int, shape: str) -> str:
    """A credential as services issue them: random, so never a word (what the rule for keys
    in any case requires, unlike the ones above)."""
    rng = random.Random(seed)
    n = rng.randint(16, 40)
    if shape == "uuid":
        return str(uuid.UUID(int=rng.getrandbits(128)))
    if shape == "percent-encoded":  # `?token=ab%2Fcd`: a value a URL carries, encoded
        body = "".join(rng.choice([*_ALNUM, "%2F", "%2B", "%3D", "%40"]) for _ in range(n))
    else:
        body = _pick(
            rng, {"alnum": _ALNUM, "base64": _ALNUM + "+/", "url-safe": _ALNUM + "-_"}[shape], n
        )
    return _pick(rng, string.digits, 2) + body


RANDOM_SECRET = st.builds(
    _random_value,
    st.integers(0, 2**32),
    st.sampled_from(["alnum", "base64", "url-safe", "uuid", "percent-encoded"]),
)


@st.composite
def key_shapes(draw: st.DrawFn) -> Shape:
    """A key in any case and spelling that names a credential, in JSON, YAML, a query string,
    an env line or code: `"access_token": "x"`, `?token=x&`, `apiKey: x`, `client.Secret`."""
    secret = draw(RANDOM_SECRET)
    place = draw(
        st.sampled_from(["json", "toml", "ini", "yaml", "quoted", "query", "env", "ruby", "go"])
    )
    word = draw(
        st.sampled_from(["token", "passphrase", "auth", "credentials", "sig", "pat", "key"])
    )
    words = [*draw(st.lists(_WORD, max_size=2)), word]
    join = draw(st.sampled_from(["_", ""] if place == "go" else ["_", "-", ".", ""]))
    if join:
        name = join.join(_cased(w, draw(st.integers(0, 2))) for w in words)
    else:  # camelCase, first letter either case
        name = _cased(words[0], draw(st.sampled_from([0, 2]))) + "".join(map(str.title, words[1:]))
    # a name random enough to be a secret itself (`"ABCDEFG_bfghjk_credentials"`) is masked
    # as one, quoted: the base64 rule
    assume(len(set(name)) <= 16)
    spaced = {
        "json": f'{{"{name}": "{secret}", "expires_in": 3600}}',
        "toml": f'[auth]\n{name} = "{secret}"',
        "ini": f"[auth]\n{name} = {secret}\nregion = eu",
        "yaml": f"  {name}: {secret}\n  region: eu-west-1",
        "quoted": f"{name}: '{secret}'",
        "query": f"GET /items?{name}={secret}&page=2 gave 200",
        "env": f"export {name}={secret}",
        "ruby": f'{{"{name}" => "{secret}"}}',
        "go": f'{name} := "{secret}"',
    }[place]
    return secret, spaced, f"{'?' if name.lower() == word else ''}{name}={secret}"


@st.composite
def cookie_shapes(draw: st.DrawFn) -> Shape:
    """A session cookie: a Cookie header's pairs, a Set-Cookie's one, curl's --cookie."""
    secret, name = draw(SECRET), draw(st.sampled_from(["sid", "session", "JSESSIONID", "_gh_s"]))
    pair = f"{name}={secret}"
    cookie, set_cookie = (_cased(h, draw(st.integers(0, 2))) for h in ("cookie", "set-cookie"))
    before = draw(st.sampled_from(["", "theme=dark; "]))
    after = draw(st.sampled_from(["", "; lang=en"]))
    spaced = draw(
        st.sampled_from(
            [
                f"curl -H '{cookie}: {before}{pair}{after}' https://app.example.test/",
                f'{{"headers": {{"{cookie}": "{before}{pair}{after}"}}}}',
                f"{set_cookie}: {pair}; Path=/; HttpOnly\nContent-Length: 0",
                f"curl --cookie '{before}{pair}' https://app.example.test/",
                f"curl --cookie {pair} https://app.example.test/",
            ]
        )
    )
    return secret, spaced, None


CONTEXT_SHAPES = (
    header_shapes() | variable_shapes() | flag_shapes() | key_shapes() | cookie_shapes()
)


# References that look random and are not secrets: commits (short or full), UUIDs, digests
# (hex, `sha256:`, SRI), the ledger's own 24-hex digests; each with where it stands.
_HEX = "0123456789abcdef"
COMMIT = st.text(_HEX, min_size=7, max_size=40).filter(
    lambda s: any(c.isdigit() for c in s) and any(c.isalpha() for c in s) and len(set(s)) > 3
)
UUID = st.uuids().map(str) | st.uuids().map(lambda u: str(u).upper())
DIGEST = (
    st.text(_HEX, min_size=64, max_size=64).map(lambda h: f"sha256:{h}")
    | st.text(_HEX, min_size=64, max_size=64)
    | st.binary(min_size=32, max_size=64).map(
        lambda b: f"sha{len(b) * 8}-{base64.b64encode(b).decode()}"
    )
)
LEDGER_DIGESTS = st.lists(st.text(_HEX, min_size=24, max_size=24), min_size=1, max_size=4).map(
    json.dumps
)
REFERENCE_LIKE = COMMIT | UUID | DIGEST


@st.composite
def reference_sentences(draw: st.DrawFn) -> tuple[str, str]:
    """(the identifier, a sentence naming it: bare, quoted, in a code span or a JSON key)."""
    ref = draw(REFERENCE_LIKE)
    template = draw(
        st.sampled_from(
            [
                "Reverted {} in the billing module.",
                "Pinned the base image to '{}' after the review.",
                'The lockfile says "{}" for it.',
                "Checked out `{}` and reran it.",
                '{{"commit": "{}", "ok": true}}',
            ]
        )
    )
    return ref, template.format(ref)
