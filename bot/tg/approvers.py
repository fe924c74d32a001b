"""Who may decide in a chat: configured user ids, or the chat's administrators (cached)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from telegram import Bot
from telegram import error as tg_error

from bot.config import ChatPolicy, Config
from bot.store import Store

log = logging.getLogger(__name__)

ADMIN_CACHE_MS = 10 * 60 * 1000


def is_private(chat_id: int) -> bool:
    """Private chats have positive ids (the user's own); groups and channels negative."""
    return chat_id > 0


class Approvers:
    """Resolves a chat's approvers; ``"admins"`` reads ``getChatAdministrators`` at most
    every ten minutes, and at once after an administrator change was seen."""

    def __init__(self, *, bot: Bot, store: Store, config: Config,
                 now_ms: Callable[[], int]) -> None:
        self._bot = bot
        self._store = store
        self._config = config
        self._now_ms = now_ms

    def policy(self, chat_id: int) -> ChatPolicy:
        return self._config.policy(chat_id, private=is_private(chat_id))

    async def of(self, chat_id: int) -> frozenset[int]:
        approvers = self.policy(chat_id).approvers
        if approvers != "admins":
            return approvers
        admins, fetched = self._store.chat_admins(chat_id)
        now = self._now_ms()
        if fetched is not None and now - fetched <= ADMIN_CACHE_MS:
            return frozenset(admins)
        try:
            members = await self._bot.get_chat_administrators(chat_id)
        except tg_error.TelegramError as exc:
            log.warning("could not read the administrators of chat %s: %s", chat_id, exc)
            return frozenset(admins)
        fresh = {m.user.id: m.user.full_name for m in members if not m.user.is_bot}
        self._store.set_chat_admins(chat_id, fresh, now)
        for user_id, name in fresh.items():
            self._store.note_user(user_id, name, None)
        return frozenset(fresh)

    async def names(self, chat_id: int) -> list[str]:
        return sorted(self._store.user_name(uid) or str(uid) for uid in await self.of(chat_id))
