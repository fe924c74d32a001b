"""Credentials written into text (pure): found in one place, so that a call holding one is
never granted and the credential is masked wherever the text is shown.

Found: header values (``Authorization: Bearer …``, ``Cookie: …``, ``X-API-Key: …``), the
password (or, for web URLs, the lone user name, usually a token) in a URL's ``user:password@``,
values given to credential-named options (``--password=…``, ``--token …``) and variables
(``GITHUB_TOKEN=…``), ``user:password`` after ``-u``/``--user`` (curl, wget and the like), a
password glued to ``-p`` for the MySQL clients or given to ``sshpass -p``, private-key blocks
and the token formats of the big providers (``ghp_…``, ``glpat-…``, ``xoxb-…``, ``AKIA…``, …).

Also which argument names name a credential (:func:`is_credential_key`): the one definition
the agent host (``ask``, the hooks) and the cards use, so that a value under ``password``,
``GITHUB_TOKEN`` or ``apiKey`` is hidden wherever it is shown.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from bot.render.masking import MASK

_VALUE = r"(?:'[^']*'|\"[^\"]*\"|[^\s'\"])+"
"""A shell word: bare, single- and double-quoted pieces."""

_HEADER = re.compile(
    r"(?<![\w/@:.])(?P<name>(?:proxy-)?authorization|(?:set-)?cookie|x-api-key|api-key|apikey"
    r"|x-auth-token|x-access-token|private-token|x-amz-security-token|x-goog-api-key)"
    r"\s*:\s*(?P<value>[^'\"\n\\]+?)\s*(?=['\"\n\\]|$)",
    re.IGNORECASE,
)
_URL_USERINFO = re.compile(r"\b(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*)://(?P<info>[^\s/?#'\"]*)@")
_WEB_SCHEMES: Final = frozenset({"http", "https", "ftp", "ftps", "ws", "wss"})
"""Where a URL's lone user name is taken for a token (``https://ghp_…@github.com``)."""
_VARIABLE = re.compile(
    r"(?<![\w-])(?P<name>[A-Za-z_]*(?:TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|APIKEY)"
    rf"[A-Za-z_]*|(?-i:[A-Z_]*PASS))=(?P<value>{_VALUE})",
    re.IGNORECASE,
)
_OPTION = re.compile(
    r"(?<![\w-])--(?P<name>[a-z0-9-]*(?:password|passwd|token|secret|api-key|apikey|bearer"
    rf"|access-key|cookie)[a-z0-9-]*)(?:=(?P<glued>{_VALUE})|\s+(?P<given>(?!-){_VALUE}))",
    re.IGNORECASE,
)
_NOT_A_VALUE_OPTION: Final = ("-file", "-stdin", "-env", "-path", "-cmd", "-command", "-type",
                              "-helper", "-prompt", "-jar")
"""Credential-named options that take a file or a way to get it, not the credential."""
_USER = re.compile(
    r"(?:\bcurl\b[^|;&\n]*?(?<!\S)-[A-Za-z]*?(?P<short>[uUb])"
    r"|(?<![\w-])(?P<long>--user|--proxy-user|--auth))"
    rf"(?:=|\s*)(?P<value>{_VALUE})"
)
_GLUED_PASSWORD = re.compile(
    r"\b(?P<name>mysql|mysqldump|mysqladmin|mariadb|mariadb-dump|mysqlimport|mysqlshow)\b"
    r"[^|;&\n]*?(?<!\S)-p(?P<value>[^\s'\"]+|'[^']*'|\"[^\"]*\")"
)
_SSHPASS = re.compile(rf"\b(?P<name>sshpass)\b[^|;&\n]*?(?<!\S)-p\s*(?P<value>{_VALUE})")
_TOKEN = re.compile(
    r"(?<![A-Za-z0-9_-])(?P<value>gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"
    r"|glpat-[A-Za-z0-9_-]{20,}|xox[abposr]-[A-Za-z0-9-]{10,}|sk-[A-Za-z0-9_-]{20,}"
    r"|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{35}|npm_[A-Za-z0-9]{36}"
    r"|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})"
)
_PRIVATE_KEY = re.compile(
    r"(?P<value>-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?-----END [A-Z0-9 ]*PRIVATE KEY-----)",
    re.DOTALL,
)
_SCHEMES: Final = frozenset({"bearer", "basic", "token", "digest"})

CREDENTIAL_WORDS: Final = frozenset({
    "password", "passwords", "passwd", "passphrase", "pwd", "pass", "token", "tokens",
    "secret", "secrets", "apikey",
    "authorization", "authorisation", "auth", "credential", "credentials", "cookie",
    "bearer", "otp", "pin", "privatekey", "accesskey", "sessionid", "sessionkey",
    "clientsecret", "signingkey",
})
"""Words that name a credential, alone or joined with the next word (``api_key``)."""
_WORDS: Final = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")


