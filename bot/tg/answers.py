"""What a tapper is told: what their tap did, and where the decision it made stands."""

from __future__ import annotations

import asyncio

from bot.bridge import TapReport
from bot.core.model import CardRow
from bot.core.policy import Answered, Decided, Refused, Tallied
from bot.tg.shared import HandlerGroup

SENT_WAIT_S = 1.0
"""How long a tap's answer waits for the relay to take the decision the tap made."""


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
            return False, self._renderer.text("alert_decided", decision=result.decision,
                                              delivery=await self._delivery(report.card))
        if isinstance(result, Answered):
            return False, self._renderer.text("alert_answered",
                                              delivery=await self._delivery(report.card))
        return False, ""

    async def _delivery(self, card: CardRow | None) -> str:
        """Where the decision a tap just made on ``card`` stands: ``sent`` (its relay took
        it), ``sending``, or ``queued`` (no session with its relay: it leaves once the
        relay is back). Waits up to :data:`SENT_WAIT_S` for the relay's ``sent``."""
        if card is None:
            return "queued"
        peer = self._view.agents.peer(card.agent_id)
        if peer is None or not any(relay.url == peer.relay_url and relay.connected
                                   for relay in self._relay_views()):
            return "queued"
        try:
            async with asyncio.timeout(SENT_WAIT_S):
                while True:
                    self._changed.clear()
                    if not self._view.items.sending(card.agent_id, card.item_id):
                        return "sent"
                    await self._changed.wait()  # set once the relay's sent is recorded
        except TimeoutError:
            return "sending"
