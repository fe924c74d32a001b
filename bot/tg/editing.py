"""Edits before approving, on Telegram's side: "✏️ Edit" asks which value (when a card
offers several) and then, with a ForceReply in the card's topic, for the new value; the
reply to that prompt is the edit, which the bridge applies to the card.

A ForceReply message carries no buttons, so the value to copy is shown monospace in the
prompt; the choice of key carries a ``copy_text`` button beside each short value.
"""

from __future__ import annotations

import logging

from telegram import Chat, Message, User

from bot.core.model import CardRow, parse_item
from bot.errors import BotApiError
from bot.protocol.encoding import json_type
from bot.protocol.payloads import Approval
from bot.render.credentials import holds_credential
from bot.render.edits import copy_text, offered_keys, typed_text
from bot.tg.keyboards import Keyboard, edit_key_keyboard
from bot.tg.shared import HandlerGroup

log = logging.getLogger(__name__)

SHOWN_VALUE_CHARS = 3000
"""A current value longer than this is not repeated in the prompt (the card shows it)."""


class EditPrompts(HandlerGroup):
    """Asks which value to edit and for the new one; applies the reply."""

    def offered(self, card: CardRow) -> tuple[str, ...]:
        """The keys the card's approval offers to edit (none holding a secret)."""
        item = self._view.items.get(card.agent_id, card.item_id)
        parsed = parse_item(item) if item is not None and item.kind == "approval" else None
        return offered_keys(parsed) if isinstance(parsed, Approval) else ()

    async def ask(self, chat: Chat, card: CardRow, user: User, option: int | None) -> None:
        """After an allowed "✏️ Edit" tap: the choice of key, or the prompt for the key
        ``option`` picks (or the only one)."""
        keys = self.offered(card)
        current = self._current(card)
        if option is None and len(keys) > 1:
            choices = tuple((key, copy_text(current.get(key))) for key in keys)
            await self._send(chat.id, card, "edit_choose", "choose",
                             keyboard=edit_key_keyboard(card.token, choices), keys=keys)
            return
        index = option or 0
        if not 0 <= index < len(keys):
            return
        key = keys[index]
        value = typed_text(current.get(key))
        prompt_id = await self._send(
            chat.id, card, "edit_prompt", "prompt", person=user.full_name, mention_id=user.id,
            key=key, value=value if len(value) <= SHOWN_VALUE_CHARS else None,
            length=len(value), kind=json_type(current.get(key)),
            force_reply=True, placeholder=f"New value of {key}"[:64])
        if prompt_id is not None:
            self._bridge.edit_prompt_sent(chat.id, prompt_id, card.card_id, user.id, key)

    async def reply(self, message: Message) -> bool:
        """Apply ``message`` if it replies to an edit prompt (True), telling the replier
        what is wrong with a value that cannot be taken."""
        target = message.reply_to_message
        user = message.from_user
        if target is None or user is None or self._view.edits.prompt(
                message.chat_id, target.message_id) is None:
            return False
        prompt = self._view.edits.prompt(message.chat_id, target.message_id)
        card = self._view.cards.get(prompt[0]) if prompt else None
        if prompt is not None and prompt[1] == user.id and holds_credential(message.text):
            # A card never shows a credential: it could not show this edit as it runs.
            await self._reply(message, "edit_problem",
                              problem="the new value holds a password, token or key")
            return True
        report = self._bridge.edit(
            message.chat_id, target.message_id, tapper=self._person(user),
            approvers=await self._approvers.for_decision(message.chat_id, {user.id}),
            offered=self.offered(card) if card else (), text=message.text or "")
        if report is None:
            return True
        self._act_on(report.changes)
        log.info("edit by user %s in chat %s on %s: %s", user.id, message.chat_id,
                 card.item_id if card else "?",
                 report.refusal.value if report.refusal else
                 "not taken" if report.problem else f"revision {report.revision}")
        if report.refusal is not None:
            await self._reply(message, "refused", text=self._renderer.text(
                "alert_refused", reason=report.refusal.value,
                approvers=await self._approvers.names(message.chat_id)))
        elif report.problem is not None:
            await self._reply(message, "edit_problem", problem=report.problem)
        return True

    def _current(self, card: CardRow) -> dict[str, object]:
        """The arguments the card shows now: the edited ones, or the agent's."""
        edit = self._view.edits.of(card.card_id)
        if edit is not None and edit.arguments:
            return edit.arguments
        item = self._view.items.get(card.agent_id, card.item_id)
        parsed = parse_item(item) if item is not None else None
        arguments = parsed.arguments if isinstance(parsed, Approval) else None
        return arguments if isinstance(arguments, dict) else {}

    async def _send(self, chat_id: int, card: CardRow, template: str, what: str, *,
                    keyboard: Keyboard = (), force_reply: bool = False,
                    placeholder: str | None = None, **context: object) -> int | None:
        html = self._renderer.message(template, **context)
        try:
            return await self._gateway.send(
                chat_id, html, topic_id=card.topic_id, reply_to=card.message_id,
                keyboard=keyboard or None,
                force_reply=force_reply, placeholder=placeholder)
        except BotApiError as exc:
            log.warning("could not send an edit %s in chat %s: %s", what, chat_id, exc)
            return None
