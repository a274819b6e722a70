"""Credentials out of everything a summary is made of, before it is made (docs/privacy.md).

Masked where memories are read (store/session_listing.py) and in the prior a pass carries,
never later. The rules: detect-secrets' plugins, CONTEXT_RULES (a credential by where it
stands) and a SessionSummarizer's own patterns (RE2); a secret becomes `[redacted: <kind>]`.
"""

from __future__ import annotations

import bisect
import functools
import math
import re
import re._constants as re_constants
import re._parser as re_parser
import types
import unicodedata
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from hashlib import sha256
from typing import Any

import re2
from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
from detect_secrets.plugins import keyword
from detect_secrets.plugins.base import RegexBasedDetector
from detect_secrets.plugins.basic_auth import BasicAuthDetector
from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString
from detect_secrets.plugins.ip_public import IPPublicDetector
from detect_secrets.plugins.private_key import PrivateKeyDetector

from controller.core.memories import Memory
from controller.core.merge import PassUpdate
from controller.core.quoting import TYPOGRAPHIC_QUOTES, fit
from controller.core.summary import TITLE_MAX, PriorSummary, StructuredSummary, SummaryItem
from controller.core.text import (
    IGNORABLE,
    PLACEHOLDER,
    Linear,
    python_meaning,
    re2_pattern,
    without_surrogates,
)

# Unquoted `NAME=value` counts when the value is this long and random (bits per character).
UNQUOTED_MIN_CHARS = 8
UNQUOTED_MIN_ENTROPY = 3.0
# Memory metadata a summary takes text from besides its three parts (row metadata, ledger).
SOURCE_KEYS = ("agent", "agentIdentity", "model", "toolsUsed", "userId", "timestamp")
_TOKEN_TAIL = re.compile(r"[\w\-+/=]*")  # a token's rest after what a detector matched
# A token glued to a secret or a placeholder, or after it and spaces (`[redacted: x] sk-...`).
_GLUED = re.compile(r"[ \t]*([\w\-+/=~%]*)")
# The kind of a token glued to what looks like a placeholder and is none (`[redacted: x] a1b2...`).
AFTER_PLACEHOLDER = "after-placeholder"
_KEYWORD = re.compile(keyword.DENYLIST_REGEX, re.IGNORECASE)
# The name before an unquoted value, and a keyword that ends it (`db_password`, not
# `PASSWORD_count`, a setting about the credential).
_KEY_BEFORE = re.compile(r"(\w+)[\]'\"]{0,2}[ \t]*(?:={1,3}|:)[ \t]*\Z")
_KEYWORD_ENDS = re.compile(rf"(?:{'|'.join(keyword.DENYLIST)})\Z", re.IGNORECASE)
_KEY_END = re.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\n\s*\n")
# Bumped when `Redaction.spans` finds secrets differently for the same rules: a summary
# masked by an earlier way is then masked again (Redaction.fingerprint).
MASKING_VERSION = 22
_ROUNDS = 4  # maskings of a text at most (Redaction.text)
_KNOWN_CHARS, _KNOWN_MAX = 1024, 2048  # the texts a pass keeps masked (PassRedaction)
# What no reader sees (text.IGNORABLE) is nothing, a zero-width space or BOM a space too (spans).
_ZERO_WIDTH = re.compile("[\u200b\ufeff]")
_HIDDEN = re.compile(f"(?!{_ZERO_WIDTH.pattern}){IGNORABLE.pattern}")
# The text as a reader sees it, one character for one (docs/privacy.md): a blank, control or
# zero-width one (not a newline) a space, quotes plain, an ASCII lookalike (`ｋ`, `а`) that one.
_AS_SHOWN = types.MappingProxyType(str.maketrans(
    {c: " " for c in map(chr, range(0xFEFF + 1)) if c != "\n" and (c.isspace() or c <= "\x1f"
     or "\x7f" <= c <= "\x9f" or _ZERO_WIDTH.match(c))}
    | dict(zip("аеорсухѕіјԁһӏԛԝкАВЕКМНОРСТХЅІЈҮΑΒΕΖΗΙΚΜΝΟΡΤΥΧαοικνρυıİ",
               "aeopcyxsijdhlqwkABEKMHOPCTXSIJYABEZHIKMNOPTYXaoikvpuiI", strict=True))
    | {c: n for c in map(chr, range(0x80, 0x20000))
       if len(n := unicodedata.normalize("NFKC", c)) == 1 and n.isascii()}
) | TYPOGRAPHIC_QUOTES)  # fmt: skip
# What stands between a name and its value for a reader, not for the rules (docs/privacy.md):
# backslashes escaping a quote (possessive: linear), a line continuation, a YAML block's
# indicator, markdown around a name, a JSON string's `\n`, `\r`, `\t` (`escaped`: a line break),
# the break after `NAME:`, a name/value pair's `value` key (`gap`), XML's `key="`, `" value`.
_SKIPPED = re.compile(
    r"""(?<!\\)\\++(?=["'])|\\\n[ \t]*|(?<=:)[ \t]*[|>][1-9+-]{0,2}[ \t]*\n[ \t]*"""
    r"|(?<=[^\W_])(?:\*{1,3}|_{1,3}|`)(?=[ \t]*[:=])|(?<=[:=])[ \t]*(?:\*{1,3}|_{1,3}|`)(?=[ \t])"
    r"|(?P<escaped>\\[nrt])"
    r"|(?<=:)[ \t]*\n[ \t]+(?=[^\s#:-])(?![^\n]*:(?:[ \t]|$))"
    r"""|\bname["']?[ \t]*:[ \t]*["']?[\w.-]+["']?(?P<gap>[ \t]*,?\s*["']?value["']?)(?=[ \t]*:)"""
    r"""|\bkey=["'](?=[\w.:-]+["'][ \t]+value=["'])|(?<=[\w.:-])["'][ \t]+value(?==["'])""",
    re.MULTILINE,
)


