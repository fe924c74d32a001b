"""The agent host's service: one Skald agent identity speaking protocol §2–§5 with every
device it is paired to, for the programs that use its local API.

Every change (an item submitted, decided, answered, expired or withdrawn; a device paired)
is one store transaction that also puts the resulting envelopes in the durable outbox, so
a SIGKILL loses nothing: the relay client sends what the outbox holds after a restart, and
the relay redelivers what was not acknowledged (the replay set drops what was already
processed). Programs waiting on an item are woken when it ends. What a change did is
logged, and its waiters woken, only once it has committed; a decision the store cannot take
now (a full disk, say) is not acknowledged, and applies when the relay hands it over again.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import secrets
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Any, Final

from bot.agenthost import grants as gr
from bot.agenthost import items as it
from bot.agenthost.describe import credential_blocks, default_summary, describe_arguments
from bot.agenthost.items import Item, Kind, State
from bot.agenthost.pairing import (
    USED_SECRET_KEPT_MS,
    Accept,
    PairingSecret,
    judge,
    reject_allowed,
)
from bot.agenthost.store import AgentStore
from bot.clock import SYSTEM_CLOCK, Clock
from bot.errors import EnvelopeRefused, PayloadError, RefusalReason, SkaldError, StoreError
from bot.protocol.encoding import args_sha256, canonical_json
from bot.protocol.envelope import MAX_ENVELOPE_BYTES, Opened, open_envelope, seal
from bot.protocol.identity import Identity, PublicCard
from bot.protocol.pairing import SECRET_BYTES, format_pairing_uri
from bot.protocol.payloads import (
    MAX_ITEMS,
    ApprovalDecision,
    ClarificationAnswer,
    GrantRevoke,
    InboxRequest,
    PairRequest,
    parse_approval,
    parse_clarification,
    raw_payload,
)
from bot.protocol.replay import RETENTION_MS
from bot.relay.client import RelayClient, one_at_a_time
from bot.render.credentials import mask_credentials

log = logging.getLogger(__name__)

MAX_TIMEOUT_S: Final = 7 * 24 * 3600.0
MAX_UPDATE_BYTES: Final = (MAX_ENVELOPE_BYTES * 3) // 4 - 64 * 1024
"""Open items whose wire form exceeds this would not fit one sealed ``inbox_update``."""
PAIRING_TTL_S: Final = 900.0
EXPIRY_TICK_S: Final = 1.0
"""The longest the expiry loop sleeps: an injected clock may jump."""
ON_RELAY_SAVE_MS: Final = 30_000
"""How often the time the host was last on the relay is saved while it is on it: after a
restart, the grants lapse counting from the last time saved."""
_ON_RELAY_META: Final = "on_relay_ms"


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
        self.notifications = notifications
        self._clock = clock
        store.health.clock = clock
        self._peers = {card.id: card for card, _, _ in store.devices()}
        self._waiters: dict[str, asyncio.Event] = {}
        self._closing = False
        self._last_reject: dict[str, int] = {}
        self._expiry_wake = asyncio.Event()
        self._grants_shown: frozenset[str] | None = None
        """The grants in force the devices were last told of."""
        saved = store.get_meta(_ON_RELAY_META)
        self._on_relay_ms = int(saved) if saved else clock.now_ms()
        """The last moment the host was seen on the relay (see :meth:`lapse_if_off_relay`)."""
        self._on_relay_saved_ms = 0
        self.relay = RelayClient(
            relay_url, identity, handler=one_at_a_time(self._on_envelope), outbox=store,
            **dict(relay_options or {}),
        )
        self._on_relay = on_relay or (lambda: self.relay.connected)

    @property
    def name(self) -> str:
        return self.identity.name

    async def run(self) -> None:
        """Talk to the relay and expire items on time, until cancelled."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self.relay.run())
            group.create_task(self._expire_forever())

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
    ) -> Item:
        """Store a new approval and show it to every paired device; with a ``grant`` it
        offers a grant for the calls under that key (unless the arguments hold a secret),
        and a call a grant in force covers is approved at once."""
        now = self._clock.now_ms()
        item_id = it.new_item_id(Kind.APPROVAL)
        summary = summary or default_summary(tool, arguments)
        blocks = describe_arguments(arguments) if blocks is None else blocks
        blocks = [*blocks, *credential_blocks(summary, blocks, arguments)]
        summary = mask_credentials(summary)  # activity lines and notifications show it bare
        offer = gr.offer_for(grant, blocks, (summary, arguments))
        self.lapse_if_off_relay()
        covering = gr.covering(self.store.grants_in_force(now), offer.key if offer else None, now)
        wire = it.approval_wire(
            item_id,
            tool=tool,
            summary=summary,
            blocks=blocks,
            arguments=arguments,
            created_ms=now,
            expires_ms=now + int(timeout_s * 1000),
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
        with self._change():
            self.store.add_item(approved, offer.key, offer.label)
            self.store.save_outcome(approved)
            self.store.count_use(grant.grant_id)
            for device in self._peers.values():
                self._send(device, payload, now)
        log.info("approved %s under grant %s", item.item_id, grant.grant_id)
        self._after_change([approved])
        return approved

    def grants(self) -> list[gr.Grant]:
        """The grants in force, oldest first."""
        return self.store.grants_in_force(self._clock.now_ms())

    def revoke_grant(self, grant_id: str) -> gr.Grant:
        """End a grant in force here and tell every device."""
        now = self._clock.now_ms()
        grant = self.store.grant(grant_id)
        with self._change():
            if grant is None or not self.store.end_grant(grant_id, now):
                raise Refusal(404, f"no grant {grant_id!r} in force", "grant_id")
            self._broadcast(self._peers.values())
        log.info("revoked grant %s locally", grant_id)
        self._after_change()
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
        with self._change():
            if len(self.store.open_items()) >= MAX_ITEMS:
                raise Refusal(409, f"{MAX_ITEMS} items are open already; wait for decisions")
            if self.store.open_wire_bytes() + size > MAX_UPDATE_BYTES:
                raise Refusal(413, "the open items would not fit one inbox update; "
                                   "send fewer or shorter arguments", "arguments")
            self.store.add_item(item, grant_key, grant_label)
            self._broadcast(self._peers.values())
            if self.notifications:
                self._notify(item)
        log.info("submitted %s %s", item.kind.value, item.item_id)
        self._after_change()

    def get(self, item_id: str) -> Item:
        item = self.store.item(item_id)
        if item is None:
            raise Refusal(404, "no such item", "item_id")
        return item

    async def wait(self, item_id: str, wait_s: float) -> Item:
        """The item once it has ended, or as it stands after ``wait_s`` seconds."""
        item = self.get(item_id)
        if not item.pending or wait_s <= 0 or self._closing:
            return item
        event = self._waiters.setdefault(item_id, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), wait_s)
        return self.get(item_id)

    def withdraw(self, item_id: str) -> Item:
        """Take a pending item back; an item that has ended stays as it is."""
        item = self.get(item_id)
        ended = it.end(item, State.WITHDRAWN, self._clock.now_ms())
        if ended is None:
            return item
        self._finish([ended])
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
            "devices": [
                {"id": card.id, "name": card.name, "platform": platform,
                 "paired_at": it.iso_ms(paired)}
                for card, platform, paired in self.store.devices()
            ],
            "open_items": [item.listing_json() for item in self.store.open_items()],
            "outbox": self.store.outbox_size(),
            "store": self._store_status(),
        }

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
        with self._change():
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
            card = self._peers.get(secret.device_id or "")
            device = {"id": secret.device_id, "name": card.name if card else None}
        else:
            state = "expired" if secret.expires_ms <= self._clock.now_ms() else "waiting"
        return {"pairing_id": pairing_id, "state": state, "device": device,
                "expires_at": it.iso_ms(secret.expires_ms)}

    async def wait_pairing(self, pairing_id: str, wait_s: float) -> dict[str, Any]:
        found = self.pairing_json(pairing_id)
        if found["state"] != "waiting" or wait_s <= 0 or self._closing:
            return found
        event = self._waiters.setdefault(f"pairing:{pairing_id}", asyncio.Event())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), wait_s)
        return self.pairing_json(pairing_id)

    def unpair(self, device: str) -> PublicCard:
        """Forget a paired device, named by id or name."""
        matches = [c for c in self._peers.values() if device in (c.id, c.name)]
        if len(matches) != 1:
            why = "no paired device" if not matches else "several paired devices"
            raise Refusal(404 if not matches else 409, f"{why} named {device!r}", "device")
        card = matches[0]
        with self._change():
            self.store.remove_device(card.id)
        self._peers.pop(card.id, None)
        log.info("unpaired device %s", card.id)
        return card

    # -- protocol ---------------------------------------------------------------------

    async def _on_envelope(self, raw: dict[str, object]) -> None:
        now = self._clock.now_ms()
        try:
            opened = open_envelope(raw, me=self.identity, peers=self._peers, now_ms=now,
                                   replay=self.store, accept_pair_requests=True)
        except EnvelopeRefused as exc:
            level = logging.DEBUG if exc.reason is RefusalReason.REPLAY else logging.WARNING
            log.log(level, "dropped envelope %s: %s", raw.get("id"), exc)
            return
        ended: list[Item] = []
        # A store that fails leaves the envelope not handled yet (delivered again) and
        # nothing logged, remembered or woken for it.
        with self._change() as committed:
            self.store.remember(opened.envelope.id, opened.envelope.ts)
            self.store.forget_replay(now - RETENTION_MS)
            payload = opened.payload
            if isinstance(payload, PairRequest):
                self._on_pair_request(opened, payload, now, committed)
            elif isinstance(payload, ApprovalDecision):
                ended = self._on_decision(opened, payload, now, committed)
            elif isinstance(payload, ClarificationAnswer):
                ended = self._on_answer(opened, payload, now, committed)
            elif isinstance(payload, InboxRequest):
                self._broadcast([opened.sender])
            elif isinstance(payload, GrantRevoke):
                if self.store.end_grant(payload.grant_id, now):
                    committed.append(functools.partial(
                        log.info, "grant %s revoked by %s on device %s", payload.grant_id,
                        payload.revoked_by.name, opened.sender.id))
                self._broadcast(self._peers.values())
            else:
                log.debug("ignored a %s from %s", type(payload).__name__, opened.sender.id)
        self._after_change(ended)

    def _on_pair_request(
        self, opened: Opened, request: PairRequest, now: int,
        committed: list[Callable[[], None]],
    ) -> None:
        device = opened.sender
        self.store.forget_secrets(now - USED_SECRET_KEPT_MS)
        verdict = judge(request, self.identity.id, self.store.secrets(), now)
        if not isinstance(verdict, Accept):
            committed.append(functools.partial(
                log.warning, "refused pairing of device %s: %s", device.id, verdict.reason))
            if reject_allowed(self._last_reject.get(device.id), now):
                committed.append(functools.partial(self._last_reject.__setitem__, device.id,
                                                   now))
                self._send(device, raw_payload("pair_reject", {"reason": verdict.reason}), now)
            return
        self.store.use_secret(verdict.secret.pairing_id, device.id, now)
        self.store.add_device(device, request.device.platform, now)
        accept = {"agent": {"id": self.identity.id, "name": self.name}, "device_id": device.id}
        self._send(device, raw_payload("pair_accept", accept), now)
        self._broadcast([device])
        committed += [
            functools.partial(self._peers.__setitem__, device.id, device),
            functools.partial(self._wake, f"pairing:{verdict.secret.pairing_id}"),
            functools.partial(log.info, "paired with device %s (%s)", device.id, device.name),
        ]

    def _on_decision(
        self, opened: Opened, decision: ApprovalDecision, now: int,
        committed: list[Callable[[], None]],
    ) -> list[Item]:
        def step(item: Item) -> Item | it.Refused:
            result = it.decide(item, decision, now)
            if isinstance(result, Item) and result.state is State.APPROVED and decision.grant:
                self._give_grant(result, decision, now, committed)
            return result

        return self._resolve(opened, decision.approval_id, "decision", now, step, committed)

    def _give_grant(
        self, item: Item, decision: ApprovalDecision, now: int,
        committed: list[Callable[[], None]],
    ) -> None:
        """Keep the grant an approval came with, if the host offered that key for it; a
        refused grant leaves the approval as it is."""
        assert decision.grant is not None
        grant = gr.give(self.store.item_offer(item.item_id), decision.grant,
                        it.person_json(decision.decided_by), now)
        if isinstance(grant, str):
            committed.append(functools.partial(
                log.warning, "refused the grant of decision %s for %s: %s",
                decision.decision_id, item.item_id, grant))
            return
        self.store.add_grant(grant, item.item_id)
        committed.append(functools.partial(
            log.info, "grant %s (%s) given by %s until %s", grant.grant_id, grant.label,
            grant.by_name, it.iso_ms(grant.expires_ms)))

    def _on_answer(
        self, opened: Opened, answer: ClarificationAnswer, now: int,
        committed: list[Callable[[], None]],
    ) -> list[Item]:
        return self._resolve(opened, answer.clarification_id, "answer", now,
                             lambda item: it.answer(item, answer, now), committed)

    def _resolve(
        self, opened: Opened, item_id: str, kind: str, now: int,
        step: Callable[[Item], Item | it.Refused], committed: list[Callable[[], None]],
    ) -> list[Item]:
        """Apply a decision or an answer, recording it either way. One that comes after
        the item's time ran out finds it expired; one the item no longer takes is answered
        with an update that lists how the item ended, however long ago."""
        item = self.store.item(item_id)
        expired = []
        if item is not None and it.due([item], now):
            ended = it.end(item, State.EXPIRED, now)
            if ended is not None:
                self.store.save_outcome(ended)
                expired, item = [ended], ended
        result = step(item) if item is not None else it.Refused("unknown item")
        verdict = "accepted" if isinstance(result, Item) else f"refused: {result.why}"
        self.store.record_received(opened.envelope.id, opened.sender.id, item_id, kind,
                                   opened.plaintext, verdict, now)
        if isinstance(result, it.Refused):
            committed.append(functools.partial(
                log.warning, "refused a %s for %s from device %s: %s", kind, item_id,
                opened.sender.id, result.why))
            if item is not None and not item.pending:
                # Its card still shows buttons, or shows a decision that did not count.
                self._broadcast(self._peers.values() if expired else [opened.sender],
                                listing=item)
            return expired
        self.store.save_outcome(result)
        self._broadcast(self._peers.values())
        committed.append(functools.partial(
            log.info, "%s %s by device %s", item_id, result.state.value, opened.sender.id))
        return [result]

    def _finish(self, ended: list[Item]) -> None:
        with self._change():
            for item in ended:
                self.store.save_outcome(item)
            self._broadcast(self._peers.values())
        self._after_change(ended)

    @contextlib.contextmanager
    def _change(self) -> Iterator[list[Callable[[], None]]]:
        """One store transaction; what the block adds to the list it gets (logs, what the
        host remembers, waiters to wake) runs once it has committed. A change that fails
        leaves the host as it was."""
        committed: list[Callable[[], None]] = []
        shown = self._grants_shown
        try:
            with self.store.transaction():
                yield committed
        except BaseException:
            self._grants_shown = shown
            raise
        for step in committed:
            step()

    def _broadcast(self, devices: Iterable[PublicCard], *, listing: Item | None = None) -> None:
        """Queue a complete ``inbox_update`` for ``devices`` (inside a transaction); its
        ``resolved`` also lists the ended item ``listing``, however long ago it ended."""
        devices = list(devices)
        if not devices:
            return
        now = self._clock.now_ms()
        resolved = self.store.recently_resolved(it.MAX_RESOLVED)
        if listing is not None and all(i.item_id != listing.item_id for i in resolved):
            resolved.append(listing)
        body = it.inbox_body(
            self.store.next_rev(now), self.name, self.store.open_items(), resolved,
        )
        grants = self.store.grants_in_force(now)
        body["grants"] = [grant.wire() for grant in grants]
        self._grants_shown = frozenset(grant.grant_id for grant in grants)
        payload = raw_payload("inbox_update", body)
        for device in devices:
            self._send(device, payload, now)

    def _notify(self, item: Item) -> None:
        payload = raw_payload("notification", it.notification_body(item, self.name))
        for device in self._peers.values():
            self._send(device, payload, self._clock.now_ms())

    def _send(self, device: PublicCard, payload: bytes, now: int) -> None:
        envelope = seal(payload, sender=self.identity, recipient=device, ts_ms=now)
        self.store.add_outgoing(self.relay_url, envelope.to_json(), now)

    def _after_change(self, ended: Iterable[Item] = ()) -> None:
        self.relay.wake()
        self._expiry_wake.set()
        for item in ended:
            self._wake(item.item_id)

    def release_waiters(self) -> None:
        """Answer every long poll now (the host is stopping) and every later one at once."""
        self._closing = True
        for event in self._waiters.values():
            event.set()
        self._waiters.clear()

    def _wake(self, key: str) -> None:
        event = self._waiters.pop(key, None)
        if event is not None:
            event.set()

    async def _expire_forever(self) -> None:
        while True:
            self._expiry_wake.clear()
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
                await self._clock.wait(self._expiry_wake, min(delay, EXPIRY_TICK_S))

    def _until_next_expiry(self) -> float:
        """Seconds until the next item or grant runs out (a tick when none is due)."""
        now = self._clock.now_ms()
        deadlines = [t for t in (self.store.next_expiry(), self.store.next_grant_expiry(now))
                     if t is not None]
        return EXPIRY_TICK_S if not deadlines else (min(deadlines) - now) / 1000

    def lapse_if_off_relay(self) -> None:
        """End every grant in force once the host has been off the relay for longer than
        :data:`~bot.agenthost.grants.OFFLINE_LAPSE_MS`: a revoke cannot reach it there, so
        no grant goes on unchecked for longer. The devices are told when it is back."""
        now = self._clock.now_ms()
        if self._on_relay():
            self._on_relay_ms = now
            if now - self._on_relay_saved_ms >= ON_RELAY_SAVE_MS:
                self.store.set_meta(_ON_RELAY_META, str(now))
                self._on_relay_saved_ms = now
            return
        if not gr.lapsed(self._on_relay_ms, now):
            return
        in_force = self.store.grants_in_force(now)
        if not in_force:
            return
        with self.store.transaction():
            for grant in in_force:
                self.store.end_grant(grant.grant_id, now)
            self._broadcast(self._peers.values())
        log.warning("ended %d grant(s): off the relay since %s", len(in_force),
                    it.iso_ms(self._on_relay_ms))
        self._after_change()

    def expire_due(self) -> list[Item]:
        """End every pending item whose time has run out, and every grant when the host
        has been off the relay too long."""
        self.lapse_if_off_relay()
        now = self._clock.now_ms()
        ended = [it.end(item, State.EXPIRED, now) for item in it.due(self.store.open_items(), now)]
        done = [item for item in ended if item is not None]
        in_force = frozenset(grant.grant_id for grant in self.store.grants_in_force(now))
        if done or (self._grants_shown is not None and in_force != self._grants_shown):
            self._finish(done)  # tells the devices, also of grants that ran out
        if done:
            log.info("expired %s", ", ".join(item.item_id for item in done))
        return done
