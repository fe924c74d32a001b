"""Time-driven work: expiring items, reminding approvers, pruning the replay set.

A reminder waits for its chat's turn (:class:`bot.tg.ratelimit.ChatTurns`) in a task of
its own, behind the chat's decided cards, so that a busy chat holds up nothing else."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from bot.bridge import REPLAY_PRUNE_EVERY_MS, Bridge
from bot.clock import Clock, maybe_from_ms
from bot.core.model import CardRow
from bot.errors import BotApiError, SkaldError
from bot.render import Renderer
from bot.render.environment import in_zone
from bot.tg.gateway import Gateway
from bot.tg.ratelimit import REMINDER, ChatTurns

log = logging.getLogger(__name__)

MAX_SLEEP_S = 30.0
RETRY_S = 5.0


class Timers:
    """Wakes when the next expiry or reminder is due (or every 30 s), and handles it."""

    def __init__(
        self,
        *,
        bridge: Bridge,
        gateway: Gateway,
        renderer: Renderer,
        approvers: Callable[[int], Awaitable[frozenset[int]]],
        redraw: Callable[[], None],
        turns: ChatTurns,
        clock: Clock,
    ) -> None:
        self._bridge = bridge
        self._view = bridge.view
        self._gateway = gateway
        self._renderer = renderer
        self._approvers = approvers
        self._redraw = redraw
        self._turns = turns
        self._clock = clock
        self._wake = asyncio.Event()
        self._reminding: set[asyncio.Task[None]] = set()

    def wake(self) -> None:
        """Something changed that may move the next due time."""
        self._wake.set()

    async def run(self) -> None:
        try:
            await self._run()
        finally:
            for task in self._reminding:
                task.cancel()
            await asyncio.gather(*self._reminding, return_exceptions=True)

    async def _run(self) -> None:
        last_prune = 0
        due: int | None = 0
        while True:
            now = self._bridge.now_ms()
            try:
                # Woken by a change, there is only work if something is due by now.
                if due is not None and due <= now:
                    if self._bridge.expire_due().cards:
                        self._redraw()
                    self._send_reminders()
                if now - last_prune > REPLAY_PRUNE_EVERY_MS:
                    self._bridge.prune_replay()
                    last_prune = now
                due = self._next_due()
            except SkaldError as exc:
                log.warning("timers: %s; trying again in %.0f s", exc, RETRY_S)
                await self._clock.sleep(RETRY_S)
                due = 0
                continue
            await self._sleep_until(due, now)

    def _next_due(self) -> int | None:
        """When the next item expires or is due for its reminder (Unix ms)."""
        due = [t for t in (self._view.items.next_expiry(), self._view.cards.next_reminder())
               if t]
        return min(due) if due else None

    async def _sleep_until(self, due: int | None, now: int) -> None:
        timeout = MAX_SLEEP_S
        if due is not None:
            timeout = min(timeout, max(0.0, (due - now) / 1000))
        self._wake.clear()
        await self._clock.wait(self._wake, timeout + 0.01)

    def _send_reminders(self) -> None:
        for card in self._view.cards.due_reminder(self._bridge.now_ms()):
            self._bridge.claim_reminder(card.card_id)
            task = asyncio.create_task(self._try_remind(card))
            self._reminding.add(task)
            task.add_done_callback(self._reminding.discard)

    async def _try_remind(self, card: CardRow) -> None:
        try:
            await self._remind(card)
        except BotApiError as exc:
            log.warning("could not send a reminder in chat %s: %s", card.chat_id, exc)
        except SkaldError as exc:
            log.warning("could not remind approvers of %s in chat %s: %s", card.item_id,
                        card.chat_id, exc)

    async def _remind(self, card: CardRow) -> None:
        approvers = await self._approvers(card.chat_id)
        tapped = {vote.user_id for vote in self._view.cards.votes(card.card_id)}
        waiting = [
            {"id": uid, "name": self._view.chats.user_name(uid) or "approver"}
            for uid in sorted(approvers - tapped)
        ]
        item = self._view.items.get(card.agent_id, card.item_id)
        if item is None or not waiting:
            return
        expires_at = maybe_from_ms(item.expires_at)
        zone = self._bridge.policy(card.chat_id).timezone
        html = self._renderer.message(
            "reminder", approvers=waiting,
            expires_at=in_zone(expires_at, zone) if expires_at is not None else None,
        )
        async with self._turns.turn(card.chat_id, REMINDER):
            await self._gateway.send(card.chat_id, html, topic_id=card.topic_id,
                                     reply_to=card.message_id)
        self._bridge.reminder_sent(card, sorted(approvers - tapped))
        log.info("reminded %d approver(s) of %s in chat %s", len(waiting), card.item_id,
                 card.chat_id)

