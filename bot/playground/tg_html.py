"""Telegram's HTML parse mode, re-implemented so tests can check rendered text offline.

`parse_html` follows tdlib's parser (``td/telegram/MessageEntity.cpp``: ``parse_html``,
``fix_formatted_text``): the same tokenizer, the same error texts and UTF-8 byte offsets,
the same silent repairs (nesting Telegram does not allow, whitespace-only entities, trimming).
It returns what Telegram would store: the visible text and its entities, offsets and lengths
in UTF-16 code units, including a close approximation of the auto-detected entities
(URLs, e-mails, @mentions, #hashtags, /commands).

`problems` lists everything that would make the stored message differ from what the markup
asks for: a refusal, or an entity Telegram would silently drop, split or turn into text.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field, replace

MESSAGE_LIMIT = 4096
"""Longest message text, in UTF-16 code units after trimming."""
CAPTION_LIMIT = 1024
"""Longest media caption, in UTF-16 code units after trimming."""
ENTITY_LIMIT = 100
"""Entities Telegram keeps in one message; the rest are silently dropped."""
RAW_TEXT_LIMIT = 32768
"""Longest raw `text` parameter, markup included, in UTF-8 bytes."""


@dataclass(frozen=True)
class Entity:
    """A Bot API MessageEntity; `offset` and `length` count UTF-16 code units."""

    type: str
    offset: int
    length: int
    url: str | None = None
    language: str | None = None

    @property
    def end(self) -> int:
        return self.offset + self.length


class HtmlRefused(Exception):
    """Telegram refuses the text; `description` is the Bot API's own error description."""

    def __init__(self, description: str) -> None:
        super().__init__(description)
        self.description = description


def parse_html(text: str) -> tuple[str, list[Entity]]:
    """Return the text and entities Telegram stores for a message sent with parse_mode HTML.

    Raises `HtmlRefused` with Telegram's description when the Bot API would answer 400.
    """
    stored = _analyse(text, limit=MESSAGE_LIMIT, too_long="message is too long", caption=False)
    return stored.text, stored.entities


def parse_entities(text: str) -> tuple[str, list[Entity]]:
    """The first step alone: the text and entities the markup itself gives, as tdlib's
    ``parse_html`` returns them (and TDLib's ``parseTextEntities`` request), before Telegram
    repairs nesting, trims, auto-detects links and caps the entity count.

    Raises `HtmlRefused` with Telegram's description for markup Telegram refuses.
    """
    parsed = _Tokenizer(text).run()
    return parsed.text, parsed.entities


def parse_caption(text: str) -> tuple[str, list[Entity]]:
    """Like `parse_html`, for a media caption: it may be empty and is capped at 1024."""
    stored = _analyse(
        text, limit=CAPTION_LIMIT, too_long="message caption is too long", caption=True
    )
    return stored.text, stored.entities


def problems(text: str) -> list[str]:
    """Describe why Telegram would refuse `text` or not keep every entity it asks for.

    An empty list means Telegram accepts the text and keeps each entity exactly.
    """
    try:
        stored = _analyse(text, limit=MESSAGE_LIMIT, too_long="message is too long", caption=False)
    except HtmlRefused as refused:
        return [refused.description]
    return list(stored.notes)


