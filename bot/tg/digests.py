"""Keeps each agent's digest of waiting approvals in Telegram in step with the store.

A digest lists the approvals whose cards are posted, so it stands below them and links to
them. On every change (and every second, for cards posted meanwhile) the bridge gives each
digest whose list changed a new version; the worker then posts, edits or removes the
digest messages in the chat's turns (:class:`bot.tg.ratelimit.ChatTurns`, shared with the
card worker), behind the cards, and never before a card that shows how its item ended. A
digest whose list is empty is removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator

from bot.bridge import Bridge
from bot.clock import Clock
from bot.core.digest import DigestRow
from bot.errors import (
    BotApiError,
    ChatMoved,
    ChatUnavailable,
    MessageGone,
    SkaldError,
    StoreError,
    Throttled,
)
from bot.protocol.payloads import parse_approval
from bot.render import Renderer
from bot.render.digest import digest_line
from bot.tg.batches import digest_keyboard, exclusion
from bot.tg.gateway import Gateway
from bot.tg.keyboards import Keyboard
from bot.tg.notes import shown
from bot.tg.ratelimit import DIGEST, ChatTurns

log = logging.getLogger(__name__)

LOOK_AGAIN_S = 1.0
"""How often digests are looked at without a change (cards posted meanwhile get links)."""
RETRY_DELAY_S = 5.0
OUTCOME_FIRST_S = 1.0
"""The longest a digest waits for the card worker to take a turn for a decided card."""


class DigestWorker:
    """Posts, edits and removes digests, paced per chat."""

    def __init__(self, *, bridge: Bridge, gateway: Gateway, renderer: Renderer,
                 turns: ChatTurns, clock: Clock) -> None:
        self._bridge = bridge
        self._view = bridge.view
        self._gateway = gateway
        self._renderer = renderer
        self._turns = turns
        self._clock = clock
        self._wake = asyncio.Event()
        self._shown: dict[int, str] = {}
        """Per digest: the text its message shows now (memory only: redrawn after a start)."""

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        while True:
            self._wake.clear()
            try:
                self._bridge.sync_digests()
            except StoreError as exc:
                log.warning("could not bring digests up to date: %s", exc)
                await self._clock.wait(self._wake, RETRY_DELAY_S)
                continue
            failed = False
            for digest in self._view.digests.all():
                if self._view.chats.forbidden(digest.chat_id):
                    continue
                failed |= not await self._attempt(digest)
            await self._clock.wait(self._wake, RETRY_DELAY_S if failed else LOOK_AGAIN_S)

    @contextlib.asynccontextmanager
    async def _turn(self, chat_id: int) -> AsyncIterator[None]:
        """The chat's turn for a digest. A digest waits behind the chat's cards; and when
        its turn comes as a card's item is decided, the card worker (which chooses its card
        only once the turn has come) takes the turn to show the outcome first."""
        while True:
            await self._turns.ready(chat_id, DIGEST)
            if not self._outcome_waiting(chat_id):
                break
            await self._turns.next_change(chat_id, OUTCOME_FIRST_S)
        async with self._turns.turn(chat_id, DIGEST):
            yield

    def _outcome_waiting(self, chat_id: int) -> bool:
        """Whether a posted card of the chat has yet to show how its item ended."""
        for card in self._view.cards.dirty(chat_id):
            item = self._view.items.get(card.agent_id, card.item_id)
            if card.message_id is not None and item is not None and item.state != "open":
                return True
        return False

    async def _attempt(self, digest: DigestRow) -> bool:
        return await shown(self._show(digest), f"digest {digest.digest_id}", digest.chat_id,
                           self._bridge, self._clock)

    async def _show(self, digest: DigestRow) -> None:
        items = self._view.digests.items(digest.digest_id, digest.version)
        if not items:
            if digest.message_id is not None:
                async with self._turn(digest.chat_id):
                    await self._remove(digest)
            self._bridge.digest_shown(digest.digest_id, digest.dirty)
            return
        html, buttons = self._draw(digest, items)
        if digest.message_id is not None and self._shown.get(digest.digest_id) == html \
                and not digest.dirty:
            return
        if digest.message_id is None:
            async with self._turn(digest.chat_id):
                message_id = await self._gateway.send(digest.chat_id, html, keyboard=buttons,
                                                      topic_id=digest.topic_id, quiet=True)
            self._bridge.digest_posted(digest.digest_id, message_id)
            log.info("posted digest %s (version %d) in chat %s", digest.digest_id,
                     digest.version, digest.chat_id)
        else:
            try:
                async with self._turn(digest.chat_id):
                    await self._gateway.edit(digest.chat_id, digest.message_id, html,
                                             keyboard=buttons)
            except MessageGone:
                self._bridge.digest_posted(digest.digest_id, None)
                self._shown.pop(digest.digest_id, None)
                return
        self._shown[digest.digest_id] = html
        self._bridge.digest_shown(digest.digest_id, digest.dirty)

    async def _remove(self, digest: DigestRow) -> None:
        """Delete the message; one that cannot be deleted any more says nothing waits (and
        one in a chat that moved or went is let go: it has no buttons that work)."""
        assert digest.message_id is not None
        try:
            await self._gateway.delete(digest.chat_id, digest.message_id)
        except (MessageGone, ChatMoved, ChatUnavailable):
            pass
        except Throttled:
            raise
        except BotApiError as exc:
            log.info("could not delete digest %s in chat %s (%s); clearing it instead",
                     digest.digest_id, digest.chat_id, exc)
            await self._gateway.edit(digest.chat_id, digest.message_id,
                                     self._renderer.message("digest_done"))
        self._bridge.digest_posted(digest.digest_id, None)
        self._shown.pop(digest.digest_id, None)
        log.info("removed digest %s in chat %s", digest.digest_id, digest.chat_id)

    def _draw(self, digest: DigestRow, items: tuple[str, ...]) -> tuple[str, Keyboard]:
        cards = {card.item_id: card
                 for _item, card in self._view.items.open_in_chat(digest.chat_id)
                 if card.agent_id == digest.agent_id}
        supergroup = self._view.chats.kind(digest.chat_id) == "supergroup"
        lines = []
        batched = 0
        for number, item_id in enumerate(items, start=1):
            row = self._view.items.get(digest.agent_id, item_id)
            if row is None:
                continue
            card = cards.get(item_id)
            reason = exclusion(row, editing=card is not None
                               and self._view.edits.in_progress(card.card_id))
            batched += reason is None and row.state == "open"
            lines.append({
                "number": number,
                "line": _line(row.body_json, item_id),
                "left_out": reason,
                "link": _link(digest.chat_id, card.message_id)
                if supergroup and card is not None and card.message_id else None,
            })
        peer = self._view.agents.peer(digest.agent_id)
        html = self._renderer.message(
            "digest", agent=peer.name if peer else digest.agent_id[:8], items=lines,
            batched=batched)
        return html, digest_keyboard(digest.token, digest.version, batched)


def _line(body_json: str, item_id: str) -> str:
    """The item's title line; its id if the stored item cannot be read."""
    try:
        return digest_line(parse_approval(json.loads(body_json)))
    except (SkaldError, ValueError):
        return item_id


def _link(chat_id: int, message_id: int) -> str:
    """A link to a message of a supergroup (``-100…`` ids); other chats have none."""
    return f"https://t.me/c/{str(chat_id).removeprefix('-100')}/{message_id}"
