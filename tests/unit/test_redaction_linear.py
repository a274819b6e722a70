"""The rules Python's re takes quadratic time on run on RE2 (controller/redaction.py): the
same secrets as their own patterns find, in time linear in the text, on any text."""

import re

import pytest
import re2
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from controller.core.text import python_meaning
from controller.redaction import DETECTOR_RULES, Redaction

# Each translated from a Python pattern (the phrase rule is written for RE2: none to agree with).
LINEAR_RULES = [r for r in DETECTOR_RULES if r.linear is not None and not r.said]
EVERY_CHARACTER = "".join(map(chr, range(0xD800))) + "".join(map(chr, range(0xE000, 0x110000)))

# What the keyword patterns are made of, in every case, beside characters of any kind.
PIECES = [
    "api_key", "API_KEY", "apikey", "password", "PassWord", "passwd", "pwd", "secret",
    "db_pass", "private_key", "contraseña", "CONTRASEÑA", "\u212aey", "ſecret",
    "'", '"', "`", "=", "==", "===", "!=", "!==", ":", ":=", "=>", "!", ">", "(", ")", "[",
    "]", "[0]", "@", ".assign", ";", ",", " ", "  ", "\t", "\n", "\x0b", "\x0c", "\r",
    "\u00a0", "\u2003", "\u3000", "\x1c", "\x85", "a", "Z", "_", "9", "é", "ß", "٣", "\u0301",
    "x1", "-", ".", "/", "$", "{", "}", "//", "/:_authToken=", "npm_", "sk-", "T3BlbkFJ",
    "Ab3" * 7, "f" * 36, "\ud800", "\udfff", " -P", "x-token", "X-Api-Key", "api-key", "-key",
    "-secret", "passwd",
]  # fmt: skip
noise = st.lists(st.one_of(st.sampled_from(PIECES), st.characters(codec="utf-8")), max_size=8).map(
    "".join
)
word = st.text(st.sampled_from("aZ_9éß٣Kſİıx-\u0345"), max_size=6)
spaces = st.text(st.sampled_from(" \t\n\x0b\u00a0\u3000"), max_size=2)
quote = st.sampled_from(["'", '"', "`", ""])
PS = ["-p", " -p", " -P", "\t-P"]
KEYWORDS = [
    "api_key",
    "APIKEY",
    "apİ_key",
    "password",
    "Passwd",
    "pwd",
    "secret",
    "contraseña",
    "db_pass",
]
OPERATORS = [":", "=", "==", "===", "!=", "!==", ":=", "=>", "(", ".assign(", "[0]=", "", " "]

# Built once: a strategy made inside the composite is built and validated again at each
# draw, a fifth of the property's time. The same draws as when made inline.
SHAPES = st.sampled_from(["keyword", "compared", "npm", "openai", "header", "flag"])
KEYWORD, OPERATOR = st.sampled_from(KEYWORDS), st.sampled_from(OPERATORS)
CLOSING = st.sampled_from(["", "]", "'", '"', "']"])
AT, END = st.sampled_from(["", "@"]), st.sampled_from(["", ";"])
COMPARISON = st.sampled_from(["==", "!=", "==="])
SK_MIDDLE = st.text(st.sampled_from("aZ9-_"), max_size=4)
FLAG = st.sampled_from(["--password", "-token", "--db-pass-Secret", "--api-key", "-x", "--Cookie"])
COMMAND = st.sampled_from(["mysql", "MariaDB", "mysql-", "mysqldump", "mysql_x"])
SEP, P = st.sampled_from(["=", " ", "\t", "  "]), st.sampled_from(PS)
HEADER = st.sampled_from(["x-token", "X-Api-Key", "a-b-secret", "api-key", "-key", "Key"])
VALUE = st.one_of(word, noise)


