"""Host names that read as another one, shown in their ``xn--`` (punycode) form as
browsers do: ``https://аpple.com`` with a Cyrillic "а" becomes ``https://xn--pple-43d.com``.

An approximation of the checks Chromium's IDN spoof checker and Firefox's restriction
profile make, label by label, on the label as browsers map it (NFKC, lower case). A label
that maps to ASCII reads as where it goes and is left alone. Any other is shown as
``xn--`` when it holds:

- a character that is not a letter, a digit, a hyphen or a mark of a non-Latin letter
  (symbols, punctuation such as the fraction slash, modifier letters), or a combining
  mark on a Latin letter (``gi̇thub``);
- a deviation character (``ß``, ``ς``, joiners), which browsers and older resolvers send
  to different hosts;
- a Latin letter that imitates another (``ı``, ``ɑ``, ``ɡ``, small capitals and the rest
  of the IPA and phonetic blocks, ``ȷ``, ``ĸ``);
- letters of more than one script, except the mixes Chromium allows: Latin with Han and
  Japanese kana, with Han and Bopomofo, or with Han and Hangul (but not with the kana
  and Han that pass for a hyphen or a stroke: ``ー``, ``一``, …); digits of two numbering
  systems, or digits of another script than the letters';
- only letters that look like Latin ones, in Cyrillic, Greek or Armenian (``аррӏе``,
  ``ѕсоре``), or any letter of Cherokee, Lisu or Coptic, under an ASCII top-level domain
  other than that of a country writing in the script (``.ru``, ``.ua``, ``.gr``, ``.am``,
  …).

No list of well-known names is compared against (Chromium's skeleton check), so a single
script name that imitates a brand with letters not listed here is left in Unicode.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from typing import Final

from bot.hidden import HIDDEN_CHARS

LABELS_KEPT: Final = 4096
"""Labels whose verdict is remembered: a log repeats the same few host names."""
_SEPARATORS: Final = r"\s/\\:?#@\[\]<>\"'`(){},;!|*&=+%$^~⟦⟧" + HIDDEN_CHARS
_TOKEN: Final = re.compile(
    "(?<![^" + _SEPARATORS + "])[^." + _SEPARATORS + "]*+(?:[.][^." + _SEPARATORS + "]*+)++")
"""A stretch of text between separators holding a dot: it may be a host name (it is
checked further). Hidden characters and their marks end it, to be shown by
:mod:`bot.hidden`. Possessive, and starting only after a separator, so that a long
text is read once."""
_DEVIATIONS: Final = frozenset("ßς\u200c\u200d")
_LATIN_IMITATORS: Final = re.compile(
    "[\u0131\u0138\u0237\u0250-\u02af\u1d00-\u1dbf\ua730-\ua7ff\uab30-\uab6f]")
_DASH_LOOKALIKES: Final = re.compile("[ー一丨丶ノ〇]")
"""Kana and Han that pass for a hyphen, a stroke or a letter next to Latin ones."""
_ALLOWED_MIXES: Final = (
    frozenset({"LATIN", "HAN", "KANA"}),
    frozenset({"LATIN", "HAN", "BOPOMOFO"}),
    frozenset({"LATIN", "HAN", "HANGUL"}),
)
_LOOKALIKES: Final[dict[str, frozenset[str] | None]] = {
    "CYRILLIC": frozenset("авгеѕзіјкмнопрстухъыьӏԁԛԝһԍүҽѵѡ"),
    "GREEK": frozenset("αβγεικνορτυχω"),
    "ARMENIAN": frozenset("օսոհցզաւ"),
    "CHEROKEE": None,
    "LISU": None,
    "COPTIC": None,
}
"""Per script, its letters that look like Latin ones (None: every letter)."""
_COUNTRIES: Final = {
    "CYRILLIC": frozenset({"bg", "by", "kg", "kz", "mk", "mn", "rs", "ru", "su", "tj", "ua",
                           "uz"}),
    "GREEK": frozenset({"cy", "gr"}),
    "ARMENIAN": frozenset({"am"}),
}
"""Top-level domains of the countries that write in a script: no whole-script check."""
_SCRIPT_NAMES: Final = {
    "CJK": "HAN", "IDEOGRAPHIC": "HAN", "HIRAGANA": "KANA", "KATAKANA": "KANA",
    "KATAKANA-HIRAGANA": "KANA", "ARABIC-INDIC": "ARABIC", "EXTENDED": "ARABIC",
}
_NOT_SCRIPTS: Final = frozenset({"MODIFIER", "SMALL", "COMBINING", "MATHEMATICAL",
                                 "FULLWIDTH", "HALFWIDTH", "CIRCLED", "PARENTHESIZED"})


def honest_hosts(text: str) -> tuple[str, bool]:
    """``text`` with the labels of every host name in it that could pass for another in
    their ``xn--`` form, and whether there was any."""
    if text.isascii() or "." not in text:
        return text, False
    found = False

    def shown(match: re.Match[str]) -> str:
        nonlocal found
        token = match.group()
        host = token.rstrip(".")
        if host.isascii() or "." not in host:
            return token
        labels = host.split(".")
        if not all(labels):
            return token
        ascii_tld = unicodedata.normalize("NFKC", labels[-1]).lower()
        safe_tld = ascii_tld if ascii_tld.isascii() else None
        shown_labels = []
        for label in labels:
            if deceptive_label(label, safe_tld):
                found = True
                shown_labels.append(ascii_label(label))
            else:
                shown_labels.append(label)
        return ".".join(shown_labels) + token[len(host):]

    result = _TOKEN.sub(shown, text)
    return result, found


@functools.lru_cache(maxsize=LABELS_KEPT)
def deceptive_label(label: str, ascii_tld: str | None) -> bool:
    """Whether one label of a host name could pass for another (see the module's
    docstring); ``ascii_tld`` is the host's top-level domain when it is ASCII."""
    mapped = unicodedata.normalize("NFKC", label).lower()
    if mapped.isascii():
        return False
    scripts: set[str] = set()
    numbering: set[str] = set()
    previous: str | None = None  # the script of the letter just before
    for char in mapped:
        if char == "-" or char in "0123456789":
            numbering.update(("ASCII",) if char != "-" else ())
            previous = None
            continue
        if char in _DEVIATIONS or _LATIN_IMITATORS.match(char):
            return True
        category = unicodedata.category(char)
        if category in ("Mn", "Mc", "Me"):
            if previous in (None, "LATIN"):
                return True
            continue
        script = _script(char) if category.startswith("L") or category == "Nd" else None
        if script is None:
            return True
        if category == "Nd":
            numbering.add(script)
            previous = None
        else:
            scripts.add(script)
            previous = script
    other_digits = numbering - {"ASCII"}
    if len(numbering) > 1 or (other_digits and scripts and not other_digits <= scripts):
        return True
    if "LATIN" in scripts and _DASH_LOOKALIKES.search(mapped):
        return True
    if len(scripts) > 1 and not any(scripts <= mix for mix in _ALLOWED_MIXES):
        return True
    if len(scripts) == 1 and ascii_tld is not None:
        return _whole_script_confusable(mapped, scripts.pop(), ascii_tld)
    return False


def ascii_label(label: str) -> str:
    """``xn--`` and the punycode of the label as browsers map it (NFKC, lower case)."""
    mapped = unicodedata.normalize("NFKC", label).lower()
    if mapped.isascii():
        return mapped
    return "xn--" + mapped.encode("punycode").decode("ascii")


def _whole_script_confusable(label: str, script: str, tld: str) -> bool:
    if script not in _LOOKALIKES or tld in _COUNTRIES.get(script, ()):
        return False
    lookalikes = _LOOKALIKES[script]
    letters = [char for char in label if char.isalpha()]
    return lookalikes is None or all(char in lookalikes for char in letters)


def _script(char: str) -> str | None:
    """The script of a letter or digit, from its Unicode name (None when unnamed)."""
    name = unicodedata.name(char, "")
    word = name.split(" ", 1)[0]
    if not word or word in _NOT_SCRIPTS:
        return None
    return _SCRIPT_NAMES.get(word, word)
