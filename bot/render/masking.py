"""Text on its way to Telegram: :func:`clean` removes what Telegram cannot carry, and a
:class:`Masker` hides every secret of an approval wherever it occurs.

Both are used on every text a card shows, including what Markdown decodes from character
references and escapes, so they must be linear in the text: a card may hold thousands of
blocks and thousands of secrets.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable
from typing import TypeAlias

MASK = "••••••"
"""What a secret is replaced with wherever it must not be shown."""

MIN_SECRET_CHARS = 4
"""Shorter secrets are masked only where they stand alone, with no letter or digit right
before or after them: a PIN ``482`` is masked in ``PIN 482`` but not in ``14820``, and a
secret ``a`` does not turn every word holding an "a" into bullets (which would mangle the
card and reveal more than it hides)."""

_BAD_CHARS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")
_DROPPED_CHARS = re.compile("[\u0333\u033f\u030a]")
"""Combining marks Telegram silently removes from a message: removing them first keeps
what is measured equal to what is shown. (The separators and direction controls it also
removes are kept here, for :mod:`bot.hidden` to show and warn about.)"""

_KEY_CHARS = 32
"""A pattern holds at most this many characters of each secret; longer secrets are then
checked in full where their first characters were found. It bounds the pattern's size
and nesting whatever the secrets."""
_ALONE_BEFORE = r"(?<![^\W_])"
_ALONE_AFTER = r"(?![^\W_])"
_END = ""
"""The trie key marking that a secret ends at this node."""

_Trie: TypeAlias = dict[str, "_Trie"]


def clean(text: str) -> str:
    """Replace what Telegram cannot carry (lone surrogates, control characters) with
    U+FFFD and drop what it would remove; CR and CRLF become LF, a tab four spaces.

    Every change maps characters independently of their neighbours (CRLF aside), so a
    secret's cleaned form is found in any cleaned text that held the secret.
    """
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if "\t" in text:
        text = text.replace("\t", "    ")
    if _BAD_CHARS.search(text):
        text = _BAD_CHARS.sub("\ufffd", text)
    if _DROPPED_CHARS.search(text):
        text = _DROPPED_CHARS.sub("", text)
    return text


class Masker:
    """Replaces every secret in a cleaned text with :data:`MASK`: as it reads, and as it
    reads inside JSON text (where tabs, newlines and quotes are escaped).

    Where secrets overlap (``abcd1234`` and ``1234wxyz`` in ``abcd1234wxyz``) the whole
    stretch they cover is masked, so no part of either shows. Secrets of only whitespace
    hide nothing and are ignored; see :data:`MIN_SECRET_CHARS` for short ones.
    """

    def __init__(self, secrets: Iterable[str]) -> None:
        forms: set[str] = set()
        for secret in secrets:
            for form in (clean(secret), clean(json.dumps(secret, ensure_ascii=False)[1:-1])):
                if form.strip():
                    forms.add(form)
        long_forms = [form for form in forms if len(form) >= MIN_SECRET_CHARS]
        short_forms = [form for form in forms if len(form) < MIN_SECRET_CHARS]
        self._whole = frozenset(form for form in long_forms if len(form) <= _KEY_CHARS)
        self._by_key: dict[str, list[str]] = {}
        for form in sorted(long_forms, key=len, reverse=True):
            if len(form) > _KEY_CHARS:
                self._by_key.setdefault(form[:_KEY_CHARS], []).append(form)
        keys = self._whole | self._by_key.keys()
        self._long = re.compile("(?=(" + _trie_pattern(keys) + "))") if keys else None
        self._short = (
            re.compile(
                "(?=" + _ALONE_BEFORE + "(" + _alternatives(short_forms) + ")" + _ALONE_AFTER + ")"
            )
            if short_forms
            else None
        )

    def __bool__(self) -> bool:
        """Whether there is any secret to mask."""
        return self._long is not None or self._short is not None

    def __call__(self, text: str) -> str:
        spans = self.spans(text)
        if not spans:
            return text
        parts: list[str] = []
        position = 0
        for start, end in spans:
            parts.append(text[position:start])
            parts.append(MASK)
            position = end
        parts.append(text[position:])
        return "".join(parts)

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Where secrets are in ``text``: sorted ``(start, end)`` pairs that neither
        overlap nor touch."""
        found: list[tuple[int, int]] = []
        if self._long is not None:
            for match in self._long.finditer(text):
                start = match.start()
                end = self._end(text, start, match.group(1))
                if end > start:
                    found.append((start, end))
        if self._short is not None:
            found.extend((match.start(), match.end(1)) for match in self._short.finditer(text))
        return _merged(found)

    def _end(self, text: str, start: int, key: str) -> int:
        """Where the longest secret starting at ``start`` ends (``start`` if none does);
        ``key`` is the longest pattern key found there."""
        for form in self._by_key.get(key, ()):
            if text.startswith(form, start):
                return start + len(form)
        for size in range(len(key), MIN_SECRET_CHARS - 1, -1):
            if key[:size] in self._whole:
                return start + size
        return start


NO_SECRETS = Masker(())
"""A masker that hides nothing."""

MASKERS_KEPT = 16


def masker(secrets: Iterable[str]) -> Masker:
    """The :class:`Masker` of ``secrets``, built once for each set of secrets: a card is
    drawn again on every change, and building the masker of thousands of secrets takes
    longer than using it."""
    return _cached_masker(tuple(secrets))


@functools.lru_cache(maxsize=MASKERS_KEPT)
def _cached_masker(secrets: tuple[str, ...]) -> Masker:
    return Masker(secrets) if secrets else NO_SECRETS


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    spans.sort()
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def _alternatives(forms: Iterable[str]) -> str:
    # Longest first: the regex takes the first alternative that matches.
    return "|".join(re.escape(form) for form in sorted(forms, key=len, reverse=True))


def _trie_pattern(keys: Iterable[str]) -> str:
    """A regex matching the longest of ``keys`` at a position, in time that does not grow
    with their number: keys sharing a prefix share one branch (a plain alternation would
    try every key at every position)."""
    root: _Trie = {}
    for key in keys:
        node = root
        for char in key:
            node = node.setdefault(char, {})
        node[_END] = {}
    return _node_pattern(root)


def _node_pattern(node: _Trie) -> str:
    """The pattern below ``node``; recursion depth is bounded by :data:`_KEY_CHARS`."""
    branches = [
        re.escape(char) + _node_pattern(child)
        for char, child in sorted(node.items())
        if char != _END
    ]
    if not branches:
        return ""
    pattern = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
    # Greedy "?": a longer key is tried before the one ending here.
    return "(?:" + pattern + ")?" if _END in node else pattern