def utf16_length(text: str) -> int:
    """Length of `text` in UTF-16 code units, the unit of Telegram's limits and offsets."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


# --- tokenizer ----------------------------------------------------------------------------

_ALLOWED_TAGS = frozenset(
    {
        "a", "b", "strong", "i", "em", "s", "strike", "del", "u", "ins", "tg-spoiler",
        "tg-emoji", "tg-time", "span", "pre", "code", "blockquote",
    }
)  # fmt: skip
_SIMPLE_TAGS = {
    "b": "bold",
    "strong": "bold",
    "i": "italic",
    "em": "italic",
    "u": "underline",
    "ins": "underline",
    "s": "strikethrough",
    "strike": "strikethrough",
    "del": "strikethrough",
    "tg-spoiler": "spoiler",
    "span": "spoiler",
}
_NAMED_CHARACTERS = {"lt": "<", "gt": ">", "amp": "&", "quot": '"'}
_TD_SPACES = frozenset(" \t\r\n\v\0")  # "\0" stands for the end of the C string tdlib scans
_REMOVED_CHARACTERS = frozenset(
    [chr(c) for c in range(0x2028, 0x202F)] + ["\u0333", "\u033f", "\u030a"]
)
_MAX_USER_ID = (1 << 40) - 1


def _is_ascii_alnum(c: str) -> bool:
    return c.isascii() and c.isalnum()


def _ascii_lower(s: str) -> str:
    return "".join(c.lower() if "A" <= c <= "Z" else c for c in s)


@dataclass
class _OpenTag:
    name: str
    argument: str
    expandable: bool
    utf16_offset: int
    text_index: int


@dataclass
class _Parsed:
    text: str
    entities: list[Entity]
    notes: list[str]


class _Tokenizer:
    """A port of tdlib's `parse_html`: one pass over the raw text, tags kept on a stack."""

    def __init__(self, raw: str) -> None:
        self.raw = raw
        self.src = raw + "\0"
        self.out: list[str] = []
        self.utf16 = 0
        self.entities: list[Entity] = []
        self.notes: list[str] = []
        self.stack: list[_OpenTag] = []

    def refuse(self, message: str) -> HtmlRefused:
        return HtmlRefused(f"Bad Request: can't parse entities: {message}")

    def byte_offset(self, index: int) -> int:
        return len(self.raw[:index].encode("utf-8", "surrogatepass"))

    def emit(self, c: str) -> None:
        """Append one visible character."""
        self.out.append(c)
        self.utf16 += 2 if ord(c) > 0xFFFF else 1

    def decode_entity(self, pos: int) -> tuple[str, int] | None:
        """Decode a character reference at `pos` ("&"); None leaves the "&" literal."""
        src = self.src
        end = pos + 1
        if src[end] == "#":
            end += 1
            digits = "0123456789"
            base = 10
            if src[end] == "x":
                end += 1
                digits, base = "0123456789abcdefABCDEF", 16
            start = end
            while src[end] in digits and src[end] != "\0":
                end += 1
            code = int(src[start:end], base) if end > start else 0
            if code == 0 or code >= 0x10FFFF or end - pos >= 10:
                return None
            decoded = chr(code)
        else:
            while src[end].isascii() and src[end].isalpha():
                end += 1
            named = _NAMED_CHARACTERS.get(src[pos + 1 : end])
            if named is None:
                return None
            decoded = named
        if src[end] == ";":
            end += 1
        return decoded, end

    def run(self) -> _Parsed:
        src, size = self.src, len(self.raw)
        i = 0
        while i < size:
            c = src[i]
            if c == "&":
                decoded = self.decode_entity(i)
                if decoded is not None:
                    self.emit(decoded[0])
                    i = decoded[1]
                    continue
            if c != "<":
                self.emit(c)
                i += 1
                continue
            i = self.end_tag(i) if src[i + 1] == "/" else self.start_tag(i)
        if self.stack:
            raise self.refuse(
                f'Can\'t find end tag corresponding to start tag "{self.stack[-1].name}"'
            )
        return _Parsed(self.visible_text(), self.entities, self.notes)

    def visible_text(self) -> str:
        text = "".join(self.out)
        try:  # surrogate halves written as numeric references pair up again
            return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
        except UnicodeDecodeError:
            raise self.refuse(
                "Text contains invalid Unicode characters after decoding HTML entities, "
                "check for unmatched surrogate code units"
            ) from None

    def skip_spaces(self, i: int) -> int:
        while self.src[i] != "\0" and self.src[i] in _TD_SPACES:
            i += 1
        return i

    def start_tag(self, begin: int) -> int:
        src = self.src
        i = begin + 1
        while src[i] not in _TD_SPACES and src[i] != ">":
            i += 1
        if src[i] == "\0":
            raise self.refuse(f"Unclosed start tag at byte offset {self.byte_offset(begin)}")
        name = _ascii_lower(src[begin + 1 : i])
        if name not in _ALLOWED_TAGS:
            raise self.refuse(
                f'Unsupported start tag "{name}" at byte offset {self.byte_offset(begin)}'
            )
        argument = ""
        expandable = False
        while src[i] != ">":
            i = self.skip_spaces(i)
            if src[i] == ">":
                break
            attribute_begin = i
            while src[i] not in _TD_SPACES and src[i] not in "=>/\"'":
                i += 1
            attribute = src[attribute_begin:i]
            if not attribute:
                raise self.refuse(
                    f'Empty attribute name in the tag "{name}" at byte offset '
                    f"{self.byte_offset(begin)}"
                )
            i = self.skip_spaces(i)
            if src[i] == "\0":
                raise self.refuse(
                    f'Unclosed start tag "{name}" at byte offset {self.byte_offset(begin)}'
                )
            value = ""
            if src[i] == "=":
                value, i = self.attribute_value(name, begin, self.skip_spaces(i + 1))
            if name == "a" and attribute == "href":
                argument = value
            elif name == "code" and attribute == "class" and value.startswith("language-"):
                argument = value[len("language-") :]
            elif name == "span" and attribute == "class" and value.startswith("tg-"):
                argument = value[len("tg-") :]
            elif (name, attribute) in {("tg-emoji", "emoji-id"), ("tg-time", "unix")}:
                argument = value
            elif name == "blockquote" and attribute == "expandable":
                expandable = True
        if name == "span" and argument != "spoiler":
            raise self.refuse(
                f'Tag "span" must have class "tg-spoiler" at byte offset {self.byte_offset(begin)}'
            )
        self.stack.append(_OpenTag(name, argument, expandable, self.utf16, len(self.out)))
        return i + 1

    def attribute_value(self, tag: str, begin: int, i: int) -> tuple[str, int]:
        src = self.src
        if src[i] == "\0":
            raise self.refuse(
                f'Unclosed start tag "{tag}" at byte offset {self.byte_offset(begin)}'
            )
        if src[i] not in "'\"":
            token_begin = i
            while _is_ascii_alnum(src[i]) or src[i] in ".-":
                i += 1
            if src[i] not in _TD_SPACES and src[i] != ">":
                raise self.refuse(
                    f"Unexpected end of name token at byte offset {self.byte_offset(token_begin)}"
                )
            value = _ascii_lower(src[token_begin:i])
        else:
            value, i = self.quoted_value(i)
        if src[i] == "\0":
            raise self.refuse(f"Unclosed start tag at byte offset {self.byte_offset(begin)}")
        return value, i

    def quoted_value(self, i: int) -> tuple[str, int]:
        src = self.src
        quote = src[i]
        i += 1
        chars: list[str] = []
        while src[i] != quote and src[i] != "\0":
            if src[i] == "&":
                decoded = self.decode_entity(i)
                if decoded is not None:
                    chars.append(decoded[0])
                    i = decoded[1]
                    continue
            chars.append(src[i])
            i += 1
        if src[i] == quote:
            i += 1
        return "".join(chars), i

    def end_tag(self, begin: int) -> int:
        src = self.src
        if not self.stack:
            raise self.refuse(f"Unexpected end tag at byte offset {self.byte_offset(begin)}")
        i = begin + 1
        while src[i] not in _TD_SPACES and src[i] != ">":
            i += 1
        end_name = _ascii_lower(src[begin + 2 : i])
        i = self.skip_spaces(i)
        if src[i] != ">":
            raise self.refuse(f"Unclosed end tag at byte offset {self.byte_offset(begin)}")
        open_tag = self.stack[-1]
        if end_name and end_name != open_tag.name:
            raise self.refuse(
                f"Unmatched end tag at byte offset {self.byte_offset(begin)}, "
                f'expected "</{open_tag.name}>", found "</{end_name}>"'
            )
        if self.utf16 > open_tag.utf16_offset:
            self.close_entity(open_tag)
        self.stack.pop()
        return i + 1

    def close_entity(self, tag: _OpenTag) -> None:
        offset, length = tag.utf16_offset, self.utf16 - tag.utf16_offset
        last = self.entities[-1] if self.entities else None
        same_range = last is not None and (last.offset, last.length) == (offset, length)
        if tag.name in _SIMPLE_TAGS:
            self.entities.append(Entity(_SIMPLE_TAGS[tag.name], offset, length))
        elif tag.name == "tg-emoji":
            if not tag.argument.isdigit() or int(tag.argument) == 0:
                raise self.refuse("Invalid custom emoji identifier specified")
            self.entities.append(Entity("custom_emoji", offset, length))
        elif tag.name == "tg-time":
            self.entities.append(Entity("date_time", offset, length))
        elif tag.name == "a":
            self.close_link(tag, offset, length)
        elif tag.name == "pre":
            if same_range and last is not None and last.type == "code" and last.language:
                self.entities[-1] = Entity("pre", offset, length, language=last.language)
            else:
                self.entities.append(Entity("pre", offset, length))
        elif tag.name == "code":
            # Only a plain pre takes the language: one that already has its own keeps it.
            plain_pre = last is not None and last.type == "pre" and last.language is None
            if same_range and plain_pre and tag.argument:
                self.entities[-1] = Entity("pre", offset, length, language=tag.argument)
            else:
                self.entities.append(Entity("code", offset, length, language=tag.argument or None))
        else:
            kind = "expandable_blockquote" if tag.expandable else "blockquote"
            self.entities.append(Entity(kind, offset, length))

    def close_link(self, tag: _OpenTag, offset: int, length: int) -> None:
        anchor = "".join(self.out[tag.text_index :])
        href = tag.argument or anchor
        user_id = _link_user_id(href)
        if user_id is not None:
            self.entities.append(
                Entity("text_mention", offset, length, url=f"tg://user?id={user_id}")
            )
            return
        scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*):", href)
        if scheme and scheme.group(1).lower() not in {"http", "https", "tg", "ton"}:
            self.notes.append(
                f'link "{href}": Telegram supports only http, https, tg and ton links; '
                f'"{scheme.group(1)}:" is silently mangled or dropped'
            )
        url = checked_link(href)
        if url is None:
            self.notes.append(
                f'link "{href}" on "{anchor}" is not a valid URL: Telegram silently shows '
                "the text without a link"
            )
            return
        self.entities.append(Entity("text_link", offset, length, url=url))


