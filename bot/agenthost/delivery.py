"""The agent host's changes and what they deliver: one store transaction per change, the
envelopes it queues in the durable outbox for the paired devices (an ``inbox_update``, a
``notification``, an ``activity`` entry), and what runs once it has committed (log lines,
what the host remembers, programs waiting on an item woken).

A change that fails leaves the host as it was: nothing of it is logged, remembered or woken.

A decision or an answer only notes, in its own commit, that the devices are owed a fresh
``inbox_update`` (:meth:`Delivery.owe_inbox`): the programs waiting on the item are
answered first, and the update is built, sealed and queued right after, in a commit that
also clears the note. A note left by a killed process is paid when the host starts again.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Final

from bot.agenthost import items as it
from bot.agenthost.items import Item
from bot.agenthost.store import AgentStore
from bot.clock import Clock
from bot.errors import StoreError
from bot.protocol.envelope import seal
from bot.protocol.identity import Identity, PublicCard
from bot.protocol.payloads import raw_payload

log = logging.getLogger(__name__)

Committed = list[Callable[[], None]]
"""What a change runs once it has committed, in order."""

SEEN_WRITTEN_EVERY_MS: Final = 1000
"""A receipt is written as a device's last-seen time at most this often (a disk sync each);
the time in memory is exact."""
SENT_REMEMBERED: Final = 4096
"""Envelopes sent whose recipient and time are kept for the relay's ``delivered`` receipt
(the oldest are forgotten first: the receipt is a courtesy)."""
INBOX_OWED_META: Final = "inbox_owed"
"""Set while the paired devices are owed an ``inbox_update`` for a committed change."""
LISTED_META: Final = "listed_ended"
"""The place, in the order items ended, of the last item an update to every paired device
could list."""
ANSWER_TURNS: Final = 6
"""Turns of the event loop in which the programs a change woke write their answers."""
PAY_RETRY_S: Final = 1.0
"""How soon an owed update whose commit failed is tried again."""


class Delivery:
    """The paired devices, the changes made for them and the programs waiting on items."""

    def __init__(self, store: AgentStore, identity: Identity, relay_url: str, clock: Clock,
                 *, notifications: bool = False) -> None:
        self.store = store
        self.identity = identity
        self.relay_url = relay_url
        self.clock = clock
        self.notifications = notifications
        """Also send a ``notification`` twin for every new item."""
        self.peers = {card.id: card for card, _, _ in store.devices()}
        self.grants_shown: frozenset[str] | None = None
        """The grants in force the devices were last told of."""
        self.on_change: list[Callable[[], None]] = []
        """Run after every change (the relay client and the expiry loop look again)."""
        self._waiters: dict[str, list[asyncio.Future[None]]] = {}
        self._owed = store.get_meta(INBOX_OWED_META) is not None
        self._paying: asyncio.Handle | None = None
        self._closing = False
        self._sent: dict[str, tuple[str, int]] = {}
        """Recipient and ``ts`` of envelopes sent, by id, oldest first."""
        self.seen: dict[str, int] = {}
        """When each paired device was last heard from in this run, written or not."""
        self._seen_written: dict[str, int] = {}
        self.holds: dict[str, int] = {}
        """Per paired device, the ``ts`` of the newest envelope it is known to hold (the
        relay said it acknowledged it) or the time it last sent one, in this run."""

    @property
    def name(self) -> str:
        return self.identity.name

    @contextlib.contextmanager
    def change(self, *, durable: bool = True) -> Iterator[Committed]:
        """One store transaction; what the block adds to the list it gets (logs, what the
        host remembers, waiters to wake) runs once it has committed. A change that fails
        leaves the host as it was."""
        committed: Committed = []
        shown = self.grants_shown
        try:
            with self.store.transaction(durable=durable):
                yield committed
        except BaseException:
            self.grants_shown = shown
            raise
        for step in committed:
            step()

    def finish(self, ended: list[Item]) -> None:
        """Save how items ended and tell every device, in one change."""
        with self.change():
            for item in ended:
                self.store.save_outcome(item)
            self.broadcast(self.peers.values())
        self.after_change(ended)

    def broadcast(self, devices: Iterable[PublicCard], *, listing: Item | None = None,
                  recap: bool = False) -> None:
        """Queue a complete ``inbox_update`` for ``devices`` (inside a transaction).

        Its ``resolved`` says how the items the devices saw open ended: the items that
        ended since the last update every paired device was sent (the relay hands each
        device every update, in order); with ``recap`` (for a device that paired, or asked
        after a reconnection), the last ones that ended, however long ago. It also lists
        the ended item ``listing``, however long ago it ended."""
        devices = list(devices)
        if not devices:
            return
        now = self.clock.now_ms()
        listed = None if recap else self.store.get_meta(LISTED_META)
        resolved = self.store.recently_ended(
            it.MAX_RESOLVED, after=None if listed is None else int(listed))
        if not recap and {device.id for device in devices} >= self.peers.keys():
            self.store.set_meta(LISTED_META, str(self.store.last_ended()))
        if listing is not None and all(e.item_id != listing.item_id for e in resolved):
            resolved.append(it.Ended.of(listing))
        body = it.inbox_body(
            self.store.next_rev(now), self.name, self.store.open_items(), resolved,
        )
        grants = self.store.grants.in_force(now)
        body["grants"] = [grant.wire() for grant in grants]
        self.grants_shown = frozenset(grant.grant_id for grant in grants)
        payload = raw_payload("inbox_update", body)
        for device in devices:
            self.send(device, payload, now)

    def owe_inbox(self, committed: Committed) -> None:
        """Note (inside a transaction) that every paired device is owed a complete
        ``inbox_update``; it is sent once the programs waiting on the change's items have
        been answered (:meth:`after_change`)."""
        if self.peers:
            self.store.set_meta(INBOX_OWED_META, "1")
            committed.append(functools.partial(setattr, self, "_owed", True))

    def pay_inbox(self) -> None:
        """Queue the ``inbox_update`` the devices are owed, if they are, and clear the
        note in the same commit. That commit need not wait for the disk: lost with the
        power, the note is still there, and the update is sent again."""
        self._paying = None
        if not self._owed:
            return
        try:
            with self.change(durable=False):
                self.broadcast(self.peers.values())
                self.store.forget_meta(INBOX_OWED_META)
        except StoreError as exc:
            log.warning("could not queue the devices' inbox update (%s); trying again in "
                        "%.0f s", exc, PAY_RETRY_S)
            self._pay_later(PAY_RETRY_S)
            return
        self._owed = False
        self._look_again()

    def _pay_later(self, delay_s: float) -> None:
        """Pay the owed update after ``delay_s`` (0: after what the loop has ready); with
        no loop running, the caller pays it now or the next change does."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._paying = loop.call_later(delay_s, self.pay_inbox) if delay_s \
            else loop.call_soon(self.pay_inbox)

    def notify(self, item: Item) -> None:
        """Queue the ``notification`` twin of a new item for every device."""
        payload = raw_payload("notification", it.notification_body(item, self.name))
        for device in self.peers.values():
            self.send(device, payload, self.clock.now_ms())

    def send(self, device: PublicCard, payload: bytes, now: int) -> None:
        envelope = seal(payload, sender=self.identity, recipient=device, ts_ms=now)
        self.store.add_outgoing(self.relay_url, envelope.to_json(), now)
        self._sent[envelope.id] = (device.id, now)
        if len(self._sent) > SENT_REMEMBERED:
            del self._sent[next(iter(self._sent))]

    # -- what the devices hold ----------------------------------------------------------

    def delivered(self, envelope_id: str) -> None:
        """The relay's receipt: a device acknowledged an envelope sent to it."""
        sent = self._sent.pop(envelope_id, None)
        if sent is None:
            return
        device_id, ts = sent
        if device_id not in self.peers:
            return
        self.holds[device_id] = max(self.holds.get(device_id, 0), ts)
        now = self.clock.now_ms()
        self.seen[device_id] = now
        if now - self._seen_written.get(device_id, 0) < SEEN_WRITTEN_EVERY_MS:
            return
        try:
            self.store.device_seen(device_id, now)
        except StoreError as exc:  # when it was last seen is not worth more than that
            log.debug("could not record that device %s was seen: %s", device_id, exc)
        else:
            self._seen_written[device_id] = now

    def heard_from(self, device_id: str, now: int) -> None:
        """A paired device sent an envelope at ``now`` (its change committed)."""
        if device_id in self.peers:
            self.holds[device_id] = max(self.holds.get(device_id, 0), now)
            self.seen[device_id] = self._seen_written[device_id] = now

    def picked_up(self, item: Item) -> bool:
        """Whether a paired device is known to hold ``item``: it acknowledged an update
        sent since the item was made, or sent something since."""
        return any(
            ts >= item.created_ms for device, ts in self.holds.items() if device in self.peers
        )

    def after_change(self, ended: Iterable[Item] = ()) -> None:
        """A change committed: wake the programs waiting on the items it ended, then send
        what it queued (an owed update once those programs have been answered)."""
        for item in ended:
            self.wake(item.item_id)
        if self._owed and self._paying is None:
            self._pay_later(0)  # after the woken waiters' turn: they answer first
            if self._paying is None:
                self.pay_inbox()
        self._look_again()

    async def let_woken_answer(self) -> None:
        """Leave the programs the last change woke (``ask``'s long poll, a hook) the turns
        of the loop they take to write their answers, before the caller goes on: the
        envelope's acknowledgement would wake the relay, and with its ``delivered`` the
        device, which would take the processor from those answers."""
        for _ in range(ANSWER_TURNS):
            await asyncio.sleep(0)

    def _look_again(self) -> None:
        for look_again in self.on_change:
            look_again()

    # -- programs waiting ---------------------------------------------------------------

    async def wait(self, key: str, wait_s: float) -> None:
        """Until ``key`` (an item id, ``pairing:<id>``) is woken, or ``wait_s`` passed.

        Each waiter awaits a future of its own, so that waking it resumes it at the
        loop's next turn."""
        if wait_s <= 0 or self._closing:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiting = self._waiters.setdefault(key, [])
        waiting.append(waiter)
        try:
            async with asyncio.timeout(wait_s):
                await waiter
        except TimeoutError:
            pass
        finally:
            if waiter in waiting:
                waiting.remove(waiter)
            if not waiting and self._waiters.get(key) is waiting:
                del self._waiters[key]

    def wake(self, key: str) -> None:
        for waiter in self._waiters.pop(key, []):
            if not waiter.done():
                waiter.set_result(None)

    def release_waiters(self) -> None:
        """Answer every long poll now (the host is stopping) and every later one at once."""
        self._closing = True
        for key in list(self._waiters):
            self.wake(key)
