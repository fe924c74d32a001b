"""Brings every card in Telegram up to date with the store, paced per chat.

Cards that need posting or editing are rows with a change counter (``cards.dirty``). The
worker drains them one chat at a time (about one message per second per chat; the bot's
rate limiter, :mod:`bot.tg.ratelimit`, keeps the global and per-group limits), so a burst
in one chat never starves another. Because the work list is in SQLite, a restart resumes
where it stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator

from bot.bridge import Bridge
from bot.clock import Clock, from_ms
from bot.config import Config
from bot.core.model import CardRow, parse_item
from bot.core.status import card_status, render_card
from bot.errors import ChatMoved, ChatUnavailable, MessageGone, SkaldError, Throttled
from bot.protocol.payloads import Approval
from bot.render import Attachment, RenderedCard, Renderer
from bot.tg.gateway import Gateway
from bot.tg.keyboards import keyboard

log = logging.getLogger(__name__)

RETRY_DELAY_S = 5.0
MAX_RETRY_DELAY_S = 600.0
STOP_TIMEOUT_S = 10.0
OFF_LOOP_CHARS = 64 * 1024
"""Items whose stored JSON is at least this long are drawn in a thread."""


class CardWorker:
    """Posts new cards, edits changed ones, and attaches full content when a card was cut."""

    def __init__(
        self,
        *,
        bridge: Bridge,
        gateway: Gateway,
        renderer: Renderer,
        config: Config,
        clock: Clock,
    ) -> None:
        self._bridge = bridge
        self._view = bridge.view
        self._gateway = gateway
        self._renderer = renderer
        self._config = config
        self._clock = clock
        self._wake = asyncio.Event()
        self._chats: dict[int, asyncio.Task[None]] = {}
        self._nudges: dict[int, asyncio.Event] = {}
        """Per chat: set by :meth:`wake` for a drain waiting on its parked cards."""
        self._last_answer: dict[int, float] = {}
        """Per chat: when the answer to its last request came (or the request failed)."""
        self._paused_until = 0.0
        self._stopping = False
        self._failures: dict[int, int] = {}
        self._retry_at: dict[int, float] = {}

    def wake(self) -> None:
        self._wake.set()
        for nudge in self._nudges.values():
            nudge.set()

    async def run(self) -> None:
        """Dispatch dirty cards to one drain task per chat, until :meth:`stop`."""
        while not self._stopping:
            self._dispatch()
            await self._wake.wait()
            self._wake.clear()

    async def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Let every chat finish the card it is showing (so no posted card goes
        unrecorded), then stop; whatever is left is resumed on the next start."""
        self._stopping = True
        self._wake.set()
        tasks = list(self._chats.values())
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=timeout)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    def _dispatch(self) -> None:
        if self._stopping:
            return
        for chat_id in self._view.cards.chats_with_dirty():
            if chat_id not in self._chats:
                task = asyncio.create_task(self._drain(chat_id))
                self._chats[chat_id] = task
                task.add_done_callback(functools.partial(self._drained, chat_id))

    def _drained(self, chat_id: int, _task: asyncio.Task[None]) -> None:
        self._chats.pop(chat_id, None)
        self._nudges.pop(chat_id, None)
        self._wake.set()

    async def _drain(self, chat_id: int) -> None:
        nudge = self._nudges.setdefault(chat_id, asyncio.Event())
        while not self._stopping and not self._view.chats.forbidden(chat_id):
            now = self._clock.time()
            nudge.clear()
            cards = self._view.cards.dirty(chat_id)
            ready = [c for c in cards if self._retry_at.get(c.card_id, 0.0) <= now]
            if not ready:
                if not cards:
                    return
                # Every card here waits for a retry: until the first is due, or until
                # something changes (wake) and a card may be ready sooner.
                wake_at = min(self._retry_at[c.card_id] for c in cards)
                await self._clock.wait(nudge, wake_at - now)
                continue
            for card in ready:
                if self._stopping:
                    return
                current = self._view.cards.get(card.card_id)
                if current is None or not current.dirty:
                    continue
                try:
                    await self._show(current)
                except Throttled as exc:
                    log.warning("Telegram asked to wait %.1f s (chat %s)", exc.retry_after,
                                chat_id)
                    self._paused_until = self._clock.time() + exc.retry_after
                    await self._clock.sleep(exc.retry_after)
                    break
                except ChatMoved as exc:
                    self._bridge.chat_migrated(exc.old_chat_id, exc.new_chat_id, force=True)
                    self._wake.set()
                    return
                except ChatUnavailable as exc:
                    log.warning("stopped posting in chat %s: %s", chat_id, exc)
                    self._bridge.chat_unavailable(chat_id)
                    return
                except Exception as exc:  # one broken card must never block its chat
                    self._park(current, exc)
                else:
                    self._failures.pop(card.card_id, None)
                    self._retry_at.pop(card.card_id, None)

    def _park(self, card: CardRow, exc: Exception) -> None:
        """Retry a card that failed later, backing off, and let the chat's others go first."""
        if "thread not found" in str(exc).lower() and card.topic_id is not None:
            log.warning("the forum topic of chat %s is gone; card %s goes to the chat itself",
                        card.chat_id, card.card_id)
            self._bridge.card_topic_gone(card.card_id)
            return
        failures = self._failures.get(card.card_id, 0) + 1
        self._failures[card.card_id] = failures
        delay = min(RETRY_DELAY_S * 2 ** (failures - 1), MAX_RETRY_DELAY_S)
        self._retry_at[card.card_id] = self._clock.time() + delay
        if isinstance(exc, SkaldError):
            log.warning("could not update card %s in chat %s (attempt %d, next in %.0f s): %s",
                        card.card_id, card.chat_id, failures, delay, exc)
        else:
            log.exception("bug while updating card %s in chat %s (attempt %d)", card.card_id,
                          card.chat_id, failures)

    @contextlib.asynccontextmanager
    async def _paced(self, chat_id: int) -> AsyncIterator[None]:
        """Keep ``chat_pace_s`` between the answer to a chat's previous request and the
        start of the next. A request reaches Telegram at some moment between its start and
        its answer, so two never arrive closer than the pace, however unevenly they
        travel (counting from the start would let a late first and a prompt second
        arrive closer)."""
        now = self._clock.time()
        wait = max(
            self._last_answer.get(chat_id, 0.0) + self._config.chat_pace_s - now,
            self._paused_until - now,
        )
        if wait > 0:
            await self._clock.sleep(wait)
        try:
            yield
        finally:
            self._last_answer[chat_id] = self._clock.time()

    async def _show(self, card: CardRow) -> None:
        view = self._view
        item = view.items.get(card.agent_id, card.item_id)
        generation = card.dirty
        if item is None or (card.message_id is None and item.state != "open"):
            self._bridge.card_shown(card.card_id, generation)  # closed before it was shown
            return
        if view.chats.kind(card.chat_id) is None:
            # A chat bound from the command line: ask Telegram what kind of chat it is.
            self._bridge.note_chat(card.chat_id, *await self._gateway.chat(card.chat_id))
        policy = self._bridge.policy(card.chat_id)
        votes = view.cards.votes(card.card_id)
        bound = view.agents.is_bound(card.agent_id, card.chat_id)
        outcome_chat = item.outcome_chat_id or card.chat_id
        status = card_status(
            item,
            card,
            votes=votes,
            required=policy.required_approvals,
            chat_title=view.chats.title(outcome_chat),
            outcome_private=view.chats.kind(outcome_chat) == "private",
            bound=bound,
            granted=view.grants.granted(card.agent_id, card.item_id),
        )
        peer = view.agents.peer(card.agent_id)
        render = functools.partial(
            render_card,
            self._renderer,
            item,
            status,
            agent_name=peer.name if peer else card.agent_id[:8],
            secrets=policy.secrets,
            now=from_ms(self._clock.now_ms()),
            zone=policy.timezone,
        )

        def draw() -> tuple[RenderedCard, Attachment | None]:
            rendered = render()
            return rendered, None if card.attachment_sent else rendered.attachment

        # A large item takes longer to draw than the loop may stall: draw it (and its
        # file) in a thread; this chat's cards still go out one after another, other
        # chats go on meanwhile.
        if len(item.body_json) >= OFF_LOOP_CHARS:
            rendered, attachment = await asyncio.to_thread(draw)
        else:
            rendered, attachment = draw()

        parsed = parse_item(item)
        minutes = self._bridge.grant_minutes(parsed, card.chat_id)
        offer = parsed.grant_offer if isinstance(parsed, Approval) and not rendered.hidden \
            else None
        buttons = keyboard(item, card, votes=votes, required=policy.required_approvals,
                           bound=bound,
                           grant=(offer.label, minutes) if offer and minutes else None)
        message_id = card.message_id
        if message_id is None:
            async with self._paced(card.chat_id):
                message_id = await self._gateway.send(
                    card.chat_id, rendered.html, plain=rendered.plain, keyboard=buttons,
                    topic_id=card.topic_id,
                )
            self._bridge.card_posted(card, message_id,
                                     shown=generation if attachment is None else None)
            log.info("posted card for %s in chat %s", card.item_id, card.chat_id)
            if attachment is None:
                return
        else:
            try:
                async with self._paced(card.chat_id):
                    await self._gateway.edit(card.chat_id, message_id, rendered.html,
                                             plain=rendered.plain, keyboard=buttons)
            except MessageGone:
                log.info("card for %s in chat %s was deleted; posting it again", card.item_id,
                         card.chat_id)
                self._bridge.card_message_gone(card.card_id)
                return
        if attachment is None:
            self._bridge.card_shown(card.card_id, generation)
            return
        async with self._paced(card.chat_id):
            await self._gateway.send_document(
                card.chat_id, attachment.filename, attachment.content,
                topic_id=card.topic_id, reply_to=message_id,
            )
        self._bridge.card_attachment_sent(card.card_id, generation)
