"""What a tapper is told: what their tap did, and where the decision it made stands."""

from __future__ import annotations

import asyncio

from bot.bridge import TapReport
from bot.core.model import CardRow
from bot.core.policy import Answered, Decided, Refused, Tallied
from bot.core.status import CONFIRM_WAIT_S
from bot.tg.shared import HandlerGroup


class TapAnswers(HandlerGroup):
    """The text (and whether it is an alert) answering a tap or a typed reply."""

    async def tap_answer(self, report: TapReport, chat_id: int) -> tuple[bool, str]:
        """(show as alert, text) telling the tapper what their tap did."""
        result = report.result
        if isinstance(result, Refused):
            item = report.item
            return True, self._renderer.text(
                "alert_refused",
                reason=result.reason.value,
                approvers=await self._approvers.names(chat_id),
                state=item.state if item else "",
                by=item.outcome_by if item else None,
            )
        if isinstance(result, Tallied):
            return False, self._renderer.text(
                "alert_tallied", count=len(result.voters), required=result.required
            )
        if isinstance(result, Decided):
            outcome = "approved" if result.decision == "approve" else "denied"
            return False, self._renderer.text(
                "alert_decided", decision=result.decision,
                delivery=await self._delivery(report.card, outcome))
        if isinstance(result, Answered):
            return False, self._renderer.text(
                "alert_answered", delivery=await self._delivery(report.card, "answered"))
        return False, ""

    async def _delivery(self, card: CardRow | None, outcome: str) -> str:
        """Where the decision a tap just made on ``card`` stands: ``confirmed`` (the agent
        reports the item ``outcome``), ``overtaken`` (it reports another outcome), ``sent``
        (its relay took it), ``sending``, or ``queued`` (no session with its relay: it
        leaves once the relay is back). Waits up to :data:`CONFIRM_WAIT_S` for the
        agent's report; the tapper's answer then takes no time from the decision's way."""
        if card is None:
            return "queued"
        peer = self._view.agents.peer(card.agent_id)
        if peer is None or not any(relay.url == peer.relay_url and relay.connected
                                   for relay in self._relay_views()):
            return "queued"
        items = self._view.items
        try:
            async with asyncio.timeout(CONFIRM_WAIT_S):
                while True:
                    self._changed.clear()
                    reported = items.reported(card.agent_id, card.item_id)
                    if reported is not None:
                        return "confirmed" if reported.outcome == outcome else "overtaken"
                    await self._changed.wait()  # set by every change applied
        except TimeoutError:
            return "sending" if items.sending(card.agent_id, card.item_id) else "sent"
