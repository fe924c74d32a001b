"""What every group of Telegram handlers shares: the bridge and its read-only view, the
renderer, the gateway, the approver lookup, and replying or answering a tap."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from telegram import CallbackQuery, Chat, Message, User
from telegram import error as tg_error

from bot.bridge import Bridge, Changes
from bot.config import Config
from bot.errors import BotApiError, RenderError
from bot.protocol.payloads import Person
from bot.relay.client import RelayStatus
from bot.render import Renderer
from bot.tg.approvers import ApproverLookup
from bot.tg.gateway import Gateway

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Wiring:
    """The parts the handlers work with."""

    bridge: Bridge
    renderer: Renderer
    gateway: Gateway
    config: Config
    act_on: Callable[[Changes], None]
    """Acts on what a use case of the bridge changed, after its commit."""
    changed: asyncio.Event
    """Set after each applied change."""
    approvers: ApproverLookup
    relay_views: Callable[[], list[RelayStatus]]
    on_start: Callable[[Chat, User], Awaitable[None]] | None = None


class HandlerGroup:
    """A group of handlers over the shared :class:`Wiring`; they hold no policy of their
    own."""

    def __init__(self, wiring: Wiring) -> None:
        self._bridge = wiring.bridge
        self._view = wiring.bridge.view
        self._renderer = wiring.renderer
        self._gateway = wiring.gateway
        self._config = wiring.config
        self._act_on = wiring.act_on
        self._changed = wiring.changed
        self._approvers = wiring.approvers
        self._relay_views = wiring.relay_views
        self._on_start = wiring.on_start

    async def _reply(self, message: Message, template: str, **context: object) -> None:
        try:
            html = self._renderer.message(template, **context)
        except RenderError as exc:
            log.warning("could not render the %s message: %s", template, exc)
            html = self._renderer.message("render_failed")
        try:
            await self._gateway.send(
                message.chat_id,
                html,
                topic_id=message.message_thread_id if message.is_topic_message else None,
                reply_to=message.message_id,
            )
        except BotApiError as exc:
            log.warning("could not reply in chat %s: %s", message.chat_id, exc)

    @staticmethod
    def _person(user: User) -> Person:
        return Person(name=user.full_name, telegram_user_id=user.id, username=user.username)

    def _is_admin(self, user: User | None) -> bool:
        return user is not None and user.id in self._config.admins

    async def _answer_query(self, query: CallbackQuery, text: str, *, alert: bool) -> None:
        try:
            await query.answer(text or None, show_alert=alert)
        except tg_error.TelegramError as exc:  # e.g. "query is too old": the tap still counts
            log.warning("could not answer a button tap: %s", exc)
