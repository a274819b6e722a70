"""Providers' tokens by their documented shape (redaction.PROVIDER_TOKENS), credentials on a
command line, in prose after `Bearer`, in a Go DSN or as a URL's user, and in every memory
metadata field a row, the ledger or a report copies: masked wherever they stand; a name that
only begins like a token, and a user that is a name, are kept."""

import json
import re
import string

from hypothesis import example, given, settings
from hypothesis import strategies as st

from controller.redaction import PassRedaction, Redaction

REDACTION = Redaction()
_ALNUM = string.ascii_letters + string.digits
_HEX = "0123456789abcdef"


def _chars(alphabet: str, n: int) -> st.SearchStrategy[str]:
    return st.text(alphabet, min_size=n, max_size=n)


def _joined(*parts: st.SearchStrategy[str] | str) -> st.SearchStrategy[str]:
    return st.tuples(*(st.just(p) if isinstance(p, str) else p for p in parts)).map("".join)


# (kind, a token of its provider's documented shape)
TOKENS = st.one_of(
    _joined("sk-ant-", st.sampled_from(["api03-", "admin01-"]), _chars(_ALNUM + "_-", 93), "AA"),
    _joined("github_pat_11", _chars(_ALNUM, 20), "_", _chars(_ALNUM, 59)),
    _joined("hf_", _chars(string.ascii_letters, 34)),
    _joined("AIza", _chars(_ALNUM + "_-", 35)),
    _joined("npm_", _chars(_ALNUM, 36)),
    _joined("glsa_", _chars(_ALNUM, 32), "_", _chars(_HEX, 8)),
    _joined(st.sampled_from(["shpat_", "shpss_", "shpca_", "shppa_"]), _chars(_HEX, 32)),
    _joined("dapi", _chars(_HEX, 32)),
    _joined("AGE-SECRET-KEY-1", _chars("QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L", 58)),
    _joined("dp.st.", st.sampled_from(["", "dev.", "prd."]), _chars(_ALNUM, 43)),
)
# Where a token stands in a memory's text.
PLACES = st.sampled_from(
    [
        "{}",
        "{} is the one",
        "use {}",
        "set it to '{}' first",
        'export VALUE="{}"',
        "value={}",
        "https://api.example.test/v1/items?key={}&page=2",
        "https://api.example.test/{}/items",
        '{{"value": "{}", "n": 1}}',
        "`{}`.",
        "(see {})",
    ]
)


@settings(max_examples=300, deadline=None)
@given(TOKENS, PLACES)
def test_a_providers_token_is_masked_wherever_it_stands(token: str, place: str) -> None:
    text = place.format(token)
    masked = REDACTION.text(text)
    assert token not in masked, masked
    assert "[redacted: " in masked


@settings(max_examples=100, deadline=None)
@given(_chars(string.digits, 18), _chars(_ALNUM + "_-", 68), st.sampled_from(["", "ptb.", "app"]))
def test_a_discord_webhooks_token_is_masked_its_url_kept(hook: str, token: str, how: str) -> None:
    host = "discordapp.com" if how == "app" else f"{how}discord.com"
    url = f"https://{host}/api/webhooks/{hook}/"
    masked = REDACTION.text(f"posted to {url}{token} ok")
    assert masked == f"posted to {url}[redacted: discord-webhook] ok"


_WORDS = st.lists(st.text(string.ascii_lowercase, min_size=1, max_size=8), min_size=1, max_size=3)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(
        [
            "hf_",
            "dapi",
            "dapi_",
            "npm_",
            "glsa_",
            "shpat_",
            "github_pat_",
            "sk-ant-api03-",
            "dp.st.",
        ]
    ),
    _WORDS,
    st.sampled_from(["call {}() here", "the {} helper", "`{}`", "import {} from x"]),
)
def test_a_name_that_only_begins_like_a_token_is_kept(
    prefix: str, words: list[str], place: str
) -> None:
    text = place.format(prefix + "_".join(words))
    assert REDACTION.text(text) == text