# A markdown table's row read as pairs: a border between two cells as `:`, the last as spaces
# (`| Authorization | Bearer x |` as `| Authorization : Bearer x  `), at the same places.
_TABLE_ROW = re.compile(r"^([ \t]*\|)([^\n]*)", re.MULTILINE)


def _cells_as_pairs(row: re.Match[str]) -> str:
    cells = row[2].rstrip(" \t|")
    return row[1] + cells.replace("|", ":") + " " * (len(row[2]) - len(cells))


def _as_read(text: str) -> tuple[str, list[int]]:
    """The text without what `_SKIPPED` finds, and where each of its characters is in the
    text ([] when nothing was skipped)."""
    parts, at, last = list[str](), list[int](), 0
    for skipped in _SKIPPED.finditer(text):
        start, end = skipped.span("gap") if skipped["gap"] else skipped.span()
        parts.append(text[last:start] + ("\n" if skipped["escaped"] else ""))
        at.extend(range(last, start + bool(skipped["escaped"])))
        last = end
    if not parts:
        return text, []
    return "".join([*parts, text[last:]]), [*at, *range(last, len(text))]


# Words joined by `_`, `-`, `.`, `+` or `/`: a setting, a name, a path (`MAX_TOKENS`, `ctrl+k`).
_PLAIN_WORD = re.compile(r"/?(?:[A-Z]?[a-z]+|[A-Z]+)\d*(?:[_.+/-](?:[A-Z]?[a-z]+|[A-Z]+)\d*)*")
# A file's path (`uploads/2024/01/a8f3e2b1.png`, an object's key): a name, not a credential.
_FILE_PATH = re.compile(r"[~.]?/?(?:[\w.-]+/)+[\w.-]*\.[A-Za-z][A-Za-z0-9]{0,4}")
# Where the next parameter or pair begins (`?api_key=x&page=2`): an unquoted value ends there.
_NEXT_PARAMETER = re.compile(r"[&;,](?=[ \t]*[A-Za-z_][\w.-]*(?:[ \t]+[\w.-]+)*[ \t]*=)")
# A quoted random-looking string that names its hash (`"sha512-..."`, SRI): a content hash.
_DIGEST = re.compile(r"(?:sha\d+|md5)-", re.IGNORECASE)


def kind_of(secret_type: str) -> str:
    """`AWS Access Key` -> `aws-access-key`."""
    return re.sub(r"[^a-z0-9]+", "-", secret_type.lower()).strip("-")


@dataclass(frozen=True)
class Rule:
    kind: str
    pattern: re.Pattern[str] = field(repr=False)  # its text and flags are in a fingerprint
    group: int = 0  # the part of a match that is the secret
    min_entropy: float = 0.0  # 0: every match; else only values at least this random
    whole_token: bool = False  # extend over the rest of the token (detect-secrets': a JWT's)
    charset: str | None = None  # what the entropy counts (None: base64's)
    keyword: bool = False  # only in a text naming a secret (password, api_key, ...)
    plain_words: bool = True  # False: a word (configurable, MAX_TOKENS, created_at) is none
    said: bool = False  # only a value that looks like a credential (_said)
    code: bool = False  # True: a value that is code reading one (`get_token(x)`) is none
    # What scans the text when not `pattern` itself: the same secrets in linear time.
    linear: Linear | None = field(default=None, repr=False, compare=False)


_I = "[iİı]"
_QUOTE_BACKREF = re.compile(r"\((\[\\'\"`\]\??|\")\)\((?P<secret>.*?)\)\(\\\d\)")


def _linear(pattern: re.Pattern[str], group: int) -> Linear:
    """A detect-secrets pattern as RE2 runs it: the keyword patterns' lookaheads become what
    they require (a word character first), and a quote with the backreference closing it one
    alternative per quote, the secret in one of their groups."""
    flags = "(?i)" if pattern.flags & re.IGNORECASE else ""  # Python's re, not RE2, folds İ, ı to i
    text, alternatives = pattern.pattern.replace("i", _I) if flags else pattern.pattern, [""]
    if quoted := _QUOTE_BACKREF.search(text):
        if quoted.group("secret") != keyword.SECRET:
            raise ValueError(f"a keyword pattern of an unknown shape: {text!r}")
        secret = r"(\w(?:[^\v'\"]*[^\v,'\"`])?)"
        three = ["'", '"', "`"]  # the quotes a keyword's value may be in ("": none)
        quotes = {"[\\'\"`]": three, "[\\'\"`]?": [*three, ""], '"': ['"']}[quoted.group(1)]
        alternatives = [f"{q}{secret}{q}" for q in quotes]
        group -= 1  # the opening quote's group goes
        text = text[: quoted.start()] + f"(?:{'|'.join(alternatives)})" + text[quoted.end() :]
    return Linear(flags + text, tuple(range(group, group + len(alternatives))))


# A URL's password: after any user (empty too, an address: `u@corp`), up to the last `@` as
# URL parsers read it (`redis://:x@cache`, `postgres://u:p@ss+w0rd!@db`).
_URL_PASSWORD = re.compile(r"""://[^\s:/?#\[\]"`<>]*:([^\s/?#\[\]"`<>]+)@""")
# What detect-secrets misses of a private key: any PEM kind (`ENCRYPTED`), PuTTY's newer
# files, and a key's tail alone (its end marker: the rest was in another memory).
_KEY_MARKS = re.compile(
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY|PuTTY-User-Key-File-\d+"
    r"|-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
)
# detect-secrets' patterns Python's re takes quadratic time on (besides the keyword ones).
_QUADRATIC = frozenset({"npm-tokens", "openai-token"})


