"""Who may decide in a chat: configured user ids, or the chat's administrators (cached)."""

from __future__ import annotations

import asyncio
import logging

from telegram import Bot
from telegram import error as tg_error

from bot.bridge import Bridge
from bot.config import ChatPolicy
from bot.tg.update_inbox import outside_update

log = logging.getLogger(__name__)

ADMIN_CACHE_MS = 10 * 60 * 1000
ADMIN_GRACE_MS = 60 * 1000
"""How old a cached administrator list may be for a decision without asking Telegram
about the people who decide (a demoted admin must not keep deciding)."""
DECIDING_STATUSES = frozenset({"administrator", "creator"})


class ApproverLookup:
    """Resolves a chat's approvers; ``"admins"`` reads ``getChatAdministrators`` at most
    every ten minutes, and at once after an administrator change was seen."""

    def __init__(self, *, bot: Bot, bridge: Bridge) -> None:
        self._bot = bot
        self._bridge = bridge
        self._chats = bridge.view.chats
        self._refreshing: dict[int, asyncio.Task[frozenset[int]]] = {}

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
                task = asyncio.create_task(self._fetch(chat_id, admins),
                                           name=f"admins of {chat_id}")
                self._refreshing[chat_id] = task
                task.add_done_callback(lambda _t: self._refreshing.pop(chat_id, None))
            return frozenset(admins)
        return await self._fetch(chat_id, admins)

    async def for_decision(self, chat_id: int, deciders: set[int]) -> frozenset[int]:
        """The approvers for a tap that may decide: the cached list (refreshed in the
        background when stale) while it is younger than :data:`ADMIN_GRACE_MS`; past
        that, each of ``deciders`` (the tapper and those whose votes count towards the
        quorum) is checked with ``getChatMember``. When Telegram cannot tell, they are
        not approvers: a decision is never made on a stale list."""
        approvers = await self.of(chat_id, wait=False)
        if self.policy(chat_id).approvers != "admins":
            return approvers
        fetched = self._chats.admins(chat_id)[1]
        if fetched is not None and self._bridge.now_ms() - fetched <= ADMIN_GRACE_MS:
            return approvers
        checked = set(approvers)
        for user_id in deciders:
            if await self._is_admin_now(chat_id, user_id):
                checked.add(user_id)
            else:
                checked.discard(user_id)
        return frozenset(checked)

    async def _is_admin_now(self, chat_id: int, user_id: int) -> bool:
        try:
            member = await self._bot.get_chat_member(chat_id, user_id)
        except tg_error.TelegramError as exc:
            log.warning("could not check user %s in chat %s (%s): not counted as an approver",
                        user_id, chat_id, exc)
            return False
        return member.status in DECIDING_STATUSES and not member.user.is_bot

    async def learn_names(self, chat_id: int) -> None:
        """Read the names of a chat's configured approvers that the bot has not seen yet
        (``getChatMember``), so that alerts and reminders name them instead of showing ids.
        Called when an agent is bound to the chat."""
        approvers = self.policy(chat_id).approvers
        if approvers == "admins":
            await self.of(chat_id)
            return
        for user_id in sorted(approvers):
            if self._chats.user_name(user_id) is not None:
                continue
            try:
                member = await self._bot.get_chat_member(chat_id, user_id)
            except tg_error.TelegramError as exc:
                log.info("could not read the name of approver %s in chat %s: %s", user_id,
                         chat_id, exc)
                continue
            self._bridge.user_seen(user_id, member.user.full_name, member.user.username)

    async def stop(self) -> None:
        """Cancel the refreshes still running."""
        tasks = list(self._refreshing.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def names(self, chat_id: int) -> list[str]:
        """The approvers' names, first reading from Telegram those of a configured list
        not known yet (the chat may have been bound while the bot was stopped)."""
        if self.policy(chat_id).approvers != "admins":
            await self.learn_names(chat_id)
        return self.cached_names(chat_id)

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
        with outside_update():  # a refresh is not what the update being handled changes
            self._bridge.admins_fetched(chat_id, fresh)
        return frozenset(fresh)

