"""python-telegram-bot handlers: taps, replies, commands and chat lifecycle events.

Handlers translate Telegram updates into calls on the :class:`~bot.bridge.Bridge` (the only
writer of the bot's state; they read it through its read-only view), hand what changed to
``act_on`` after the commit, and answer with texts rendered from ``templates/messages/``;
they hold no policy of their own. Each group lives in its own module: :mod:`bot.tg.taps`,
:mod:`bot.tg.answers`, :mod:`bot.tg.prompts` (deny reasons and typed replies),
:mod:`bot.tg.editing` (edits before approving),
:mod:`bot.tg.commands`, :mod:`bot.tg.pairing` and :mod:`bot.tg.lifecycle`; this one
registers them and guards each.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, cast

from telegram import Chat, Update, User
from telegram.ext import (
    Application,
    CallbackQueryHandler,
    ChatMemberHandler,
    CommandHandler,
    ContextTypes,
    MessageHandler,
    filters,
)

from bot.bridge import Bridge, Changes
from bot.config import Config
from bot.core.model import ChatKind
from bot.errors import SkaldError, StoreUnavailable
from bot.relay.client import RelayStatus
from bot.render import Renderer
from bot.tg.answers import TapAnswers
from bot.tg.approvers import ApproverLookup
from bot.tg.batches import BATCH_PATTERN, Batches
from bot.tg.commands import Commands
from bot.tg.editing import EditPrompts
from bot.tg.gateway import Gateway
from bot.tg.lifecycle import Lifecycle
from bot.tg.pairing import Pairing
from bot.tg.prompts import Prompts
from bot.tg.shared import HandlerGroup, Wiring
from bot.tg.taps import Taps
from bot.tg.update_inbox import leave_unhandled

log = logging.getLogger(__name__)

TOLD_MAX = 1000

HandlerFn = Callable[[Update, ContextTypes.DEFAULT_TYPE], Coroutine[Any, Any, None]]


class Handlers(HandlerGroup):
    """Every handler of the bot, registered and guarded."""

    def __init__(
        self,
        *,
        bridge: Bridge,
        renderer: Renderer,
        gateway: Gateway,
        config: Config,
        act_on: Callable[[Changes], None],
        changed: asyncio.Event,
        approvers: ApproverLookup,
        relay_views: Callable[[], list[RelayStatus]],
        on_start: Callable[[Chat, User], Awaitable[None]] | None = None,
    ) -> None:
        wiring = Wiring(bridge, renderer, gateway, config, act_on, changed, approvers,
                        relay_views, on_start)
        super().__init__(wiring)
        answers = TapAnswers(wiring)
        self.edits = EditPrompts(wiring)
        self.prompts = Prompts(wiring, answers, self.edits)
        self.taps = Taps(wiring, answers, self.prompts, self.edits)
        self.batches = Batches(wiring)
        self.commands = Commands(wiring)
        self.pairing = Pairing(wiring)
        self.lifecycle = Lifecycle(wiring)
        self._told: set[int] = set()
        """Updates whose sender was told that the store failed them."""

    def register(self, application: Application) -> None:  # type: ignore[type-arg]
        commands, pairing = self.commands, self.pairing
        named: list[tuple[str, HandlerFn, bool]] = [
            ("start", commands.start, True),
            ("help", commands.help, True),
            ("pending", commands.pending, True),
            ("pair", pairing.pair, True),
            ("unpair", pairing.unpair, True),
            ("status", commands.status, True),
            ("history", commands.history, True),
            ("grants", commands.grants, True),
        ]
        for name, callback, block in named:
            application.add_handler(CommandHandler(name, self._guarded(callback), block=block))
        application.add_handler(CallbackQueryHandler(self._guarded(self.batches.tap),
                                                     pattern=BATCH_PATTERN))
        application.add_handler(CallbackQueryHandler(self._guarded(self.taps.tap)))
        application.add_handler(
            MessageHandler(filters.StatusUpdate.MIGRATE, self._guarded(self.lifecycle.migrated))
        )
        application.add_handler(
            MessageHandler(filters.REPLY & filters.TEXT & ~filters.COMMAND,
                           self._guarded(self.prompts.reply))
        )
        application.add_handler(
            ChatMemberHandler(self._guarded(self.lifecycle.my_membership),
                              ChatMemberHandler.MY_CHAT_MEMBER)
        )
        application.add_handler(
            ChatMemberHandler(self._guarded(self.lifecycle.membership),
                              ChatMemberHandler.CHAT_MEMBER)
        )

    def _guarded(self, callback: HandlerFn) -> HandlerFn:
        """Log our own errors as one line instead of a traceback; never crash the bot."""

        async def run(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
            try:
                self._record_seen(update)
                await callback(update, context)
            except StoreUnavailable as exc:
                log.warning("could not record update %s, the store failed (%s): handling it "
                            "again once the store can write", update.update_id, exc)
                await self._tell_not_recorded(update)
                leave_unhandled(exc)
            except SkaldError as exc:
                log.warning("could not handle update %s: %s", update.update_id, exc)

        return run

    async def _tell_not_recorded(self, update: Update) -> None:
        """Tell the person (once per update) that what they did is not recorded yet and
        applies by itself once the store can write."""
        if update.update_id in self._told:
            return
        self._told.add(update.update_id)
        if len(self._told) > TOLD_MAX:
            self._told.discard(min(self._told))
        if update.callback_query is not None:
            await self._answer_query(update.callback_query,
                                     self._renderer.text("alert_not_recorded"), alert=True)
        elif update.message is not None and update.message.text:
            await self._reply(update.message, "not_recorded")

    def _record_seen(self, update: Update) -> None:
        chat, user = update.effective_chat, update.effective_user
        if chat is not None:
            title = chat.title or chat.full_name or ""
            self._bridge.chat_seen(chat.id, title, cast(ChatKind, chat.type))
        if user is not None and not user.is_bot:
            self._bridge.user_seen(user.id, user.full_name, user.username)
