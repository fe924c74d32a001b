"""The agent host's service: one Skald agent identity speaking protocol §2–§5 with every
device it is paired to, for the programs that use its local API.

Every change (an item submitted, decided, answered, expired or withdrawn; a device paired)
is one store transaction that also puts the resulting envelopes in the durable outbox, so
a SIGKILL loses nothing: the relay client sends what the outbox holds after a restart, and
the relay redelivers what was not acknowledged (the replay set drops what was already
processed). Programs waiting on an item are woken when it ends. What a change did is
logged, and its waiters woken, only once it has committed; a decision the store cannot take
now (a full disk, say) is not acknowledged, and applies when the relay hands it over again.

:class:`AgentHost` holds the local API's operations; the changes and what they deliver are
:class:`~bot.agenthost.delivery.Delivery`'s, what devices send is
:class:`~bot.agenthost.inbound.Inbound`'s, and time running out is
:class:`~bot.agenthost.expiry.Expiry`'s.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, Final

from bot.agenthost import grants as gr
from bot.agenthost import items as it
from bot.agenthost.delivery import Delivery
from bot.agenthost.describe import credential_blocks, default_summary, describe_arguments
from bot.agenthost.edits import editable_keys
from bot.agenthost.expiry import Expiry
from bot.agenthost.inbound import Inbound
from bot.agenthost.items import Item, Kind, State
from bot.agenthost.outbox import HostOutbox
from bot.agenthost.pairing import USED_SECRET_KEPT_MS, PairingSecret
from bot.agenthost.store import AgentStore
from bot.clock import SYSTEM_CLOCK, Clock
from bot.errors import PayloadError, SkaldError
from bot.protocol.encoding import args_sha256, canonical_json
from bot.protocol.envelope import MAX_ENVELOPE_BYTES
from bot.protocol.identity import Identity, PublicCard
from bot.protocol.pairing import SECRET_BYTES, format_pairing_uri
from bot.protocol.payloads import MAX_ITEMS, parse_approval, parse_clarification, raw_payload
from bot.relay.client import RelayClient, one_at_a_time
from bot.render.credentials import mask_credentials

log = logging.getLogger(__name__)

MAX_TIMEOUT_S: Final = 7 * 24 * 3600.0
MAX_UPDATE_BYTES: Final = (MAX_ENVELOPE_BYTES * 3) // 4 - 64 * 1024
"""Open items whose wire form exceeds this would not fit one sealed ``inbox_update``."""
PAIRING_TTL_S: Final = 900.0


class Refusal(SkaldError):
    """A request the host does not take: ``status`` (an HTTP 4xx) and the ``field``."""

    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.field = field


class AgentHost:
    """The service behind the local API (one per state folder)."""

    def __init__(
        self,
        store: AgentStore,
        identity: Identity,
        relay_url: str,
        *,
        clock: Clock = SYSTEM_CLOCK,
        notifications: bool = False,
        relay_options: Mapping[str, Any] | None = None,
        on_relay: Callable[[], bool] | None = None,
    ) -> None:
        """``on_relay`` says whether the host has a live relay session now (default: its
        relay client's state)."""
        self.store = store
        self.identity = identity
        self.relay_url = relay_url
        self._clock = clock
        store.health.clock = clock
        self.delivery = Delivery(store, identity, relay_url, clock, notifications=notifications)
        self.inbound = Inbound(self.delivery)
        self.outbox = HostOutbox(store)
        self.relay = RelayClient(
            relay_url, identity, handler=one_at_a_time(self.inbound.on_delivery),
            outbox=self.outbox,
            on_delivered=self.delivery.delivered, **dict(relay_options or {}),
        )
        self.expiry = Expiry(self.delivery, on_relay or (lambda: self.relay.connected))
        self.delivery.on_change += [self.relay.wake, self.expiry.wake.set]

    @property
    def name(self) -> str:
        return self.identity.name

    async def run(self) -> None:
        """Talk to the relay and expire items on time, until cancelled."""
        self.delivery.pay_inbox()  # an update a killed process owed the devices
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self.relay.run())
                group.create_task(self.expiry.run())
        finally:
            self.outbox.forget()

    def expire_due(self) -> list[Item]:
        """End every pending item whose time has run out (see :class:`Expiry`)."""
        return self.expiry.expire_due()

    def release_waiters(self) -> None:
        """Answer every long poll now (the host is stopping) and every later one at once."""
        self.delivery.release_waiters()

    # -- the local API's operations ---------------------------------------------------

    def submit_approval(
        self,
        *,
        tool: str,
        summary: str | None,
        arguments: Mapping[str, Any],
        blocks: list[dict[str, Any]] | None,
        timeout_s: float,
        grant: gr.Offer | None = None,
        editable: tuple[str, ...] = (),
    ) -> Item:
        """Store a new approval and show it to every paired device; with a ``grant`` it
        offers a grant for the calls under that key (unless the arguments hold a secret),
        and a call a grant in force covers is approved at once. The ``editable`` keys of
        ``arguments`` that hold no secret may be edited before approving."""
        now = self._clock.now_ms()
        item_id = it.new_item_id(Kind.APPROVAL)
        summary = summary or default_summary(tool, arguments)
        blocks = describe_arguments(arguments) if blocks is None else blocks
        blocks = [*blocks, *credential_blocks(summary, blocks, arguments)]
        summary = mask_credentials(summary)  # activity lines and notifications show it bare
        offer = gr.offer_for(grant, blocks, (summary, arguments))
        self.expiry.lapse_if_off_relay()
        covering = gr.covering(self.store.grants.in_force(now), offer.key if offer else None, now)
        wire = it.approval_wire(
            item_id,
            tool=tool,
            summary=summary,
            blocks=blocks,
            arguments=arguments,
            created_ms=now,
            expires_ms=now + int(timeout_s * 1000),
            editable=editable_keys(editable, arguments, blocks),
        )
        if offer is not None and covering is None:
            wire["grant_offer"] = offer.wire()
        try:
            parse_approval(wire)
        except PayloadError as exc:
            raise Refusal(400, f"not a valid approval: {exc}", "blocks") from exc
        item = Item(
            item_id=item_id, kind=Kind.APPROVAL, wire=wire,
            args_sha256=args_sha256(dict(arguments)), created_ms=now,
            expires_ms=now + int(timeout_s * 1000),
        )
        if covering is not None and offer is not None:
            return self._run_covered(item, covering, offer, now)
        self._add(item, offer.key if offer else None, offer.label if offer else None)
        return item

    def _run_covered(self, item: Item, grant: gr.Grant, offer: gr.Offer, now: int) -> Item:
        """Approve a call a grant covers without asking: count the use and show every
        device what ran (an ``activity`` entry)."""
        approved = replace(item, state=State.APPROVED, reason=gr.covered_reason(grant, now),
                           decided_by=dict(grant.granted_by), resolved_ms=now)
        entry = gr.activity_entry(grant, str(item.wire["tool"]), item.summary, now)
        payload = raw_payload("activity", {"entries": [entry]})
        with self.delivery.change():
            self.store.add_item(approved, offer.key, offer.label)
            self.store.save_outcome(approved)
            self.store.grants.count_use(grant.grant_id)
            for device in self.delivery.peers.values():
                self.delivery.send(device, payload, now)
        log.info("approved %s under grant %s", item.item_id, grant.grant_id)
        self.delivery.after_change([approved])
        return approved

    def grants(self) -> list[gr.Grant]:
        """The grants in force, oldest first."""
        return self.store.grants.in_force(self._clock.now_ms())

    def revoke_grant(self, grant_id: str) -> gr.Grant:
        """End a grant in force here and tell every device."""
        now = self._clock.now_ms()
        grant = self.store.grants.get(grant_id)
        with self.delivery.change():
            if grant is None or not self.store.grants.end(grant_id, now):
                raise Refusal(404, f"no grant {grant_id!r} in force", "grant_id")
            self.delivery.broadcast(self.delivery.peers.values())
        log.info("revoked grant %s locally", grant_id)
        self.delivery.after_change()
        return grant

    def submit_question(
        self, *, question: str, options: list[str], timeout_s: float
    ) -> Item:
        """Store a new question and show it to every paired device."""
        now = self._clock.now_ms()
        item_id = it.new_item_id(Kind.QUESTION)
        expires = now + int(timeout_s * 1000)
        wire = it.question_wire(
            item_id, question=question, options=options, created_ms=now, expires_ms=expires
        )
        try:
            parse_clarification(wire)
        except PayloadError as exc:
            raise Refusal(400, f"not a valid question: {exc}", "question") from exc
        item = Item(item_id=item_id, kind=Kind.QUESTION, wire=wire, args_sha256=None,
                    created_ms=now, expires_ms=expires)
        self._add(item, None, None)
        return item

    def _add(self, item: Item, grant_key: str | None, grant_label: str | None) -> None:
        size = len(canonical_json(dict(item.wire)))
        with self.delivery.change():
            count, wire_bytes = self.store.open_load()
            if count >= MAX_ITEMS:
                raise Refusal(409, f"{MAX_ITEMS} items are open already; wait for decisions")
            if wire_bytes + size > MAX_UPDATE_BYTES:
                raise Refusal(413, "the open items would not fit one inbox update; "
                                   "send fewer or shorter arguments", "arguments")
            self.store.add_item(item, grant_key, grant_label)
            self.delivery.broadcast(self.delivery.peers.values())
            if self.delivery.notifications:
                self.delivery.notify(item)
        log.info("submitted %s %s", item.kind.value, item.item_id)
        self.delivery.after_change()

    def get(self, item_id: str) -> Item:
        item = self.store.item(item_id)
        if item is None:
            raise Refusal(404, "no such item", "item_id")
        return item

    async def wait(self, item_id: str, wait_s: float) -> Item:
        """The item once it has ended, or as it stands after ``wait_s`` seconds."""
        if self.get(item_id).pending:
            await self.delivery.wait(item_id, wait_s)
        return self.get(item_id)

    def withdraw(self, item_id: str) -> Item:
        """Take a pending item back; an item that has ended stays as it is."""
        item = self.get(item_id)
        ended = it.end(item, State.WITHDRAWN, self._clock.now_ms())
        if ended is None:
            return item
        self.delivery.finish([ended])
        log.info("withdrew %s", item_id)
        return ended

    def open_items(self) -> list[Item]:
        return self.store.open_items()

    def status(self) -> dict[str, Any]:
        relay = self.relay.status()
        return {
            "agent": {"id": self.identity.id, "name": self.name},
            "relay": {
                "url": relay.url,
                "connected": relay.connected,
                "since": None if relay.since is None else relay.since.isoformat(),
                "last_error": relay.last_error,
            },
            "devices": self.devices_json(),
            "open_items": [item.listing_json() for item in self.store.open_items()],
            "outbox": self.outbox.size(),
            "store": self._store_status(),
        }

    def devices_json(self) -> list[dict[str, Any]]:
        """The paired devices, each with when it was last seen (``None``: not yet)."""
        seen = self.store.last_seen()
        for device_id, when in self.delivery.seen.items():
            seen[device_id] = max(seen.get(device_id, 0), when)
        return [
            {"id": card.id, "name": card.name, "platform": platform,
             "paired_at": it.iso_ms(paired),
             "last_seen": it.iso_ms(seen[card.id]) if card.id in seen else None}
            for card, platform, paired in self.store.devices()
        ]

    def outcome_json(self, item: Item) -> dict[str, Any]:
        """The local API's outcome of ``item``, with whether a device is known to hold it."""
        return {**item.outcome_json(), "picked_up": self.delivery.picked_up(item)}

    def _store_status(self) -> dict[str, Any]:
        """Whether the host's database writes, else since when it fails and why."""
        health = self.store.health.status()
        since = health["failing_since"]
        return {
            "ok": since is None,
            "failing_since": it.iso_ms(int(since * 1000)) if isinstance(since, float) else None,
            "cause": health["cause"],
        }

    def new_pairing(self, ttl_s: float = PAIRING_TTL_S) -> tuple[PairingSecret, str]:
        """A fresh one-time secret and the pairing link that carries it."""
        now = self._clock.now_ms()
        secret = PairingSecret(
            pairing_id=secrets.token_hex(8), secret=secrets.token_bytes(SECRET_BYTES),
            created_ms=now, expires_ms=now + int(ttl_s * 1000),
        )
        with self.delivery.change():
            self.store.forget_secrets(now - USED_SECRET_KEPT_MS)
            self.store.add_secret(secret)
        return secret, format_pairing_uri(self.relay_url, self.identity.card, secret.secret)

    def pairing_json(self, pairing_id: str) -> dict[str, Any]:
        secret = self.store.secret(pairing_id)
        if secret is None:
            raise Refusal(404, "no such pairing", "pairing_id")
        device = None
        if secret.used_ms is not None:
            state = "paired"
            card = self.delivery.peers.get(secret.device_id or "")
            device = {"id": secret.device_id, "name": card.name if card else None}
        else:
            state = "expired" if secret.expires_ms <= self._clock.now_ms() else "waiting"
        return {"pairing_id": pairing_id, "state": state, "device": device,
                "expires_at": it.iso_ms(secret.expires_ms)}

    async def wait_pairing(self, pairing_id: str, wait_s: float) -> dict[str, Any]:
        if self.pairing_json(pairing_id)["state"] == "waiting":
            await self.delivery.wait(f"pairing:{pairing_id}", wait_s)
        return self.pairing_json(pairing_id)

    def unpair(self, device: str) -> PublicCard:
        """Forget a paired device, named by id or name."""
        matches = [c for c in self.delivery.peers.values() if device in (c.id, c.name)]
        if len(matches) != 1:
            why = "no paired device" if not matches else "several paired devices"
            raise Refusal(404 if not matches else 409, f"{why} named {device!r}", "device")
        card = matches[0]
        with self.delivery.change():
            self.store.remove_device(card.id)
        self.delivery.peers.pop(card.id, None)
        log.info("unpaired device %s", card.id)
        return card
