"""What Telegram refuses in what a bot sends: the text's parse mode and its reply markup.

Each check raises the :class:`ApiError` Telegram answers with, in Telegram's own words, so
the bot meets the refusal it would meet on Telegram.
"""

from __future__ import annotations

import html
from typing import Any

from bot.playground.stub.errors import ApiError, bad_request
from bot.playground.tg_html import Entity, HtmlRefused, checked_link, parse_caption, parse_html

_BUTTON_ACTIONS = frozenset(
    {
        "login_url", "switch_inline_query", "switch_inline_query_current_chat",
        "switch_inline_query_chosen_chat", "callback_game", "pay", "web_app", "copy_text",
    }
)  # fmt: skip
_TEXT_BUTTON = (
    "can't parse inline keyboard button: Text buttons are unallowed in the inline keyboard"
)


def parse_text(text: str, parse_mode: Any, *, caption: bool) -> tuple[str, list[Entity]]:
    """The visible text and its entities, as Telegram reads ``text`` in ``parse_mode``."""
    if parse_mode is None or parse_mode == "":
        text = html.escape(text, quote=False)
    elif not isinstance(parse_mode, str) or parse_mode.lower() != "html":
        raise bad_request(f"unsupported parse_mode {parse_mode!r} (the stub speaks HTML)")
    try:
        return parse_caption(text) if caption else parse_html(text)
    except HtmlRefused as refused:
        raise ApiError(400, refused.description) from None


def checked_markup(markup: Any, *, private: bool) -> dict[str, Any] | None:
    """Validate any reply_markup like Telegram (for a private chat or not); an empty
    inline keyboard means none."""
    if markup is None:
        return None
    if not isinstance(markup, dict):
        raise bad_request("can't parse reply keyboard markup JSON object")
    if "inline_keyboard" in markup:
        return inline_markup(markup, private=private)
    if "force_reply" in markup:
        if len(markup.get("input_field_placeholder") or "") > 64:
            raise bad_request("can't parse reply keyboard markup JSON object")
        return markup
    if "keyboard" in markup or "remove_keyboard" in markup:
        return markup
    raise bad_request("can't parse reply keyboard markup JSON object")


def inline_markup(markup: Any, *, private: bool) -> dict[str, Any] | None:
    """Validate an inline keyboard (the only markup a message keeps); None when absent.
    ``web_app`` buttons are for private chats only."""
    if markup is None:
        return None
    rows = markup.get("inline_keyboard") if isinstance(markup, dict) else None
    if not isinstance(rows, list) or not all(isinstance(row, list) for row in rows):
        raise bad_request("inline keyboard expected")
    if sum(len(row) for row in rows) > 100 or any(len(row) > 8 for row in rows):
        raise bad_request("reply markup is too long")
    for button in (button for row in rows for button in row):
        _check_button(button)
        if "web_app" in button:
            _check_web_app(button["web_app"], private=private)
    kept = [row for row in rows if row]
    return {"inline_keyboard": kept} if kept else None


def _check_web_app(web_app: Any, *, private: bool) -> None:
    if not private:
        raise bad_request("BUTTON_TYPE_INVALID")
    url = web_app.get("url") if isinstance(web_app, dict) else None
    if not isinstance(url, str) or not url.startswith("https://") or checked_link(url) is None:
        raise bad_request("BUTTON_URL_INVALID")


def _check_button(button: Any) -> None:
    if not isinstance(button, dict) or not isinstance(button.get("text"), str):
        raise bad_request(
            'can\'t parse inline keyboard button: Field "text" must be of type String'
        )
    data = button.get("callback_data")
    if data is not None:
        if not isinstance(data, str) or data == "":
            raise bad_request(_TEXT_BUTTON)
        if len(data.encode("utf-8")) > 64:
            raise bad_request("BUTTON_DATA_INVALID")
        return
    url = button.get("url")
    if url is not None:
        if not isinstance(url, str) or checked_link(url) is None:
            raise bad_request("BUTTON_URL_INVALID")
        return
    if not _BUTTON_ACTIONS & button.keys():
        raise bad_request(_TEXT_BUTTON)