def _detector_rules() -> tuple[Rule, ...]:
    rules: list[Rule] = []
    plugin: type
    for secret_type, plugin in get_mapping_from_secret_type_to_class().items():
        if not issubclass(plugin, RegexBasedDetector) or plugin is IPPublicDetector:
            continue  # an address is not a credential
        kind = kind_of(secret_type)
        if plugin is BasicAuthDetector:  # its pattern, with an empty user and sub-delims
            rules.append(Rule(kind, _URL_PASSWORD, 1))
            continue
        marks = [_KEY_MARKS] if plugin is PrivateKeyDetector else []
        for p in [*plugin.denylist, *marks]:  # type: ignore[attr-defined]
            linear = _linear(p, 0) if kind in _QUADRATIC else None
            rules.append(Rule(kind, p, whole_token=True, linear=linear))
    kw = kind_of(keyword.KeywordDetector.secret_type)
    for denylist, min_entropy in (
        (keyword.QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP, 0.0),
        (keyword.CONFIG_DENYLIST_REGEX_TO_GROUP, UNQUOTED_MIN_ENTROPY),
    ):
        for p, g in denylist.items():  # `name : x` too (YAML, a table's row): blanks before `:`
            p = re.compile(p.pattern.replace("{0,2})?:", r"{0,2})?[ \t]*:"), p.flags)
            rules.append(Rule(kw, p, g, min_entropy, keyword=True, code=True, linear=_linear(p, g)))
    e = Base64HighEntropyString()
    rules.append(Rule(kind_of(e.secret_type), e.regex, 2, e.entropy_limit, charset=e.charset))
    return tuple(rules)


