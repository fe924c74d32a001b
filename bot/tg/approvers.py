"""Who may decide in a chat: configured user ids, or the chat's administrators (cached)."""

from __future__ import annotations

import asyncio
import logging

from telegram import Bot
from telegram import error as tg_error

from bot.bridge import Bridge
from bot.config import ChatPolicy

log = logging.getLogger(__name__)

ADMIN_CACHE_MS = 10 * 60 * 1000


class ApproverLookup:
    """Resolves a chat's approvers; ``"admins"`` reads ``getChatAdministrators`` at most
    every ten minutes, and at once after an administrator change was seen."""

    def __init__(self, *, bot: Bot, bridge: Bridge) -> None:
        self._bot = bot
        self._bridge = bridge
        self._chats = bridge.view.chats
        self._refreshing: set[int] = set()

    def policy(self, chat_id: int) -> ChatPolicy:
        return self._bridge.policy(chat_id)

    async def of(self, chat_id: int, *, wait: bool = True) -> frozenset[int]:
        """The chat's approvers. With ``wait=False`` (a button tap, which Telegram wants
        answered within seconds) a stale cached list is used and refreshed in the
        background; only a chat never seen before waits for Telegram."""
        approvers = self.policy(chat_id).approvers
        if approvers != "admins":
            return approvers
        admins, fetched = self._chats.admins(chat_id)
        if fetched is not None and self._bridge.now_ms() - fetched <= ADMIN_CACHE_MS:
            return frozenset(admins)
        if fetched is not None and not wait:
            if chat_id not in self._refreshing:
                self._refreshing.add(chat_id)
                task = asyncio.create_task(self._fetch(chat_id, admins))
                task.add_done_callback(lambda _t: self._refreshing.discard(chat_id))
            return frozenset(admins)
        return await self._fetch(chat_id, admins)

    def cached_names(self, chat_id: int) -> list[str]:
        """The approvers' names as known now, without asking Telegram."""
        approvers = self.policy(chat_id).approvers
        ids = self._chats.admins(chat_id)[0].keys() if approvers == "admins" else approvers
        return sorted(self._chats.user_name(uid) or str(uid) for uid in ids)

    async def _fetch(self, chat_id: int, cached: dict[int, str]) -> frozenset[int]:
        try:
            members = await self._bot.get_chat_administrators(chat_id)
        except tg_error.TelegramError as exc:
            log.warning("could not read the administrators of chat %s: %s", chat_id, exc)
            return frozenset(cached)
        fresh = {m.user.id: m.user.full_name for m in members if not m.user.is_bot}
        self._bridge.admins_fetched(chat_id, fresh)
        return frozenset(fresh)