@st.composite
def assignment(draw: st.DrawFn) -> str:
    """A secret as a rule expects one, each part drawn from what it may be or nearly."""
    shape = draw(SHAPES)
    q1, q2, value = draw(quote), draw(quote), draw(VALUE)
    if shape == "keyword":
        kw, op = draw(KEYWORD), draw(OPERATOR)
        closing, at, end = draw(CLOSING), draw(AT), draw(END)
        return (
            f"{draw(word)}{kw}{draw(word)}{closing}{draw(spaces)}{op}{draw(spaces)}"
            f"{at}{q1}{value}{q2}{end}"
        )
    if shape == "compared":
        op, kw = draw(COMPARISON), draw(KEYWORD)
        return f"{q1}{value}{q2}{draw(spaces)}{op}{draw(spaces)}{draw(word)}{kw}"
    if shape == "npm":
        token = draw(st.sampled_from(["npm_" + value, "0123abcd-" * 4, "f" * 36]))
        return f"//{draw(word)}/:_authToken={draw(spaces)}{token}"
    if shape == "openai":
        return f"sk-{draw(SK_MIDDLE)}{'A1b' * 7}T3BlbkFJ{'c2D' * 7}"
    if shape == "flag":
        flag, command, sep, p = draw(FLAG), draw(COMMAND), draw(SEP), draw(P)
        return draw(
            st.sampled_from(
                [
                    f"{draw(word)}{flag}{sep}{q1}{value}{q1}",
                    f"{draw(word)}{command}{draw(word)}{draw(noise)}{p}{q1}{value}{q2}",
                ]
            )
        )
    name = draw(HEADER)
    return f"{draw(word)}{name}{q1}{draw(spaces)}:{draw(spaces)}{q2}{value}{q2}"


texts = st.lists(st.one_of(noise, assignment()), max_size=5).map("".join)


@pytest.mark.parametrize("escape", [r"\w", r"\W", r"\d", r"\D", r"\s", r"\S"])
@pytest.mark.parametrize("flags", ["", "(?i)"])
def test_re2_reads_a_shorthand_class_as_python_does_on_every_character(
    escape: str, flags: str
) -> None:
    for python in (escape, f"[^{escape}]", f"[{escape}_]"):  # runs: few matches to compare
        runs = re2.findall(f"{flags}{python_meaning(python)}+", EVERY_CHARACTER)
        assert runs == re.findall(f"{flags}{python}+", EVERY_CHARACTER), python


def test_every_keyword_pattern_of_detect_secrets_has_its_linear_form() -> None:
    assert all(r.linear is not None for r in DETECTOR_RULES if r.keyword)