# A value, quoted (all of it) or not (one token, up to a `&`: a query's next parameter;
# Authorization's with its scheme): group 2.
_VALUE = r"""(["'])?((?(1)[^"'\n]+|%s[^\s"'`,;&]+))"""
# A name's closing quote and what assigns it: `=`, `:`, Go's `:=`, Ruby's `=>`.
_ASSIGN = r"[\"']?[ \t]*(?::=|=>|[:=])[ \t]*"
# A header's `:`, and markdown's code around its value (`` Authorization: `Bearer x` ``).
_COLON = r"[ \t]*:[ \t]*`?"
# The same value as RE2 runs it: the condition one group per branch.
_QUOTED_OR_NOT = r"""(?:(["'])([^"'\n]+)|([^\s"'`,;&]+))"""
# A key in any case that names a credential, a word of its own or after `_`, `-`, `.` or a
# camelCase boundary: apiKey, getAToken.
_CAMEL = r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])"
# A password on a command line beside a user (curl's `-u user:x`, `sshpass -p x`, ...:
# docs/privacy.md). ASCII only: Python and RE2 read it alike, and RE2 runs it.
_LOGIN = (
    r"(?:^|[^A-Za-z0-9_.-])(?:(?:curl|wget|http|https)(?:[ \t][^\n|;&]*?)?[ \t]"
    r"(?:-u|--user|--proxy-user)(?:=|[ \t]*)"
    r"""(?:"[^\n:"@/]*:{dq}|'[^\n:'@/]*:{sq}|["']?[^ \t\n:"'@/]*:{bare})"""
    r"|(?:(?:sshpass|(?:docker|podman|nerdctl|oras|helm[ \t]+registry)[ \t]+login)"
    r"(?:[ \t][^\n|;&]*?)?[ \t]-p|sqlcmd(?:[ \t][^\n|;&]*?)?[ \t]-P"
    r"|redis-cli(?:[ \t][^\n|;&]*?)?[ \t]-a|htpasswd(?:(?:{p})*?[ \t]+-{g}*b{g}*(?:{p})*{arg}"
    r"|(?:{o})*?[ \t]+-{f}*(?:b{f}*(?:(?:{o})*?[ \t]+-{f}*)?n|n{f}*(?:(?:{o})*?[ \t]+-{f}*)?b)"
    r"{f}*(?:{o})*){arg}[ \t])"
    r"""(?:[ \t]+|=)?(?:"{dq}|'{sq}|["']?{bare}))"""
).format(  # quoted: with spaces; arg: a command's word (htpasswd's file, user)
    dq=r'([^"\n]+)"', sq=r"([^'\n]+)'", bare=r"""([^ \t\n"']+)""",
    arg=r"""[ \t]+[^ \t\n|;&<>"'-][^ \t\n|;&<>]*""",
    # htpasswd's options, split or joined (-B -b, -bB, -C 10): with n (-nb) no file
    f="[A-Za-z0-9]", g="[A-Za-mo-z0-9]", o=r"[ \t]+(?:-[A-Za-z0-9]+|\d+)",
    p=r"[ \t]+(?:-[A-Za-mo-z0-9]+|\d+)",
)  # fmt: skip
# A credential said in a sentence or set with `:`, `=` or an XML element (docs/privacy.md),
# name then value or value `is` name, when the value looks like one (_said). RE2 runs it.
_NAMED = (
    r"(?:passw(?:or)?d|pwd|passphrase|passcode|secret|token|credentials?"
    r"|(?:api|access|secret|private|client|license|ssh|deploy|signing|encryption|master)"
    r"[ _-]?key)"
)
_GAP = r"(?:[ \t]+\n?|\n)[ \t]*"  # spaces, at most one line break
_SAYS = r"(?:is|was|are|were|be|been|now|set|changed|reset|updated|to|becomes?|became|equals)"
_SETS = r"[ \t]*(?::=|=>|->|==?|:|>)[ \t]*\n?[ \t]*"  # `>`: an XML element's
_FOR = r"[ \t]+(?:for|of|on|in)(?:[ \t]+[A-Za-z0-9_.@-]+){1,4}?"
_IS = rf"(?:(?:{_GAP}{_SAYS}){{1,3}}(?:{_SETS}|{_GAP})|{_SETS})"
_SAID_VALUE = r"""(?:"([^"\n]+)"|'([^'\n]+)'|`([^`\n]+)`|([^\s"'`<]+))"""
# After the name alone (`use passphrase X`) a value is no option (`passwd --stdin`).
_NO_OPTION = r"""(?:"([^"\n]+)"|'([^'\n]+)'|`([^`\n]+)`|([^-\s"'`<][^\s"'`<]*))"""
_WHOSE = r"(?:the|my|our|your|his|her|their|its|a|an)"
_PHRASE = (
    rf"(?i)(?:^|[^A-Za-z0-9_])[A-Za-z0-9_.-]*?{_NAMED}[\"'`*_]{{0,3}}"
    rf"(?:(?:{_FOR}{_IS}|{_IS}){_SAID_VALUE}|{_GAP}{_NO_OPTION})"
    + r"|(?:^|[\s(])"
    + _SAID_VALUE
    + rf"{_GAP}(?:is|was|as){_GAP}(?:{_WHOSE}{_GAP}(?:[A-Za-z0-9_.-]+{_GAP}){{0,2}}?)?"
    + rf"[A-Za-z0-9_.-]*?{_NAMED}"
    + r"(?:[^A-Za-z0-9_]|$)"
)
# A key named `pass` or ending in it (`db_pass=`, `dbPass:`; not `--- PASS: TestX`), its value
# as after `password:` (_said); `pass` alone only where a key begins (not `first pass: v2`).
_PASS = (
    r"(?:(?:^|[^A-Za-z0-9_.-])(?:[A-Za-z0-9_.-]*[_.-](?i:pass)|[A-Za-z0-9]*[a-z0-9]Pass)"
    r"|(?:(?m:^)[ \t]*(?:-[ \t]+)?|[\"'`{?&<(]|[,;][ \t]*)[Pp]ass)"
    rf"[\"'`]?{_SETS}{_SAID_VALUE}"
)
_PAIR_VALUE = r"""([^;"'\n]*[^;"' \t\n\r\f\v])"""
_CONNECTION = r";[ \t]*(?i:password|pwd)[ \t]*=[ \t]*"
_DSN = re.compile(r""":([^\s"`]+)@(?:tcp6?|unix)\(""")
# A header (Authorization with any scheme, any *-Token, *-Key, *-Secret, *-Password), an
# env-style NAME, a command-line flag (--token=x, mysql's -pSECRET): (kind, pattern, linear).
_HEADERS_VARIABLES_FLAGS = (
    ("credential-header", r"(?i)(?<![a-z0-9])(?:proxy-)?authorization[\"'`*_]{0,3}"
     + _COLON + _VALUE % r"(?:[a-z]+\d?(?:-[a-z0-9]+)*[ \t]+)?", None),  # with its scheme
    ("credential-header", r"(?i)\b(?:(?:[a-z0-9]+-)+(?:token|key|secret|passw(?:or)?d)|api-?key)"
     r"[\"']?" + _COLON + _VALUE % "",
     Linear(rf"(?:^|\W)(?i:(?:[a-z0-9İı]+-)+(?:token|key|secret|passw(?:or)?d)|ap{_I}-?key)"
            rf"[\"']?{_COLON}" + _QUOTED_OR_NOT, (2, 3))),
    ("credential-variable", r"\b[A-Z0-9_]*(?:TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|APIKEY|_KEY"
     r"|_PWD|_PASS)\b" + _ASSIGN + _VALUE % "", None),
    ("credential-flag", r"(?i:(?<![\w-])--?(?:[a-z0-9]+-)*(?:token|secret|passw(?:or)?d|passphrase"
     r"|api-?key|cookie)(?:=|[ \t]+)(?!-)|\b(?:mysql|mariadb)[\w-]*\b[^\n|;&]*?[ \t]-p(?!\s))"
     + _VALUE % "",
     Linear(rf"(?i:(?:^|[^\w-])--?(?:[a-z0-9İı]+-)*(?:token|secret|passw(?:or)?d"
            rf"|passphrase|ap{_I}-?key|cook{_I}e)(?:=|[ \t]+))"
            + r"""(?:(["'])([^"'\n]+)|([^-\s"'`,;&][^\s"'`,;&]*))"""
            + rf"|(?:^|\W)(?i:mysql|mar{_I}adb)(?:(?:[\w-]*\w)?"
            r"(?:[^\n|;&\w][^\n|;&]*?)??|[\w-]*-\w[^\n|;&]*?)(?i:[ \t]-p)"
            + _QUOTED_OR_NOT, (2, 3, 5, 6))),
)  # fmt: skip
# Credentials by where they stand; with `linear` on RE2 (Python's re: quadratic, `a-a-a-...`).
CONTEXT_RULES = (
    *(Rule(kind, re.compile(pattern), 2, code=kind == "credential-variable", linear=linear)
      for kind, pattern, linear in _HEADERS_VARIABLES_FLAGS),
    # A cookie header's value: Cookie's every pair, Set-Cookie's one (its attributes stay).
    Rule("credential-header", re.compile(
        rf"(?i)\b(set-)?cookie[\"']?{_COLON}([\"']?)(?=[^\s=;:\"'`]+=)"
        r"((?(1)[^\s=;\"'`]+=[^;\s\"'`]+|[^\n\"'`]+))"
    ), 3),
    # A credential key (_CAMEL; `apiKey: x`, `client.auth = x`; not `monkey`): its value when
    # random and no words, name or path (`hotKey: ctrl+k`).
    Rule("credential-variable", re.compile(
        rf"(?:(?<![A-Za-z0-9])|{_CAMEL})(?i:token|passphrase|auth|credentials?|sig|pat|cookie"
        r"|passw(?:or)?d|pwd|secret|key)(?![A-Za-z0-9])"
        + _ASSIGN + _VALUE % ""
    ), 2, UNQUOTED_MIN_ENTROPY, plain_words=False, code=True),
    Rule("credential-flag", re.compile(_LOGIN), 1, linear=Linear(_LOGIN, tuple(range(1, 7)))),
    Rule("credential-phrase", re.compile(_PHRASE), said=True, code=True,
         linear=Linear(_PHRASE, tuple(range(1, 13)))),
    Rule("credential-variable", re.compile(_PASS), said=True, code=True,
         linear=Linear(_PASS, (1, 2, 3, 4))),
    # A connection string's password (`Server=db;Password=x;`), up to its `;` or quote, spaces
    # and all: after another pair's `;`, or ended by one. ASCII only.
    Rule("credential-variable", re.compile(
        rf"""(?:{_CONNECTION}|(?<![A-Za-z0-9_])(?i:password|pwd)=(?=[^;"' \t\n\r\f\v][^;"'\n]*;))"""
        + _PAIR_VALUE
    ), 1, linear=Linear(
        rf"""{_CONNECTION}{_PAIR_VALUE}|(?:^|[^A-Za-z0-9_])(?i:password|pwd)="""
        r"""([^;"' \t\n\r\f\v](?:[^;"'\n]*[^;"' \t\n\r\f\v])?)""", (1, 2), (2, r"[ \t\r\f\v]*;"))),
    # A bearer token said in prose (`sent Bearer x`), when it looks like one (_said).
    Rule("credential-header", re.compile(r"(?i:\bbearer)[ \t]+([^\s\"'`<>]+)"), 1, said=True),
    # A URL's password without its protocol, a port or a path after the host, when it looks
    # like one (`user:x@db:5432/app`; not an address after a label: `email:jo42@corp.com`).
    Rule(kind_of(BasicAuthDetector.secret_type), re.compile(
        r"""(?<![\w.:/@-])[\w.-]*:([^\s:/@"'`]+)@[\w-]+(?:\.[\w-]+)*(?::\d{1,5}(?!\w|\.\w)|/)"""
    ), 1, said=True),
    # A Go DSN's password, from the user's first `:` to the protocol's `@` as Go's driver
    # reads it (`user:x@tcp(db:3306)/app`, `u:p:a@ss@unix(...)`).
    Rule(kind_of(BasicAuthDetector.secret_type), _DSN, 1, linear=Linear(_DSN.pattern, (1,))),
    # A URL's user alone when random, no word or name (`https://<token>@github.com/o/r`, not
    # `ssh://git@host`).
    Rule(kind_of(BasicAuthDetector.secret_type), re.compile(r"""://([^\s:/?#\[\]@"'`<>]+)@"""),
         1, UNQUOTED_MIN_ENTROPY, plain_words=False),
)  # fmt: skip
# Providers' tokens detect-secrets has no plugin for, by documented shape (prefix, alphabet,
# length; a Discord webhook URL's token): a name only beginning like one (`dapi_url`) is none.
PROVIDER_TOKENS = (
    ("anthropic-api-key", r"sk-ant-(?:api|admin)\d\d-[A-Za-z0-9_-]{32,}"),
    ("github-token", r"github_pat_[A-Za-z0-9_]{82}"),
    ("hugging-face-token", r"hf_[A-Za-z]{34}"),
    ("google-api-key", r"AIza[A-Za-z0-9_-]{35}"),
    ("npm-tokens", r"npm_[A-Za-z0-9]{36}"),
    ("grafana-token", r"glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}"),
    ("shopify-token", r"shp(?:at|ca|pa|ss)_[A-Fa-f0-9]{32}"),
    ("databricks-token", r"dapi[a-f0-9]{32}(?:-\d)?"),
    ("age-secret-key", r"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}"),
    ("doppler-token",
     r"dp\.(?:st|pt|ct|sa|scim|audit)\.(?:[a-z0-9_-]{2,35}\.)?[A-Za-z0-9]{40,44}"),
    ("discord-webhook",
     r"(?:(?:ptb|canary)\.)?discord(?:app)?\.com/api/(?:v\d+/)?webhooks/\d+/([A-Za-z0-9_-]{60,68})"),
)  # fmt: skip
DETECTOR_RULES = _detector_rules() + CONTEXT_RULES + tuple(
    Rule(kind, p, p.groups)
    for kind, shape in PROVIDER_TOKENS
    for p in (re.compile(rf"(?<![A-Za-z0-9_]){shape}(?![A-Za-z0-9_-])"),)
)  # fmt: skip
_PRIVATE_KEY = kind_of(PrivateKeyDetector.secret_type)
_BASE64 = Base64HighEntropyString().charset