def checked_link(href: str) -> str | None:
    """Follow tdlib's `LinkManager::get_checked_link` (and tdutils' `parse_url`): the URL
    Telegram stores for a link, or None when it shows the text without one."""
    lowered = href.lower()
    for scheme in ("tg", "ton"):
        if lowered.startswith(scheme + ":"):
            return _checked_app_link(scheme, href[len(scheme) + 1 :])
    match = re.match(r"([^:/?#@\[\]]*)://", href)
    if match:
        scheme = match.group(1).lower()
        if scheme not in {"http", "https"}:
            return None
        rest = href[match.end() :]
    else:
        scheme, rest = "http", href
    split = re.search(r"[/?#]", rest)
    authority, tail = (rest[: split.start()], rest[split.start() :]) if split else (rest, "")
    port = ""
    colon = max(authority.rfind(":"), -1)
    if colon > 0 and colon > authority.rfind("]") and colon > authority.rfind("@"):
        authority, port = authority[:colon], authority[colon + 1 :]
        if not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
            return None
        port = str(int(port))
    userinfo, at, host = authority.rpartition("@")
    if host.startswith("[") and host.endswith("]"):
        if not _valid_ipv6(host[1:-1]):
            return None
    elif not _url_part_ok(host, colon=False) or "." not in host or host == ".":
        return None
    if not _url_part_ok(userinfo, colon=True):
        return None
    return f"{scheme}://{userinfo}{at if userinfo else ''}{_ascii_lower(host)}" + (
        f":{port}" if port else ""
    ) + _checked_tail(tail)


