"""Credentials are masked by kind, whatever surrounds them, and nothing else is touched."""

from __future__ import annotations

import itertools
import json
import re
import string
import unicodedata
from collections import Counter
from collections.abc import Callable
from unittest.mock import patch

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from controller.core.item_sources import item_key, rekeyed
from controller.core.memories import Memory
from controller.core.merge import PassUpdate, merge_pass
from controller.core.quoting import ERROR_LABEL, INSTRUCTION_LABEL, is_quoted
from controller.core.references import extract_references
from controller.core.summary import (
    ITEM_MAX,
    TITLE_MAX,
    LegacySummary,
    OtherWriter,
    StructuredSummary,
    SummaryItem,
    validate_summary,
)
from controller.redaction import DEFAULT_REDACTION, PassRedaction, Redaction
from tests.support.credentials import (
    CONTEXT_SHAPES,
    LEDGER_DIGESTS,
    RANDOM_SECRET,
    Shape,
    cookie_shapes,
    generated,
    key_shapes,
    reference_sentences,
)
from tests.support.passes import source_key
from tests.unit.test_redaction_tokens import TOKENS

KINDS = list(generated(0))
_MAILCHIMP = "0123456789abcdef0123456789abcdef-us12"  # detect-secrets' shape, a kind's too


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("kind", KINDS)
def test_each_detector_kind_is_masked_with_its_placeholder(kind: str, seed: int) -> None:
    secret, sentence = generated(seed)[kind]
    masked = DEFAULT_REDACTION.text(sentence)
    assert secret not in masked
    assert f"[redacted: {kind}]" in masked
    assert masked.split()[0] == sentence.split()[0]  # the words around it stay


def test_a_password_in_a_url_keeps_the_url_readable() -> None:
    secret, sentence = generated(1)["basic-auth-credentials"]
    masked = DEFAULT_REDACTION.text(sentence)
    assert secret not in masked
    assert "postgres://admin:[redacted: basic-auth-credentials]@db.internal.example" in masked


def test_a_reference_keeps_its_shape_with_the_secret_masked() -> None:
    secret, _ = generated(2)["github-token"]
    text = DEFAULT_REDACTION.text(f"cloned https://bot:{secret}@github.com/acme/api.git today")
    assert extract_references(text) == [
        "https://bot:[redacted: basic-auth-credentials]@github.com/acme/api.git"
    ]


@given(
    scheme=st.sampled_from(
        ["redis", "rediss", "postgres", "mysql", "amqp", "mongodb+srv", "https", "go-dsn"]
    ),
    user=st.text(string.ascii_lowercase + string.digits + "-._~@", max_size=8),
    password=st.text(string.ascii_letters + string.digits + "!$&'()*+,;=-._~%@:", min_size=8),
)
@example(scheme="redis", user="secret", password="00000000")  # a user named like a key
@example(scheme="https", user="token", password="Zq8xK2mP4vN7wR1t")
@example(scheme="postgres", user="admin@srv", password="00000000")  # Azure's user@server
@example(scheme="go-dsn", user="user", password="pa:ss0000")
@settings(max_examples=400, deadline=None)
def test_a_password_in_a_url_is_masked_whatever_the_user_and_its_characters(
    scheme: str, user: str, password: str
) -> None:
    """`redis://:x@cache` (no user), a password with the characters RFC 3986 allows in it
    (`!`, `$`, `+`, `=`, ...), or with an `@` URL parsers read up to the last one; a user
    named like a key (`secret`) or an address (`admin@srv`) masks no more than the password
    (the host stays). A Go DSN's too (`user:pa:ss@tcp(db:3306)/app`)."""
    url = f"{scheme}://{user}:{{}}@db.internal.example:5432/orders"
    if scheme == "go-dsn":
        url = f"{user}:{{}}@tcp(db.internal.example:5432)/orders"
    masked = DEFAULT_REDACTION.text(f"Connected to {url.format(password)} fine.")
    assert masked == f"Connected to {url.format('[redacted: basic-auth-credentials]')} fine."


@given(
    kind=st.sampled_from(["RSA ", "EC ", "OPENSSH ", "DSA ", "", "ENCRYPTED ", "PGP "]),
    body=st.lists(
        st.text(string.ascii_letters + string.digits + "+/", min_size=16, max_size=64),
        min_size=2,
        max_size=8,
    ),
    cut=st.integers(0, 8),
    before=st.sampled_from(["", "Deploy key:\n", "cat id_rsa printed\n\n"]),
    after=st.sampled_from(["", "\nthen restart.", "\n\nRestarted."]),
)
@settings(max_examples=400, deadline=None)
def test_a_private_key_is_masked_whole_and_its_tail_in_another_memory_too(
    kind: str, body: list[str], cut: int, before: str, after: str
) -> None:
    """Any PEM kind; a key split over two memories (a long output cut, `tail id_rsa`): each
    part masked on its own leaves no line of the key."""
    block = " BLOCK" if kind == "PGP " else ""
    begin, end = (
        f"-----BEGIN {kind}PRIVATE KEY{block}-----",
        f"-----END {kind}PRIVATE KEY{block}-----",
    )
    lines = [begin, *body, end]
    cut = min(cut, len(lines) - 1)
    for part in (lines, lines[:cut], lines[cut:]):
        masked = DEFAULT_REDACTION.text(before + "\n".join(part) + after)
        assert not any(line in masked for line in body), masked
    key = "\n".join(lines)
    assert DEFAULT_REDACTION.text(f"{before}{key}\n-----\nkept{key}{after}") == (
        f"{before}[redacted: private-key]\n-----\nkept[redacted: private-key]{after}"
    )


def test_a_putty_key_of_either_version_is_masked() -> None:
    for version in (2, 3):
        text = (
            f"PuTTY-User-Key-File-{version}: ssh-ed25519\nEncryption: none\nComment: k\n"
            "Public-Lines: 1\nAAAAC3NzaC1lZDI1NTE5AAAAIH\nPrivate-Lines: 1\n"
            "AAAAIGq9Zx0s3cr3tBodyLine1234\nPrivate-MAC: 3f1a2b\n"
        )
        assert "AAAAIGq9Zx0s3cr3tBodyLine1234" not in DEFAULT_REDACTION.text(text)


@pytest.mark.parametrize(
    "text",
    [
        "Decided: the exporter listens on port 7103; see docs/ledger.md and #36.",
        "the password: is wrong, fix controller/core/merge.py at commit 2a093a7",
        'run `pytest tests/unit -k "test_merge_keeps_items"` now',
        "The API key rotation happens monthly, the secret store holds them.",
        # names a credential without holding one
        "Set MAX_TOKENS=4096 and TOKEN_FILE=/run/secrets/token; read $HF_TOKEN from the env.",
        "docker login --password-stdin < f; ssh -p 2222 host; mkdir -p a/b; docker run -p 8080:80",
        "The gate reads the `X-Chroma-Token` header (or Authorization) and drops both.",
        "Token count, the key point and the password policy: all three stay in the summary.",
        "The session cookie: it expired; curl --cookie-jar cookies.txt kept none of them.",
        "token:\n  path: /var/run/secrets/token\nTOKEN:\n  secretKeyRef:\n    name: app",
        "cat notes.txt |\n  grep token: | sort\nSteps:\n  rotate the password yearly",
        '- name: LOG_LEVEL\n  value: debug\n{"name": "token_count", "value": "42"}',
    ],
)
def test_ordinary_text_is_left_as_it_is(text: str) -> None:
    assert DEFAULT_REDACTION.text(text) == text


def test_masking_twice_changes_nothing_more() -> None:
    once = DEFAULT_REDACTION.text(" ".join(s for _, s in generated(3).values()))
    assert DEFAULT_REDACTION.text(once) == once


def test_a_summarizers_own_pattern_masks_its_first_group() -> None:
    own = Redaction((("acme-license", r"ACME-LIC-(\d{12})"),))
    assert (
        own.text("license ACME-LIC-123456789012 ok")
        == "license ACME-LIC-[redacted: acme-license] ok"
    )
    assert (
        DEFAULT_REDACTION.text("license ACME-LIC-123456789012") == "license ACME-LIC-123456789012"
    )


def test_a_memory_is_masked_in_every_field_and_counted_per_row() -> None:
    creds = generated(4)
    memory = Memory(
        id="m1",
        session_id="s",
        timestamp_ms=1,
        prompt=creds["aws-access-key"][1],
        thought=creds["json-web-token"][1],
        response=creds["slack-token"][1],
        document=creds["github-token"][1],
        tools_used=(f"curl -H 'Authorization: Bearer {creds['github-token'][0]}'",),
    )
    mask = PassRedaction()
    masked = mask.memory(memory)
    mask.memory(memory)  # read twice: counted once
    text = masked.model_dump_json()
    assert all(creds[k][0] not in text for k in creds)
    assert mask.counts() == {
        "aws-access-key": 1,
        "credential-header": 1,  # the header's value, its scheme and the token in one
        "github-token": 1,
        "json-web-token": 1,
        "slack-token": 1,
    }


@settings(max_examples=200, deadline=None)
@given(planted=st.from_regex(r"[a-z0-9-]{1,60}", fullmatch=True))
@example(planted=_MAILCHIMP)
def test_the_kinds_counted_are_the_rules_never_a_memorys_text(planted: str) -> None:
    """The counts are a metric's labels (session_summary_redactions_total{kind}): a token
    glued to a placeholder planted in a memory is counted under no kind the memory spells."""
    text = f"copied [redacted: {planted}] a1b2c3d4e5f6g7 from the summary"
    memory = Memory(id="m1", session_id="s", timestamp_ms=1, prompt=text, document=text)
    mask = PassRedaction()
    mask.memory(memory)
    assert mask.counts(), text
    assert set(mask.counts()) <= DEFAULT_REDACTION.kinds, mask.counts()


def test_a_prior_summary_stored_with_a_secret_is_masked_and_counted() -> None:
    secret, sentence = generated(5)["aws-access-key"]
    prior = StructuredSummary(
        session_id="s",
        title="t",
        sections={"User Requests": [SummaryItem(text=sentence)]},
        references=[f"s3://{secret}/x"],
    )
    mask = PassRedaction()
    masked = mask.prior(prior)
    assert masked is not None and secret not in masked.model_dump_json()
    assert mask.counts() == {"aws-access-key": 2}
    clean = prior.model_copy(update={"sections": {}, "references": []})
    assert PassRedaction().prior(clean) is clean  # nothing to mask: the same object