def _a_url_password(text: str, start: int) -> bool:
    """Whether a URL's or a Go DSN's password begins at start: a user named like a key
    (`redis://secret:x@db`, `key:x@tcp(db)/app`) names none, and the URL's rule masks the
    password alone, not the host after it."""
    head = text.rfind("://", max(0, start - 256), start)
    url = _URL_PASSWORD.match(text, head) if head >= 0 else None
    return any(m is not None and m.start(1) == start for m in (url, _DSN.match(text, start - 1)))


_WORDS = re.compile(r"[^\W\d_]+(?:['’-][^\W\d_]+)*")
# Not a value: a variable (`$X`), an address, a number or date, a URL, or code that reads one
# read up to a quote (`session["token"]`, `getpass()`, `args[0]`; `Summer[2024]` is a password).
_NOT_A_VALUE = re.compile(
    r"\$\{?\w+\}?|[\w.+-]+@[\w-]+(?:\.[\w-]+)+|[\d.,:/+-]+|\w+://\S*|[a-z_]+(?:\.\w+)*(?:\(|\[\d*)"
)


# Code that reads a value, after `=` or `:` and unquoted (`get_token(x)`, `self.tokens[i]`):
# a name with a `_` or a dot, or reading a name or string (`P4ss(w0rd)` is a password).
_ID = r"[A-Za-z_]\w*"
_ARG = r"""[\w.,:=*+ \t-]|"[^"\n]*"|'[^'\n]*'"""
_ARGS = functools.reduce(  # calls and subscripts in it, three deep (`f(g(h(x)))`)
    lambda inner, _: rf"(?:{_ARG}|\({inner}\)|\[{inner}\])*", range(3), rf"(?:{_ARG})*"
)
_CALL = rf"\({_ARGS}\)|\[{_ARGS}\]"
_CODE_READ = re.compile(rf"([a-z_]+(?:\.{_ID})*)({_CALL})(?:\.{_ID}|{_CALL})*(?![\w.(\[])")