def _link_user_id(href: str) -> int | None:
    """The user a ``tg://user?id=N`` link mentions, as tdlib's ``get_link_user_id`` reads it."""
    link = _ascii_lower(href)
    if not link.startswith("tg:"):
        return None
    link = link[3:].removeprefix("//")
    if not link.startswith("user"):
        return None
    link = link[4:].removeprefix("/")
    if not link.startswith("?"):
        return None
    for parameter in link[1:].partition("#")[0].split("&"):
        key, _, value = parameter.partition("=")
        if key == "id":
            if not (value.isascii() and value.isdigit() and str(int(value)) == value):
                return None
            user_id = int(value)
            return user_id if 0 < user_id <= _MAX_USER_ID else None
    return None


def _checked_app_link(scheme: str, rest: str) -> str | None:
    """A ``tg:`` or ``ton:`` link: a host of letters, digits, ``_`` and ``-``, then the rest."""
    if rest.startswith("//"):
        rest = rest[2:]
    split = re.search(r"[/?#]", rest)
    host, tail = (rest[: split.start()], rest[split.start() :]) if split else (rest, "")
    if not host or not all(_is_ascii_alnum(c) or c in "_-" for c in host):
        return None
    tail = _percent_encoded(tail.rstrip(_URL_SPACES))
    if tail.startswith("/?"):
        tail = tail[1:]
    if not tail.startswith(("/", "?")):
        tail = "/" + tail
    return f"{scheme}://{_ascii_lower(host)}{tail}"


