"""Brings every card in Telegram up to date with the store, paced per chat.

Cards that need posting or editing are rows with a change counter (``cards.dirty``). The
worker drains them one chat at a time (about one message per second per chat; the bot's
rate limiter, :mod:`bot.tg.ratelimit`, keeps the global and per-group limits), so a burst
in one chat never starves another. In each chat, the cards of items that ended go first:
a decided card loses its buttons before the chat's new cards and reminders go out.
Because the work list is in SQLite, a restart resumes where it stopped.

Nothing goes out that the store cannot record: before a message is sent, the store takes a
write for it, and no new message goes out while one already sent waits to be recorded. A
message sent whose record then fails is recorded again (never sent again) until the store
takes it, so a store that fails costs no extra copy; only a crash between the send and the
record does (one copy, posted again at the next start).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable

from bot.backoff import Backoff
from bot.bridge import Bridge
from bot.clock import Clock, from_ms
from bot.config import Config
from bot.core.model import CardRow, ItemRow, parse_item
from bot.core.status import CONFIRM_WAIT_S, card_status
from bot.errors import (
    ChatMoved,
    ChatUnavailable,
    MessageGone,
    SkaldError,
    StoreError,
    StoreUnavailable,
    Throttled,
)
from bot.protocol.payloads import Approval
from bot.render import Attachment, RenderedCard, Renderer, render_card
from bot.render.edits import EditShown, offered_keys
from bot.render.values import card_secrets
from bot.tg.gateway import Gateway
from bot.tg.keyboards import Keyboard, details_button, keyboard
from bot.tg.ratelimit import CARD, OUTCOME, ChatTurns

log = logging.getLogger(__name__)

RETRY = Backoff(initial_s=5.0, max_s=600.0)
"""How a card that failed is tried again."""
STORE_RETRY = Backoff(initial_s=5.0, max_s=30.0)
"""How a card waits for a store that failed: posting resumes this soon after the store can
write again."""
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
        bot_username: str = "",
    ) -> None:
        self._bridge = bridge
        self._bot_username = bot_username
        self._view = bridge.view
        self._gateway = gateway
        self._renderer = renderer
        self._config = config
        self._clock = clock
        self._wake = asyncio.Event()
        self._chats: dict[int, asyncio.Task[None]] = {}
        self._nudges: dict[int, asyncio.Event] = {}
        """Per chat: set by :meth:`wake` for a drain waiting on its parked cards."""
        self.turns = ChatTurns(config.chat_pace_s, clock)
        """Each chat's requests in turns, a pace apart (reminders take theirs too)."""
        self._stopping = False
        self._failures: dict[int, int] = {}
        self._retry_at: dict[int, float] = {}
        self._unrecorded: dict[int, Callable[[], None]] = {}
        """Per card: the record of a message Telegram took that the store has not taken
        yet (one per chat at most: nothing else goes out meanwhile)."""

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

    def _drained(self, chat_id: int, task: asyncio.Task[None]) -> None:
        error = None if task.cancelled() else task.exception()
        if isinstance(error, StoreUnavailable):
            # Its cards stay dirty: the chat is drained again once the store works.
            log.warning("chat %d paused, the store cannot work for now (%s)", chat_id, error)
        elif error is not None:
            log.error("the cards of chat %d failed", chat_id, exc_info=error)
        self._chats.pop(chat_id, None)
        self._nudges.pop(chat_id, None)
        self._wake.set()

    async def _drain(self, chat_id: int) -> None:
        nudge = self._nudges.setdefault(chat_id, asyncio.Event())
        turn_came = False
        while not self._stopping and not self._view.chats.forbidden(chat_id):
            now = self._clock.time()
            nudge.clear()
            cards = self._view.cards.dirty(chat_id)  # the most urgent first
            if not cards:
                return
            waits = [self._waits_for(card, now) for card in cards]
            ready = [card for card, wait in zip(cards, waits, strict=True) if wait <= 0]
            if not ready:
                # Every card here waits (a retry, or its agent's word): until the first may
                # go, or until something changes (wake) and a card may go sooner.
                await self._clock.wait(nudge, min(waits))
                continue
            if not turn_came and self._asks_telegram(ready[0]):
                # Choose once the chat's turn has come: an item decided while this one
                # waited for it goes first.
                await self.turns.ready(chat_id, self._urgency(ready[0]))
                turn_came = True
                continue
            turn_came = False
            if not await self._show_one(ready[0]):
                return

    def _waits_for(self, card: CardRow, now: float) -> float:
        """How long ``card`` waits before it is shown (0 or less: not at all): a retry
        after it failed, or the agent's word on a decision made here."""
        retry = self._retry_at.get(card.card_id, 0.0) - now
        if card.message_id is None:
            return retry
        return max(retry, self._unconfirmed(card, now))

    def _unconfirmed(self, card: CardRow, now: float) -> float:
        """How much longer a card decided here waits for its agent to report how the
        item ended (:data:`CONFIRM_WAIT_S`); its report wakes the chat."""
        item = self._view.items.get(card.agent_id, card.item_id)
        if item is None or item.outcome_chat_id is None or item.outcome_at is None:
            return 0.0
        left = item.outcome_at / 1000 + CONFIRM_WAIT_S - now
        if left <= 0 or self._view.items.reported(card.agent_id, card.item_id) is not None:
            return 0.0
        return left

    async def _show_one(self, card: CardRow) -> bool:
        """Bring one card up to date; False when its chat can take no more for now."""
        try:
            await self._show(card)
        except Throttled as exc:
            log.warning("Telegram asked to wait %.1f s (chat %s)", exc.retry_after,
                        card.chat_id)
            self.turns.pause(exc.retry_after)
            await self._clock.sleep(exc.retry_after)
        except ChatMoved as exc:
            self._bridge.chat_migrated(exc.old_chat_id, exc.new_chat_id, force=True)
            self._wake.set()
            return False
        except ChatUnavailable as exc:
            log.warning("stopped posting in chat %s: %s", card.chat_id, exc)
            self._bridge.chat_unavailable(card.chat_id)
            return False
        except Exception as exc:  # one broken card must never block its chat
            self._park(card, exc)
        else:
            self._failures.pop(card.card_id, None)
            self._retry_at.pop(card.card_id, None)
        return True

    def _asks_telegram(self, card: CardRow) -> bool:
        """Whether showing the card takes a request in its chat (one that ended before it
        was posted takes none)."""
        if card.message_id is not None:
            return True
        item = self._view.items.get(card.agent_id, card.item_id)
        return item is not None and item.state == "open"

    def _urgency(self, card: CardRow) -> int:
        item = self._view.items.get(card.agent_id, card.item_id)
        return CARD if item is not None and item.state == "open" else OUTCOME

    def _park(self, card: CardRow, exc: Exception) -> None:
        """Retry a card that failed later, backing off, and let the chat's others go first."""
        if "thread not found" in str(exc).lower() and card.topic_id is not None:
            log.warning("the forum topic of chat %s is gone; card %s goes to the chat itself",
                        card.chat_id, card.card_id)
            self._bridge.card_topic_gone(card.card_id)
            return
        failures = self._failures.get(card.card_id, 0) + 1
        self._failures[card.card_id] = failures
        delay = (STORE_RETRY if isinstance(exc, StoreError) else RETRY).delay(failures)
        self._retry_at[card.card_id] = self._clock.time() + delay
        if isinstance(exc, SkaldError):
            log.warning("could not update card %s in chat %s (attempt %d, next in %.0f s): %s",
                        card.card_id, card.chat_id, failures, delay, exc)
        else:
            log.exception("bug while updating card %s in chat %s (attempt %d)", card.card_id,
                          card.chat_id, failures)

    async def _show(self, card: CardRow) -> None:
        record = self._unrecorded.get(card.card_id)
        if record is not None:
            # Sent already: record it, and show what else changed on the next pass.
            self._record(card, record)
            return
        view = self._view
        item = view.items.get(card.agent_id, card.item_id)
        generation = card.dirty
        urgency = CARD if item is not None and item.state == "open" else OUTCOME
        if item is None or (card.message_id is None and item.state != "open"):
            self._bridge.card_shown(card.card_id, generation)  # closed before it was shown
            return
        if view.chats.kind(card.chat_id) is None:
            # A chat bound from the command line: ask Telegram what kind of chat it is.
            self._bridge.chat_seen(card.chat_id, *await self._gateway.chat(card.chat_id))
        rendered, attachment, buttons = await self._draw(card, item)
        message_id = card.message_id
        if message_id is None:
            self._reserve(card)
            async with self.turns.turn(card.chat_id, urgency):
                message_id = await self._gateway.send(
                    card.chat_id, rendered.html, plain=rendered.plain, keyboard=buttons,
                    topic_id=card.topic_id,
                )
            self._record(card, functools.partial(
                self._bridge.card_posted, card, message_id,
                shown=generation if attachment is None else None))
            log.info("posted card for %s in chat %s", card.item_id, card.chat_id)
            if attachment is None:
                return
        else:
            try:
                async with self.turns.turn(card.chat_id, urgency):
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
        self._reserve(card)
        async with self.turns.turn(card.chat_id, urgency):
            await self._gateway.send_document(
                card.chat_id, attachment.filename, attachment.content,
                topic_id=card.topic_id, reply_to=message_id,
            )
        self._record(card, functools.partial(
            self._bridge.card_attachment_sent, card.card_id, generation))

    async def _draw(self, card: CardRow, item: ItemRow) -> tuple[
            RenderedCard, Attachment | None, Keyboard]:
        """What ``card`` shows now: its text, the file still to send with it, its buttons."""
        view = self._view
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
            sending=item.state != "open" and view.items.sending(card.agent_id, card.item_id),
            reported=None if item.state == "open" else view.items.reported(card.agent_id,
                                                                          card.item_id),
        )
        peer = view.agents.peer(card.agent_id)
        details = details_button(card, self._config.webapp, self._bot_username)
        edit = view.edits.of(card.card_id)
        edited = EditShown(edit.arguments, edit.user_name) \
            if edit is not None and edit.arguments and item.kind == "approval" else None
        render = functools.partial(
            render_card,
            self._renderer,
            item,
            status,
            agent_name=peer.name if peer else card.agent_id[:8],
            secrets=card_secrets(policy.secrets, app=self._config.webapp is not None,
                                 details=details is not None),
            now=from_ms(self._clock.now_ms()),
            zone=policy.timezone,
            edited=edited,
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
        minutes = self._bridge.grant_minutes(parsed, card.chat_id, card.agent_id)
        offer = parsed.grant_offer if isinstance(parsed, Approval) and not rendered.hidden \
            else None
        buttons = keyboard(item, card, votes=votes, required=policy.required_approvals,
                           bound=bound,
                           grant=(offer.label, minutes) if offer and minutes else None,
                           details=details,
                           editable=isinstance(parsed, Approval) and bool(offered_keys(parsed)),
                           edit_revision=edit.revision if edit and edited else 0)
        return rendered, attachment, buttons

    def _reserve(self, card: CardRow) -> None:
        """Before a message of ``card`` goes out: the store must be able to record it (it
        takes a write now, and has recorded every message sent before)."""
        if self._unrecorded:
            raise StoreUnavailable(f"{len(self._unrecorded)} message(s) sent and not "
                                   "recorded yet: waiting for the store")
        self._bridge.card_sending(card.card_id)

    def _record(self, card: CardRow, record: Callable[[], None]) -> None:
        """Record a message Telegram took; if the store fails, the card's next turn
        records it again instead of sending anything (:meth:`_show`), and no other card
        goes out until then."""
        self._unrecorded[card.card_id] = record
        try:
            record()
        except StoreUnavailable:
            log.warning("card %s in chat %s was sent and could not be recorded yet; "
                        "nothing more goes out until it is", card.card_id, card.chat_id)
            raise
        except BaseException:
            del self._unrecorded[card.card_id]  # not the store: waiting would not help
            raise
        del self._unrecorded[card.card_id]
