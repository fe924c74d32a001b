"""Who may decide in a chat: configured user ids, or the chat's administrators (cached)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from telegram import Bot
from telegram import error as tg_error

from bot.config import ChatPolicy
from bot.store import Store
from bot.tg.update_inbox import outside_update

log = logging.getLogger(__name__)

ADMIN_CACHE_MS = 10 * 60 * 1000


class Approvers:
    """Resolves a chat's approvers; ``"admins"`` reads ``getChatAdministrators`` at most
    every ten minutes, and at once after an administrator change was seen."""

    def __init__(self, *, bot: Bot, store: Store, policy: Callable[[int], ChatPolicy],
                 now_ms: Callable[[], int]) -> None:
        self._bot = bot
        self._store = store
        self.policy = policy
        self._now_ms = now_ms
        self._refreshing: dict[int, asyncio.Task[frozenset[int]]] = {}

    async def of(self, chat_id: int, *, wait: bool = True) -> frozenset[int]:
        """The chat's approvers. With ``wait=False`` (a button tap, which Telegram wants
        answered within seconds) a stale cached list is used and refreshed in the
        background; only a chat never seen before waits for Telegram."""
        approvers = self.policy(chat_id).approvers
        if approvers != "admins":
            return approvers
        admins, fetched = self._store.chat_admins(chat_id)
        if fetched is not None and self._now_ms() - fetched <= ADMIN_CACHE_MS:
            return frozenset(admins)
        if fetched is not None and not wait:
            if chat_id not in self._refreshing:
                task = asyncio.create_task(self._fetch(chat_id, admins),
                                           name=f"admins of {chat_id}")
                self._refreshing[chat_id] = task
                task.add_done_callback(lambda _t: self._refreshing.pop(chat_id, None))
            return frozenset(admins)
        return await self._fetch(chat_id, admins)

    async def stop(self) -> None:
        """Cancel the refreshes still running."""
        tasks = list(self._refreshing.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def cached_names(self, chat_id: int) -> list[str]:
        """The approvers' names as known now, without asking Telegram."""
        approvers = self.policy(chat_id).approvers
        ids = self._store.chat_admins(chat_id)[0].keys() if approvers == "admins" else approvers
        return sorted(self._store.user_name(uid) or str(uid) for uid in ids)

    async def _fetch(self, chat_id: int, cached: dict[int, str]) -> frozenset[int]:
        now = self._now_ms()
        try:
            members = await self._bot.get_chat_administrators(chat_id)
        except tg_error.TelegramError as exc:
            log.warning("could not read the administrators of chat %s: %s", chat_id, exc)
            return frozenset(cached)
        fresh = {m.user.id: m.user.full_name for m in members if not m.user.is_bot}
        with outside_update():  # a refresh is not what the update being handled changes
            self._store.set_chat_admins(chat_id, fresh, now)
        for user_id, name in fresh.items():
            self._store.note_user(user_id, name, None)
        return frozenset(fresh)

