"""Turn blocks and their JSON values into :class:`BlockView`: the plain text a template
shows, plus what the template needs to pick a widget (kind, language, link, parsed time).

Everything that reaches a template passes through here first: lone surrogates and control
characters are replaced, every secret is masked wherever it occurs, and invisible or
direction-changing characters are shown (monospace) or marked (prose); a view that had any
says so in ``hidden``. A host name that could pass for another is shown in its ``xn--``
form, and ``punycode`` says so.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import date, datetime
from typing import Literal

from bot import hidden
from bot.protocol.payloads import JSON, Block
from bot.render.credentials import is_credential_key
from bot.render.hosts import honest_hosts
from bot.render.markdown import http_link, markdown_reveals, markdown_to_text
from bot.render.masking import MASK, NO_SECRETS, Masker, clean

SecretsMode = Literal["spoiler", "masked", "details"]
"""How a card shows a ``secret`` block: behind a spoiler, masked, or (``details``, never
a chat's setting: the bot's choice when the Mini App can reveal it) masked with its name
and a pointer to the Mini App's "Reveal"."""

LONG_TEXT_LINES = 4
LONG_TEXT_CHARS = 300
"""Text longer than this goes into an expandable quote."""

_LAYOUTS = {"key_value": "row", "field": "field", "block": "block"}
_KINDS = frozenset(
    {
        "string", "text", "markdown", "code", "diff", "command", "email", "url", "path",
        "json", "number", "boolean", "datetime", "secret",
    }
)  # fmt: skip
MONOSPACE_KINDS = frozenset({"code", "diff", "json", "command", "path"})
"""Value kinds shown in ``<pre>`` or ``<code>``: hidden characters are spelled out in them
(``⟦U+2067⟧``); elsewhere each run of them is one :data:`bot.hidden.MARK`."""
_CREDENTIAL_PARTS = re.compile(r"[\s=:;,]+")
MIN_CREDENTIAL_PART = 8
"""A part of a credential's value this long is masked on its own too."""
_SHEBANG_PROGRAM = re.compile(r"([A-Za-z][A-Za-z0-9_+-]{0,31}?)[0-9.]*")
_TRUE_WORDS = frozenset(("true", "yes", "on", "1"))
_FALSE_WORDS = frozenset(("false", "no", "off", "0"))


@dataclass(frozen=True)
class BlockView:
    """One block as the templates see it.

    ``layout`` is ``row`` (key_value), ``field``, ``block``, ``arguments`` (raw arguments
    when there are no blocks), ``question`` or ``options``. ``kind`` selects the value
    macro: a wire ``value_type``, ``masked`` for a hidden secret or ``options``.
    ``text`` is what is shown (already masked) and what gets cut to fit; ``more_lines`` /
    ``more_chars`` say how much was cut; ``lost_chars`` how much was cut before arrival.
    ``mask`` hides the approval's secrets in what Markdown decodes from ``text``.
    ``in_details``: a masked secret that the Mini App reveals (the card says so).
    ``hidden`` says whether the label or value held invisible or direction-changing
    characters (``text`` and ``label`` show them; see :mod:`bot.hidden`);
    ``punycode`` whether a host name in them is shown in its ``xn--`` form
    (:mod:`bot.render.hosts`).
    """

    layout: str
    kind: str
    label: str
    text: str
    language: str = ""
    link: bool = False
    when: datetime | None = None
    date_only: bool = False
    flag: bool | None = None
    secret_chars: int = 0
    in_details: bool = False
    expandable: bool = False
    more_lines: int = 0
    more_chars: int = 0
    lost_chars: int = 0
    hidden: bool = False
    punycode: bool = False
    mask: Masker = field(default=NO_SECRETS, compare=False, repr=False)

    @property
    def cut(self) -> bool:
        return bool(self.more_lines or self.more_chars)

    @property
    def standalone(self) -> bool:
        """Whether the value is a block of its own (a ``<pre>``, a quote or several lines
        of Markdown) rather than text that can follow its label on the same line."""
        return (
            self.kind in ("code", "diff", "json")
            or self.expandable
            or (self.kind in ("command", "markdown") and "\n" in self.text)
        )


def secret_values(blocks: Iterable[Block]) -> list[str]:
    """The text of every secret block, as received, and of every leaf of a secret object
    or list (each may show on its own elsewhere: in the arguments, the summary, a file)."""
    values: list[str] = []
    for block in blocks:
        if block.value_type == "secret":
            values.append(plain_text(block.value))
            if isinstance(block.value, dict | list):
                values.extend(_leaves(block.value))
    return values


