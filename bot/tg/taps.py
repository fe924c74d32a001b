"""Button taps: a decision, vote, answer, grant or edit on a card, and a Revoke on a
grant."""

from __future__ import annotations

import asyncio
import logging

from telegram import CallbackQuery, Update
from telegram.ext import ContextTypes

from bot.bridge import TapReport, wait_until_revoked
from bot.core.policy import Action, Answered, AskEdit, AskReason, Decided, Refusal, Refused
from bot.errors import SkaldError
from bot.protocol.payloads import Person
from bot.tg.answers import TapAnswers
from bot.tg.editing import EditPrompts
from bot.tg.keyboards import parse_callback_data
from bot.tg.prompts import Prompts
from bot.tg.shared import HandlerGroup, Wiring

log = logging.getLogger(__name__)


class Taps(HandlerGroup):
    """The callback-query handler: taps on cards and on Revoke."""

    def __init__(self, wiring: Wiring, answers: TapAnswers, prompts: Prompts,
                 edits: EditPrompts) -> None:
        super().__init__(wiring)
        self._answers = answers
        self._prompts = prompts
        self._edits = edits
        self._answering: set[asyncio.Task[None]] = set()

    async def tap(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        query = update.callback_query
        if query is None:
            return
        parsed = parse_callback_data(query.data)
        message = query.message
        tapper = self._person(query.from_user)
        if parsed is None or message is None:
            chat_id = message.chat.id if message else 0
            self._bridge.record_refused_tap(chat_id, tapper, "unknown", Refusal.OUTDATED)
            await self._answer_query(query, self._renderer.text("alert_outdated"), alert=True)
            return
        chat = message.chat
        if parsed.action is Action.REVOKE:
            await self._revoke(query, parsed.token, chat.id, tapper, update, context)
            return
        # Cached approvers (the query must be answered within seconds), but a list past its
        # grace period is checked for the tapper and for whoever already voted on the card.
        # The bridge reads the card again, after this lookup: it may wait on Telegram while
        # agents' deliveries change the item.
        card = self._view.cards.by_token(parsed.token)
        voters = {v.user_id for v in self._view.cards.votes(card.card_id)} if card else set()
        report = self._bridge.tap(
            parsed.token,
            parsed.action,
            chat_id=chat.id,
            tapper=tapper,
            approvers=await self._approvers.for_decision(chat.id, {query.from_user.id, *voters}),
            option=parsed.option,
            editable=bool(self._edits.offered(card)) if card else False,
        )
        self._act_on(report.changes)
        await asyncio.sleep(0)  # the decision leaves for the relay before the tap's answer
        if isinstance(report.result, Decided | Answered):
            # Its answer waits for the agent's word, up to a second: the updates behind
            # this one do not wait with it.
            answering = asyncio.create_task(self._answer_tap(query, report, chat.id))
            self._answering.add(answering)
            answering.add_done_callback(self._answering.discard)
        else:
            await self._answer_tap(query, report, chat.id)
        log.info("tap %s by user %s in chat %s on %s: %s", parsed.action.name.lower(),
                 query.from_user.id, chat.id, report.card.item_id if report.card else "?",
                 _result_name(report))
        if isinstance(report.result, AskReason) and report.card is not None:
            await self._prompts.ask_reason(chat, report.card, query.from_user)
        if isinstance(report.result, AskEdit) and report.card is not None:
            await self._edits.ask(chat, report.card, query.from_user, parsed.option)

    async def _answer_tap(self, query: CallbackQuery, report: TapReport, chat_id: int) -> None:
        try:
            alert, text = await self._answers.tap_answer(report, chat_id)
        except SkaldError as exc:  # the tap counts; only what the tapper is told is lost
            log.warning("could not tell the tapper in chat %s what the tap did: %s", chat_id,
                        exc)
            return
        await self._answer_query(query, text, alert=alert)

    async def _revoke(self, query: CallbackQuery, token: str, chat_id: int, tapper: Person,
                      update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        report = self._bridge.revoke_grant(
            token, chat_id=chat_id, tapper=tapper,
            approvers=await self._approvers.of(chat_id, wait=False),
        )
        self._act_on(report.changes)
        label = report.grant.label if report.grant else ""
        if report.refusal is None:
            # Waiting for the agent runs apart, so that other updates are not held up.
            context.application.create_task(
                self._answer_revoke(query, token, label, chat_id, tapper), update=update,
                name=f"revoke in chat {chat_id}")
            return
        text = self._renderer.text(
            "alert_revoke", reason=report.refusal.value, label=label,
            approvers=self._approvers.cached_names(chat_id),
        )
        await self._answer_query(query, text, alert=True)
        log.info("revoke tap by user %s in chat %s: %s", tapper.telegram_user_id, chat_id,
                 report.refusal.value)

    async def _answer_revoke(self, query: CallbackQuery, token: str, label: str,
                             chat_id: int, tapper: Person) -> None:
        """Tell the tapper whether the agent confirmed the revoke, or that it takes effect
        when the agent is back."""
        confirmed = await wait_until_revoked(self._bridge, token, self._changed)
        text = self._renderer.text("alert_revoke", reason=None, label=label,
                                   confirmed=confirmed, approvers=[])
        await self._answer_query(query, text, alert=not confirmed)
        log.info("revoke tap by user %s in chat %s: %s", tapper.telegram_user_id, chat_id,
                 "confirmed" if confirmed else "sent, not confirmed yet")


def _result_name(report: TapReport) -> str:
    result = report.result
    if isinstance(result, Refused):
        return "refused (" + result.reason.value + ")"
    return type(result).__name__.lower()
