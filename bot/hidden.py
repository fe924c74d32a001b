"""What would hide part of a text from the person reading it: characters that are
invisible or change the direction of the text around them, and lines after the first.

A card must show what runs, byte for byte. ``echo done \\u2067;rm -rf ~ #\\u2069`` looks
like one harmless ``echo`` with a comment when the isolates are left to do their work,
and a command followed by 80 blank lines and a second one reads as the first alone in a
one-line title. So every value shown goes through :func:`reveal` (monospace: each such
character becomes ``⟦U+2067⟧``) or :func:`strip` (prose: each run of them becomes
:data:`MARK`); titles and one-line summaries go through :func:`one_line`, which says how
many more lines there are. :func:`holds_hidden` is the test for "no grant may cover this".

Marked: Unicode categories Cf (format: bidi controls and isolates, zero-width spaces and
joiners, the soft hyphen, tag characters, …), Zl and Zp (line and paragraph separators),
the C1 controls (``U+0085`` among them) and the other default-ignorable code points
(Hangul fillers, the combining grapheme joiner, variation selectors, …). Left alone, as
they change how a text is drawn without hiding a word: a zero-width joiner inside an
emoji sequence or between a virama and a letter, a zero-width non-joiner between Arabic
letters or between a virama and a letter, and one variation selector after an emoji, a
symbol, a keycap digit or an ideograph.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterator, Mapping
from typing import Final

MARK: Final = "⟦?⟧"
"""What a run of hidden characters becomes in prose."""

HIDDEN_CHARS: Final = (
    "\x80-\x9f"  # C1 controls
    "\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2"
    "\u115f\u1160\u17b4\u17b5\u180b-\u180f"
    "\u200b-\u200f\u2028-\u202e\u2060-\u206f"
    "\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb"
    "\U000110bd\U000110cd\U00013430-\U0001345f\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0000-\U000e0fff"
)
"""Every character that may be hidden, as the inside of a regex character class:
categories Cf, Zl and Zp, the C1 controls and the default-ignorable code points (tests
check it against :mod:`unicodedata`)."""
_HIDDEN: Final = re.compile("[" + HIDDEN_CHARS + "]")
_CONTROLS: Final = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|\r(?!\n)")
"""Control characters besides tab, line feed and CRLF: a card shows them as U+FFFD or a
line break, which does not say what they are."""
BREAKS: Final = re.compile(r"\r\n|[\n\r\v\f\x1c-\x1e\x85\u2028\u2029]")
"""Where Python's ``str.splitlines`` (and so a shell, for ``\\n``) starts a new line."""

_NOTE: Final = re.compile(r" \(\+[\d,]+ more lines?\)$")
_ZWNJ, _ZWJ, _VS16 = "\u200c", "\u200d", "\ufe0f"
_KEYCAP = "\u20e3"
_VIRAMA = 9
"""The canonical combining class of a virama."""


def has_hidden(text: str) -> bool:
    """Whether ``text`` holds a character :func:`reveal` and :func:`strip` would mark."""
    return not text.isascii() and _HIDDEN.search(text) is not None and \
        next(_hidden_runs(text), None) is not None


def reveal(text: str) -> str:
    """``text`` for a monospace value: each hidden character as ``⟦U+XXXX⟧``."""
    return _replaced(text, lambda run: "".join(f"⟦U+{ord(c):04X}⟧" for c in run))


def strip(text: str) -> str:
    """``text`` for prose: each run of hidden characters as :data:`MARK`."""
    return _replaced(text, lambda run: MARK)