@settings(max_examples=1500, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(texts)
def test_the_linear_form_finds_what_detect_secrets_finds(text: str) -> None:
    for rule in LINEAR_RULES:
        assert rule.linear is not None
        python = [m.span(rule.group) for m in rule.pattern.finditer(text)]
        assert list(rule.linear.spans(text)) == python, (rule.kind, text)


@example("", [("pwd", "hello world"), ("pwd", "good day"), ("pwd", "abc def")])
@settings(max_examples=300)
@given(
    st.sampled_from(["", "Server=db;", "x "]),
    st.lists(
        st.tuples(
            st.sampled_from(["password", "PWD", "Pwd"]),
            st.text(st.sampled_from("aZ9 é-!x"), min_size=1, max_size=8).filter(str.strip),
        ),
        min_size=2,
        max_size=8,
    ),
)
def test_every_password_of_a_connection_string_is_masked(
    before: str, pairs: list[tuple[str, str]]
) -> None:
    """A password masked alone is masked after another. RE2's form took the `;` after each
    password, which the next pair begins with: every other pair went unseen in a round, and
    past the rounds one stayed (`pwd=x;pwd=good day;pwd=y;`)."""

    def masked(pairs: list[tuple[str, str]]) -> list[bool]:
        text = before + "".join(f"{name}={value};" for name, value in pairs)
        return ["[redacted" in pair for pair in Redaction().text(text)[len(before) :].split(";")]

    alone = [masked([pair])[0] for pair in pairs]
    assert [a <= b for a, b in zip(alone, masked(pairs), strict=False)] == [True] * len(pairs)


# Text written to make a backtracking engine take quadratic time or worse: before RE2,
# 16 KB of `api_key` took minutes, and Python's re holds every thread of the operator.
HOSTILE = ["api_key", "api_key=`", "password: `a ", "secret='", 'pwd = "x', "a-", "-a", "a.", "//",
           "sk-", "PASSWD", "mysql-", "mysql ", "--a-", "\\", '\\"', "\u00a0", "://a:",
           ":@", "aToken: ", "?key=", "token=x&", "a_key=", "AToken",
           "Cookie:", "cookie:a", "Set-Cookie: a=", "key: a/", "key: a/.b.",
           "key: 1.", "password is ", "the token for a b ", "a is the password ", "password: ",
           "pwd (", "a is the a b c ", "curl -u", "curl ", "sshpass ",
           "docker login -p", "TOKEN=x a1b2c3d4e5 ", "[redacted: x] a1b2c3d4e5 ",
           "secret: 000000000123 password: x ", "pass: ", "a_pass=", "\n pass:",
           ", pass=a!", "pass\u200bword: a1b2c3d4 ", "to\u2060ken=x ", "curl -u 'a:",
           'curl -u "', "sshpass -p '", ";password=a ", "pwd=a",
           '<add key="a', '" value="a', "a:a1@", "u:p4ss@db.example:5432/app "]  # fmt: skip


@pytest.mark.timeout(120)
@pytest.mark.parametrize("unit", HOSTILE)
def test_masking_any_long_text_takes_time_linear_in_it(unit: str) -> None:
    text = unit * (262_144 // len(unit))
    assert Redaction().text(text).count("[redacted") <= len(text)  # it ends


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "unit",
    ["-----BEGIN RSA PRIVATE KEY-----", "PuTTY-User-Key-File-2", "-----END EC PRIVATE KEY-----\n"],
)
def test_a_text_of_private_key_markers_is_masked_in_time_linear_in_it(unit: str) -> None:
    """Each marker began a search to the end of the text for the key's end: a megabyte of
    them took minutes."""
    text = unit * (1_048_576 // len(unit))
    assert "[redacted: private-key]" in Redaction().text(text)


def test_a_text_with_a_lone_surrogate_is_masked_as_any_other() -> None:
    """JSON may carry a lone surrogate, which UTF-8 (what RE2 reads) cannot."""
    text = "mysql -Psecret \ud800 password = 'abc123'\udfff x-token: abc"
    assert Redaction().text(text) == (
        "mysql -P[redacted: credential-flag] \ud800 password = '[redacted: secret-keyword]'"
        "\udfff x-token: [redacted: credential-header]"
    )


@given(
    before=st.text(st.characters(categories=["Cs", "Ll", "Zs"]), max_size=8),
    after=st.text(st.characters(categories=["Cs", "Ll", "Zs"]), max_size=8),
)
def test_a_summarizers_own_pattern_masks_a_text_with_a_lone_surrogate(
    before: str, after: str
) -> None:
    """A SessionSummarizer's extraPatterns run on RE2, which reads UTF-8: a memory's lone
    surrogate (JSON may carry one) raised UnicodeEncodeError and failed the pass."""
    own = Redaction((("acme-license", r"ACME-LIC-(\d{12})"),))
    text = f"{before}license ACME-LIC-123456789012{after}"
    assert own.text(text) == f"{before}license ACME-LIC-[redacted: acme-license]{after}"


PAIR = st.tuples(
    st.sampled_from(["", ";", "; ", " ", "a", "Server=db;"]),
    st.sampled_from(["password", "PWD", "Password"]),
    st.sampled_from(["", " "]),
    st.text(st.sampled_from("aZ9 \t\x0b\x0c\r-é=`;"), min_size=1, max_size=6),
    st.text(st.sampled_from(" \t\r\x0b\x0c"), max_size=3),
).map(lambda p: f"{p[0]}{p[1]}{p[2]}={p[3]}{p[4]};")


@example(["password=`;", "password==;"])
@given(st.lists(PAIR, min_size=1, max_size=4))
def test_a_connection_strings_password_is_found_as_python_finds_it(pairs: list[str]) -> None:
    """`Password=x;` with no `;` before: a value's end, then any of Python's \\s but a line
    break up to its `;` (RE2's form took spaces and tabs only). Python only looks at that
    `;`: the next pair's `;Password=y` begins with it (RE2's form took it and missed y)."""
    text = "".join(pairs)
    for rule in LINEAR_RULES:
        assert rule.linear is not None
        python = [m.span(rule.group) for m in rule.pattern.finditer(text)]
        assert list(rule.linear.spans(text)) == python, (rule.kind, text)