def _reads_code(text: str, start: int) -> bool:
    before = text[max(0, start - 8) : start].rstrip(" \t")
    code = _CODE_READ.match(text, start) if before.endswith(("=", ":")) else None
    return code is not None and (
        "_" in code[1] or "." in code[1] or re.search(r"[A-Za-z\"']", code[2]) is not None
    )


def _names_more(text: str, start: int) -> bool:
    """Whether the name before the value at start goes on past its keyword (`secret_name`)."""
    key = _KEY_BEFORE.search(text, max(0, start - 64), start)
    return key is not None and not _KEYWORD_ENDS.search(key[1])


def _said(value: str) -> int:
    """How much of a value said after a credential's name to mask (0: none): one with a letter
    and a digit, or a symbol and either (`hunter2!`, `P@ss`), or a PIN of 6 digits; no word,
    name or path. Judged without the punctuation that may end a sentence (docs/privacy.md)."""
    keep = len(value.rstrip(".,;:)]}>"))
    bare = value.lstrip("([{<").rstrip(".,;:!?)]}>")
    if bare.isdigit():
        return keep if len(bare) >= 6 else 0
    if (
        len(bare) < 4
        or any(p.fullmatch(bare) for p in (_WORDS, _FILE_PATH, _NOT_A_VALUE))
        or bare.startswith(("/", "./", "~/"))
        or (_PLAIN_WORD.fullmatch(bare) and re.search(r"[_.+/-]", bare))
    ):
        return 0
    joined = bare[0].isalnum() and all(c.isalnum() or c in " -_.'’/+" for c in bare)
    letters, digits = (any(map(str.isalpha, bare)), any(map(str.isdigit, bare)))
    return keep if (letters and digits) or ((letters or digits) and not joined) else 0


def _glued(text: str, start: int, at: list[int]) -> tuple[int, int] | None:
    """Where a random token at `start`, or after spaces, is: the rest of a secret ending there.
    Its length is the written one (`at`: _as_read's positions; `A_=` reads as `A=`)."""
    s, e = _GLUED.match(text, start).span(1)  # type: ignore[union-attr]  # "" too: no None
    if e == s or (at[e - 1] + 1 - at[s] if at else e - s) < UNQUOTED_MIN_CHARS:
        return None
    return (s, e) if re.search(r"\d", text[s:e]) and re.search("[A-Za-z]", text[s:e]) else None


def _random_enough(rule: Rule, value: str) -> bool:
    if not rule.min_entropy:
        return True
    if rule.charset is None and len(value) < UNQUOTED_MIN_CHARS:  # keyword values
        return False
    # Shannon's, of the characters in the charset over all (as detect-secrets)
    charset, size = rule.charset or _BASE64, len(value)
    counts = Counter(c for c in value if c in charset).values()
    return -sum(n / size * math.log2(n / size) for n in counts) > rule.min_entropy


