"""The one place that calls the Bot API to post and edit messages, translating its errors.

``telegram.error.*`` becomes our own errors (:class:`bot.errors.ChatMoved`,
:class:`~bot.errors.ChatUnavailable`, :class:`~bot.errors.Throttled`,
:class:`~bot.errors.MessageGone`, :class:`~bot.errors.BotApiError`). Two Telegram answers
are handled here for every caller: "message is not modified" is success, and "can't parse
entities" is retried once as plain text so no card is ever lost to a markup problem.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TypeVar, cast

from telegram import (
    Bot,
    CopyTextButton,
    ForceReply,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    InputFile,
    Message,
    ReplyParameters,
    WebAppInfo,
)
from telegram import error as tg_error
from telegram.constants import ParseMode

from bot.core.model import ChatKind
from bot.errors import BotApiError, ChatMoved, ChatUnavailable, MessageGone, Throttled
from bot.tg.keyboards import Button, Keyboard

log = logging.getLogger(__name__)

T = TypeVar("T")


def markup(keyboard: Keyboard) -> InlineKeyboardMarkup:
    """The Bot API form of a keyboard."""
    return InlineKeyboardMarkup([[_button(b) for b in row] for row in keyboard])


def _button(button: Button) -> InlineKeyboardButton:
    if button.copy is not None:
        return InlineKeyboardButton(button.label, copy_text=CopyTextButton(button.copy))
    if button.link is not None and button.web_app:
        return InlineKeyboardButton(button.label, web_app=WebAppInfo(button.link))
    if button.link is not None:
        return InlineKeyboardButton(button.label, url=button.link)
    return InlineKeyboardButton(button.label, callback_data=button.data, style=button.style)


def _reply_to(message_id: int | None) -> ReplyParameters | None:
    """Reply to a message, and still send if it was deleted meanwhile."""
    if message_id is None:
        return None
    return ReplyParameters(message_id=message_id, allow_sending_without_reply=True)


class Gateway:
    """Posts and edits messages; every Bot API failure leaves as one of our errors."""

    def __init__(self, bot: Bot) -> None:
        self.bot = bot

    async def chat(self, chat_id: int) -> tuple[str, ChatKind]:
        """The chat's title (a user's name for a private chat) and type (``getChat``)."""
        chat = await self._call(chat_id, lambda: self.bot.get_chat(chat_id))
        return chat.title or chat.full_name or "", cast(ChatKind, chat.type)

    async def send(
        self,
        chat_id: int,
        html: str,
        *,
        plain: str | None = None,
        keyboard: Keyboard | None = None,
        topic_id: int | None = None,
        reply_to: int | None = None,
        force_reply: bool = False,
        placeholder: str | None = None,
        quiet: bool = False,
    ) -> int:
        """Send an HTML message (plain-text fallback on a parse error); its message id.
        A ``quiet`` one arrives without a notification sound."""
        reply_markup: InlineKeyboardMarkup | ForceReply | None = None
        if force_reply:
            reply_markup = ForceReply(selective=True, input_field_placeholder=placeholder)
        elif keyboard:
            reply_markup = markup(keyboard)

        async def attempt(text: str, parse_mode: str | None) -> Message:
            return await self.bot.send_message(
                chat_id,
                text,
                parse_mode=parse_mode,
                reply_markup=reply_markup,
                message_thread_id=topic_id,
                reply_parameters=_reply_to(reply_to),
                disable_notification=quiet or None,
            )

        message = await self._with_fallback(chat_id, html, plain, attempt)
        return message.message_id

    async def edit(
        self,
        chat_id: int,
        message_id: int,
        html: str,
        *,
        plain: str | None = None,
        keyboard: Keyboard = (),
    ) -> None:
        """Replace a message's text and keyboard (an empty keyboard removes it)."""

        async def attempt(text: str, parse_mode: str | None) -> bool:
            try:
                await self.bot.edit_message_text(
                    text,
                    chat_id=chat_id,
                    message_id=message_id,
                    parse_mode=parse_mode,
                    # Without reply_markup, Telegram drops the keyboard: that is how a
                    # closed card loses its buttons.
                    reply_markup=markup(keyboard) if keyboard else None,
                )
            except tg_error.BadRequest as exc:
                if "message is not modified" not in exc.message.lower():
                    raise
            return True

        await self._with_fallback(chat_id, html, plain, attempt)

    async def delete(self, chat_id: int, message_id: int) -> None:
        """Delete a message of the bot's."""
        await self._call(chat_id, lambda: self.bot.delete_message(chat_id, message_id))

    async def send_document(
        self,
        chat_id: int,
        filename: str,
        content: bytes,
        *,
        caption: str | None = None,
        topic_id: int | None = None,
        reply_to: int | None = None,
    ) -> int:
        message = await self._call(
            chat_id,
            lambda: self.bot.send_document(
                chat_id,
                InputFile(content, filename=filename),
                caption=caption,
                parse_mode=ParseMode.HTML,
                message_thread_id=topic_id,
                reply_parameters=_reply_to(reply_to),
            ),
        )
        return message.message_id

    async def _with_fallback(
        self,
        chat_id: int,
        html: str,
        plain: str | None,
        attempt: Callable[[str, str | None], Awaitable[T]],
    ) -> T:
        try:
            return await self._call(chat_id, lambda: attempt(html, ParseMode.HTML))
        except BotApiError as exc:
            if plain is None or "can't parse entities" not in str(exc).lower():
                raise
            log.warning("Telegram refused a card's HTML in chat %s; sending it as plain text",
                        chat_id)
            return await self._call(chat_id, lambda: attempt(plain, None))

    async def _call(self, chat_id: int, call: Callable[[], Awaitable[T]]) -> T:
        try:
            return await call()
        except tg_error.ChatMigrated as exc:
            raise ChatMoved(chat_id, int(exc.new_chat_id)) from exc
        except tg_error.RetryAfter as exc:
            retry = exc.retry_after
            seconds = retry.total_seconds() if isinstance(retry, timedelta) else float(retry)
            raise Throttled(seconds) from exc
        except tg_error.Forbidden as exc:
            raise ChatUnavailable(chat_id, exc.message) from exc
        except tg_error.BadRequest as exc:
            text = exc.message.lower()
            if "message to edit not found" in text or "message can't be edited" in text:
                raise MessageGone(exc.message) from exc
            if "chat not found" in text or "have no rights" in text or "not enough rights" in text:
                raise ChatUnavailable(chat_id, exc.message) from exc
            raise BotApiError(f"Telegram refused a request: {exc.message}") from exc
        except tg_error.TelegramError as exc:
            raise BotApiError(f"Telegram request failed: {exc.message}") from exc
