"""Deny-reason prompts and typed replies: the bot asks for a reason (a ForceReply), and
a reply to it, or to a question card, is applied like a tap; a reply to an edit prompt
goes to :mod:`bot.tg.editing`."""

from __future__ import annotations

import logging

from telegram import Chat, Update, User
from telegram.ext import ContextTypes

from bot.core.model import CardRow
from bot.core.policy import Action, Refused
from bot.errors import BotApiError
from bot.tg.answers import TapAnswers
from bot.tg.editing import EditPrompts
from bot.tg.shared import HandlerGroup, Wiring

log = logging.getLogger(__name__)


class Prompts(HandlerGroup):
    """Asks for deny reasons; applies a reply to such a prompt or to a question card."""

    def __init__(self, wiring: Wiring, answers: TapAnswers, edits: EditPrompts) -> None:
        super().__init__(wiring)
        self._answers = answers
        self._edits = edits

    async def ask_reason(self, chat: Chat, card: CardRow, user: User) -> None:
        html = self._renderer.message("deny_reason_prompt", person=user.full_name,
                                      mention_id=user.id)
        try:
            prompt_id = await self._gateway.send(
                chat.id, html, topic_id=card.topic_id, reply_to=card.message_id,
                force_reply=True, placeholder="Reason for denying",
            )
        except BotApiError as exc:
            log.warning("could not ask for a deny reason in chat %s: %s", chat.id, exc)
            return
        self._bridge.prompt_sent(chat.id, prompt_id, card.card_id, user.id)

    async def reply(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message = update.message
        if message is None or message.reply_to_message is None or message.from_user is None:
            return
        if await self._edits.reply(message):
            return
        text = (message.text or "").strip()
        target = message.reply_to_message.message_id
        prompt = self._view.cards.prompt(message.chat_id, target)
        if prompt is not None:
            card_id, user_id = prompt
            if user_id != message.from_user.id:
                return
            card = self._view.cards.get(card_id)
            action = Action.DENY_WITH_REASON
        else:
            card = self._view.cards.by_message(message.chat_id, target)
            action = Action.ANSWER
            if card is None:
                return
            item = self._view.items.get(card.agent_id, card.item_id)
            if item is None or item.kind != "clarification":
                return
        if card is None or not text:
            return
        report = self._bridge.tap(
            card.token,
            action,
            chat_id=message.chat_id,
            tapper=self._person(message.from_user),
            approvers=await self._approvers.for_decision(message.chat_id, {message.from_user.id}),
            text=text,
        )
        self._act_on(report.changes)
        if isinstance(report.result, Refused):
            _alert, refusal = await self._answers.tap_answer(report, message.chat_id)
            await self._reply(message, "refused", text=refusal)
