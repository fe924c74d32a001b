"""/pair and /unpair: binding an agent to a chat and undoing it (bot admins only)."""

from __future__ import annotations

import logging

from telegram import Chat, Message, Update, User
from telegram.ext import ContextTypes

from bot.bridge import PAIRING_TIMEOUT_S, wait_until_paired
from bot.errors import PairingError, SkaldError
from bot.protocol.pairing import PairingUri, parse_pairing_uri
from bot.tg.shared import HandlerGroup

log = logging.getLogger(__name__)


class Pairing(HandlerGroup):
    """Pairing commands; waiting for the agent runs apart from other updates."""

    async def _from_admin(self, update: Update, command: str) -> tuple[Message, Chat, User] | None:
        """The command's message, chat and sender, when a bot admin sent it; otherwise
        None (someone else is told that only admins may)."""
        message, chat, user = update.effective_message, update.effective_chat, update.effective_user
        if message is None or chat is None:
            return None
        if user is None or not self._is_admin(user):
            await self._reply(message, "not_allowed", command=command)
            return None
        return message, chat, user

    async def pair(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        sent = await self._from_admin(update, "pair")
        if sent is None:
            return
        message, chat, user = sent
        if not context.args:
            await self._reply(message, "pair_usage")
            return
        try:
            uri = parse_pairing_uri(context.args[0])
        except PairingError as exc:
            await self._reply(message, "pair_failed", error=str(exc))
            return
        topic = message.message_thread_id if message.is_topic_message else None
        # The update is handled once this commits (see bot.tg.update_inbox); waiting for
        # the agent runs apart, so that other updates are not held up meanwhile.
        self._act_on(self._bridge.start_pairing(uri, chat_id=chat.id, topic_id=topic,
                                               requested_by=user.id))
        context.application.create_task(self._finish_pairing(message, uri), update=update,
                                        name=f"pairing with {uri.agent.id[:8]}")

    async def _finish_pairing(self, message: Message, uri: PairingUri) -> None:
        """Say that a pairing started, wait for the agent, and say how it ended."""
        try:
            await self._await_agent(message, uri)
        except SkaldError as exc:
            log.warning("could not finish pairing with %s: %s", uri.agent.id[:8], exc)

    async def _await_agent(self, message: Message, uri: PairingUri) -> None:
        chat = message.chat
        await self._reply(message, "pair_started", agent=uri.agent.name, relay=uri.relay)
        try:
            await wait_until_paired(self._bridge.view, uri.agent.id, self._changed)
        except PairingError as exc:  # the agent refused: say why at once
            await self._reply(message, "pair_failed", error=str(exc))
            return
        except TimeoutError:
            self._bridge.cancel_pairing(uri.agent.id)
            await self._reply(message, "pair_failed", error="the agent did not answer within "
                                                            f"{PAIRING_TIMEOUT_S:g} seconds")
            return
        await self._approvers.learn_names(chat.id)
        await self._reply(message, "pair_done", agent=uri.agent.name)

    async def unpair(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        sent = await self._from_admin(update, "unpair")
        if sent is None:
            return
        message, chat, user = sent
        bound = [self._view.agents.peer(b.agent_id)
                 for b in self._view.agents.bindings_for_chat(chat.id)]
        peers = [p for p in bound if p is not None]
        wanted = " ".join(context.args or []).strip().lower()
        chosen = [p for p in peers if not wanted or wanted in (p.name.lower(), p.agent_id)]
        if len(chosen) != 1:
            await self._reply(message, "unpair_choose", agents=[p.name for p in peers])
            return
        self._act_on(self._bridge.unbind(chosen[0].agent_id, chat.id, user.id))
        await self._reply(message, "unpair_done", agent=chosen[0].name)