def card_secrets(chosen: SecretsMode, *, app: bool, details: bool) -> SecretsMode:
    """How a chat's cards show secrets: as the chat ``chosen`` without the Mini App
    (``app``); with it, never in a Telegram message: ``details`` where the card has a
    Details button and the chat lets approvers see secrets (``spoiler``), else masked."""
    if not app:
        return chosen
    return "details" if chosen == "spoiler" and details else "masked"


def hide_credentials(value: JSON) -> tuple[JSON, list[str]]:
    """``value`` with whatever sits under a credential-named key (at any depth) replaced
    by :data:`MASK`, and the text of everything replaced (each leaf of an object or list
    and each long enough part of a value on its own), for the masker: raw arguments
    shown without blocks hide these in every chat, as the blocks ``ask`` makes would."""
    hidden_texts: list[str] = []

    def shown(item: JSON) -> JSON:
        if isinstance(item, dict):
            copy: dict[str, JSON] = {}
            for key, inner in item.items():
                if is_credential_key(key) and inner not in (None, ""):
                    texts = [plain_text(inner)]
                    texts += _leaves(inner) if isinstance(inner, dict | list) else ()
                    hidden_texts.extend(texts)
                    # "Bearer <token>", "sid=<token>": the token may show on its own.
                    hidden_texts.extend(part for text in texts for part in
                                        _CREDENTIAL_PARTS.split(text)
                                        if len(part) >= MIN_CREDENTIAL_PART)
                    copy[key] = MASK
                else:
                    copy[key] = shown(inner)
            return copy
        if isinstance(item, list):
            return [shown(inner) for inner in item]
        return item

    return shown(value), hidden_texts


def _leaves(value: JSON) -> list[str]:
    """The text of every string and number inside a JSON object or list."""
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in _leaves(item)]
    if isinstance(value, list):
        return [leaf for item in value for leaf in _leaves(item)]
    if isinstance(value, str) or (isinstance(value, int | float) and not isinstance(value, bool)):
        return [plain_text(value)]
    return []