@dataclass(frozen=True)
class Redaction:
    """Masks credentials: the detector rules plus extra (kind, pattern) pairs."""

    extra: tuple[tuple[str, str], ...] = ()
    rules: tuple[Rule, ...] = field(init=False, repr=False, compare=False)
    # The rules, thresholds and MASKING_VERSION: a summary written under the same fingerprint
    # needs no second look (PassRedaction.prior).
    fingerprint: str = field(init=False, repr=False, compare=False)
    # What a placeholder this masking writes may name: `[redacted: <any other>]` is text.
    kinds: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        own = [(kind_of(name), re2_pattern(pattern)) for name, pattern in self.extra]
        rules = DETECTOR_RULES + tuple(Rule(k, p, min(p.groups, 1)) for k, p in own)
        object.__setattr__(self, "rules", rules)
        object.__setattr__(self, "kinds", frozenset(r.kind for r in rules) | {AFTER_PLACEHOLDER})
        settings = [(r.pattern.pattern, getattr(r.pattern, "flags", 0), r) for r in rules]
        described = (MASKING_VERSION, UNQUOTED_MIN_CHARS, UNQUOTED_MIN_ENTROPY,
                     PLACEHOLDER.pattern, _KEYWORD.pattern, settings)  # fmt: skip
        object.__setattr__(self, "fingerprint", sha256(repr(described).encode()).hexdigest()[:16])

    @functools.cached_property
    def _gates(self) -> tuple[Any, tuple[str | None, ...]]:
        """What skips a detector rule no match can come of, exactly: one RE2 set over the
        linear rules (which of them match at all, in one scan), and a literal each other
        rule's matches hold. Built once (30 ms), for the detector rules every masking shares;
        a summarizer's own patterns always run."""
        if self is not DEFAULT_REDACTION:
            return DEFAULT_REDACTION._gates
        scan = re2.Set.SearchSet(re2.Options())
        for rule in DETECTOR_RULES:
            scan.Add(python_meaning(rule.linear.source) if rule.linear else "$^")
        scan.Compile()
        return scan, tuple(map(_literal, DETECTOR_RULES))

    def spans(self, text: str) -> list[tuple[int, int, str]]:
        """(start, end, kind) of each secret, in order, none in a placeholder. What no
        reader sees is read as nothing (`pass\u00adword: x`); a zero-width space as a space,
        then as nothing for what that finds apart (`pass\u200bword: x`) or longer on its line
        (`B\u200bearer x`, `ghp_a\u200bb...`: a reader sees one token)."""
        found = self._without(text, _HIDDEN)
        if not _ZERO_WIDTH.search(text):
            return found
        ends, spans = [e for _, e, _ in found], list(found)
        for start, end, kind in self._without(text, IGNORABLE):
            after = bisect.bisect_right(ends, start)  # the first found that ends after start
            if after == len(found) or found[after][0] >= end or "\n" not in text[start:end]:
                spans.append((start, end, kind))
        joined: list[tuple[int, int, str]] = []
        for start, end, kind in sorted(spans, key=lambda span: span[0]):  # found's kind first
            if joined and start < joined[-1][1]:
                joined[-1] = (joined[-1][0], max(end, joined[-1][1]), joined[-1][2])
            else:
                joined.append((start, end, kind))
        return joined

    def _without(self, text: str, hidden: re.Pattern[str]) -> list[tuple[int, int, str]]:
        if text.isascii() or not hidden.search(text):  # no ASCII character is hidden
            return self._spans(text)
        at = [i for i, c in enumerate(text) if not hidden.match(c)]
        return [(at[s], at[e - 1] + 1, k) for s, e, k in self._spans(hidden.sub("", text))]

    def _spans(self, text: str) -> list[tuple[int, int, str]]:
        text = without_surrogates(text.translate(_AS_SHOWN))  # the same positions; RE2 reads it
        text, at = _as_read(text)
        text = _TABLE_ROW.sub(_cells_as_pairs, text)
        # A placeholder is one this masking writes (its kind in `kinds`): kept, it shields
        # nothing but itself. What only looks like one (another kind, a secret for its kind)
        # is text. A random token glued to either is the rest of the secret it stood for.
        shapes = [(m, m.group()[len("[redacted: ") : -1]) for m in PLACEHOLDER.finditer(text)]
        kept = [(m.start(), m.end(), "") for m, kind in shapes if kind in self.kinds]
        named = _KEYWORD.search(text) is not None
        scan, literals = self._gates
        linear = set(scan.Match(text) or ())  # None: none matched
        for n, rule in enumerate(self.rules):
            if (rule.keyword and not named) or (rule.linear and n not in linear):
                continue
            if n < len(literals) and (literal := literals[n]) is not None and literal not in text:
                continue
            if rule.linear:
                found = rule.linear.spans(text)
            else:
                found = (m.span(rule.group) for m in rule.pattern.finditer(text))
            covered = 0  # the end of the last key this rule found: a match before is in it
            for start, end in found:
                if start < covered or (rule.code and _reads_code(text, start)):
                    continue
                if rule.said or (rule.min_entropy and rule.charset is None):  # unquoted
                    ahead = _NEXT_PARAMETER.search(text, start, end + 64)  # its name too
                    end = ahead.start() if ahead and ahead.start() < end else end
                value = text[start:end]
                if rule.said:
                    end = start + _said(value)
                    value = text[start:end]
                if rule.min_entropy and rule.charset is None:  # unquoted: one token
                    value = value.split(maxsplit=1)[0].rstrip(",;.)'\"`") if value.strip() else ""
                    end = start + len(value)
                if start < 0 or not value.strip() or not _random_enough(rule, value):
                    continue
                if rule.charset and _DIGEST.match(value):
                    continue
                if rule.pattern not in (_URL_PASSWORD, _DSN) and _a_url_password(text, start):
                    continue
                words_are_none = not rule.plain_words or (rule.keyword and _names_more(text, start))
                if words_are_none and (_PLAIN_WORD.fullmatch(value) or _FILE_PATH.fullmatch(value)):
                    continue
                if rule.kind == _PRIVATE_KEY:
                    if text.startswith("-----END", start):  # a key's tail alone: from its
                        # text's start (or the last key's end), a blank line or a key's line
                        found = ((text.rfind(m, covered, start), len(m)) for m in ("-----", "\n\n"))
                        start = max((at + n for at, n in found if at >= 0), default=covered)
                    else:
                        start -= 5 if text.startswith("-----", start - 5) and start >= 5 else 0
                        tail = _KEY_END.search(text, end)
                        end = tail.end() if tail and tail.group(0).startswith("-") else len(text)
                    covered = end
                elif rule.whole_token:
                    end = _TOKEN_TAIL.match(text, end).end()  # type: ignore[union-attr]
                kept.append((start, end, rule.kind))
        for m, kind in shapes:  # after the rules': where both find a token, its rule's kind
            if glued := _glued(text, m.end(), at):
                kept.append((*glued, kind if kind in self.kinds else AFTER_PLACEHOLDER))
        kept.sort(key=lambda s: (s[0], -s[1]))
        out: list[tuple[int, int, str]] = []
        reach = -1
        for start, end, kind in kept:
            if start >= reach:
                out.append((start, end, kind))
            elif end <= reach:
                continue
            elif out[-1][2]:  # an overlap widens the secret
                out[-1] = (out[-1][0], end, out[-1][2])
            else:  # a secret past a placeholder's end: that part
                out.append((reach, end, kind))
            # A random token glued to a secret, or after it and spaces, is its rest.
            while out[-1][2] and (glued := _glued(text, out[-1][1], at)):
                out.append((*glued, out[-1][2]))
            reach = out[-1][1]
        return [(at[s], at[e - 1] + 1, k) if at else (s, e, k) for s, e, k in out if k]

    def text(self, text: str, found: Counter[str] | None = None) -> str:
        """Each secret a placeholder, masked again until that changes nothing: a match a rule
        dropped may have hidden one the masking shows."""
        return self.settled(text, found)[0]

    def settled(self, text: str, found: Counter[str] | None = None) -> tuple[str, bool]:
        """text(text), and whether masking it again would change nothing."""
        for _ in range(_ROUNDS):
            parts, at = [], 0
            for start, end, kind in self.spans(text) if text else ():
                parts += [text[at:start], f"[redacted: {kind}]"]
                at = end
                if found is not None:
                    found[kind] += 1
            if not parts:
                return text, True
            text = "".join(parts) + text[at:]
        return text, False


