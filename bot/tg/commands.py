"""The slash commands people use in a chat: /start, /help, /pending, /status,
/history and /grants (pairing has its own module)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from telegram import Chat, Update
from telegram.ext import ContextTypes

from bot.clock import from_ms, maybe_from_ms
from bot.core.model import ItemRow, parse_item
from bot.render.environment import in_zone
from bot.tg.shared import HandlerGroup

HISTORY_DEFAULT = 10
HISTORY_MAX = 15
PENDING_MAX = 20


class Commands(HandlerGroup):
    """What each informational command answers."""

    async def start(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message, chat, user = update.effective_message, update.effective_chat, update.effective_user
        if message is None or chat is None:
            return
        if self._on_start is not None and user is not None:
            await self._on_start(chat, user)
        agents = [self._view.agents.peer(b.agent_id)
                  for b in self._view.agents.bindings_for_chat(chat.id)]
        await self._reply(
            message, "start",
            device_id=self._bridge.identity.id,
            agents=[a.name for a in agents if a is not None],
            is_admin=self._is_admin(user),
        )

    async def help(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        if update.effective_message is not None:
            await self._reply(update.effective_message, "help")

    async def pending(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message, chat = update.effective_message, update.effective_chat
        if message is None or chat is None:
            return
        waiting = self._view.items.open_in_chat(chat.id)
        zone = self._approvers.policy(chat.id).timezone
        entries = []
        for item, card in waiting[:PENDING_MAX]:
            peer = self._view.agents.peer(item.agent_id)
            entries.append({
                "summary": self._title(item),
                "agent": peer.name if peer else item.agent_id[:8],
                "link": _message_link(chat, card.message_id),
                "expires_at": _local(maybe_from_ms(item.expires_at), zone),
            })
        await self._reply(message, "pending", items=entries, total=len(waiting))

    async def status(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """The agents bound here and their relays; bot admins see every agent."""
        message, chat = update.effective_message, update.effective_chat
        if message is None or chat is None:
            return
        everything = self._is_admin(update.effective_user)
        bound = {b.agent_id for b in self._view.agents.bindings_for_chat(chat.id)}
        peers = [p for p in self._view.agents.peers() if everything or p.agent_id in bound]
        urls = {peer.relay_url for peer in peers}
        zone = self._approvers.policy(chat.id).timezone
        today = _local(from_ms(self._bridge.now_ms()), zone)
        agents = []
        for peer in peers:
            updated = _local(maybe_from_ms(self._view.agents.last_update_at(peer.agent_id)),
                             zone)
            agents.append({
                "name": peer.name,
                "relay": peer.relay_url,
                "updated_at": updated,
                "other_day": updated is not None and today is not None
                and updated.date() != today.date(),
            })
        relays = [replace(r, since=_local(r.since, zone)) for r in self._relay_views()
                  if everything or r.url in urls]
        await self._reply(
            message, "status",
            relays=relays,
            agents=agents,
            timezone=zone,
            everything=everything,
            outbox=self._view.outbox.depth(),
            open_items=self._view.items.open_count(),
        )

    async def history(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message, chat = update.effective_message, update.effective_chat
        if message is None or chat is None:
            return
        try:
            count = int(context.args[0]) if context.args else HISTORY_DEFAULT
        except ValueError:
            count = HISTORY_DEFAULT
        count = max(1, min(count, HISTORY_MAX))
        rows = self._view.audit.rows(
            chat_id=chat.id, events=("decision_sent", "answer_sent"), limit=count,
            newest_first=True,
        )
        zone = self._approvers.policy(chat.id).timezone
        entries = [
            {
                "at": in_zone(from_ms(row.at), zone),
                "event": row.event,
                "by": row.user_name,
                "decision": row.detail.get("decision", "answer"),
                "reason": row.detail.get("reason"),
                "approvers": [a.get("name") for a in row.detail.get("approvers", [])],
                "edited_by": row.detail.get("edited_by"),
                "summary": self._item_summary(row.agent_id, row.item_id),
            }
            for row in rows
        ]
        await self._reply(message, "history", entries=entries, count=count)

    async def grants(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """The grants in force for the agents bound here, each with a Revoke button."""
        message, chat = update.effective_message, update.effective_chat
        if message is None or chat is None:
            return
        topic = message.message_thread_id if message.is_topic_message else None
        self._act_on(self._bridge.list_grants(chat.id, topic))

    def _item_summary(self, agent_id: str | None, item_id: str | None) -> str:
        if agent_id is None or item_id is None:
            return ""
        item = self._view.items.get(agent_id, item_id)
        return self._title(item) if item else item_id

    def _title(self, item: ItemRow) -> str:
        return self._renderer.title(parse_item(item))


def _message_link(chat: Chat, message_id: int | None) -> str | None:
    """A t.me link to a message where Telegram has them (supergroups and channels)."""
    if message_id is None:
        return None
    if chat.username:
        return f"https://t.me/{chat.username}/{message_id}"
    text = str(chat.id)
    if text.startswith("-100"):
        return f"https://t.me/c/{text[4:]}/{message_id}"
    return None


def _local(moment: datetime | None, zone: str) -> datetime | None:
    """``moment`` in the chat's time zone, for display."""
    return in_zone(moment, zone) if moment is not None else None
