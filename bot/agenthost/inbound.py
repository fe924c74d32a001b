"""What the agent host does with an envelope a device sent: open it, then hand its payload
to the handler registered for the payload's type (pair, decide, answer, send the inbox,
revoke a grant). A payload of any other type is ignored.

Each envelope is one change (:meth:`bot.agenthost.delivery.Delivery.change`): a store that
fails leaves it not handled yet, so the relay delivers it again.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, Final

from bot.agenthost import grants as gr
from bot.agenthost import items as it
from bot.agenthost.delivery import Committed, Delivery
from bot.agenthost.items import Item, State
from bot.agenthost.pairing import USED_SECRET_KEPT_MS, Accept, judge, reject_allowed
from bot.errors import EnvelopeRefused, RefusalReason
from bot.protocol.envelope import Opened, open_envelope
from bot.protocol.payloads import (
    ApprovalDecision,
    ClarificationAnswer,
    GrantRevoke,
    InboxRequest,
    PairRequest,
    raw_payload,
)
from bot.protocol.replay import RETENTION_MS

log = logging.getLogger(__name__)

Handler = Callable[["Inbound", Opened, Any, int, Committed], list[Item]]
"""Applies one payload inside its change; returns the items it ended."""


class Inbound:
    """Opens what devices send and applies it."""

    def __init__(self, delivery: Delivery) -> None:
        self.delivery = delivery
        self.store = delivery.store
        self._last_reject: dict[str, int] = {}

    async def on_delivery(self, raw: dict[str, object]) -> None:
        """Handle an envelope the relay delivered; one that ended items leaves the programs
        waiting on them the turns they take to answer before the relay client acknowledges
        it (:meth:`~bot.agenthost.delivery.Delivery.let_woken_answer`)."""
        if await self.on_envelope(raw):
            await self.delivery.let_woken_answer()

    async def on_envelope(self, raw: dict[str, object]) -> bool:
        """Open and apply an envelope; whether it ended items (a decision, an answer)."""
        now = self.delivery.clock.now_ms()
        try:
            opened = open_envelope(raw, me=self.delivery.identity, peers=self.delivery.peers,
                                   now_ms=now, replay=self.store, accept_pair_requests=True)
        except EnvelopeRefused as exc:
            level = logging.DEBUG if exc.reason is RefusalReason.REPLAY else logging.WARNING
            log.log(level, "dropped envelope %s: %s", raw.get("id"), exc)
            return False
        ended: list[Item] = []
        handler = HANDLERS.get(type(opened.payload))
        with self.delivery.change() as committed:
            self.store.remember(opened.envelope.id, opened.envelope.ts)
            self.store.forget_replay(now - RETENTION_MS)
            if handler is None:
                log.debug("ignored a %s from %s", type(opened.payload).__name__,
                          opened.sender.id)
            else:
                ended = handler(self, opened, opened.payload, now, committed)
            self.store.device_seen(opened.sender.id, now)
            committed.append(functools.partial(self.delivery.heard_from, opened.sender.id, now))
        self.delivery.after_change(ended)
        return bool(ended)

    def pair(self, opened: Opened, request: PairRequest, now: int,
             committed: Committed) -> list[Item]:
        device = opened.sender
        self.store.forget_secrets(now - USED_SECRET_KEPT_MS)
        identity = self.delivery.identity
        verdict = judge(request, identity.id, self.store.secrets(), now)
        if not isinstance(verdict, Accept):
            committed.append(functools.partial(
                log.warning, "refused pairing of device %s: %s", device.id, verdict.reason))
            if reject_allowed(self._last_reject.get(device.id), now):
                committed.append(functools.partial(self._last_reject.__setitem__, device.id,
                                                   now))
                self.delivery.send(
                    device, raw_payload("pair_reject", {"reason": verdict.reason}), now)
            return []
        self.store.use_secret(verdict.secret.pairing_id, device.id, now)
        self.store.add_device(device, request.device.platform, now)
        accept = {"agent": {"id": identity.id, "name": identity.name}, "device_id": device.id}
        self.delivery.send(device, raw_payload("pair_accept", accept), now)
        self.delivery.broadcast([device], recap=True)
        committed += [
            functools.partial(self.delivery.peers.__setitem__, device.id, device),
            functools.partial(self.delivery.wake, f"pairing:{verdict.secret.pairing_id}"),
            functools.partial(log.info, "paired with device %s (%s)", device.id, device.name),
        ]
        return []

    def decide(self, opened: Opened, decision: ApprovalDecision, now: int,
               committed: Committed) -> list[Item]:
        def step(item: Item) -> Item | it.Refused:
            result = it.decide(item, decision, now)
            if isinstance(result, Item) and result.state is State.APPROVED and decision.grant:
                self._give_grant(result, decision, now, committed)
            return result

        return self._resolve(opened, decision.approval_id, "decision", now, step, committed)

    def _give_grant(self, item: Item, decision: ApprovalDecision, now: int,
                    committed: Committed) -> None:
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
        self.store.grants.add(grant, item.item_id)
        committed.append(functools.partial(
            log.info, "grant %s (%s) given by %s until %s", grant.grant_id, grant.label,
            grant.by_name, it.iso_ms(grant.expires_ms)))

    def answer(self, opened: Opened, answer: ClarificationAnswer, now: int,
               committed: Committed) -> list[Item]:
        return self._resolve(opened, answer.clarification_id, "answer", now,
                             lambda item: it.answer(item, answer, now), committed)

    def send_inbox(self, opened: Opened, request: InboxRequest, now: int,
                   committed: Committed) -> list[Item]:
        self.delivery.broadcast([opened.sender], recap=True)
        return []

    def revoke(self, opened: Opened, revoke: GrantRevoke, now: int,
               committed: Committed) -> list[Item]:
        if self.store.grants.end(revoke.grant_id, now):
            committed.append(functools.partial(
                log.info, "grant %s revoked by %s on device %s", revoke.grant_id,
                revoke.revoked_by.name, opened.sender.id))
        self.delivery.broadcast(self.delivery.peers.values())
        return []

    def _resolve(
        self, opened: Opened, item_id: str, kind: str, now: int,
        step: Callable[[Item], Item | it.Refused], committed: Committed,
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
        peers = self.delivery.peers
        if isinstance(result, it.Refused):
            committed.append(functools.partial(
                log.warning, "refused a %s for %s from device %s: %s", kind, item_id,
                opened.sender.id, result.why))
            if item is not None and not item.pending:
                # Its card still shows buttons, or shows a decision that did not count.
                self.delivery.broadcast(peers.values() if expired else [opened.sender],
                                        listing=item)
            return expired
        self.store.save_outcome(result)
        self.delivery.owe_inbox(committed)
        committed.append(functools.partial(
            log.info, "%s %s%s by device %s", item_id, result.state.value,
            "" if result.edited is None else " with an edit", opened.sender.id))
        return [result]


HANDLERS: Final[dict[type, Handler]] = {
    PairRequest: Inbound.pair,
    ApprovalDecision: Inbound.decide,
    ClarificationAnswer: Inbound.answer,
    InboxRequest: Inbound.send_inbox,
    GrantRevoke: Inbound.revoke,
}
"""The payload types the host takes from a device, each with its handler."""
