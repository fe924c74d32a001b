"""Telegram's own HTML parser, offline: TDLib's ``parseTextEntities`` through ``libtdjson``.

The aiotdlib wheel (a test dependency) ships ``libtdjson``; it needs Debian's ``libc++1``.
``td_execute`` runs synchronous requests without a network or an account. The result is
mapped onto the stand-in's :class:`Entity` so the two parsers can be compared directly.
"""

from __future__ import annotations

import ctypes
import json
from functools import cache
from pathlib import Path
from typing import Any

import aiotdlib

from bot.playground.tg_html import Entity

_TYPES = {
    "textEntityTypeBold": "bold",
    "textEntityTypeItalic": "italic",
    "textEntityTypeUnderline": "underline",
    "textEntityTypeStrikethrough": "strikethrough",
    "textEntityTypeSpoiler": "spoiler",
    "textEntityTypeCode": "code",
    "textEntityTypePre": "pre",
    "textEntityTypePreCode": "pre",
    "textEntityTypeBlockQuote": "blockquote",
    "textEntityTypeExpandableBlockQuote": "expandable_blockquote",
    "textEntityTypeTextUrl": "text_link",
    "textEntityTypeMentionName": "text_mention",
    "textEntityTypeCustomEmoji": "custom_emoji",
    "textEntityTypeDateTime": "date_time",
}


class TdError(Exception):
    """TDLib refused the text; ``message`` is its error message."""


@cache
def _library() -> ctypes.CDLL:
    path = Path(aiotdlib.__file__).parent / "tdlib" / "libtdjson_linux_amd64.so"
    library = ctypes.CDLL(str(path))
    library.td_execute.restype = ctypes.c_char_p
    library.td_execute.argtypes = [ctypes.c_char_p]
    _execute(library, {"@type": "setLogVerbosityLevel", "new_verbosity_level": 0})
    return library


def _execute(library: ctypes.CDLL, request: dict[str, Any]) -> dict[str, Any]:
    answer = library.td_execute(json.dumps(request).encode())
    result: dict[str, Any] = json.loads(answer)
    return result


def tdlib_version() -> str:
    answer = _execute(_library(), {"@type": "getOption", "name": "version"})
    return str(answer.get("value", ""))


def telegram_parse(html: str) -> tuple[str, list[Entity]]:
    """What TDLib makes of ``html`` in HTML parse mode; raises :class:`TdError`."""
    answer = _execute(_library(), {
        "@type": "parseTextEntities", "text": html, "parse_mode": {"@type": "textParseModeHTML"},
    })
    if answer["@type"] == "error":
        raise TdError(answer["message"])
    return answer["text"], [_entity(e) for e in answer["entities"]]


_DETECTED = {
    "textEntityTypeUrl": "url",
    "textEntityTypeEmailAddress": "email",
    "textEntityTypeMention": "mention",
    "textEntityTypeHashtag": "hashtag",
    "textEntityTypeCashtag": "cashtag",
    "textEntityTypeBotCommand": "bot_command",
    "textEntityTypePhoneNumber": "phone_number",
    "textEntityTypeBankCardNumber": "bank_card_number",
}


def telegram_detect(text: str) -> list[Entity]:
    """What TDLib finds by itself in plain ``text`` (links, addresses, mentions, commands),
    leaving out media timestamps, which the Bot API keeps only in replies to media."""
    answer = _execute(_library(), {"@type": "getTextEntities", "text": text})
    return [
        Entity(_DETECTED[e["type"]["@type"]], e["offset"], e["length"])
        for e in answer["entities"]
        if e["type"]["@type"] != "textEntityTypeMediaTimestamp"
    ]


def _entity(raw: dict[str, Any]) -> Entity:
    kind = raw["type"]
    name = _TYPES[kind["@type"]]
    url = kind.get("url")
    if name == "text_mention":
        url = f"tg://user?id={kind['user_id']}"
    return Entity(name, raw["offset"], raw["length"], url=url, language=kind.get("language"))