DEFAULT_REDACTION = Redaction()
# What a summary is made of and shows or carries; the rest (ids, times, digests) holds no text.
MEMORY_TEXT = ("prompt", "thought", "response", "document", "tools_used", "agent", "model",
               "agent_identity")  # fmt: skip
SUMMARY_TEXT = ("text", "title", "sections", "references", "legacy_text", "sources_json",
                "technologies", "participating_agents", "models", "tools_used")  # fmt: skip


def _literal(rule: Rule) -> str | None:
    """The longest run of literal characters in a Python pattern's top-level sequence: every
    match holds it. None: the rule has no such run (or is linear, or folds case)."""
    if rule.linear or not isinstance(rule.pattern, re.Pattern) or rule.pattern.flags & re.I:
        return None
    runs = [""]
    for op, arg in re_parser.parse(rule.pattern.pattern, rule.pattern.flags):
        if op is re_constants.LITERAL:
            runs[-1] += chr(arg)
        elif op not in (re_constants.AT, re_constants.ASSERT, re_constants.ASSERT_NOT):
            runs.append("")  # what matches no character leaves a run whole
    return max(runs, key=len) or None


def _masked(value: Any, text: Callable[[str], str]) -> Any:
    """Each string in value masked: lists, tuples, dicts and summary items walked."""
    if isinstance(value, str):
        return text(value)
    if isinstance(value, list | tuple):
        return type(value)(_masked(v, text) for v in value)
    if isinstance(value, dict):
        return {k: _masked(v, text) for k, v in value.items()}
    if isinstance(value, SummaryItem):  # a placeholder may be longer than what it hides
        item = _masked(value.model_dump(), text)
        return SummaryItem.model_validate({**item, "text": fit(item["text"])})
    return value


@dataclass
class PassRedaction:
    """One pass's masking: what it read, masked, and how many secrets of each kind per memory
    row (a row read twice counts once), in the prior summary and in what the summarizer
    proposed. Never the secrets."""

    redaction: Redaction = DEFAULT_REDACTION
    by_row: dict[str, Counter[str]] = field(default_factory=dict)
    prior_found: Counter[str] = field(default_factory=Counter)
    proposed_found: Counter[str] = field(default_factory=Counter)
    # Each text this pass masked (short ones, at most _KNOWN_MAX): masked again, as what the
    # memories repeat or a proposal takes whole, it is looked up. Never kept past the pass.
    known: dict[str, tuple[str, Counter[str]]] = field(default_factory=dict, repr=False)

    def text(self, text: str, found: Counter[str]) -> str:
        """Redaction.text, each secret counted in found."""
        if (seen := self.known.get(text)) is None:
            counts: Counter[str] = Counter()
            masked, settled = self.redaction.settled(text, counts)
            seen = (masked, counts)
            if len(text) <= _KNOWN_CHARS and len(self.known) < _KNOWN_MAX:
                self.known[text] = seen
                if settled:  # masked again: itself, no secret
                    self.known.setdefault(masked, (masked, Counter()))
        found.update(seen[1])
        return seen[0]

    def memory(self, memory: Memory) -> Memory:
        """The memory with every text a summary could take from it masked."""
        found: Counter[str] = Counter()
        text = functools.partial(self.text, found=found)
        masked = memory.model_copy(
            update={n: _masked(getattr(memory, n), text) for n in MEMORY_TEXT}
        )
        if found:
            self.by_row[memory.id] = found
        return masked

    def meta(self, meta: Mapping[str, Any]) -> Mapping[str, Any]:
        """A row's metadata with SOURCE_KEYS masked (who wrote it, with what tools)."""
        masked = {k: _masked(meta[k], self.redaction.text) for k in SOURCE_KEYS if k in meta}
        return {**meta, **masked} if any(masked[k] != meta[k] for k in masked) else meta

    def prior(self, prior: PriorSummary | None) -> PriorSummary | None:
        """The prior summary masked now; one this masking wrote (its fingerprint, no other
        writer's text) as it is, masked when it came in."""
        if prior is None or (
            isinstance(prior, StructuredSummary)
            and prior.other_writer is None
            and prior.masked_with == self.redaction.fingerprint
        ):
            return prior
        text = functools.partial(self.redaction.text, found=self.prior_found)
        fields = [n for n in SUMMARY_TEXT if n in type(prior).model_fields]
        update = {n: _masked(getattr(prior, n), text) for n in fields}
        if isinstance(update.get("title"), str):
            update["title"] = fit(update["title"], TITLE_MAX)
        return prior.model_copy(update=update) if self.prior_found else prior

    def proposal(self, update: PassUpdate) -> PassUpdate:
        """Every text of a proposal masked: a model can echo a secret, join one split in two
        (each half too short to mask) or be a hostile endpoint's."""
        text = functools.partial(self.text, found=self.proposed_found)
        return PassUpdate.model_validate(_masked(update.model_dump(), text))

    def counts(self) -> dict[str, int]:
        """By kind: a rule's, or `after-placeholder` (Redaction.kinds; never the text's own)."""
        found = self.prior_found + self.proposed_found
        return dict(sorted(sum(self.by_row.values(), found).items()))