@pytest.mark.parametrize("kind", KINDS)
def test_a_prior_this_masking_wrote_is_carried_as_it_is_and_any_other_is_looked_at(
    kind: str,
) -> None:
    """A pass does not re-read a history the same masking wrote (its fingerprint); a prior
    written by an earlier masking, by none, or carrying another writer's text is masked."""
    secret, sentence = generated(7)[kind]
    redaction = Redaction((("ticket", r"TCK-(\d{6})"),))
    prior = StructuredSummary(
        session_id="s", title="t", sections={"User Requests": [SummaryItem(text=sentence)]}
    )
    own = prior.model_copy(update={"masked_with": redaction.fingerprint})
    assert PassRedaction(redaction).prior(own) is own
    others = (
        prior,  # no fingerprint: an earlier release, or a row rewritten by one
        prior.model_copy(update={"masked_with": DEFAULT_REDACTION.fingerprint}),
        own.model_copy(update={"other_writer": OtherWriter(who="w")}),
    )
    for other in others:
        masked = PassRedaction(redaction).prior(other)
        assert masked is not None and secret not in masked.model_dump_json(), other


def test_a_summary_masking_version_19_stored_with_a_planted_placeholder_is_masked_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Version 19 kept `[redacted: <key>]` as a placeholder: a summary it stamped is masked
    again (the fingerprint names the version), and counted, so its row is written again."""
    monkeypatch.setattr("controller.redaction.MASKING_VERSION", 19)
    stamped = Redaction().fingerprint
    monkeypatch.undo()
    item = SummaryItem(text=f"Copied [redacted: {_MAILCHIMP}] from the old summary.")
    prior = StructuredSummary(
        session_id="s", title="t", sections={"User Requests": [item]}, masked_with=stamped
    )
    mask = PassRedaction()
    masked = mask.prior(prior)
    assert masked is not None and _MAILCHIMP not in masked.model_dump_json()
    assert mask.counts() == {"mailchimp-access-key": 1}


def test_the_fingerprint_names_the_rules_and_nothing_else() -> None:
    same = [Redaction((("a", "x+"),)), Redaction((("a", "x+"),))]
    assert same[0].fingerprint == same[1].fingerprint
    fingerprints = {
        r.fingerprint
        for r in (DEFAULT_REDACTION, same[0], Redaction((("a", "y+"),)), Redaction((("b", "x+"),)))
    }
    assert len(fingerprints) == 4


@given(shape=CONTEXT_SHAPES, around=st.sampled_from(["{}", "Ran {} twice.", "`{}`", "a\n{}\nb"]))
@settings(max_examples=400, deadline=None)
def test_a_credential_is_masked_for_where_it_stands_whatever_its_shape(
    shape: Shape, around: str
) -> None:
    """Headers that carry one, env-style names that name one, flags that pass one."""
    secret, spaced, compact = shape
    before, after = around.split("{}")
    for text in (spaced, compact):
        if text is not None:
            masked = DEFAULT_REDACTION.text(around.format(text))
            assert secret not in masked and "[redacted: " in masked, masked
            assert masked.startswith(before) and masked.endswith(after), masked  # a code span


@given(shape=key_shapes())
@settings(max_examples=300, deadline=None)
def test_a_key_in_any_case_that_names_a_credential_is_masked_wherever_it_is_written(
    shape: Shape,
) -> None:
    """`{"access_token": "x"}`, `?token=x&`, `apiKey: x`, `export gh_pat=x`, `?token=ab%2Fcd`:
    detect-secrets names no token, and the variable rule only UPPERCASE names. What stands
    around the value stays (the query's next parameter too)."""
    secret, spaced, compact = shape
    for text in (spaced, compact):
        assert compact is not None
        before, after = text.split(secret)
        masked = DEFAULT_REDACTION.text(text)
        assert re.fullmatch(
            rf"{re.escape(before)}\[redacted: [a-z0-9-]+\]{re.escape(after)}", masked
        )


@given(shape=cookie_shapes())
@settings(max_examples=400, deadline=None)
def test_a_session_cookie_is_masked_in_every_header_and_flag_that_sends_it(shape: Shape) -> None:
    """`Cookie: sid=x`, `Set-Cookie: sid=x; Path=/` (its attributes stay), `--cookie sid=x`."""
    secret, text, _ = shape
    masked = DEFAULT_REDACTION.text(text)
    assert secret not in masked and "[redacted: " in masked, masked
    if "et-cookie" in text.lower():
        assert masked.endswith("]; Path=/; HttpOnly\nContent-Length: 0"), masked


@given(
    secret=RANDOM_SECRET,
    name=st.sampled_from(
        ["DB_PASSWORD", "API_TOKEN", "access_token", "password", "clientSecret", "api_key"]
    ),
    shape=st.sampled_from(
        [
            "{n}:\n  {s}",
            "{n}: {b}\n  {s}\n  more: 1",
            "  {n}: {b}\n    {s}",
            "export {n}=\\\n  {s}",
            'export {n}="\\\n{s}"',
            "deploy --password \\\n  {s} --verbose",
            "curl -H 'X-Api-Key: \\\n  {s}'",
            "Authorization:\n  Bearer {s}",
        ]
    ),
    block=st.sampled_from(["|", "|-", "|+", ">", ">-", "|2", ">+2"]),
    indent=st.sampled_from(["", "    ", "- "]),
)
@settings(max_examples=400, deadline=None)
def test_a_value_on_the_line_after_its_name_is_masked(
    secret: str, name: str, shape: str, block: str, indent: str
) -> None:
    """`TOKEN:` and the value alone on the next line, a YAML block (`password: |`), a shell's
    line continuation (`export TOKEN=\\`): the value is the name's, as on one line."""
    text = indent + shape.format(n=name, s=secret, b=block)
    assert secret not in DEFAULT_REDACTION.text(text), text


@given(
    secret=RANDOM_SECRET,
    first=st.sampled_from(["%40", "%21", "@", "!", "-", "+", "~", ".", "*", "^", "?", "/"]),
    name=st.sampled_from(
        ["password", "DB_PASSWORD", "dbPassword", "passwd", "pwd", "client_secret", "Secret"]
    ),
    shape=st.sampled_from(
        ["{n}={v}", "{n}: {v}", "{n} = '{v}'", '{{"{n}": "{v}"}}', "GET /login?{n}={v}&next=/"]
    ),
)
@settings(max_examples=400, deadline=None)
def test_a_password_that_begins_with_a_symbol_is_masked(
    secret: str, first: str, name: str, shape: str
) -> None:
    """`password=%40...` (an `@` percent-encoded), `secret: @...`, `pwd = '!...'`:
    detect-secrets' keyword rules take a value that begins with a word character only."""
    text = shape.format(n=name, v=first + secret)
    assert secret not in DEFAULT_REDACTION.text(text), text


@given(
    secret=RANDOM_SECRET,
    name=st.sampled_from(
        ["API_TOKEN", "DB_PASSWORD", "GITHUB_TOKEN", "access_token", "clientSecret", "password"]
    ),
    shape=st.sampled_from(
        [
            "env:\n- name: {n}\n  value: {s}",
            '  - name: {n}\n    value: "{s}"',
            "- name: '{n}'\n  value: '{s}'",
            '{{"name": "{n}", "value": "{s}"}}',
            '"env": [{{"name": "{n}",\n  "value": "{s}"}}]',
        ]
    ),
)
@settings(max_examples=300, deadline=None)
def test_a_credential_in_a_name_value_pair_is_masked(secret: str, name: str, shape: str) -> None:
    """A container's env as a manifest or the API writes it: the name says what the value is."""
    text = shape.format(n=name, s=secret)
    assert secret not in DEFAULT_REDACTION.text(text), text


# Ordinary uses of the words that name credentials: counts, settings, names, prose.
_VALUES = ["configurable", "authentication", "Punctuation", "rotate", "Enter", "include", "none",
           "MAX_TOKENS", "created_at", "orders.created", "ctrl+shift+k", "len", "4096", "true",
           "reports/q3.csv", "/run/secrets/kubernetes.io/token", "the next step",
           "uploads/2024/01/a8f3e2b1c9d4.png", "backups/db-2024-11-30.sql.gz"]  # fmt: skip
_PROSE = ["the {w} count is {v}", "the {w} point: {v}", "{w} policy: {v}", "max_{w}s={v}",
          "{w}_count: {v}", "{w}s: {v}", "{w} {v}", "sort(key={v})", '{{"key": "{v}"}}',
          "key: {v}", "s3 ls returned Key: {v}"]  # fmt: skip
_KEYS = ["{w}: {v}", "{w}={v}", '"{w}": "{v}"', "hot{W}: {v}", "{w}_limit: {v}"]


@given(
    word=st.sampled_from(["token", "key", "auth", "credentials", "passphrase", "sig", "pat"]),
    cased=st.sampled_from([str.lower, str.title]),  # an UPPERCASE name holds one: any value
    template=st.sampled_from(_PROSE + _KEYS),
    value=st.sampled_from(_VALUES),
)
@settings(max_examples=400, deadline=None)
def test_a_word_naming_a_credential_in_ordinary_text_is_left_as_it_is(
    word: str, cased: Callable[[str], str], template: str, value: str
) -> None:
    """`token count`, `the key point`, `token: configurable`: a key in lowercase says less
    than an UPPERCASE variable, so its value is masked only when random."""
    w = cased(word)
    text = template.format(w=w, W=w.title(), v=value)
    assert DEFAULT_REDACTION.text(text) == text


@given(
    word=st.sampled_from(["password", "PASSWORD", "Password", "secret", "SECRET", "api_key",
                          "apiKey", "passwd", "pwd", "private_key", "db_pass"]),
    suffix=st.sampled_from(["_count", "_policy", "_name", "_header", "_min_length", "Count",
                            "_file", "_backend", "_rotation_days", "_ref"]),
    shape=st.sampled_from(["{k}: {v}", "{k}={v}", "{k} = {v}", "[db]\n{k} = {v}\nport = 5432"]),
    value=st.sampled_from(["configurable", "production", "authorization", "vault_kv",
                           "MAX_TOKENS", "strict-mode", "/run/secrets/db", "reports/q3.csv"]),
    secret=RANDOM_SECRET,
)  # fmt: skip
@example(word="PASSWORD", suffix="_count", shape="{k}: {v}", value="configurable", secret="")
@settings(max_examples=400, deadline=None)
def test_a_key_that_names_more_than_a_credential_keeps_a_plain_value(
    word: str, suffix: str, shape: str, value: str, secret: str
) -> None:
    """`PASSWORD_count: configurable`, `secret_name: production`: a key that goes on past the
    credential word names a setting about it, so a word, name or path there is kept (as
    under `token_count:`); a random value there, or any one under the word alone, is masked."""
    text = shape.format(k=word + suffix, v=value)
    assert DEFAULT_REDACTION.text(text) == text
    if secret:
        assert secret not in DEFAULT_REDACTION.text(shape.format(k=word + suffix, v=secret))
    if value.isalpha():  # `password: configurable`: a passphrase may be a word
        assert value not in DEFAULT_REDACTION.text(shape.format(k=word, v=value))


# Characters a summary shows as one space (extractive.sentences, str.split): an agent's text
# copied from a web page or a terminal carries them where a space would be.
ODD_SPACES = st.sampled_from(
    ["\xa0", "\u2003", "\u202f", "\u3000", "\x0b", "\x0c", "\x1f", "\x85", "\u2028", "\u200b",
     "\ufeff", "\t", "\r", "\x00"]
)  # fmt: skip


@given(
    shape=CONTEXT_SHAPES,
    kind=st.sampled_from(KINDS),
    seed=st.integers(0, 20),
    spaces=st.lists(ODD_SPACES, min_size=1, max_size=4),
)
@settings(max_examples=400, deadline=None)
def test_a_credential_spaced_with_any_blank_character_is_masked_as_with_a_space(
    shape: Shape, kind: str, seed: int, spaces: list[str]
) -> None:
    """`Authorization:\xa0Bearer x` is stored as `Authorization: Bearer x` (a summary shows
    each such character as a space): every space of the text swapped for one of them, the
    same secrets are masked at the same places (with a zero-width space, which a reader of
    the memory does not see, a secret may also take the word glued to it)."""
    for secret, plain in (shape[:2], generated(seed)[kind]):
        odd = iter(itertools.cycle(spaces))
        text = "".join(next(odd) if c == " " else c for c in plain)
        assert secret not in DEFAULT_REDACTION.text(text), repr(text)
        if not {"\u200b", "\ufeff"} & set(spaces):
            assert DEFAULT_REDACTION.spans(text) == DEFAULT_REDACTION.spans(plain), repr(text)


@given(
    shape=CONTEXT_SHAPES,
    kind=st.sampled_from(KINDS),
    seed=st.integers(0, 20),
    singles=st.lists(st.sampled_from("‘’‚"), min_size=1, max_size=3),
    doubles=st.lists(st.sampled_from("“”„"), min_size=1, max_size=3),
)
@settings(max_examples=400, deadline=None)
def test_a_credential_in_typographic_quotes_is_masked_as_in_plain_ones(
    shape: Shape, kind: str, seed: int, singles: list[str], doubles: list[str]
) -> None:
    """`password = ’x’` is stored as `password = 'x'` (the extractive summary straightens
    ’, a quoted item “ and ”): every quote of the text swapped for a typographic one, the
    same secrets are masked at the same places."""
    for secret, plain in (shape[:2], generated(seed)[kind]):
        one, two = itertools.cycle(singles), itertools.cycle(doubles)
        quotes = {"'": one, '"': two}
        text = "".join(next(quotes[c]) if c in quotes else c for c in plain)
        assert secret not in DEFAULT_REDACTION.text(text), text
        assert DEFAULT_REDACTION.spans(text) == DEFAULT_REDACTION.spans(plain), text


@given(
    shape=CONTEXT_SHAPES,
    kind=st.sampled_from(KINDS),
    seed=st.integers(0, 20),
    depth=st.integers(1, 3),
    quote=st.sampled_from(['"', "'"]),
    line=st.sampled_from(["", "[auth]\n", "ran:\r\n", "a\tb\t", "x\n\n"]),
)
@settings(max_examples=400, deadline=None)
def test_a_credential_in_json_text_is_masked_at_any_depth(
    shape: Shape, kind: str, seed: int, depth: int, quote: str, line: str
) -> None:
    """Agents' memories carry commands as JSON (a tool call's arguments, a logged request):
    `{"cmd": "curl -H \\"X-Api-Key: \\"x\\"\\""}`. A value quoted there is masked whole; a
    line break or tab JSON escapes (`"[auth]\\ntoken = x"`) ends a line as it does."""
    for secret, plain in (shape[:2], generated(seed)[kind]):
        text = line + plain.replace('"', quote)
        for _ in range(depth):
            text = json.dumps({"cmd": text})
        masked = DEFAULT_REDACTION.text(text)
        assert secret not in masked and json.dumps(secret)[1:-1] not in masked, text


@given(found=reference_sentences())
@settings(max_examples=400, deadline=None)
def test_an_identifier_that_looks_random_is_a_reference_not_a_secret(
    found: tuple[str, str],
) -> None:
    """Commits (short, full, quoted or not), UUIDs, digests: kept verbatim."""
    _, sentence = found
    assert DEFAULT_REDACTION.text(sentence) == sentence


@given(digests=LEDGER_DIGESTS)
def test_the_ledgers_own_digest_lists_are_not_secrets(digests: str) -> None:
    assert DEFAULT_REDACTION.spans(digests) == []


@given(
    kind=st.sampled_from(KINDS),
    seed=st.integers(0, 20),
    item_room=st.integers(0, 40),
    title_room=st.integers(0, 40),
    label=st.sampled_from(["", ERROR_LABEL, INSTRUCTION_LABEL]),
    legacy=st.booleans(),
)
@settings(max_examples=300, deadline=None)
def test_a_prior_masked_at_its_length_bounds_stays_a_summary_a_pass_can_keep(
    kind: str, seed: int, item_room: int, title_room: int, label: str, legacy: bool
) -> None:
    """A placeholder is longer than many secrets: an item or a title stored close to its
    bound must come out of the masking within it (a quoted item still quoted), so the next
    pass can carry it instead of failing at every retry."""
    secret, sentence = generated(seed)[kind]

    def near(bound: int, room: int, wrap: str = "") -> str:
        """The sentence padded (or cut) to `room` characters under `bound`."""
        size = bound - room - (len(wrap) + 2 if wrap else 0)
        text = f"{sentence} {'x' * bound}"[:size].strip()
        return f"{wrap}“{text}”" if wrap else text

    title = near(TITLE_MAX, title_room)
    if legacy:
        prior: StructuredSummary | LegacySummary = LegacySummary(
            session_id="s", text=near(4000, 0), title=title
        )
    else:
        item = SummaryItem(text=near(ITEM_MAX, item_room, label))
        assert is_quoted(item.text) == bool(label)
        prior = StructuredSummary(
            session_id="s",
            title=title,
            sections={"User Requests": [item]},
            item_sources=[f"{item_key('User Requests', item.text)}:{source_key('m1')}"],
        )
    masked = rekeyed(prior, PassRedaction().prior(prior))
    assert masked is not None and secret not in masked.model_dump_json()
    assert masked.title is not None and len(masked.title) <= TITLE_MAX
    if isinstance(masked, StructuredSummary):
        (kept,) = masked.sections["User Requests"]
        assert len(kept.text) <= ITEM_MAX and is_quoted(kept.text) == bool(label)
        # its memory is still named by the text it has now: erasure can still find it
        assert masked.item_sources == [f"{item_key('User Requests', kept.text)}:{source_key('m1')}"]
    update = PassUpdate(
        user_requests=["Ship the exporter."],
        questions_and_decisions=[],
        design_choices=[],
        corrections_and_feedback=[],
        current_state=None,
    )
    validate_summary(merge_pass(masked, update, [], session_id="s"), masked)


_GLUED_SECRETS = st.text(
    string.ascii_letters + string.digits + "-_+/=", min_size=8, max_size=40
).filter(lambda v: any(c.isdigit() for c in v) and any(c.isalpha() for c in v))


@settings(max_examples=500, deadline=None)
@given(
    secret=_GLUED_SECRETS,
    before=st.sampled_from(
        ["password: ", "TOKEN=", "", "the key is ", "api_key: abc1234567", "Authorization: Bearer "]
    ),
    kind=st.sampled_from(["x", "secret-keyword", "url-password"]),
    after=st.sampled_from(["", " and more", "\nnext line", ".", ", then"]),
    space=st.sampled_from(["", " ", "  ", "\t", " \t"]),
)
@example(secret="xZq8vK2mP9wL4xN7r", before="password: ", kind="x", after="", space="")
@example(secret="sk-abcdef1234567890", before="TOKEN=", kind="x", after="", space=" ")
@example(secret="00000A_=", before="password: ", kind="x", after="", space="")  # `A_=` reads `A=`
def test_a_placeholder_does_not_shield_a_secret_glued_to_it(
    secret: str, before: str, kind: str, after: str, space: str
) -> None:
    """Text already holding a placeholder (copied from a summary, or planted) is masked like
    any other: a value glued to the placeholder, or after it and a space
    (`TOKEN=[redacted: x] sk-...`), is the rest of that value, not a word."""
    text = f"{before}[redacted: {kind}]{space}{secret}{after}"
    masked = DEFAULT_REDACTION.text(text)
    assert secret not in masked, masked
    assert DEFAULT_REDACTION.text(masked) == masked  # masking masked text changes nothing


@given(
    suffix=st.sampled_from(["s", ".txt", "'s", "Configuration", "_config_file", "-like", ")"]),
    kind=st.sampled_from(["x", "secret-keyword"]),
)
def test_words_after_a_placeholder_stay(suffix: str, kind: str) -> None:
    text = f"see [redacted: {kind}]{suffix} and [redacted: {kind}] configurable"
    assert DEFAULT_REDACTION.text(text) == text


# A password people choose: a word with a digit or a symbol (not only at its end, where it
# may end the sentence), one that begins with a symbol, a PIN; or a token services issue.
_CHOSEN = st.builds(
    lambda lead, word, digits, tail: f"{lead}{word}{digits}{tail}",
    st.sampled_from(["", "!", "@", "#", "%", "&", "*", "~", "^", "+"]),
    st.sampled_from(["hunter", "Summer", "admin", "letmein", "abc", "P@ss", "Tr0ub4dor", "s3cr"]),
    st.text(string.digits, max_size=4),
    st.sampled_from(["", "!", "?", "#", "$", "&", "*", "!!"]),
).filter(lambda v: len(v.rstrip("!?")) >= 4 and any(not c.isalpha() for c in v.rstrip("!?")))
SAID_SECRETS = (
    _CHOSEN
    | st.text(string.digits, min_size=6, max_size=8)
    | RANDOM_SECRET
    | st.text(string.ascii_letters + string.digits, min_size=20, max_size=40).map(
        lambda s: f"sk-{s}9"
    )
)
CREDENTIAL_NAMES = ["password", "Password", "passwd", "pwd", "passphrase", "secret", "token",
                    "API key", "api-key", "access key", "credentials", "db_password",
                    "admin password", "SSH key", "client secret"]  # fmt: skip


@given(
    secret=SAID_SECRETS,
    name=st.sampled_from(CREDENTIAL_NAMES),
    sentence=st.sampled_from(
        [
            "the {n} is {v}",
            "my {n} was {v}",
            "The {n} for the prod db is {v}",
            "the {n} on staging was set to {v}",
            "use {n} {v}",
            "{n} {v}",
            "set the {n} to {v}",
            "the {n} was changed to {v}",
            "the {n} is now {v}",
            "the {n} is: {v}",
            "the {n} is\n{v}",
            "{v} is the {n}",
            "I used {v} as my new {n}",
            "({v} was the {n})",
        ]
    ),
    quote=st.sampled_from(["", "'", "`", '"']),
    end=st.sampled_from(["", ".", "!", ", then it worked.", " and it worked."]),
)
@example(secret="hunter2!", name="password", sentence="the {n} is {v}", quote="", end="")
@settings(max_examples=300, deadline=None)
def test_a_credential_said_in_a_sentence_is_masked(
    secret: str, name: str, sentence: str, quote: str, end: str
) -> None:
    """`the password is hunter2!`, `my api key is sk-...`, `use passphrase X`, `X is the
    token`: a word naming a credential, what says it is (or nothing), and a value that looks
    like one (a letter and a digit or symbol, or a PIN), in the orders an agent writes it."""
    text = sentence.format(n=name, v=f"{quote}{secret}{quote}") + end
    masked = DEFAULT_REDACTION.text(text)
    assert secret.rstrip("!?") not in masked, masked
    assert DEFAULT_REDACTION.text(masked) == masked


@given(
    secret=SAID_SECRETS,
    name=st.sampled_from(
        [
            "password",
            "passwd",
            "pwd",
            "secret",
            "passphrase",
            "db_password",
            "clientSecret",
            "token",
            "api_key",
        ]
    ),
    shape=st.sampled_from(
        [
            "{n}: {v}",
            "{n}={v}",
            "{n} = {v}",
            '"{n}": "{v}"',
            "{n} = '{v}'",
            "{n}: '{v}'",
            "[db]\n{n} = {v}\nport = 5432",
            "db:\n  {n}: {v}\n  port: 5432",
            '{n} := "{v}"',
            "GET /login?{n}={v}&next=/",
            "<{n}>{v}</{n}>",
            '<user name="app" {n}="{v}"/>',
        ]
    ),
    symbol=st.sampled_from(["!", "@", "#", "%", "&", "*", "~", "^", "+", "?", "="]),
)
@example(secret="abc", name="password", shape="{n}: {v}", symbol="!")
@settings(max_examples=500, deadline=None)
def test_a_low_entropy_password_that_begins_with_a_symbol_is_masked(
    secret: str, name: str, shape: str, symbol: str
) -> None:
    """`password: !abc`: detect-secrets takes a value that begins with a word character only,
    and the rules for keys in any case a random one only. JSON, TOML/INI, YAML, .env, Go,
    a query string."""
    assume(symbol != "+" or not secret.isdigit())  # `+000000`: a number
    value = symbol + secret
    text = shape.format(n=name, v=value)
    masked = DEFAULT_REDACTION.text(text)
    assert value not in masked and secret not in masked, masked


_SAID_PROSE = ["wrong", "expired", "invalid", "required", "rotated", "correct", "not set",
               "stored in vault", "isn't set", "the same", "self-service", "out of date",
               "user's", "too short", "Bearer", "JWT", "MAX_TOKENS", "created_at",
               "db-creds-v2", "reports/q3.csv", "$GITHUB_TOKEN", "${DB_PASSWORD}",
               "alice@example.com", "https://vault.example/ui", "5", "4096", "2024-11-30",
               "10:30", "v2", "1.5", "wrong!", "missing?", "(see vault)", "-", "***",
               "[redacted: secret-keyword]", "/run/secrets/db"]  # fmt: skip


@given(
    name=st.sampled_from([n for n in CREDENTIAL_NAMES if "-" not in n]),  # a header: any value
    value=st.sampled_from(_SAID_PROSE),
    sentence=st.sampled_from(
        [
            "the {n} is {v}",
            "The {n} was {v}.",
            "the {n} count is {v}",
            "{n}: {v}",  # an assignment (detect-secrets' keywords): only this rule is checked
            "the {n} policy requires {v}",
            "the {n} for staging is {v}",
            "rotate the {n} next week, it is {v}",
            "{v} is the {n} limit",
            "the {n} {v}",
            '"{n}": "{v}"',
            "the {n} is '{v}'",
        ]
    ),
)
@example(name="password", value="wrong", sentence="the {n} is {v}")
@example(name="token", value="the next step", sentence='"{n}": "{v}"')
@settings(max_examples=500, deadline=None)
def test_ordinary_prose_about_a_credential_is_left_as_it_is(
    name: str, value: str, sentence: str
) -> None:
    """`the password is wrong`, `the token count is 5`, `rotate the key next week`: a word,
    a name, a path, a number, a reference to a variable or an address is not a credential."""
    text = sentence.format(n=name, v=value)
    masked = DEFAULT_REDACTION.text(text)
    assert "[redacted: credential-phrase]" not in masked, masked
    assert masked == text or ":" in sentence, masked


# A command-line option that passes no credential: a name with no credential's word in it.
_OPTION = st.from_regex(
    r"--?[a-z][a-z0-9]{0,9}(?:-[a-z0-9]{1,8})?(?:=[a-z0-9.]{1,10})?", fullmatch=True
)
_PASSES_ONE = re.compile(r"pass|pwd|secret|token|key|auth|cookie|cred|sig|pat")


@given(
    command=st.sampled_from(
        [
            "passwd",
            "sudo passwd",
            "openssl passwd",
            "vault token",
            "gh secret",
            "npm token",
            "kubectl create secret",
            "gpg --passphrase",
            "my-password",
            "op read password",
        ]
    ),
    options=st.lists(_OPTION.filter(lambda o: not _PASSES_ONE.search(o)), min_size=1, max_size=3),
    after=st.sampled_from(["", " alice", " lookup", " create", " | tee out.txt"]),
)
@example(command="passwd", options=["--stdin"], after=" alice")
@settings(max_examples=500, deadline=None)
def test_an_option_after_a_command_named_for_a_credential_is_left_as_it_is(
    command: str, options: list[str], after: str
) -> None:
    """`passwd --stdin`, `vault token -format=json`, `gh secret --help`: an option is not the
    credential a word like `passwd` may name, as after `--password` (mysql's `-pX` aside)."""
    text = f"echo x | {command} {' '.join(options)}{after}"
    assert DEFAULT_REDACTION.text(text) == text


_IDENT = st.from_regex(r"[a-z_][a-z_]{0,11}", fullmatch=True)  # code names are words
_KEY = st.from_regex(r"[a-z]{2,8}(?:_[a-z]{2,8})?", fullmatch=True)  # a key named in code
_CODE_READING = st.one_of(
    st.tuples(_IDENT, _KEY).map(lambda p: f'{p[0]}["{p[1]}"]'),
    st.tuples(_IDENT, _KEY).map(lambda p: f"{p[0]}['{p[1]}']"),
    st.tuples(_IDENT, _IDENT, _KEY).map(lambda p: f'{p[0]}.{p[1]}("{p[2]}")'),
    _IDENT.map(lambda i: f"{i}()"),
    st.tuples(_IDENT, st.integers(0, 99)).map(lambda p: f"{p[0]}[{p[1]}]"),
    st.sampled_from(['os.environ["API_KEY"]', 'os.getenv("TOKEN")', "getpass.getpass()"]),
)


@given(
    name=st.sampled_from(["token", "password", "api_key", "secret", "passphrase", "db_pass"]),
    code=_CODE_READING,
    spacing=st.sampled_from([" = ", "=", ": ", " := "]),
)
@example(name="token", code='session["token"]', spacing=" = ")
@settings(max_examples=300, deadline=None)
def test_code_that_reads_a_credential_is_left_as_it_is(name: str, code: str, spacing: str) -> None:
    """`token = session["token"]`, `password = getpass()`: the code that reads a credential
    names where it is, not what it is; a summary quoting code keeps it (a legacy summary's
    traceback did not: test_nothing_lost)."""
    text = f"    {name}{spacing}{code}"
    masked = DEFAULT_REDACTION.text(text)
    assert "[redacted: credential-phrase]" not in masked, masked


@pytest.mark.parametrize(
    "line",
    [
        'token = session["token"]',
        "password = getpass()",
        'api_key = os.environ.get("API_KEY")',
        "secret = args[0]",
        'db_pass = config["db_pass"]',
    ],
)
def test_code_that_reads_a_credential_is_kept_whole(line: str) -> None:
    assert DEFAULT_REDACTION.text(line) == line


# Code that reads a value: a name (dotted or not) with a call or a subscript, and any attribute,
# call or subscript after it (`get_token(x)`, `self.tokens[i]`, `os.environ["X"].strip()`).
# The name has a `_` or a dot (`tokens[i]`, a bare name reading a name, is an example below).
_CODE_NAME = st.from_regex(
    r"(?:[a-z]{0,4}_[a-z_]{0,4}|[a-z]{1,6}\.[a-z_][a-z0-9_]{0,8})(?:\.[a-z_][a-z0-9_]{0,8}){0,2}",
    fullmatch=True,
)
_CODE_ARG = st.recursive(  # and code in it: `decrypt(b64decode(env["X"]))`
    st.sampled_from(["x", "i", "0", "10", "-1", '"X"', "'api_key'", "a, 2", "k=v", "1:3"]),
    lambda inner: st.builds(
        lambda name, arg, pair: f"{name}{pair[0]}{arg}{pair[1]}",
        _IDENT,
        inner,
        st.sampled_from(["()", "[]"]),
    ),
    max_leaves=3,
)
_CALL = st.one_of(_CODE_ARG.map("({})".format), _CODE_ARG.map("[{}]".format))
_CODE_EXPRESSION = st.builds(
    lambda name, call, rest: name + call + "".join(rest),
    _CODE_NAME,
    _CALL,
    st.lists(_CALL | _IDENT.map(".{}".format), max_size=2),
)
# A secret written as a value: a quoted string, or a bare random token (a letter first too).
_LITERAL_SECRET = st.one_of(
    st.tuples(SAID_SECRETS, st.sampled_from(['"', "'"])).map(lambda p: f"{p[1]}{p[0]}{p[1]}"),
    RANDOM_SECRET,
    st.text(string.ascii_letters + string.digits, min_size=24, max_size=40).filter(
        lambda s: s[0].isalpha() and any(c.isdigit() for c in s) and any(c.isupper() for c in s)
    ),
)


@given(
    name=st.sampled_from(["token", "password", "api_key", "secret", "db_pass", "API_TOKEN"]),
    spacing=st.sampled_from([" = ", "=", ": ", " := "]),
    code=_CODE_EXPRESSION,
    literal=_LITERAL_SECRET,
)
@example(name="token", spacing=" = ", code="h_abcdefg[10]", literal='"hunter2!"')
@example(name="token", spacing=" = ", code="get_token(x)", literal='"hunter2!"')
@example(name="token", spacing=" = ", code="self.tokens[i]", literal='"hunter2!"')
@example(name="password", spacing=": ", code="tokens[i]", literal='"hunter2!"')
@example(name="token", spacing=" = ", code="get_token(g(h(x)))", literal='"hunter2!"')
@settings(max_examples=500, deadline=None)
def test_code_that_reads_a_value_is_kept_and_a_literal_is_masked(
    name: str, spacing: str, code: str, literal: str
) -> None:
    """`token = get_token(x)`, `token = self.tokens[i]`: a call or a subscript reads a value,
    it is not one, and is kept whole; `token = "hunter2!"` or a random token there is masked."""
    line = f"    {name}{spacing}{code}"
    assert DEFAULT_REDACTION.text(line) == line
    masked = DEFAULT_REDACTION.text(f"{name}{spacing}{literal}")
    assert literal.strip("'\"").rstrip("!?") not in masked, masked


@given(
    name=st.sampled_from(["token", "password", "api_key", "secret", "db_pass", "API_TOKEN"]),
    spacing=st.sampled_from([" = ", "=", ": "]),
    head=st.from_regex(r"[A-Z][a-z]{2,8}|[a-z]{2,5}[0-9@$!][a-z0-9]{0,4}", fullmatch=True),
    inner=st.from_regex(r"[0-9]{1,4}|[A-Z][a-z0-9]{2,6}", fullmatch=True),
    brackets=st.sampled_from(["()", "[]"]),
)
@example(name="password", spacing=": ", head="Summer", inner="2024", brackets="()")
@example(name="password", spacing="=", head="P4ss", inner="w0rd", brackets="()")
@example(name="password", spacing=": ", head="Summer", inner="2024", brackets="[]")
@example(name="password", spacing=" = ", head="summer", inner="2024", brackets="()")
@settings(max_examples=300, deadline=None)
def test_a_password_shaped_like_a_call_is_masked(
    name: str, spacing: str, head: str, inner: str, brackets: str
) -> None:
    """`password: Summer(2024)`, `password: Summer[2024]`, `password=P4ss(w0rd)`: a capitalised
    or digit-bearing word before a call or a subscript is a password's shape, not code reading
    one (`get_token(x)`, `self.tokens[i]`, `args[0]`): it is masked."""
    value = f"{head}{brackets[0]}{inner}{brackets[1]}"
    masked = DEFAULT_REDACTION.text(f"{name}{spacing}{value}")
    assert value not in masked and head not in masked.split(spacing.strip(), 1)[1], masked


# Names a credential goes by, and the shapes it is set in, for the generated-text tests below.
SAID_NAMES = (
    *("password", "API_TOKEN", "secret", "access_token", "X-Api-Key"),
    *("Authorization", "passphrase", "DB_PASSWORD", "apiKey", "token"),
)
CREDENTIAL_SHAPES = ("{n}: {v}", "{n}={v}", '"{n}": "{v}"', "the {n} is {v}", "curl -H '{n}: {v}'")


# Letters a reader takes for Latin ones: Cyrillic, Greek, fullwidth, mathematical bold.
_LOOKALIKE = {"a": "аα𝐚ａ", "e": "е𝐞ｅ", "o": "оο𝐨ｏ", "p": "рρ𝐩ｐ", "c": "с𝐜ｃ", "s": "ѕ𝐬ｓ",
              "i": "іι𝐢ｉı", "k": "кκ𝐤ｋ", "y": "у𝐲ｙ", "x": "х𝐱ｘ", "T": "ТΤ𝐓Ｔ", "A": "АΑ𝐀Ａ",
              "E": "ЕΕ𝐄Ｅ", "K": "КΚ𝐊Ｋ", "O": "ОΟ𝐎Ｏ", "P": "РΡ𝐏Ｐ", "N": "Ν𝐍Ｎ", "t": "𝐭ｔ",
              "w": "ԝ𝐰ｗ", "r": "𝐫ｒ", "d": "ԁ𝐝ｄ", "h": "һ𝐡ｈ", "n": "𝐧ｎ"}  # fmt: skip


@given(
    secret=RANDOM_SECRET,
    name=st.sampled_from(SAID_NAMES),
    shape=st.sampled_from(CREDENTIAL_SHAPES),
    swaps=st.lists(st.integers(0, 40), min_size=1, max_size=4),
    pick=st.integers(0, 4),
)
@settings(max_examples=500, deadline=None)
def test_a_name_spelled_with_letters_that_look_latin_names_what_it_looks_like(
    secret: str, name: str, shape: str, swaps: list[int], pick: int
) -> None:
    """`pаssword: x` with a Cyrillic `а`, `ＡＰＩ_ＴＯＫＥＮ=x`, `𝐩assword`: a reader sees the
    name, so the same secret is masked at the same place as under the Latin one."""
    odd = list(name)
    for at in swaps:
        if odd[at % len(odd)] in _LOOKALIKE:
            choices = _LOOKALIKE[odd[at % len(odd)]]
            odd[at % len(odd)] = choices[pick % len(choices)]
    plain, text = shape.format(n=name, v=secret), shape.format(n="".join(odd), v=secret)
    assume(secret not in DEFAULT_REDACTION.text(plain))  # `Authorization=x`: no header
    assert secret not in DEFAULT_REDACTION.text(text), text
    assert DEFAULT_REDACTION.spans(text) == DEFAULT_REDACTION.spans(plain), text


@given(
    secret=SAID_SECRETS,
    user=st.sampled_from(["admin", "bot", "", "ci-runner", "me.example"]),
    shape=st.sampled_from(
        [
            "curl -u {u}:{p} https://api.example.test/v1",
            "curl -s -X POST --user {u}:{p} https://api.example.test/v1",
            "curl --user={u}:{p} https://api.example.test/v1",
            "curl -sS -u '{u}:{p}' -H 'Accept: */*' https://api.example.test/v1",
            'curl --proxy-user "{u}:{p}" https://api.example.test/v1',
            "wget --user={u}:{p} https://files.example.test/a.tgz",
            "sshpass -p {p} ssh {u}@host.example.test",
            "sshpass -p'{p}' scp a.txt host:/tmp",
            "docker login -u {u} -p {p} registry.example.test",
            "podman login registry.example.test -u {u} -p {p}",
            "helm registry login registry.example.test -u {u} -p {p}",
        ]
    ),
)
@settings(max_examples=400, deadline=None)
def test_a_password_passed_beside_a_user_on_a_command_line_is_masked(
    secret: str, user: str, shape: str
) -> None:
    """curl's `-u user:x` (wget's `--user`), `sshpass -p x`, a registry login's `-p x`; the user
    and the rest of the command stay."""
    assume(not secret.startswith("-"))
    text = shape.format(u=user, p=secret)
    masked = DEFAULT_REDACTION.text(text)
    assert secret not in masked, masked
    assert masked.endswith(text.rsplit(secret, 1)[1]), masked


@pytest.mark.parametrize(
    "text",
    [
        "docker run -u 1000:1000 app:1.2",
        "git push -u origin feature:main",
        "curl -u admin https://api.example.test (it prompts)",
        "ssh -p 2222 deploy@host; scp -P 2222 a b",
        "docker login --password-stdin -u bob registry.example.test",
        "curl -sS https://x.example.test | sort -u",
    ],
)
def test_a_command_line_with_no_password_beside_its_user_is_left_as_it_is(text: str) -> None:
    assert DEFAULT_REDACTION.text(text) == text


# Pieces of what a pass masks: credentials in every shape the tests above generate, prose
# about them, placeholders as a summary carries them, ordinary text.
_PIECES = st.one_of(
    CONTEXT_SHAPES.map(lambda s: s[1]),
    CONTEXT_SHAPES.map(lambda s: s[2] or s[1]),
    st.builds(lambda k, seed: generated(seed)[k][1], st.sampled_from(KINDS), st.integers(0, 20)),
    st.builds(
        lambda n, v, s: s.format(n=n, v=v),
        st.sampled_from(CREDENTIAL_NAMES),
        SAID_SECRETS | st.sampled_from(_SAID_PROSE),
        st.sampled_from(["the {n} is {v}", "{n}: {v}", "{v} is the {n}", "use {n} {v}"]),
    ),
    st.builds(
        lambda w, t, v: t.format(w=w, W=w.title(), v=v),
        st.sampled_from(["token", "key", "auth", "pat", "TOKEN", "PASSWORD"]),
        st.sampled_from(_PROSE + _KEYS),
        st.sampled_from(_VALUES) | RANDOM_SECRET,
    ),
    st.builds(
        "[redacted: {}]".format,
        st.sampled_from(["x", "secret-keyword", "credential-variable", "credential-phrase"]),
    ),
    _GLUED_SECRETS,
    st.builds(
        lambda v, t: t.format(v=v),
        SAID_SECRETS | st.sampled_from(["Summer", "a b c"]),
        st.sampled_from(
            [
                "db_pass={v}",
                "pass\u200bword: {v}",
                "curl -u 'user:{v} with space' https://x",
                '<add key="Password" value="{v}" />',
                "Server=db;User Id=sa;Password={v};",
            ]
        ),
    ),
    st.sampled_from(
        ["other9876543", "and", "then ran make", "v2.3.1", "is", "the", "was set to", "=", ":"]
    ),
)


@given(
    pieces=st.lists(_PIECES, min_size=1, max_size=5),
    seps=st.lists(
        st.sampled_from([" ", "", "\n", ", ", ": ", "=", " is ", ";", "\u200b"]), min_size=5
    ),
)
@example(pieces=["TOKEN=x", "other9876543"], seps=[" "] * 5)  # a random token after a secret
@example(pieces=["TOKEN=x", " ".join(["a1b2c3d4e5"] * 6)], seps=[" "] * 5)  # a chain of them
@example(pieces=["a-secret:000000000123", "PASSWORD_count: configurable"], seps=[" "] * 5)
@settings(max_examples=800, deadline=None)
def test_masking_masked_text_again_changes_nothing(pieces: list[str], seps: list[str]) -> None:
    """Every pass masks the summary it carries again and rewrites the row if that changed
    it: what a second masking would mask, the first masks already."""
    text = "".join(p + s for p, s in zip(pieces, seps, strict=False))
    once = DEFAULT_REDACTION.text(text)
    assert DEFAULT_REDACTION.text(once) == once, (text, once)


@given(
    secret=SAID_SECRETS,
    name=st.sampled_from(["pass", "Pass", "db_pass", "user_pass", "dbPass", "db.pass", "DB-PASS"]),
    shape=st.sampled_from(
        [
            "{n}={v}",
            "{n}: {v}",
            "{n} = '{v}'",
            '{{"user": "app", "{n}": "{v}"}}',
            "[db]\n{n} = {v}\nport = 5432",
            "db:\n  user: app\n  {n}: {v}",
            "- {n}: {v}",
            "GET /login?user=app&{n}={v}&next=/",
            "user=app, {n}={v}",
            "<{n}>{v}</{n}>",
        ]
    ),
)
@example(secret="hunter2!", name="db_pass", shape="{n}={v}")
@settings(max_examples=400, deadline=None)
def test_a_password_under_a_key_named_pass_is_masked_whatever_its_randomness(
    secret: str, name: str, shape: str
) -> None:
    """`db_pass=hunter2!`, `pass: x`: detect-secrets' `db_pass` takes a random value only,
    and no rule named `pass` alone."""
    masked = DEFAULT_REDACTION.text(shape.format(n=name, v=secret))
    assert secret.rstrip("!?") not in masked, masked


@pytest.mark.parametrize(
    "text",
    [
        "--- PASS: TestParseConfig2 (0.00s)\nPASS\nok  \tgithub.com/acme/api\t0.012s",
        "PASS: test_a1b2 in 0.3s",
        "the tests pass v2.3.1 now; first pass: v2.3.1 shipped",
        "bypass: x1y2z3w4 and compass=a1b2c3 stay",
        "pass: ok, pass: 3/5, second_pass: enabled, pass: $DB_PASS",
    ],
)
def test_the_word_pass_in_ordinary_text_is_left_as_it_is(text: str) -> None:
    assert DEFAULT_REDACTION.text(text) == text


@given(
    secret=RANDOM_SECRET | SAID_SECRETS,
    name=st.sampled_from((*SAID_NAMES, "db_pass")),
    shape=st.sampled_from(CREDENTIAL_SHAPES),
    marks=st.lists(
        st.tuples(st.integers(1, 40), st.sampled_from("\u200b\u200c\u200d\u2060\ufeff")),
        min_size=1,
        max_size=3,
    ),
)
@example(secret="hunter2!", name="password", shape="{n}: {v}", marks=[(4, "\u200b")])
@settings(max_examples=500, deadline=None)
def test_a_zero_width_character_inside_a_credentials_name_hides_nothing(
    secret: str, name: str, shape: str, marks: list[tuple[int, str]]
) -> None:
    """`pass\u200bword: x`: a reader sees `password: x`, so a secret masked under the name
    written plainly is masked under this one."""
    odd = name
    for at, mark in marks:
        at = 1 + at % (len(odd) - 1)
        odd = odd[:at] + mark + odd[at:]
    plain, text = shape.format(n=name, v=secret), shape.format(n=odd, v=secret)
    assume(secret.rstrip("!?") not in DEFAULT_REDACTION.text(plain))  # `Authorization=x`
    assert secret.rstrip("!?") not in DEFAULT_REDACTION.text(text), repr(text)


_DECORATION = st.sampled_from(["", "*", "**", "_", "__", "`"])


@given(
    secret=SAID_SECRETS | st.text(string.ascii_letters, min_size=12, max_size=24),
    name=st.sampled_from((*CREDENTIAL_NAMES, *SAID_NAMES, "Proxy-Authorization")),
    scheme=st.sampled_from(["", "Bearer ", "Basic "]),
    key=_DECORATION,
    value=_DECORATION,
    shape=st.sampled_from(
        [
            "{k}{n}{k}: {v}{s}{v}",
            "{k}{n}:{k} {v}{s}{v}",
            "{k}{n}: {k} {v}{s}{v}",
            "{k}{n}={k} {v}{s}{v}",
            "- {k}{n}{k}: {v}{s}{v}",
            "Set {k}{n}{k} = {v}{s}{v} today",
            "| {k}{n}{k} | {v}{s}{v} |",
            "| Name | Value |\n|---|---|\n| {k}{n}{k} | {v}{s}{v} |\n| port | 5432 |",
            "| prod | {k}{n}{k} | {v}{s}{v} | rotated 2024-11-30 |",
        ]
    ),
)
@example(
    secret="Xk9mP2qL7vR",
    name="Password",
    scheme="",
    key="**",
    value="",
    shape="{k}{n}{k}: {v}{s}{v}",
)
@example(
    secret="Xk9mP2qL7vR",
    name="password",
    scheme="",
    key="",
    value="",
    shape="| {k}{n}{k} | {v}{s}{v} |",
)
@example(
    secret="ArbuaQSr56026",
    name="password",
    scheme="",
    key="**",
    value="",
    shape="{k}{n}: {k} {v}{s}{v}",
)
@example(
    secret="dXNlcjpwYXNz",
    name="Authorization",
    scheme="Basic ",
    key="",
    value="",
    shape="| {k}{n}{k} | {v}{s}{v} |",
)
@example(
    secret="AbCdEfGhIjKlMnOp",
    name="token",
    scheme="",
    key="",
    value="",
    shape="| {k}{n}{k} | {v}{s}{v} |",
)
@example(
    secret="AAAAAAAAAAAA", name="api-key", scheme="", key="", value="", shape="{k}{n}={k} {v}{s}{v}"
)
@settings(max_examples=1000, deadline=None)
def test_a_credential_in_markdown_is_masked_as_in_plain_text(
    secret: str, name: str, scheme: str, key: str, value: str, shape: str
) -> None:
    """`**Password**: x`, `**API key:** x`, `` | DB_PASSWORD | `x` | ``, `| Authorization |
    Basic x |`: agents write markdown; its emphasis, code and table cells around a name or a
    value hide no secret (a table's row reads as `name : value`)."""
    scheme = scheme if "uthorization" in name else ""
    plains = [f"{name}: {scheme}{secret}", f"{name} : {scheme}{secret}"]
    if "=" in shape:  # an assignment: masked when its value is random (`api-key= AAAAAAAAAAAA`
        plains.append(f"{name}={scheme}{secret}")  # is not, in plain text either)
    for plain in plains:
        assume(secret.rstrip("!?") not in DEFAULT_REDACTION.text(plain))
    assume(value != "`" or "`" not in secret)
    assume(not (key or value) or not secret.isalpha())  # `` `AbCdEfGhIjKl` ``: the key rule's
    assume(("=" not in shape and not value) or "uthorization" not in name)  # `:`, bare
    text = shape.format(k=key, n=name, v=value, s=scheme + secret)
    assert secret.rstrip("!?") not in DEFAULT_REDACTION.text(text), text


# detect-secrets' keywords (its rule alone masks a value of letters only), and the shapes of
# `name : value`: as YAML or French text write it, as a markdown table's row is read.
_KEYWORDS = ["password", "Password", "passwd", "pwd", "secret", "api_key", "apikey", "db_pass",
             "private_key", "client_key", "contraseña", "admin_password"]  # fmt: skip
_SPACED_COLON = [
    "{n} : {v}",
    "{n}\t: {v}",
    "{n}  :  {v}",
    '{n} : "{v}"',
    "- {n} : `{v}`",
    "| {n} | {v} |",
    "| prod | {n} | {v} | rotated |",
    '| {n} | "{v}" |',
    "|{n}|{v}|",
    "| Name | Value |\n|---|---|\n| {n} | {v} |\n| port | 5432 |",
]


@given(
    secret=st.text(string.ascii_letters, min_size=8, max_size=24) | RANDOM_SECRET,
    name=st.sampled_from(_KEYWORDS),
    shape=st.sampled_from(_SPACED_COLON),
)
@example(secret="AAABBCDEFGHI", name="password", shape="| {n} | {v} |")
@settings(max_examples=300, deadline=None)
def test_a_keyword_assignment_with_blanks_before_its_colon_is_masked_as_without(
    secret: str, name: str, shape: str
) -> None:
    """`| password | AAABBCDEFGHI |` reads `password : AAABBCDEFGHI`: detect-secrets' keyword
    rule masks `password: AAABBCDEFGHI`, so it masks this too."""
    assume(secret not in DEFAULT_REDACTION.text(f"{name}: {secret}"))
    text = shape.format(n=name, v=secret)
    assert secret not in DEFAULT_REDACTION.text(text), text


@given(
    password=SAID_SECRETS.filter(lambda v: not set(v) & set(":/@%")),
    user=st.sampled_from(["app", "db_user", "svc-orders", "u.name", ""]),
    host=st.sampled_from(["db.example", "10.0.0.5", "localhost", "pg-primary.prod.svc"]),
    tail=st.sampled_from([":5432/app", ":6379", "/orders", ":3306/shop?sslmode=require"]),
    around=st.sampled_from(
        ["{}", "DATABASE_URL={}", "psql {} -c 'select 1'", "`{}`", '{{"dsn": "{}"}}', "at {}."]
    ),
)
@example(password="s3cretPass", user="user", host="db.example", tail=":5432/app", around="{}")
@settings(max_examples=500, deadline=None)
def test_a_connection_string_without_its_protocol_keeps_no_password(
    password: str, user: str, host: str, tail: str, around: str
) -> None:
    """`user:s3cretPass@db.example:5432/app`: a URL's credentials with its `postgres://` left
    out (a port or a path after the host says it is one) are masked as with it."""
    dsn = f"{user}:{{}}@{host}{tail}"
    masked = DEFAULT_REDACTION.text(around.format(dsn.format(password)))
    assert password.rstrip("!?") not in masked, masked
    assert f"@{host}{tail}" in masked, masked


@pytest.mark.parametrize(
    "text",
    [
        "mail me: mailto:john@example.com or email:jdoe42@corp.example, sip:alice@atlanta.com:5060",
        "docker pull node:20-alpine@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123",
        "git clone git@github.com:acme/api.git; ssh deploy@10.0.0.5:2222 at 10:30@home",
        "user:admin2@ no host, a:b@c.d:1, ratio 3:1@5/s, app:$DB_PASS@db.example:5432/app",
    ],
)
def test_an_address_or_a_reference_shaped_like_a_bare_connection_string_stays(text: str) -> None:
    """An address after a label (`email:jdoe42@corp.example`: no port or path after it), a
    digest after an image's tag, a word, a variable or a value too short for a password."""
    assert DEFAULT_REDACTION.text(text) == text


# Each header the rules know, with what its value begins with (a scheme, a cookie's name).
_HEADERS = [("Authorization", "Bearer "), ("Authorization", "Basic "), ("Authorization", ""),
            ("Proxy-Authorization", "token "), ("X-Api-Key", ""), ("Api-Key", ""),
            ("X-Chroma-Token", ""), ("x-client-secret", ""), ("X-DB-Password", ""),
            ("Cookie", "session="), ("Set-Cookie", "sid=")]  # fmt: skip
_CODE_SHAPES = ["{n}: `{v}`", "`{n}:` `{v}`", "- **{n}**: `{v}`", "| {n} | `{v}` |",
                "| prod | {n} | `{v}` | rotated |", "Sent `{n}: {v}` twice"]  # fmt: skip


@given(
    secret=SAID_SECRETS | st.text(string.ascii_letters, min_size=12, max_size=24),
    header=st.sampled_from(_HEADERS),
    shape=st.sampled_from(_CODE_SHAPES),
)
@example(secret="abcdefghijklmnop", header=("Authorization", "Bearer "), shape="{n}: `{v}`")
@settings(max_examples=500, deadline=None)
def test_a_header_whose_value_is_in_backticks_is_masked_as_without_them(
    secret: str, header: tuple[str, str], shape: str
) -> None:
    """`` Authorization: `Bearer x` ``, `` | X-Api-Key | `x` | ``: markdown's code around a
    header's value (its scheme too) hides no secret that the header without it shows."""
    name, before = header
    assume(secret.rstrip("!?") not in DEFAULT_REDACTION.text(f"{name}: {before}{secret}"))
    text = shape.format(n=name, v=before + secret)
    assert secret.rstrip("!?") not in DEFAULT_REDACTION.text(text), text


# Unicode's Default_Ignorable_Code_Point (DerivedCoreProperties.txt): what no reader sees.
IGNORABLE = "".join(
    chr(c)
    for first, last in (
        (0xAD, 0xAD), (0x34F, 0x34F), (0x61C, 0x61C), (0x115F, 0x1160), (0x17B4, 0x17B5),
        (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x206F),
        (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0),
        (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF),
    )
    for c in range(first, last + 1)
)  # fmt: skip
# Every secret in a shape the tests know, with the text it is in, masked as it is written.
KNOWN_SECRETS = st.one_of(
    CONTEXT_SHAPES.map(lambda s: s[:2]),
    st.builds(lambda k, seed: generated(seed)[k], st.sampled_from(KINDS), st.integers(0, 20)),
    st.builds(
        lambda v, n, shape: (v.rstrip("!?"), shape.format(n=n, v=v)),
        RANDOM_SECRET | SAID_SECRETS,
        st.sampled_from((*SAID_NAMES, "db_pass")),
        st.sampled_from(CREDENTIAL_SHAPES),
    ).filter(lambda s: s[0] not in DEFAULT_REDACTION.text(s[1])),  # `Authorization=x`
)


@given(
    known=KNOWN_SECRETS,
    marks=st.lists(
        st.tuples(st.integers(0, 200), st.sampled_from(IGNORABLE) | st.just("\u200b")),
        max_size=3,
    ),
)
@example(known=("Zq8#wE4rT6y", "password: Zq8#wE4rT6y"), marks=[(4, "\u00ad")])
@example(known=("AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"), marks=[(10, "\u00ad")])
@example(known=("000000000123", "authorization: Bearer 000000000123"), marks=[(16, "\u200b")])
@settings(max_examples=300, deadline=None)
def test_a_character_no_reader_sees_hides_no_secret_wherever_it_is(
    known: tuple[str, str], marks: list[tuple[int, str]]
) -> None:
    """`pass\u00adword: x`, `B\u200bearer x`, `ghp_\u200e...`, a variation selector or a tag
    character inside a name, a scheme or a token: a reader sees the text without it, so the
    same secrets are masked (a zero-width space reads as a space too, which may find more)."""
    secret, plain = known
    text = plain
    for at, mark in marks:
        at %= len(text) + 1
        text = text[:at] + mark + text[at:]
    shown = "".join(c for c in DEFAULT_REDACTION.text(text) if c not in IGNORABLE)
    assert secret not in shown, repr(text)
    if not any(mark in "\u200b\ufeff" for _, mark in marks):
        assert shown == DEFAULT_REDACTION.text(plain), repr(text)


@given(known=KNOWN_SECRETS, at=st.integers(1, 200), mark=st.sampled_from("\u200b\ufeff"))
@example(known=("abc123xyz789", "password: abc123xyz789"), at=5, mark="\ufeff")
@example(known=("AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE to"), at=19, mark="\u200b")
@settings(max_examples=300, deadline=None)
def test_a_zero_width_space_inside_a_secret_leaves_no_part_of_it_shown(
    known: tuple[str, str], at: int, mark: str
) -> None:
    """`ghp_...\u200b...`, `password: abc12\ufeff3xyz`: a reader sees one token, so the mask
    covers all of it, not only what comes before the zero-width space."""
    secret, plain = known
    begin = plain.find(secret)
    covered = {i for s, e, _ in DEFAULT_REDACTION.spans(plain) for i in range(s, e)}
    assume(begin >= 0 and covered.issuperset(range(begin, begin + len(secret))))
    cut = begin + 1 + at % (len(secret) - 1)
    text = plain[:cut] + mark + plain[cut:]
    covered = {i for s, e, _ in DEFAULT_REDACTION.spans(text) for i in range(s, e)}
    shown = [i for i in range(begin, begin + len(secret) + 1) if i not in covered | {cut}]
    assert not shown, repr(text)


# Each ASCII character and the characters NFKC makes it (`：`, `＝`, `＿`, `﹕`, `ｋ`).
def _compatible() -> dict[str, str]:
    forms: dict[str, str] = {}
    for c in map(chr, range(0x80, 0x110000)):
        if len(n := unicodedata.normalize("NFKC", c)) == 1 and n.isascii():
            forms[n] = forms.get(n, "") + c
    return forms


_COMPATIBLE = _compatible()


@given(
    known=KNOWN_SECRETS,
    swaps=st.lists(st.integers(0, 200), min_size=1, max_size=6),
    pick=st.integers(0, 100),
)
@example(known=("Zq8#wE4rT6y", "password: Zq8#wE4rT6y"), swaps=[8], pick=0)
@settings(max_examples=300, deadline=None)
def test_a_character_nfkc_makes_ascii_reads_as_that_character(
    known: tuple[str, str], swaps: list[int], pick: int
) -> None:
    """`password：x` (a fullwidth colon, CJK text's), `password＝x`, `ghp＿...`: each such
    character for its ASCII one, the same secrets are masked at the same places."""
    _, plain = known
    odd = list(plain)
    for at in swaps:
        if (forms := _COMPATIBLE.get(odd[at % len(odd)], "")) and odd[at % len(odd)] != " ":
            odd[at % len(odd)] = forms[pick % len(forms)]
    text = "".join(odd)
    assert DEFAULT_REDACTION.spans(text) == DEFAULT_REDACTION.spans(plain), repr(text)


@given(
    words=st.lists(SAID_SECRETS | st.sampled_from(["with", "space", "horse", "42"]), min_size=2),
    quote=st.sampled_from(["'", '"']),
    user=st.sampled_from(["admin", "bot", "", "ci-runner"]),
    shape=st.sampled_from(
        [
            "curl -u {q}{u}:{p}{q} https://api.example.test/v1",
            "curl -sS --user={q}{u}:{p}{q} -H 'Accept: */*' https://api.example.test/v1",
            "curl --proxy-user {q}{u}:{p}{q} https://api.example.test/v1",
            "sshpass -p {q}{p}{q} ssh {u}@host.example.test",
            "sshpass -p{q}{p}{q} scp a.txt host:/tmp",
            "docker login -u {u} -p {q}{p}{q} registry.example.test",
        ]
    ),
)
@example(words=["pass", "with", "space"], quote="'", user="user", shape=
         "curl -u {q}{u}:{p}{q} https://api.example.test/v1")  # fmt: skip
@settings(max_examples=300, deadline=None)
def test_a_quoted_password_with_spaces_beside_a_user_is_masked_whole(
    words: list[str], quote: str, user: str, shape: str
) -> None:
    """`curl -u 'user:pass with space'`: the quotes hold the password, spaces and all."""
    secret = " ".join(words)
    assume(quote not in secret and not secret.startswith("-"))
    text = shape.format(u=user, p=secret, q=quote)
    masked = DEFAULT_REDACTION.text(text)
    assert not any(w in masked for w in words[1:] if len(w) > 3), masked
    assert masked.endswith(text.rsplit(secret, 1)[1]), masked


@given(
    secret=SAID_SECRETS | st.sampled_from(["Summer", "correct horse", "abc"]),
    key=st.sampled_from(["Password", "DbPassword", "Smtp.Password", "db_password", "Secret"]),
    quote=st.sampled_from(['"', "'"]),
    pair=st.sampled_from(["Password", "Pwd", "password"]),
    shape=st.sampled_from(
        [
            "<appSettings>\n  <add key={q}{k}{q} value={q}{v}{q} />\n</appSettings>",
            "<add key={q}{k}{q}   value={q}{v}{q}/>",
            "<add name={q}Main{q} connectionString={q}Server=db;User Id=sa;{p}={v};{q} />",
            "<add name={q}Main{q} connectionString={q}Data Source=db;{p} = {v}{q} />",
            "Server=tcp:db.example.test,1433;Initial Catalog=orders;{p}={v};Encrypt=True",
            "{p}={v};Server=db",
        ]
    ),
)
@example(secret="hunter2!", key="Password", quote='"', pair="Password", shape=
         "<add key={q}{k}{q} value={q}{v}{q} />")  # fmt: skip
@settings(max_examples=400, deadline=None)
def test_a_password_in_a_dotnet_config_or_a_connection_string_is_masked(
    secret: str, key: str, quote: str, pair: str, shape: str
) -> None:
    """`<add key="Password" value="x"/>` (appSettings: the key names the value) and a
    connection string's `Password=x;` (any value up to its `;`, spaces and all)."""
    assume(quote not in secret and ";" not in secret)
    text = shape.format(k=key, v=secret, q=quote, p=pair)
    masked = DEFAULT_REDACTION.text(text)
    assert secret.rstrip("!?") not in masked, masked


@pytest.mark.parametrize(
    "text",
    [
        '<add key="LogLevel" value="Debug" />\n<add key="Retries" value="3" />',
        '<option name="region" value="eu-west-1">',
        "Server=db;Database=orders;Trusted_Connection=True;",
        "the password= field is required; see the form",
    ],
)
def test_a_dotnet_config_and_a_connection_string_without_a_password_stay(text: str) -> None:
    assert DEFAULT_REDACTION.text(text) == text


_PAIRS = st.lists(
    st.sampled_from(["Server=db", "Data Source=tcp:db,1433", "User Id=sa", "Database=orders",
                     "Encrypt=True", "Initial Catalog=orders", "Trusted_Connection=False"]),
    min_size=1, max_size=4, unique=True,
)  # fmt: skip


@given(
    pairs=_PAIRS,
    at=st.integers(0, 4),
    pair=st.sampled_from(["Password", "Pwd", "password", "PWD"]),
    secret=st.just("") | SAID_SECRETS | st.sampled_from(["Summer", "correct horse"]),
    spaced=st.sampled_from(["", " "]),
    end=st.sampled_from(["", ";"]),
)
@example(pairs=["Server=x"], at=1, pair="Password", secret="", spaced="", end="")
@example(pairs=["Encrypt=True"], at=1, pair="Password", secret="hunter2!", spaced="", end="")
@settings(max_examples=500, deadline=None)
def test_a_connection_strings_other_pairs_stay_whatever_its_password(
    pairs: list[str], at: int, pair: str, secret: str, spaced: str, end: str
) -> None:
    """`Password=;Server=x` (an empty password), `Password=x;Encrypt=True`: the password is
    masked up to its `;`, and every other pair stays as it was."""
    assume(";" not in secret)
    pairs = list(pairs)
    pairs.insert(at % (len(pairs) + 1), f"{pair}={secret}")
    text = f";{spaced}".join(pairs) + end
    masked = DEFAULT_REDACTION.text(text)
    assert all(p in masked for p in pairs if not p.startswith(pair)), masked
    assert not secret or secret.rstrip("!?") not in masked, masked


# Secrets the rules find wherever they stand, by their shape alone (no name before them).
_ANYWHERE = st.one_of(
    st.builds(
        lambda k, seed: generated(seed)[k][0],
        st.sampled_from(["aws-access-key", "github-token", "slack-token", "stripe-access-key",
                         "json-web-token"]),
        st.integers(0, 50),
    ),
    TOKENS,
    st.text("0123456789abcdefghijklmnopqrstuvwxyz", min_size=32, max_size=32).map(
        lambda s: f"{s}-us12"  # Mailchimp's: a placeholder's kind in shape
    ),
    st.text(string.digits, min_size=6, max_size=12).map(lambda d: f"xoxb-{d}-{d[::-1]}-a1b2c3"),
    st.text("0123456789abcdef", min_size=32, max_size=32).map(lambda h: f"dapi{h}"),
)  # fmt: skip
# What a memory can write that looks like a placeholder: any kind (the rules', another
# summarizer's, made up, empty, the secret), brackets, colon, letters and spaces a reader
# takes for the masking's, one in another.
_KIND = st.sampled_from(sorted(DEFAULT_REDACTION.kinds)) | st.from_regex(
    r"[a-z0-9-]{0,30}", fullmatch=True
)


def _spelled(usual: str, *others: str) -> st.SearchStrategy[str]:
    return st.just(usual) | st.sampled_from(others)


_SHAPE = st.tuples(
    _spelled("[", "［", "[[", "\\[", "("),
    _spelled("redacted", "rеdacted", "REDACTED", "redac\u00adted", "masked"),
    _spelled(": ", "：", "\\:", ":", ":\u00a0", ":\u3000", ":\u200b", ":  ", ":\n"),
    _spelled("]", "］", "]]", " ]", ""),
)


def _shown_parts(secret: str, text: str, masked: str) -> list[str]:
    """Each run of 8 of the secret's characters (all of a shorter one) the masked text shows
    that the text shows nowhere but in the secret."""
    n = min(8, len(secret))
    parts = {secret[i : i + n] for i in range(len(secret) - n + 1)}
    return sorted(p for p in parts if p in masked and p not in text.replace(secret, "\0"))


_PLAIN = ("[", "redacted", ": ", "]")


@given(
    known=KNOWN_SECRETS
    | _ANYWHERE.map(lambda s: (s, s))
    | st.builds(
        lambda v, n: (v.rstrip("!?"), f"{v} is the {n}"), SAID_SECRETS, st.sampled_from(SAID_NAMES)
    ),
    shape=_SHAPE,
    kind=_KIND | st.sampled_from(["{secret}", "{lower}", "[redacted: {secret}]"]),
    sep=st.sampled_from(["", " ", "\t", "\n", " \n "]),
)
@example(
    known=(_MAILCHIMP, _MAILCHIMP), shape=("[", "redacted", ": ", "]"), kind="{secret}", sep=""
)
@example(
    known=("hunter2", "hunter2 is the password"),
    shape=("[", "redacted", ": ", "]"),
    kind="secret-keyword",
    sep="",
)
@settings(max_examples=1500, deadline=None)
def test_a_planted_placeholder_shields_no_part_of_a_secret_wherever_it_stands(
    known: tuple[str, str], shape: tuple[str, str, str, str], kind: str, sep: str
) -> None:
    """A placeholder-like string a memory writes (`[redacted: <a Mailchimp key>]`,
    `[redacted: x] <key>`, `[redacted: secret-keyword]hunter2 is the password`) hides no
    secret that the same text with `redacted` spelled backwards shows (`detcader`: the same
    letters, a value as random): the masked text shows no part of it, and masking that again
    changes nothing."""
    secret, sentence = known
    opening, word, colon, closing = shape
    kind = kind.format(secret=secret, lower=secret.lower())
    planted = f"{opening}{word}{colon}{kind}{closing}"
    other = f"{opening}{word[::-1]}{colon}{kind}{closing}"
    start = sentence.find(secret)
    end = start + len(secret)
    for before, after in (
        ("", sep + sentence),
        (sentence + sep, ""),
        (sentence[:end] + sep, sentence[end:]),
        (sentence[:start], sep + sentence[start:]),
    ):
        text, control = before + planted + after, before + other + after
        if _shown_parts(secret, control, DEFAULT_REDACTION.text(control)):
            continue  # not a secret the rules find there
        masked = DEFAULT_REDACTION.text(text)
        assert not _shown_parts(secret, text, masked), (text, masked)
        assert DEFAULT_REDACTION.text(masked) == masked, (text, masked)


def test_no_ascii_character_is_one_no_reader_sees() -> None:
    """Redaction._without skips the search for hidden characters in an ASCII text: none is."""
    from controller.core.text import IGNORABLE as IGNORABLE_PATTERN

    assert IGNORABLE_PATTERN.search("".join(map(chr, range(128)))) is None


PASS_TEXTS = st.one_of(
    KNOWN_SECRETS.map(lambda known: known[1]),
    st.sampled_from(["Done; tests pass.", "", "[redacted: github-token] a1b2c3d4e5f6g7"]),
    st.text(max_size=40),
)


@given(texts=st.lists(PASS_TEXTS, max_size=8), repeats=st.lists(st.integers(0, 20), max_size=8))
@settings(max_examples=300, deadline=None)
def test_a_pass_masks_a_text_once_and_as_redaction_text_does(
    texts: list[str], repeats: list[int]
) -> None:
    """A pass masking a text again (a response every memory repeats, a proposal's item taken
    whole from a masked memory) gets what Redaction.text gives, the same secrets counted each
    time, with the text masked only once."""
    texts += [texts[i % len(texts)] for i in repeats] if texts else []
    mask, found, expected = PassRedaction(), Counter[str](), Counter[str]()
    with patch.object(Redaction, "settled", autospec=True, side_effect=Redaction.settled) as m:
        outputs = [mask.text(t, found) for t in texts]
        assert outputs == [DEFAULT_REDACTION.text(t, expected) for t in texts]
        assert found == expected
        calls = m.call_count - len(texts)  # less Redaction.text's own
        assert calls <= len(set(texts))
        again = Counter[str]()
        assert [mask.text(t, again) for t in outputs] == outputs  # masked: itself, no secret
        assert not again and m.call_count - len(texts) == calls