_URL_PART_CHARACTERS = frozenset(".-_!$,~*'();&+=")
_URL_SPACES = " \t\r\n\v\f\0"


def _url_part_ok(part: str, *, colon: bool) -> bool:
    i = 0
    while i < len(part):
        c = part[i]
        if _is_ascii_alnum(c) or c in _URL_PART_CHARACTERS or (colon and c == ":"):
            i += 1
        elif c == "%" and re.fullmatch(r"[0-9A-Fa-f]{2}", part[i + 1 : i + 3]):
            i += 3
        elif not c.isascii():
            i += 1
        else:
            return False
    return True


def _valid_ipv6(address: str) -> bool:
    try:
        ipaddress.IPv6Address(address)
    except ValueError:
        return False
    return "%" not in address


def _checked_tail(tail: str) -> str:
    """The path, query and fragment as stored: trailing spaces cut, control characters and
    spaces percent-encoded, a leading ``/`` added."""
    tail = tail.rstrip(_URL_SPACES)
    if not tail.startswith("/"):
        tail = "/" + tail
    return _percent_encoded(tail)


def _percent_encoded(tail: str) -> str:
    return "".join(f"%{ord(c):02X}" if ord(c) <= 0x20 else c for c in tail)


# --- what Telegram does after parsing (fix_formatted_text) ---------------------------------

_SPLITTABLE = frozenset({"bold", "italic", "underline", "strikethrough", "spoiler"})
_BLOCKQUOTES = frozenset({"blockquote", "expandable_blockquote"})
_PRE_LIKE = frozenset({"code", "pre"})
_HIDDEN_DATA = frozenset({"text_link", "text_mention", "custom_emoji", "date_time"})
_PRIORITY = {
    "blockquote": 0,
    "expandable_blockquote": 0,
    "pre": 11,
    "code": 20,
    "text_link": 49,
    "text_mention": 49,
    "bold": 90,
    "italic": 91,
    "underline": 92,
    "strikethrough": 93,
    "spoiler": 94,
    "custom_emoji": 99,
}
_WHITESPACE_UNITS = frozenset({0x20, 0x0A})


def _sort_key(entity: Entity) -> tuple[int, int, int]:
    return entity.offset, -entity.length, _PRIORITY.get(entity.type, 50)


def _contains(outer: Entity, inner: Entity) -> bool:
    return outer.offset <= inner.offset and inner.end <= outer.end


def _intersects(a: Entity, b: Entity) -> bool:
    return a.offset < b.end and b.offset < a.end


@dataclass
class _Stored:
    text: str
    entities: list[Entity]
    notes: list[str] = field(default_factory=list)