@dataclass(frozen=True)
class Credential:
    """One credential in a text: what names it, its value, and where the value stands."""

    name: str
    value: str
    start: int
    end: int


def is_credential_key(key: str) -> bool:
    """Whether an argument name names a credential: ``password``, ``GITHUB_TOKEN``,
    ``apiKey``, ``X-Authorization``, ``private_key`` … (a word of it, or two joined)."""
    words = [word.lower() for word in _WORDS.findall(key)]
    pairs = (a + b for a, b in itertools.pairwise(words))
    return any(word in CREDENTIAL_WORDS for word in (*words, *pairs))


def credentials_in(text: str) -> list[Credential]:
    """Every credential written into ``text``, in the order they start."""
    found = [*_headers(text), *_url_userinfo(text), *_named(text), *_users(text),
             *_tokens(text)]
    return sorted(found, key=lambda c: (c.start, c.end))


def holds_credential(value: Any) -> bool:
    """Whether any string in ``value`` (a text, or mappings and lists of them) holds one."""
    return any(credentials_in(text) for text in strings_in(value))


def mask_credentials(text: str) -> str:
    """``text`` with every credential's value replaced by the mask."""
    spans = [(c.start, c.end) for c in credentials_in(text)]
    if not spans:
        return text
    parts, at = [], 0
    for start, end in spans:
        if end <= at:
            continue
        parts.append(text[at:max(at, start)])
        parts.append(MASK)
        at = end
    parts.append(text[at:])
    return "".join(parts)


def scheme_token(value: str) -> str | None:
    """The token of an ``Authorization``-style value ``<scheme> <token>`` (``Bearer``,
    ``Basic``, ``Token``, ``Digest``), else ``None``."""
    scheme, _, token = value.partition(" ")
    token = token.strip()
    return token if token and scheme.lower() in _SCHEMES else None


def strings_in(value: Any) -> Iterator[str]:
    """Every string in ``value``: itself, or the keys and leaves of mappings and lists."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield str(key)
            yield from strings_in(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from strings_in(item)


def _headers(text: str) -> Iterator[Credential]:
    for match in _HEADER.finditer(text):
        value = match["value"].strip()
        if not value:
            continue
        start = match.start("value")
        yield Credential(match["name"], value, start, start + len(value))
        # A bearer token is also masked alone, where the command repeats it.
        token = scheme_token(value)
        if token:
            offset = value.index(token)
            yield Credential(match["name"], token, start + offset, start + offset + len(token))


def _url_userinfo(text: str) -> Iterator[Credential]:
    for match in _URL_USERINFO.finditer(text):
        info = match["info"]
        user, colon, password = info.partition(":")
        start = match.start("info")
        if colon and password:
            offset = start + len(user) + 1
            yield Credential("URL password", password, offset, offset + len(password))
        elif not colon and user and match["scheme"].lower() in _WEB_SCHEMES:
            yield Credential("URL user", user, start, start + len(user))


def _named(text: str) -> Iterator[Credential]:
    for pattern in (_VARIABLE, _OPTION, _GLUED_PASSWORD, _SSHPASS):
        for match in pattern.finditer(text):
            name = match["name"]
            if pattern is _OPTION and name.lower().endswith(_NOT_A_VALUE_OPTION):
                continue
            group = "value" if pattern is not _OPTION else (
                "glued" if match["glued"] is not None else "given")
            if _unquote(match[group]):
                yield _word(name, match[group], match.start(group))


def _users(text: str) -> Iterator[Credential]:
    """``user:password`` after curl's ``-u`` or a ``--user``: the password; a cookie
    (``name=value``) after curl's ``-b``: all of it."""
    for match in _USER.finditer(text):
        name = f"-{match['short']}" if match["short"] else match["long"]
        raw, start = match["value"], match.start("value")
        if name == "-b":
            if "=" in raw:
                yield _word(name, raw, start)
            continue
        user, colon, password = raw.partition(":")
        if colon and _unquote(password):
            yield _word(name, password, start + len(user) + 1)


def _tokens(text: str) -> Iterator[Credential]:
    for pattern in (_TOKEN, _PRIVATE_KEY):
        for match in pattern.finditer(text):
            yield Credential("token", match["value"], match.start("value"), match.end("value"))


def _word(name: str, raw: str, start: int) -> Credential:
    """The credential a shell word (or the end of one) holds: its value without quotes,
    and the span of the word as written."""
    return Credential(name, _unquote(raw), start, start + len(raw))


def _unquote(raw: str) -> str:
    return raw.replace("'", "").replace('"', "")
