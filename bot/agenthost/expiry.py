"""Time running out at the agent host: pending items that expire, grants that end, and every
grant lapsing once the host has been off the relay too long (a revoke could not reach it).

The loop sleeps until the next deadline, a tick at most (an injected clock may jump), and
wakes early after every change. A store that fails is tried again next tick; its health
logs the failure, once a minute at most.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Final

from bot.agenthost import grants as gr
from bot.agenthost import items as it
from bot.agenthost.delivery import Delivery
from bot.agenthost.items import Item, State
from bot.errors import SkaldError, StoreError

log = logging.getLogger(__name__)

EXPIRY_TICK_S: Final = 1.0
"""The longest the expiry loop sleeps: an injected clock may jump."""
ON_RELAY_SAVE_MS: Final = 30_000
"""How often the time the host was last on the relay is saved while it is on it: after a
restart, the grants lapse counting from the last time saved."""
ON_RELAY_META: Final = "on_relay_ms"


class Expiry:
    """Ends what has run out, on time."""

    def __init__(self, delivery: Delivery, on_relay: Callable[[], bool]) -> None:
        """``on_relay`` says whether the host has a live relay session now."""
        self.delivery = delivery
        self.store = delivery.store
        self.clock = delivery.clock
        self.wake = asyncio.Event()
        self._on_relay = on_relay
        saved = self.store.get_meta(ON_RELAY_META)
        self._on_relay_ms = int(saved) if saved else self.clock.now_ms()
        """The last moment the host was seen on the relay (see :meth:`lapse_if_off_relay`)."""
        self._on_relay_saved_ms = 0

    async def run(self) -> None:
        """Expire what is due, until cancelled."""
        while True:
            self.wake.clear()
            try:
                self.expire_due()
                delay = self._until_next_expiry()
            except StoreError as exc:  # the store's health logs it, once a minute at most
                log.debug("cannot expire items: %s", exc)
                delay = EXPIRY_TICK_S  # tried again next tick, not at once
            except SkaldError as exc:
                log.error("cannot expire items: %s", exc)
                delay = EXPIRY_TICK_S
            if delay > 0:
                await self.clock.wait(self.wake, min(delay, EXPIRY_TICK_S))

    def _until_next_expiry(self) -> float:
        """Seconds until the next item or grant runs out (a tick when none is due)."""
        now = self.clock.now_ms()
        deadlines = [t for t in (self.store.next_expiry(), self.store.grants.next_expiry(now))
                     if t is not None]
        return EXPIRY_TICK_S if not deadlines else (min(deadlines) - now) / 1000

    def lapse_if_off_relay(self) -> None:
        """End every grant in force once the host has been off the relay for longer than
        :data:`~bot.agenthost.grants.OFFLINE_LAPSE_MS`: a revoke cannot reach it there, so
        no grant goes on unchecked for longer. The devices are told when it is back."""
        now = self.clock.now_ms()
        if self._on_relay():
            self._on_relay_ms = now
            if now - self._on_relay_saved_ms >= ON_RELAY_SAVE_MS:
                self.store.set_meta(ON_RELAY_META, str(now))
                self._on_relay_saved_ms = now
            return
        if not gr.lapsed(self._on_relay_ms, now):
            return
        in_force = self.store.grants.in_force(now)
        if not in_force:
            return
        with self.store.transaction():
            for grant in in_force:
                self.store.grants.end(grant.grant_id, now)
            self.delivery.broadcast(self.delivery.peers.values())
        log.warning("ended %d grant(s): off the relay since %s", len(in_force),
                    it.iso_ms(self._on_relay_ms))
        self.delivery.after_change()

    def expire_due(self) -> list[Item]:
        """End every pending item whose time has run out, and every grant when the host
        has been off the relay too long."""
        self.lapse_if_off_relay()
        now = self.clock.now_ms()
        ended = [it.end(item, State.EXPIRED, now) for item in it.due(self.store.open_items(), now)]
        done = [item for item in ended if item is not None]
        in_force = frozenset(grant.grant_id for grant in self.store.grants.in_force(now))
        shown = self.delivery.grants_shown
        if done or (shown is not None and in_force != shown):
            self.delivery.finish(done)  # tells the devices, also of grants that ran out
        if done:
            log.info("expired %s", ", ".join(item.item_id for item in done))
        return done