def holds_hidden(value: object) -> bool:
    """Whether any text in ``value`` (a string, or the keys and items of mappings, lists
    and tuples at any depth) holds a hidden character or a control character other than
    tab, line feed and CRLF. No grant may cover a call for which this is true."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if _CONTROLS.search(item) or has_hidden(item):
                return True
        elif isinstance(item, Mapping):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            pending.extend(item)
    return False


def first_line(text: str) -> tuple[str, int]:
    """The first line of ``text`` holding more than whitespace, and how many lines come
    after it up to the last such line."""
    lines = BREAKS.split(text)
    shown = [index for index, line in enumerate(lines) if line.strip()]
    if not shown:
        return "", 0
    return lines[shown[0]], shown[-1] - shown[0]


def more_lines(count: int) -> str:
    """`` (+3 more lines)``, or ``""`` for none."""
    if count <= 0:
        return ""
    return f" (+{count:,} more line{'s' if count != 1 else ''})"


def one_line(text: str, chars: int | None = None) -> str:
    """``text`` on one line: its first line, inner whitespace runs as one space, then how
    many more lines there are; the line is shortened with "…" so that the whole fits in
    ``chars`` characters (the note about more lines is never cut)."""
    line, count = first_line(text)
    line, note = " ".join(line.split()), more_lines(count)
    kept = _NOTE.search(line) if not count else None
    if kept is not None:  # already one line with its note: keep the note when shortening
        line, note = line[: kept.start()], kept.group()
    if chars is not None and len(line) + len(note) > chars:
        line = line[: max(chars - len(note) - 1, 1)].rstrip() + "…"
    return line + note


def _replaced(text: str, replacement: Callable[[str], str]) -> str:
    if text.isascii() or _HIDDEN.search(text) is None:  # no hidden character is ASCII
        return text
    parts: list[str] = []
    position = 0
    for start, end in _hidden_runs(text):
        parts += (text[position:start], replacement(text[start:end]))
        position = end
    parts.append(text[position:])
    return "".join(parts)


def _hidden_runs(text: str) -> Iterator[tuple[int, int]]:
    """Where the characters to mark are, as ``(start, end)`` runs."""
    run_start = run_end = -1
    for match in _HIDDEN.finditer(text):
        index = match.start()
        if _drawn(text, index):
            continue
        if index != run_end:
            if run_end >= 0:
                yield run_start, run_end
            run_start = index
        run_end = index + 1
    if run_end >= 0:
        yield run_start, run_end


def _drawn(text: str, index: int) -> bool:
    """Whether the joiner or selector at ``index`` only shapes its neighbours."""
    char = text[index]
    before = text[index - 1] if index > 0 else ""
    after = text[index + 1] if index + 1 < len(text) else ""
    if char == _ZWJ:
        if before == _VS16 or "\U0001f3fb" <= before <= "\U0001f3ff":  # skin tones
            before = text[index - 2] if index > 1 else ""
        return _conjunct(before, after) or (_emoji(before) and _emoji(after))
    if char == _ZWNJ:
        return _conjunct(before, after) or (_arabic(before) and _arabic(after))
    if "\ufe00" <= char <= "\ufe0f" or "\U000e0100" <= char <= "\U000e01ef":
        keycap = before != "" and before in "0123456789#*" and after == _KEYCAP
        return _emoji(before) or keycap or _ideograph(before)
    if "\u180b" <= char <= "\u180f" and char != "\u180e":
        return before != "" and unicodedata.name(before, "").startswith("MONGOLIAN")
    return False


def _emoji(char: str) -> bool:
    """An emoji or another symbol drawn as a picture (never ASCII: ``<`` is a symbol)."""
    return char > "\x7f" and unicodedata.category(char) in ("So", "Sm")


def _conjunct(before: str, after: str) -> bool:
    """Between a virama and a letter of its script (which a joiner or non-joiner shapes)."""
    return (before != "" and unicodedata.combining(before) == _VIRAMA and after.isalpha()
            and not after.isascii())


def _arabic(char: str) -> bool:
    return char.isalpha() and unicodedata.name(char, "").startswith("ARABIC")


def _ideograph(char: str) -> bool:
    return char != "" and unicodedata.name(char, "").startswith("CJK")