class _Units:
    """The visible text as UTF-16 code units, for offset arithmetic the way Telegram does it."""

    def __init__(self, text: str) -> None:
        data = text.encode("utf-16-le", "surrogatepass")
        self.units = [int.from_bytes(data[k : k + 2], "little") for k in range(0, len(data), 2)]

    def __len__(self) -> int:
        return len(self.units)

    def is_blank(self, k: int) -> bool:
        return self.units[k] in _WHITESPACE_UNITS

    def text(self, start: int = 0, end: int | None = None) -> str:
        chunk = self.units[start:end]
        return b"".join(u.to_bytes(2, "little") for u in chunk).decode("utf-16-le", "replace")

    def quote(self, entity: Entity) -> str:
        snippet = self.text(entity.offset, entity.end)
        return snippet if len(snippet) <= 40 else snippet[:37] + "..."


def _analyse(text: str, *, limit: int, too_long: str, caption: bool) -> _Stored:
    if not caption and not text:
        raise HtmlRefused("Bad Request: message text is empty")
    try:
        raw_size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise HtmlRefused(
            "Bad Request: strings must be encoded in UTF-8 (the text has a lone surrogate)"
        ) from None
    if raw_size > RAW_TEXT_LIMIT:
        raise HtmlRefused("Bad Request: text is too long")
    parsed = _Tokenizer(text).run()
    parsed.text, parsed.entities = _clean(parsed.text, parsed.entities)
    units = _Units(parsed.text)
    notes = list(parsed.notes)
    entities = _fix_nesting(parsed.entities, units, notes)
    entities = _drop_blank_entities(entities, units, notes)
    if all(units.is_blank(k) for k in range(len(units))):
        if caption:
            return _Stored("", [], notes)
        raise HtmlRefused("Bad Request: message must be non-empty")
    stored_text, entities = _trim(units, entities)
    if utf16_length(stored_text) > limit:
        raise HtmlRefused(f"Bad Request: {too_long}")
    entities = _merge_detected(entities, find_auto_entities(stored_text))
    if len(entities) > ENTITY_LIMIT:
        notes.append(
            f"{len(entities)} entities (formatting and auto-detected): Telegram keeps at most "
            f"{ENTITY_LIMIT} and silently drops the rest"
        )
        entities = _cap(entities)
    return _Stored(stored_text, sorted(entities, key=_sort_key), notes)


def _clean(text: str, entities: list[Entity]) -> tuple[str, list[Entity]]:
    """Clean the text as tdlib cleans input strings (no carriage returns, other control
    characters as spaces, a few characters removed), moving the entities with it."""
    kept: list[str] = []
    moved = {0: 0}
    old = new = 0
    for c in text:
        cleaned = c
        if c == "\r" or c in _REMOVED_CHARACTERS:
            cleaned = ""
        elif ord(c) < 32 and c != "\n":
            cleaned = " "
        kept.append(cleaned)
        old += utf16_length(c)
        new += utf16_length(cleaned)
        moved[old] = new
    cleaned_text = "".join(kept)
    if cleaned_text == text:
        return text, entities
    return cleaned_text, [
        replace(e, offset=moved[e.offset], length=moved[e.end] - moved[e.offset])
        for e in entities
    ]


def _fix_nesting(entities: list[Entity], units: _Units, notes: list[str]) -> list[Entity]:
    """Drop or split what Telegram's `fix_entities` does not allow, with a note for each."""
    ordered = sorted(entities, key=_sort_key)
    continuous = [e for e in ordered if e.type not in _SPLITTABLE | _BLOCKQUOTES]
    quotes = _without_nested(
        [e for e in ordered if e.type in _BLOCKQUOTES], units, notes, "blockquotes can't nest"
    )
    continuous = _without_nested(continuous, units, notes, "these entities can't nest")
    kept_continuous = []
    for entity in continuous:
        crossing = [q for q in quotes if _intersects(q, entity) and not _contains(q, entity)]
        if crossing:
            notes.append(
                f'{entity.type} "{units.quote(entity)}" crosses the edge of '
                f"{crossing[0].type}: Telegram drops it"
            )
        else:
            kept_continuous.append(entity)
    pre_like = [e for e in kept_continuous if e.type in _PRE_LIKE]
    splittable = [
        piece
        for entity in ordered
        if entity.type in _SPLITTABLE
        for piece in _split_around(entity, pre_like, units, notes)
    ]
    return kept_continuous + quotes + _merge_touching(splittable)


