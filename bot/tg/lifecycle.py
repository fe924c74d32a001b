"""Chat lifecycle updates: a group that became a supergroup, the bot added to or removed
from a chat, and members who gained or lost the administrator role."""

from __future__ import annotations

import logging

from telegram import Update
from telegram.ext import ContextTypes

from bot.tg.shared import HandlerGroup

log = logging.getLogger(__name__)


class Lifecycle(HandlerGroup):
    """What Telegram reports about chats, recorded through the bridge."""

    async def migrated(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message = update.effective_message
        if message is None:
            return
        if message.migrate_to_chat_id:
            old, new = message.chat_id, message.migrate_to_chat_id
        elif message.migrate_from_chat_id:
            old, new = message.migrate_from_chat_id, message.chat_id
        else:
            return
        self._act_on(self._bridge.chat_migrated(old, new))

    async def my_membership(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        change = update.my_chat_member
        if change is None:
            return
        status = change.new_chat_member.status
        gone = status in ("left", "kicked")
        changes = self._bridge.chat_membership(change.chat.id, present=not gone)
        log.info("bot is now %s in chat %s", status, change.chat.id)
        self._act_on(changes)

    async def membership(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        change = update.chat_member
        if change is None:
            return
        was_admin = change.old_chat_member.status in ("administrator", "creator")
        is_admin = change.new_chat_member.status in ("administrator", "creator")
        if was_admin != is_admin:
            self._bridge.admins_changed(change.chat.id)
