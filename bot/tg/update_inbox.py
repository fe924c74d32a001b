"""The durable inbox of Telegram updates: nothing Telegram hands over is lost to a crash.

Telegram forgets an update once a ``getUpdates`` call confirms it (asks for a higher
offset). So the fetcher stores every update it receives in the database *before* its next
call confirms them, and a separate handler task runs the stored updates through
python-telegram-bot's handlers, in order. An update is marked handled in the same
transaction as the first change its handler commits (a decision, a vote, a pairing), or
after its handler returns when it changes nothing; a restarted bot handles every update
not marked yet, so each is handled exactly once for what it changes.

Fetching waits for handling only briefly (the decisions a batch made leave before the next
long poll is asked for, :data:`HANDLER_HEAD_START_S` at most): a tap that arrives while a
handler waits out a 429 is stored moments later. In webhook mode (:mod:`bot.tg.webhook`)
the updates Telegram posts are held the same way, before the answer that confirms them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from typing import Any, Final

from telegram import Update
from telegram import error as tg_error
from telegram.ext import Application

from bot.backoff import Backoff, Retries
from bot.bridge import Bridge
from bot.clock import SYSTEM_CLOCK, Clock
from bot.errors import BotApiError, StoreUnavailable, UpdateTaken

log = logging.getLogger(__name__)

LONG_POLL_S: Final = 30
"""How long one ``getUpdates`` call waits for updates."""
RETRY: Final = Backoff(initial_s=1.0, max_s=30.0)
"""How a fetch or a handling pass that failed is tried again."""
PRUNE_EVERY: Final = 500
"""Handled updates between two prunes of the table."""
HANDLER_HEAD_START_S: Final = 0.05
"""How long the next ``getUpdates`` waits, at most, for the handler to have handled the
updates just held (so that a handler stuck on Telegram holds no tap back for long)."""
POLL_PAUSE_S: Final = 0.01
"""How long the next ``getUpdates`` waits once the handler is done: what it set off goes
first (a decision's way through the relay to its agent, on this machine's processor when
they share it, which asking for updates would take)."""

_handling: ContextVar[int | None] = ContextVar("handling_update", default=None)
_failed: ContextVar[StoreUnavailable | None] = ContextVar("update_store_failed", default=None)


def leave_unhandled(exc: StoreUnavailable) -> None:
    """The store failed while the update being handled was recorded: leave it held, to be
    handled again (with backoff) once the store can write."""
    _failed.set(exc)


@contextlib.contextmanager
def outside_update() -> Iterator[None]:
    """Commits in this block do not mark the update being handled as done (a cache
    refresh on the way to the decisive change, say)."""
    token = _handling.set(None)
    try:
        yield
    finally:
        _handling.reset(token)


class UpdateInbox:
    """Fetches updates into the store and hands them to the application's handlers."""

    def __init__(
        self,
        application: Application,  # type: ignore[type-arg]
        bridge: Bridge,
        *,
        allowed_updates: Sequence[str],
        long_poll_s: float = LONG_POLL_S,
        clock: Clock = SYSTEM_CLOCK,
        replica: str = "",
        look_again_s: float | None = None,
    ) -> None:
        """``replica``: the name this process claims held updates under; ``look_again_s``:
        how often to look for updates other replicas held (None: only this one holds)."""
        self._application = application
        self._replica = replica
        self._look_again_s = look_again_s
        self._bridge = bridge
        self._allowed = list(allowed_updates)
        self._long_poll_s = long_poll_s
        self._clock = clock
        self._arrived = asyncio.Event()
        self._caught_up = asyncio.Event()
        """Set while the handler has handled every update held."""
        self._handler_task: asyncio.Task[Any] | None = None
        self._handled = 0
        self._fetched: dict[int, Update] = {}
        """The last batch fetched, parsed: its updates are handed over as they are (the
        stored JSON is read again only after a restart, or by another replica)."""
        bridge.before_each_commit(self._mark_in_transaction)

    async def fetch(self) -> None:
        """Long-poll ``getUpdates`` forever, storing each batch before confirming it."""
        bot = self._application.bot
        await _call(bot.delete_webhook())
        offset = self._bridge.next_update_offset()
        retries = Retries(RETRY)
        while True:
            try:
                updates = await bot.get_updates(
                    offset=offset, timeout=int(self._long_poll_s), allowed_updates=self._allowed)
            except tg_error.InvalidToken as exc:
                raise BotApiError("Telegram refused the bot token") from exc
            except tg_error.Conflict:
                delay = retries.next_delay()
                log.error("409 Conflict: another process polls with this bot token; "
                          "retrying in %.0f s", delay)
            except tg_error.TelegramError as exc:
                delay = retries.next_delay()
                log.warning("getUpdates failed (%s); retrying in %.0f s",
                            type(exc).__name__, delay)
            else:
                try:
                    if updates:
                        self._fetched = {u.update_id: u for u in updates}
                        self.hold([(u.update_id, json.dumps(u.to_dict())) for u in updates])
                        offset = updates[-1].update_id + 1
                        await self._handler_first()
                    retries.reset()
                    continue
                except StoreUnavailable as exc:
                    # Not confirmed: Telegram hands them over again.
                    delay = retries.next_delay()
                    log.warning("cannot hold %d update(s), the store failed (%s); fetching "
                                "them again in %.0f s", len(updates), exc, delay)
            await self._clock.sleep(delay)

    async def _handler_first(self) -> None:
        """Let the handler handle what was just held, and the decisions it made go their
        way, before the next long poll is asked for: asking takes the processor for a
        while, and an update arriving meanwhile only waits at Telegram for a moment."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(HANDLER_HEAD_START_S):
                await self._caught_up.wait()
        await asyncio.sleep(POLL_PAUSE_S)

    def hold(self, updates: Sequence[tuple[int, str]], *, durable: bool = False) -> None:
        """Store updates (id, JSON) not held yet and wake the handler; a copy of one held
        before is ignored. :class:`StoreUnavailable` when the store cannot take them."""
        self._bridge.hold_updates(list(updates), durable=durable)
        self._caught_up.clear()
        self._arrived.set()

    async def set_webhook(self, url: str, secret: str) -> None:
        """Ask Telegram to post updates to ``url`` with ``secret``; BotApiError if it
        refuses (no update would ever arrive)."""
        try:
            await self._application.bot.set_webhook(
                url, secret_token=secret, allowed_updates=self._allowed)
        except tg_error.InvalidToken as exc:
            raise BotApiError("Telegram refused the bot token") from exc
        except tg_error.TelegramError as exc:
            raise BotApiError(f"Telegram refused the webhook {url}: {exc}") from exc
        log.info("Telegram posts updates to %s", url)

    async def handle(self) -> None:
        """Hand every stored update to the handlers, oldest first, forever."""
        self._handler_task = asyncio.current_task()
        retries = Retries(RETRY)
        while True:
            self._arrived.clear()
            try:
                while claimed := self._bridge.claim_updates(self._replica):
                    for update_id, body in claimed:
                        await self._handle_one(update_id, body)
            except StoreUnavailable as exc:
                # Not marked handled: handled again once the store can write.
                delay = retries.next_delay()
                log.warning("cannot handle the held updates, the store failed (%s); trying "
                            "again in %.0f s", exc, delay)
                await self._clock.sleep(delay)
                continue
            retries.reset()
            if not self._arrived.is_set():
                self._caught_up.set()
            if self._look_again_s is None:
                await self._arrived.wait()
            else:
                await self._clock.wait(self._arrived, self._look_again_s)

    async def _handle_one(self, update_id: int, body: str) -> None:
        update = self._fetched.pop(update_id, None)
        if update is None:
            try:
                update = Update.de_json(json.loads(body), self._application.bot)
            except (ValueError, TypeError, KeyError) as exc:
                log.warning("dropped stored update %s: %s", update_id, type(exc).__name__)
        marked = False
        if update is not None:
            token, failing = _handling.set(update_id), _failed.set(None)
            try:
                await self._application.process_update(update)
            finally:
                marked = _handling.get() is None  # by the handler's first commit
                failure = _failed.get()
                _handling.reset(token)
                _failed.reset(failing)
            if failure is not None and not marked:
                raise failure
        if not marked:
            self._bridge.update_handled(update_id)
        self._handled += 1
        if self._handled % PRUNE_EVERY == 0:
            self._bridge.prune_updates()

    def _mark_in_transaction(self) -> None:
        """The store's commit hook: the update being handled is done in the same
        transaction as its first change."""
        update_id = _handling.get()
        if update_id is not None and asyncio.current_task() is self._handler_task:
            if not self._bridge.update_handled(update_id):
                raise UpdateTaken(f"update {update_id} was handled by another replica")
            _handling.set(None)


async def _call(request: Any) -> None:
    try:
        await request
    except tg_error.InvalidToken as exc:
        raise BotApiError("Telegram refused the bot token") from exc
    except tg_error.TelegramError as exc:
        log.warning("Telegram call failed at start: %s", type(exc).__name__)