# A credential as issued: random (distinct characters), a letter after a digit (no name).
VALUES = (
    st.lists(st.sampled_from(_ALNUM), min_size=12, max_size=32, unique=True)
    .map("".join)
    .filter(lambda s: re.search(r"\d[A-Za-z]", s) is not None)
)
USERS = st.from_regex(r"[a-z]{2,10}(?:[-_.][a-z]{2,8})?", fullmatch=True)
# A command line, prose or a DSN carrying a credential ({v}) beside a user ({u}).
CONTEXTS = st.sampled_from(
    [
        'sqlcmd -S db.internal -U sa -P {v} -Q "SELECT 1"',
        "sqlcmd -S db -U {u} -P '{v}#!'",
        "redis-cli -h cache -p 6379 -a {v} ping",
        "redis-cli -a {v}",
        "I sent Bearer {v} to the API.",
        "then the bearer {v} worked",
        'dsn := "{u}:{v}@tcp(db:3306)/app?parseTime=true"',
        "DSN={u}:{v}@unix(/tmp/mysql.sock)/app",
        "git clone https://{v}@github.com/o/r.git",
        "pushed to https://{v}@gitlab.example.test/g/p",
    ]
)


@st.composite
def _htpasswd(draw: st.DrawFn) -> str:
    """htpasswd with -b (the password on the line) among its options in any order, split or
    joined (`-B -b`, `-bB`, `-c -b`, `-C 10`); with -n (to stdout) no file before the user."""
    flags = draw(st.permutations(["b", *draw(st.lists(st.sampled_from("ncmBdps25"), unique=True))]))
    cuts = draw(st.lists(st.booleans(), min_size=len(flags), max_size=len(flags)))
    groups = "".join(
        (" -" if cut or not i else "") + f
        for i, (f, cut) in enumerate(zip(flags, cuts, strict=True))
    )
    cost = draw(st.sampled_from(["", " -C 10", " -r 5"]))
    where = "" if "n" in flags else draw(st.sampled_from([" /etc/nginx/.htpasswd", " .htpasswd"]))
    after = draw(st.sampled_from(["", " && reload", " > out", "; echo ok"]))
    options = groups + cost if draw(st.booleans()) else cost + groups
    return f"htpasswd{options}{where} {{u}} {{v}}{after}"


CONTEXTS = CONTEXTS | _htpasswd()


@settings(max_examples=400, deadline=None)
@given(CONTEXTS, VALUES, USERS)
@example("htpasswd -B -b .htpasswd {u} {v}", "a1B2c3D4e5F6", "admin")
@example("htpasswd -c -b .htpasswd {u} {v}", "a1B2c3D4e5F6", "admin")
def test_a_credential_where_it_stands_is_masked(context: str, value: str, user: str) -> None:
    text = context.format(v=value, u=user)
    masked = REDACTION.text(text)
    assert value not in masked, masked
    assert user in masked or "{u}" not in context


@settings(max_examples=200, deadline=None)
@given(USERS)
def test_a_urls_user_a_bearer_word_and_a_port_are_kept(user: str) -> None:
    for text in (
        f"git clone ssh://{user}@github.com/o/r.git",
        f"https://{user}@example.test/x",
        "use a Bearer token, not Bearer auth",
        f"redis-cli -h cache -p 6379 ping; sqlcmd -S db -U {user} -Q x",
    ):
        assert REDACTION.text(text) == text


# Every memory metadata field a row, the ledger or `summaryctl ledger` copies (who wrote it,
# with what model and tools, whose it is, its unreadable time).
COPIED = ("agent", "agentIdentity", "model", "toolsUsed", "userId", "timestamp")


@settings(max_examples=200, deadline=None)
@given(st.one_of(TOKENS, _joined("ghp_", _chars(_ALNUM, 36))), st.sampled_from(COPIED))
def test_a_token_in_any_copied_metadata_field_is_masked(token: str, key: str) -> None:
    value = json.dumps([f"auth {token}"]) if key == "toolsUsed" else token
    meta = PassRedaction().meta({"sessionId": "s1", key: value})
    assert token not in json.dumps(meta) and "[redacted: " in meta[key]
    assert meta["sessionId"] == "s1"