def plain_text(value: JSON) -> str:
    """A JSON value as one plain string: strings as they are, other values as JSON."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return _int_text(value)
    if isinstance(value, float):
        return repr(value)
    try:
        return json.dumps(value, ensure_ascii=False)
    except (ValueError, TypeError, RecursionError):
        return "…"


def pretty_json(value: JSON) -> str:
    """Indented JSON for a ``json`` block or raw arguments."""
    try:
        return json.dumps(value, indent=2, ensure_ascii=False)
    except (ValueError, TypeError, RecursionError):
        return plain_text(value)


def block_view(block: Block, *, mask: Masker, secrets: SecretsMode) -> BlockView:
    """The view of one block. Unknown ``type`` or ``value_type``: a plain-text row.
    A ``secret`` is hidden whatever its layout."""
    raw_label = mask(clean(block.label))
    layout = _LAYOUTS.get(block.type)
    value_type = block.value_type
    if value_type == "secret":
        text = clean(plain_text(block.value))
        if secrets == "spoiler":
            return _view(layout or "row", "secret", raw_label, text, block)
        label = hidden.strip(raw_label)
        return BlockView(layout or "row", "masked", label.strip(), "", secret_chars=len(text),
                         in_details=secrets == "details", hidden=label != raw_label)
    if layout is None or value_type not in _KINDS:
        return _view("row", "string", raw_label, mask(clean(plain_text(block.value))), block)
    if value_type == "json":
        return _json_view(layout, raw_label, block, mask)
    text = mask(clean(plain_text(block.value)))
    if value_type == "url":
        return _view(layout, "url", raw_label, text, block, link=True)
    if value_type == "boolean":
        return _view(layout, "boolean", raw_label, text, block, flag=_boolean(block.value))
    if value_type == "datetime":
        when, date_only = _datetime(block.value)
        return _view(layout, "datetime", raw_label, text, block, when=when, date_only=date_only)
    if value_type == "diff":
        return _view(layout, "diff", raw_label, text, block, language="diff")
    if value_type == "code":
        return _view(layout, "code", raw_label, text, block, language=_shebang_language(text))
    if value_type == "markdown":
        return _view(layout, "markdown", raw_label, text, block, expandable=is_long(text),
                     mask=mask)
    if value_type in ("text", "string"):
        return _view(layout, value_type, raw_label, text, block, expandable=is_long(text))
    return _view(layout, value_type, raw_label, text, block)


def arguments_view(arguments: JSON, *, mask: Masker) -> BlockView:
    """Raw arguments as pretty JSON: the fallback when an approval has no blocks."""
    text, punycode = honest_hosts(mask(clean(pretty_json(arguments))))
    return BlockView("arguments", "json", "", _shown(hidden.reveal(text)), "json",
                     hidden=hidden.has_hidden(text), punycode=punycode)


def question_view(question: str, *, mask: Masker) -> BlockView:
    text, punycode = honest_hosts(mask(clean(question)))
    shown = _shown(hidden.strip(text))
    return BlockView("question", "text", "", shown, expandable=is_long(shown),
                     hidden=hidden.has_hidden(text), punycode=punycode)


def options_view(options: Iterable[str], *, mask: Masker) -> BlockView:
    """A question's options, one per line (an option's own line breaks become spaces)."""
    texts = [honest_hosts(mask(clean(option))) for option in options]
    lines = [hidden.strip(text).replace("\n", " ").strip() for text, _ in texts]
    return BlockView("options", "options", "", "\n".join(lines),
                     hidden=any(hidden.has_hidden(text) for text, _ in texts),
                     punycode=any(punycode for _, punycode in texts))


def for_attachment(view: BlockView) -> BlockView:
    """``view`` as the attached file shows it: a secret masked, and Markdown whose escapes
    or character references spell out a secret as the text it reads as, masked."""
    if view.kind in ("secret", "masked"):
        return replace(view, text=MASK)
    if view.kind == "markdown" and view.mask and markdown_reveals(view.text, view.mask):
        return replace(view, kind="text", text=markdown_to_text(view.text, view.mask))
    return view


def is_long(text: str) -> bool:
    return len(text) > LONG_TEXT_CHARS or text.count("\n") >= LONG_TEXT_LINES


def _view(
    layout: str,
    kind: str,
    label: str,
    text: str,
    block: Block,
    *,
    language: str = "",
    link: bool = False,
    when: datetime | None = None,
    date_only: bool = False,
    flag: bool | None = None,
    expandable: bool = False,
    mask: Masker = NO_SECRETS,
) -> BlockView:
    """The view of a value; ``label`` and ``text`` masked but with their hidden characters
    still in (this shows or marks them) and their host names as given. ``link``: link
    the value if it is a web address Telegram accepts."""
    monospace = kind in MONOSPACE_KINDS
    text, text_punycode = honest_hosts(text)
    label, label_punycode = honest_hosts(label)
    shown_label = hidden.strip(label)
    shown_text = hidden.reveal(text) if monospace else hidden.strip(text)
    found = shown_label != label or shown_text != text or (
        kind == "markdown" and "&" in text and hidden.has_hidden(html.unescape(text)))
    return BlockView(
        layout,
        kind,
        shown_label.strip(),
        _shown(shown_text),
        language=language,
        link=link and http_link(text),
        when=when,
        date_only=date_only,
        flag=flag,
        expandable=expandable,
        lost_chars=block.truncated_chars,
        hidden=found,
        punycode=text_punycode or label_punycode,
        mask=mask,
    )


def _shown(text: str) -> str:
    """Whitespace-only text is shown as empty (Telegram drops whitespace-only entities)."""
    return text if text.strip() else ""


def _json_view(layout: str, label: str, block: Block, mask: Masker) -> BlockView:
    value = block.value
    language = "json"
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            language = ""
    text = block.value if language == "" else pretty_json(value)
    return _view(layout, "json", label, mask(clean(str(text))), block, language=language)


def _int_text(value: int) -> str:
    try:
        return str(value)
    except ValueError:  # more digits than Python agrees to print
        return "≈ 10^" + str(int(value.bit_length() * 0.30103))


def _boolean(value: JSON) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        word = value.strip().lower()
        if word in _TRUE_WORDS:
            return True
        if word in _FALSE_WORDS:
            return False
    return None


def _datetime(value: JSON) -> tuple[datetime | None, bool]:
    if not isinstance(value, str) or len(value) > 64:
        return None, False
    text = value.strip()
    try:
        day = date.fromisoformat(text)
    except ValueError:
        pass
    else:
        return datetime(day.year, day.month, day.day), True
    try:
        return datetime.fromisoformat(text), False
    except ValueError:
        return None, False


def _shebang_language(code: str) -> str:
    """The language a ``#!`` line names (``python3`` → ``python``), or ``""``."""
    if not code.startswith("#!"):
        return ""
    words = code[2 : code.find("\n") if "\n" in code else len(code)].split()
    if not words:
        return ""
    program = words[0].rsplit("/", 1)[-1]
    if program == "env":
        rest = [word for word in words[1:] if not word.startswith("-")]
        program = rest[0] if rest else ""
    match = _SHEBANG_PROGRAM.fullmatch(program)
    return match.group(1).lower() if match else ""