def _without_nested(
    entities: list[Entity], units: _Units, notes: list[str], rule: str
) -> list[Entity]:
    kept: list[Entity] = []
    last_end = 0
    for entity in entities:
        if entity.offset >= last_end:
            kept.append(entity)
            last_end = entity.end
            continue
        outer = kept[-1]
        if (
            entity.type == "code"
            and outer.type == "pre"
            and ((entity.offset, entity.length) == (outer.offset, outer.length))
        ):
            continue  # <pre><code>…</code></pre> without a language is simply a pre block
        notes.append(
            f'{entity.type} "{units.quote(entity)}" sits inside {outer.type} '
            f'"{units.quote(outer)}" ({rule}): Telegram drops it'
        )
    return kept


def _split_around(
    entity: Entity, pre_like: list[Entity], units: _Units, notes: list[str]
) -> list[Entity]:
    pieces = [entity]
    for block in pre_like:
        next_pieces = []
        for piece in pieces:
            if not _intersects(piece, block):
                next_pieces.append(piece)
                continue
            if piece.offset < block.offset:
                next_pieces.append(replace(piece, length=block.offset - piece.offset))
            if block.end < piece.end:
                next_pieces.append(replace(piece, offset=block.end, length=piece.end - block.end))
        pieces = next_pieces
    if pieces != [entity]:
        blocks = "/".join(sorted({b.type for b in pre_like if _intersects(b, entity)}))
        fate = "drops it" if not pieces else "splits it around them"
        notes.append(
            f'{entity.type} "{units.quote(entity)}" overlaps {blocks}, where no formatting '
            f"is allowed: Telegram {fate}"
        )
    return pieces


def _merge_touching(entities: list[Entity]) -> list[Entity]:
    merged: list[Entity] = []
    for entity in sorted(entities, key=lambda e: (e.type, e.offset)):
        last = merged[-1] if merged else None
        if last is not None and last.type == entity.type and entity.offset <= last.end:
            merged[-1] = replace(last, length=max(last.end, entity.end) - last.offset)
        else:
            merged.append(entity)
    return merged


def _drop_blank_entities(entities: list[Entity], units: _Units, notes: list[str]) -> list[Entity]:
    """Trim leading blanks off entities and drop those holding only spaces and newlines."""
    kept = []
    for entity in sorted(entities, key=_sort_key):
        if entity.type in _HIDDEN_DATA:
            kept.append(entity)
            continue
        start = entity.offset
        while start < entity.end and units.is_blank(start):
            start += 1
        if start == entity.end:
            notes.append(
                f'{entity.type} "{units.quote(entity)}" holds only whitespace: Telegram drops it'
            )
            continue
        kept.append(replace(entity, offset=start, length=entity.end - start))
    return kept


def _trim(units: _Units, entities: list[Entity]) -> tuple[str, list[Entity]]:
    last = max(k for k in range(len(units)) if not units.is_blank(k))
    clipped = [
        replace(e, length=min(e.end, last + 1) - e.offset) for e in entities if e.offset <= last
    ]
    first_entity = min((e.offset for e in clipped), default=last + 1)
    first = 0
    while first < first_entity and units.is_blank(first):
        first += 1
    shifted = [replace(e, offset=e.offset - first) for e in clipped]
    return units.text(first, last + 1), shifted


def _merge_detected(entities: list[Entity], detected: list[Entity]) -> list[Entity]:
    """Add auto-detected entities that do not collide with explicit non-splittable ones."""
    blockers = [e for e in entities if e.type not in _SPLITTABLE | _BLOCKQUOTES]
    quotes = [e for e in entities if e.type in _BLOCKQUOTES]
    merged = list(entities)
    for found in detected:
        if any(_intersects(found, b) for b in blockers):
            continue
        if any(_intersects(found, q) and not _contains(q, found) for q in quotes):
            continue
        merged.append(found)
    return merged


def _cap(entities: list[Entity]) -> list[Entity]:
    """Keep 100 entities; formatting that can be split gets the last slots, as in tdlib."""
    ordered = sorted(entities, key=_sort_key)
    first = [e for e in ordered if e.type not in _SPLITTABLE]
    last = [e for e in ordered if e.type in _SPLITTABLE]
    return (first + last)[:ENTITY_LIMIT]


