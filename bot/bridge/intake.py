"""Intake: delivered envelopes opened, checked and applied in batches (one transaction
for envelopes that queued up behind each other), and the relays' side of the outbox."""

from __future__ import annotations

import asyncio
import functools
import json
import operator
import traceback
from collections.abc import Sequence

from bot.bridge.apart import APART_BYTES, Apart
from bot.bridge.applying import Applying
from bot.bridge.base import NOTHING, PAIRING_WINDOW_MS, REDRAW, Changes, held_log, short
from bot.bridge.batch import (
    Batch,
    BatchReplay,
    Hinted,
    Received,
    Snapshots,
    dropped,
    stretches,
)
from bot.clock import Clock
from bot.config import Config
from bot.core.model import Pairing
from bot.errors import EnvelopeRefused, StoreUnavailable
from bot.protocol.envelope import Unsealed, unseal
from bot.protocol.identity import Identity, PublicCard
from bot.protocol.payloads import InboxRequest
from bot.protocol.snapshot import SeenSnapshot, held_bytes
from bot.store import StateStore

OFF_LOOP_BYTES = 16 * 1024
"""Deliveries whose ciphertext adds up to at least this are opened and applied in a thread."""


class Intake(Applying):
    """Opens delivered envelopes and applies them; keeps the relays' outbox."""

    def __init__(self, *, identity: Identity, store: StateStore, config: Config,
                 clock: Clock) -> None:
        super().__init__(identity=identity, store=store, config=config, clock=clock)
        self._apart = Apart()

    def close(self) -> None:
        """Stop the process checking large envelopes, if it was started."""
        self._apart.close()

    def relay_urls(self) -> set[str]:
        """Every relay the bot must keep a session with: its peers' and pending pairings'."""
        urls = {peer.relay_url for peer in self._store.agents.peers()}
        urls.update(pairing.relay_url for pairing in self._pending_pairings())
        return urls

    def _pending_pairings(self) -> list[Pairing]:
        return self._store.agents.pending_pairings(since_ms=self.now_ms() - PAIRING_WINDOW_MS)

    def request_inboxes(self, relay_url: str) -> Changes:
        """Ask every agent on ``relay_url`` for a complete inbox (after each (re)connection)."""
        changes = NOTHING
        with self._store.transaction():
            for peer in self._store.agents.peers():
                if peer.relay_url == relay_url:
                    changes |= self._send(
                        peer, InboxRequest(since_rev=self._store.agents.last_rev(peer.agent_id)))
        return changes

    def outbox_pending(self, relay_url: str) -> list[dict[str, object]]:
        """The relay client's outbox: envelopes for ``relay_url`` the relay has not taken."""
        return self._store.outbox.pending(relay_url)

    def outbox_mark_sent(self, envelope_id: str) -> Changes:
        """The relay took an envelope: stop resending it; a decision's is recorded as
        acknowledged in the audit trail, and its cards no longer say "sending"."""
        now = self.now_ms()
        # Not durable: lost with the power, the envelope is sent again and the agent's
        # replay set drops it.
        with self._store.transaction(durable=False):
            if not self._store.outbox.mark_sent(envelope_id, now):
                return NOTHING
            decision = self._store.items.decision_by_envelope(envelope_id)
            if decision is None:
                return NOTHING
            self._store.audit.append(
                "decision_acknowledged", at=now, chat_id=decision.chat_id,
                agent_id=decision.agent_id, item_id=decision.item_id,
                user_id=decision.user_id, user_name=decision.user_name,
                decision_id=decision.decision_id,
            )
            self._store.items.redraw(decision.agent_id, decision.item_id)
        return REDRAW

    def handle_envelopes(self, raws: Sequence[dict[str, object]]) -> Changes:
        """Open, check and durably apply delivered envelopes, in order and in one
        transaction: envelopes that queued up behind each other cost one commit (the relay
        acks them after this).

        A refused envelope is logged with its reason and dropped; it is still acknowledged.
        One whose payload fails to apply is refused alone: the others' changes stay. When
        the store fails (:class:`StoreUnavailable`), none of them is applied or logged.
        """
        now = self.now_ms()
        with held_log.holding():
            received = self._open_all(self._unseal_all(raws, now), now, self._seen)
            if not received:
                return NOTHING
            snapshots = Snapshots(self._seen)
            changes = NOTHING
            with self._store.transaction():
                for delivery in received:
                    changes |= self._apply_or_refuse(delivery, now, snapshots)
            snapshots.keep()
        return changes

    async def receive(self, raws: Sequence[dict[str, object]]) -> Changes:
        """:meth:`handle_envelopes`, in a thread for large envelopes (up to a megabyte each
        to decrypt and parse, and a thousand items to store) so that the event loop keeps
        serving other chats meanwhile; the store makes anything else wait for the
        transaction's commit."""
        size = sum(len(ct) for raw in raws if isinstance(ct := raw.get("ct"), str))
        if size < OFF_LOOP_BYTES:
            # Deliveries queued behind each other would otherwise run back to back: let
            # other chats' work in between.
            await asyncio.sleep(0)
            return self.handle_envelopes(raws)
        return await asyncio.to_thread(self.handle_envelopes, raws)

    def _open_all(
        self, unsealed: Sequence[Unsealed], now: int, seen: dict[str, SeenSnapshot]
    ) -> list[Received]:
        """Open each unsealed envelope, reading each snapshot against the same agent's one
        before it (in this batch, or else ``seen``); refused ones are logged and left out.

        Of a stretch of one agent's snapshots (nothing else from the agent in between),
        only the newest that opens is read and checked: each is the agent's complete
        inbox, so whatever the others say, applying it leaves nothing of them (an item that
        came and went in between never reaches a chat). The others are only decrypted, to
        tell that they are older snapshots (:func:`snapshot_rev`)."""
        batch = Batch(reading=dict(seen), replay=BatchReplay(
            self._store.outbox.seen_among({item.envelope.id for item in unsealed})))
        groups = stretches(unsealed)
        self._check_apart(batch, groups)
        received: list[Received] = []
        for group in groups:
            if len(group) > 1:
                received += batch.accept_stretch(group, now)
            elif (delivery := batch.accept(group[0][1], now)) is not None:
                received.append(delivery)
        return received

    def _check_apart(self, batch: Batch, groups: Sequence[Sequence[Hinted]]) -> None:
        """Check in the process apart the envelopes that will be read (each alone, or the
        newest of a stretch) and hold much that is new: read in full there, an unchanged
        large item would cost this process more to take back than to read here."""
        ahead = []
        for group in groups:
            item = max(group, key=lambda hinted: hinted[0])[1]
            before = batch.reading.get(item.envelope.sender)
            if item.plaintext is not None \
                    and len(item.plaintext) - held_bytes(before) >= APART_BYTES:
                ahead.append(item)
        if ahead:
            for item, checked in zip(ahead, self._apart.check_all(ahead), strict=True):
                if checked is not None:
                    batch.checked[id(item)] = checked

    def _unseal_all(self, raws: Sequence[dict[str, object]], now: int) -> list[Unsealed]:
        """Each envelope from a peer (or an agent the bot is pairing with) decrypted, in
        order; the others logged and left out."""
        cards: dict[str, PublicCard | None] = {}
        unsealed = []
        for raw in raws:
            sender = raw.get("from")
            card = None
            if isinstance(sender, str):
                if sender not in cards:
                    cards[sender] = self._card_of(sender, now)
                card = cards[sender]
            try:
                unsealed.append(unseal(raw, me=self.identity,
                                       peers={str(sender): card} if card is not None else {}))
            except EnvelopeRefused as refusal:
                dropped(raw.get("id"), sender, refusal)
        return unsealed

    def _apply_or_refuse(self, delivery: Received, now: int, snapshots: Snapshots) -> Changes:
        """Apply one opened envelope inside the batch's transaction, or refuse it alone
        (and apply the snapshots it superseded instead)."""
        envelope, payload = delivery.opened.envelope, delivery.opened.payload
        try:
            with self._store.savepoint():
                self._store.outbox.remember(envelope.id, envelope.ts, now)
                changes = self._apply_payload(delivery, now, snapshots)
        except StoreUnavailable:
            raise  # the disk, not the sender: not handled yet, delivered again later
        except Exception as exc:
            # One sender's payload must not stall everyone else's behind it on the shared
            # relay session: it is refused (acknowledged, nothing applied) like any other.
            # The error's text may quote decrypted content: log its type and place only.
            where = traceback.extract_tb(exc.__traceback__)[-1]
            held_log.error("refused envelope %s from %s: applying its %s failed with %s at %s:%s",
                           short(envelope.id), envelope.sender[:8], type(payload).__name__,
                           type(exc).__name__, where.filename, where.lineno)
            # Its id is kept, so that a copy delivered again is a replay.
            self._store.outbox.remember(envelope.id, envelope.ts, now)
            return self._fall_back_to_superseded(delivery, now, snapshots)
        if delivery.supersedes:
            held_log.info("applied %s from agent %s, the newest of %d of its snapshots in the same "
                          "delivery", type(payload).__name__, envelope.sender[:8],
                          len(delivery.supersedes) + 1)
        else:
            held_log.info("applied %s from agent %s", type(payload).__name__, envelope.sender[:8])
        return changes | REDRAW

    def _fall_back_to_superseded(
        self, delivery: Received, now: int, snapshots: Snapshots
    ) -> Changes:
        """The snapshots a refused one superseded, opened and applied in its place."""
        if not delivery.supersedes:
            return NOTHING
        sender = delivery.opened.envelope.sender
        held_log.info("opening the %d snapshots of %s it superseded instead",
                      len(delivery.supersedes), sender[:8])
        applied = snapshots.get(sender)
        opened = self._open_all(delivery.supersedes, now,
                                {} if applied is None else {sender: applied})
        return functools.reduce(operator.or_, [
            self._apply_or_refuse(part, now, snapshots) for part in opened], NOTHING)

    def _card_of(self, agent_id: str, now: int) -> PublicCard | None:
        """The card of a peer, or else of an agent the bot is pairing with."""
        agents = self._store.agents
        peer = agents.peer(agent_id)
        if peer is not None:
            return _stored_card(peer.card_json)
        pairing = agents.pairing(agent_id)
        if pairing is None or pairing.accepted_at is not None \
                or pairing.created_at < now - PAIRING_WINDOW_MS:
            return None
        return _stored_card(pairing.card_json)


@functools.lru_cache(maxsize=1024)
def _stored_card(card_json: str) -> PublicCard:
    """A peer's card as the store keeps it (checked again only when its text changes: every
    envelope needs its sender's)."""
    return PublicCard.from_json(json.loads(card_json))
