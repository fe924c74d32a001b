"""Batch taps on a digest: "Approve all" / "Deny all" ask once for confirmation, and the
confirmation decides exactly the items of the digest version that was tapped.

Callback data is ``b:<digest token>:<version>:<step>[:<user id>]``: the step is ``a`` or
``d`` (asking), ``A`` or ``D`` (confirmed) or ``c`` (cancelled); the confirming steps carry
the id of the person who asked, and only that person can confirm.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass

from telegram import CallbackQuery, Update
from telegram.ext import ContextTypes

from bot.bridge import BatchReport
from bot.core.digest import DigestRow
from bot.core.model import ItemRow
from bot.core.policy import Action, Decided, Refusal, Tallied, may_decide
from bot.errors import BotApiError, PayloadError
from bot.protocol.payloads import parse_approval
from bot.render.digest import LeftOut, left_out
from bot.tg.keyboards import Button, Keyboard
from bot.tg.shared import HandlerGroup

log = logging.getLogger(__name__)

BATCH_PATTERN = r"^b:"
_DATA = re.compile(r"b:([A-Za-z0-9_-]{1,32}):([0-9]{1,9}):([adADc])(?::([0-9]{1,20}))?")
_ACTIONS = {"a": Action.APPROVE, "d": Action.DENY, "A": Action.APPROVE, "D": Action.DENY}


@dataclass(frozen=True)
class BatchPress:
    """Decoded batch callback data."""

    token: str
    version: int
    step: str
    user_id: int | None


def parse_batch_data(data: object) -> BatchPress | None:
    if not isinstance(data, str):
        return None
    match = _DATA.fullmatch(data)
    if match is None or (match.group(3) in "ADc") != (match.group(4) is not None):
        return None
    user = match.group(4)
    return BatchPress(match.group(1), int(match.group(2)), match.group(3),
                      int(user) if user else None)


def digest_keyboard(token: str, version: int, count: int) -> Keyboard:
    """"Approve all N" and "Deny all N" on version ``version`` (none when N is 0)."""
    if count < 1:
        return ()
    return ((Button(f"✅ Approve all {count}", f"b:{token}:{version}:a", "success"),
             Button(f"❌ Deny all {count}", f"b:{token}:{version}:d", "danger")),)


def confirm_keyboard(token: str, version: int, step: str, user_id: int, count: int) -> Keyboard:
    verb = "approve" if step == "a" else "deny"
    return ((Button(f"Yes, {verb} these {count}", f"b:{token}:{version}:{step.upper()}:{user_id}",
                    "success" if step == "a" else "danger"),
             Button("Cancel", f"b:{token}:{version}:c:{user_id}")),)


def exclusion(item: ItemRow, *, editing: bool = False) -> LeftOut | None:
    """Why the item stays out of batches (a stored item that cannot be read: fail closed;
    ``editing``: its card has an edit in progress)."""
    if editing:
        return "editing"
    try:
        return left_out(parse_approval(json.loads(item.body_json)))
    except (PayloadError, ValueError):
        return "hidden"


class Batches(HandlerGroup):
    """The callback-query handler for digest buttons."""

    async def tap(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        query = update.callback_query
        if query is None:
            return
        press = parse_batch_data(query.data)
        message = query.message
        if press is None or message is None:
            await self._answer_query(query, self._renderer.text("alert_outdated"), alert=True)
            return
        digest = self._view.digests.by_token(press.token)
        if digest is None or digest.chat_id != message.chat.id:
            await self._answer_query(query, self._renderer.text("alert_unknown_card"),
                                     alert=True)
            return
        if press.user_id is not None and press.user_id != query.from_user.id:
            await self._answer_query(query, "Only the person who tapped can confirm.",
                                     alert=True)
        elif press.step in "ad":
            await self._start(query, digest, press)
        elif press.step == "c":
            await self._finish(query, "batch_done", cancelled=True, decision="", decided=0,
                               voted=0, skipped=0)
        else:
            await self._decide(query, digest, press)

    async def _start(self, query: CallbackQuery, digest: DigestRow, press: BatchPress) -> None:
        """"Approve all" or "Deny all": an approver is asked to confirm."""
        chat_id = digest.chat_id
        if not may_decide(query.from_user.id,
                          await self._approvers.for_decision(chat_id, {query.from_user.id})):
            self._bridge.record_refused_tap(chat_id, self._person(query.from_user), "batch",
                                            Refusal.NOT_APPROVER)
            await self._answer_query(query, self._renderer.text(
                "alert_refused", reason=Refusal.NOT_APPROVER.value,
                approvers=await self._approvers.names(chat_id)), alert=True)
            return
        listed = self._view.digests.items(digest.digest_id, press.version)
        batchable = [i for i in listed if (row := self._view.items.get(digest.agent_id, i))
                     is not None and row.state == "open"
                     and self._exclusion(digest, row) is None]
        agent = self._view.agents.peer(digest.agent_id)
        await self._ask(query, digest.token, press, len(batchable),
                        agent.name if agent else digest.agent_id[:8], chat_id,
                        digest.topic_id)

    async def _decide(self, query: CallbackQuery, digest: DigestRow, press: BatchPress) -> None:
        """A confirmation: the items of the version tapped, one tap each."""
        chat_id = digest.chat_id
        listed = self._view.digests.items(digest.digest_id, press.version)
        left = {i for i in listed if (row := self._view.items.get(digest.agent_id, i))
                is not None and self._exclusion(digest, row) is not None}
        # As for one tap: a stale list is checked for the tapper and whoever voted already.
        voters = {v.user_id for _item, card in self._view.items.open_in_chat(chat_id)
                  if card.item_id in listed and card.agent_id == digest.agent_id
                  for v in self._view.cards.votes(card.card_id)}
        action = _ACTIONS[press.step]
        report = self._bridge.batch(
            press.token, press.version, action, chat_id=chat_id,
            tapper=self._person(query.from_user),
            approvers=await self._approvers.for_decision(chat_id,
                                                         {query.from_user.id, *voters}),
            left_out=left,
        )
        self._act_on(report.changes)
        log.info("batch %s by user %s in chat %s on %d item(s): %s", action.name.lower(),
                 query.from_user.id, chat_id, len(listed), _summary(report))
        if report.refusal is not None:
            await self._answer_query(query, self._renderer.text("alert_unknown_card"),
                                     alert=True)
            return
        decided = sum(isinstance(t.result, Decided) for t in report.taps)
        voted = sum(isinstance(t.result, Tallied) for t in report.taps)
        await self._finish(query, "batch_done", cancelled=False,
                           decision=action.name.lower(), decided=decided, voted=voted,
                           skipped=len(report.skipped) + len(report.taps) - decided - voted)

    def _exclusion(self, digest: DigestRow, item: ItemRow) -> LeftOut | None:
        card = next((card for open_item, card in self._view.items.open_in_chat(digest.chat_id)
                     if card.agent_id == digest.agent_id and open_item.item_id == item.item_id),
                    None)
        return exclusion(item, editing=card is not None
                         and self._view.edits.in_progress(card.card_id))

    async def _ask(self, query: CallbackQuery, token: str, press: BatchPress, count: int,
                   agent: str, chat_id: int, topic_id: int | None) -> None:
        """Ask the tapper once, in a message of its own (the digest may change meanwhile)."""
        if count < 1:
            await self._answer_query(query, "Nothing here can be decided together now.",
                                     alert=True)
            return
        decision = "approve" if press.step == "a" else "deny"
        html = self._renderer.message("batch_confirm", decision=decision, count=count,
                                      agent=agent, by=query.from_user.full_name)
        await self._answer_query(query, "", alert=False)
        try:
            await self._gateway.send(
                chat_id, html, topic_id=topic_id,
                keyboard=confirm_keyboard(token, press.version, press.step,
                                          query.from_user.id, count))
        except BotApiError as exc:
            log.warning("could not ask to confirm a batch in chat %s: %s", chat_id, exc)

    async def _finish(self, query: CallbackQuery, template: str, **context: object) -> None:
        """Answer the tap and turn the confirmation into what happened (no buttons)."""
        await self._answer_query(query, "", alert=False)
        message = query.message
        if message is None:
            return
        html = self._renderer.message(template, by=query.from_user.full_name, **context)
        try:
            await self._gateway.edit(message.chat.id, message.message_id, html)
        except BotApiError as exc:
            log.warning("could not close a batch confirmation in chat %s: %s",
                        message.chat.id, exc)


def _summary(report: BatchReport) -> str:
    if report.refusal is not None:
        return "refused (" + report.refusal.value + ")"
    results = [type(t.result).__name__.lower() for t in report.taps]
    return ", ".join(results + ["skipped"] * len(report.skipped)) or "nothing"