# --- auto-detected entities (an approximation of tdlib's find_entities) --------------------

_COMMON_TLDS = frozenset(
    {
        "com", "net", "org", "info", "biz", "edu", "gov", "mil", "int", "name", "pro", "mobi",
        "aero", "asia", "cat", "coop", "jobs", "museum", "tel", "travel", "app", "dev", "xyz",
        "online", "site", "tech", "store", "blog", "cloud", "shop", "top", "club", "live",
        "news", "link", "click", "space", "website", "email", "art", "design", "page", "world",
        "life", "today", "digital", "network", "group", "agency", "company", "ton",
    }
)  # fmt: skip
_WORD = r"[^\W_]"
_EMAIL = re.compile(
    r"(?<![\w.+-])[\w.+-]+@(?:" + _WORD + r"[\w-]*\.)+(?P<tld>[^\W\d_]{2,63})(?![\w-])"
)
_URL = re.compile(
    r"(?<![\w@/.:-])(?P<scheme>(?:https?|ftp)://)?"
    r"(?P<host>(?:" + _WORD + r"(?:[\w-]*" + _WORD + r")?\.)+(?P<tld>[^\W\d_]{2,63}))"
    r"(?::\d{1,5})?(?P<path>[/?#][^\s<>\"]*)?(?![\w@-])",
    re.IGNORECASE,
)
_MENTION = re.compile(r"(?<!\w)@[A-Za-z0-9_]{4,32}(?!\w)")
_COMMAND = re.compile(r"(?<![\w/<>])/[A-Za-z0-9_]{1,64}(?:@[A-Za-z0-9_]{3,32})?(?![\w/<>@])")
_HASHTAG = re.compile(r"(?<![\w\u200c\u0d80-\u0dff\u00b7])#[\w\u200c\u0d80-\u0dff\u00b7]+")


def _known_tld(tld: str) -> bool:
    tld = tld.lower()
    return (len(tld) == 2 and tld.isascii()) or tld in _COMMON_TLDS


def _url_end(match: re.Match[str]) -> int:
    """Where a URL match really ends: trailing punctuation and unbalanced brackets are text."""
    start, end = match.start(), match.end()
    text = match.string
    while end > match.start("host"):
        c = text[end - 1]
        unbalanced = c == ")" and text[start:end].count("(") < text[start:end].count(")")
        if c not in ".,:;!?'\"" and not unbalanced:
            break
        end -= 1
    return end


def find_auto_entities(text: str) -> list[Entity]:
    """URLs, e-mails, @mentions, #hashtags and /commands that Telegram links by itself."""
    spans: list[tuple[int, int, str]] = []
    for m in _EMAIL.finditer(text):
        if _known_tld(m.group("tld")):
            spans.append((m.start(), m.end(), "email"))
    for m in _URL.finditer(text):
        if m.group("scheme") or _known_tld(m.group("tld")):
            spans.append((m.start(), _url_end(m), "url"))
    spans += [(m.start(), m.end(), "mention") for m in _MENTION.finditer(text)]
    spans += [(m.start(), m.end(), "bot_command") for m in _COMMAND.finditer(text)]
    for m in _HASHTAG.finditer(text):
        tag = m.group()[1:257]
        if (m.end() < len(text) and text[m.end()] == "#") or not any(c.isalpha() for c in tag):
            continue
        spans.append((m.start(), m.start() + 1 + len(tag), "hashtag"))
    kept: list[tuple[int, int, str]] = []
    for start, end, kind in sorted(spans, key=lambda s: (s[0], -s[1])):
        if not kept or start >= kept[-1][1]:
            kept.append((start, end, kind))
    prefix = _utf16_prefix(text)
    return [Entity(kind, prefix[start], prefix[end] - prefix[start]) for start, end, kind in kept]


def _utf16_prefix(text: str) -> list[int]:
    prefix = [0]
    for c in text:
        prefix.append(prefix[-1] + (2 if ord(c) > 0xFFFF else 1))
    return prefix
