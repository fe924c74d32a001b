"""The bridge between agents and chats, independent of Telegram and of sockets.

It applies what agents send (envelopes in, store changes out) and turns what people decide
into sealed envelopes in the outbox. Each step is one store transaction, so a crash between
any two steps leaves a state the next start finishes: cards are rows waiting to be shown,
decisions are outbox rows waiting for the relay.
"""

from __future__ import annotations

import json
import logging
import secrets
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from bot.cards import parse_item
from bot.clock import from_ms, to_ms
from bot.config import ChatPolicy, Config
from bot.errors import EnvelopeRefused, PayloadError, RefusalReason
from bot.inbox import plan_update, remind_at
from bot.policy import (
    Action,
    Answered,
    Decided,
    ItemView,
    Refusal,
    Refused,
    Tallied,
    TapResult,
    Voter,
    evaluate_tap,
)
from bot.protocol.encoding import args_sha256, format_rfc3339
from bot.protocol.envelope import open_envelope, seal
from bot.protocol.identity import Identity, PublicCard
from bot.protocol.pairing import PairingUri, build_pair_request
from bot.protocol.payloads import (
    Approval,
    ApprovalDecision,
    Clarification,
    ClarificationAnswer,
    InboxRequest,
    InboxUpdate,
    Notification,
    PairAccept,
    Payload,
    Person,
    encode_payload,
    item_to_wire,
)
from bot.store import CardRow, DecisionRow, ItemRow, Pairing, Peer, Store, is_store_failure

log = logging.getLogger(__name__)

MS = 1000
PAIRING_WINDOW_MS = 10 * 60 * MS
"""How long a pairing in progress waits for the agent's pair_accept."""


@dataclass(frozen=True)
class TapOutcome:
    """What a tap did, for the Telegram side to tell the tapper."""

    result: TapResult
    card: CardRow | None = None
    item: ItemRow | None = None


class Bridge:
    """Applies agents' envelopes and people's decisions to the store."""

    def __init__(
        self,
        *,
        identity: Identity,
        store: Store,
        config: Config,
        clock: Callable[[], float],
        on_change: Callable[[], None] = lambda: None,
        on_outbox: Callable[[str], None] = lambda relay_url: None,
    ) -> None:
        self.identity = identity
        self.store = store
        self.config = config
        self._clock = clock
        self._on_change = on_change
        self._on_outbox = on_outbox

    def now_ms(self) -> int:
        return int(self._clock() * MS)

    def policy(self, chat_id: int) -> ChatPolicy:
        """A chat's rules from the configuration, following supergroup migrations."""
        # Private chats have positive ids (the user's own); groups negative ones.
        return self.config.policy(chat_id, private=chat_id > 0,
                                  former_ids=tuple(self.store.former_chat_ids(chat_id)))

    def notify_change(self) -> None:
        """Something outside the bridge changed what cards should show (a chat came back)."""
        self._on_change()

    # -- relays -----------------------------------------------------------------------------

    def relay_urls(self) -> set[str]:
        """Every relay the bot must keep a session with: its peers' and pending pairings'."""
        urls = {peer.relay_url for peer in self.store.peers()}
        urls.update(pairing.relay_url for pairing in self._pending_pairings())
        return urls

    def _pending_pairings(self) -> list[Pairing]:
        return self.store.pending_pairings(since_ms=self.now_ms() - PAIRING_WINDOW_MS)

    def request_inboxes(self, relay_url: str) -> None:
        """Ask every agent on ``relay_url`` for a complete inbox (after each (re)connection)."""
        with self.store.transaction():
            for peer in self.store.peers():
                if peer.relay_url == relay_url:
                    self._send(peer, InboxRequest(since_rev=self.store.last_rev(peer.agent_id)))

    def outbox_pending(self, relay_url: str) -> list[dict[str, object]]:
        """The relay client's outbox: envelopes for ``relay_url`` the relay has not taken."""
        return self.store.outbox_pending(relay_url)

    def outbox_mark_sent(self, envelope_id: str) -> None:
        """The relay took an envelope: stop resending it, and record a decision as
        acknowledged in the audit trail."""
        now = self.now_ms()
        with self.store.transaction():
            if not self.store.outbox_mark_sent(envelope_id, now):
                return
            decision = self.store.decision_by_envelope(envelope_id)
            if decision is not None:
                self.store.audit(
                    "decision_acknowledged", at=now, chat_id=decision.chat_id,
                    agent_id=decision.agent_id, item_id=decision.item_id,
                    user_id=decision.user_id, user_name=decision.user_name,
                    decision_id=decision.decision_id,
                )

    def handle_envelope(self, raw: dict[str, object]) -> None:
        """Open, check and durably apply one delivered envelope (the relay acks after this).

        A refused envelope is logged with its reason and dropped; it is still acknowledged.
        """
        now = self.now_ms()
        try:
            opened = open_envelope(
                raw,
                me=self.identity,
                peers=self._known_cards(),
                now_ms=now,
                replay=self.store.replay_guard(),
            )
        except EnvelopeRefused as refusal:
            level = logging.INFO if refusal.reason is RefusalReason.REPLAY else logging.WARNING
            log.log(level, "dropped envelope %s from %s: %s", _short(raw.get("id")),
                    _short(raw.get("from")), refusal)
            return
        envelope = opened.envelope
        try:
            with self.store.transaction():
                self.store.replay_remember(envelope.id, envelope.ts, now)
                self._apply(opened.sender, opened.payload, now)
        except Exception as exc:
            if is_store_failure(exc):
                raise  # the disk, not the sender: fail the session and retry later
            # One sender's payload must not stall everyone else's behind it on the shared
            # relay session: it is refused (acknowledged, nothing applied) like any other.
            # The error's text may quote decrypted content: log its type and place only.
            where = traceback.extract_tb(exc.__traceback__)[-1]
            log.error("refused envelope %s from %s: applying its %s failed with %s at %s:%s",
                      _short(envelope.id), envelope.sender[:8], type(opened.payload).__name__,
                      type(exc).__name__, where.filename, where.lineno)
            self._remember_refused(envelope.id, envelope.ts, now)
            return
        log.info("applied %s from agent %s", type(opened.payload).__name__, envelope.sender[:8])
        self._on_change()

    def _remember_refused(self, envelope_id: str, ts_ms: int, now: int) -> None:
        """Keep a refused envelope's id, so that a copy delivered again is a replay."""
        with self.store.transaction():
            self.store.replay_remember(envelope_id, ts_ms, now)

    def _known_cards(self) -> dict[str, PublicCard]:
        cards = {peer.agent_id: PublicCard.from_json(json.loads(peer.card_json))
                 for peer in self.store.peers()}
        for pairing in self._pending_pairings():
            cards.setdefault(pairing.agent_id,
                             PublicCard.from_json(json.loads(pairing.card_json)))
        return cards

    def _apply(self, sender: PublicCard, payload: Payload, now: int) -> None:
        if isinstance(payload, PairAccept):
            self._apply_pair_accept(sender, payload, now)
        elif self.store.peer(sender.id) is None:
            log.warning("ignored %s from %s: pairing not finished", type(payload).__name__,
                        sender.id[:8])
        elif isinstance(payload, InboxUpdate):
            self._apply_inbox_update(sender.id, payload, now)
        elif isinstance(payload, Notification):
            if not self.store.has_item(sender.id, payload.item_id):
                peer = self.store.peer(sender.id)
                if peer is not None:
                    self._send(peer, InboxRequest(since_rev=self.store.last_rev(sender.id)))
        else:
            log.info("ignored a %s payload from %s", type(payload).__name__, sender.id[:8])

    def _apply_pair_accept(self, sender: PublicCard, accept: PairAccept, now: int) -> None:
        pairing = self.store.pairing(sender.id)
        if (
            pairing is None
            or pairing.accepted_at is not None
            or pairing.created_at < now - PAIRING_WINDOW_MS
            or accept.device_id != self.identity.id
        ):
            log.warning("ignored a pair_accept from %s that answers no pairing in progress",
                        sender.id[:8])
            return
        name = accept.agent_name or sender.name
        self.store.add_peer(
            Peer(sender.id, pairing.relay_url, json.dumps(sender.to_json()), name), now
        )
        self._bind(sender.id, pairing.chat_id, pairing.topic_id, now)
        self.store.pairing_accepted(sender.id, now)
        self.store.audit("paired", at=now, chat_id=pairing.chat_id, agent_id=sender.id,
                         user_id=pairing.requested_by, agent_name=name)
        log.info("paired with agent %s (%s)", sender.id[:8], name)

    def _apply_inbox_update(self, agent_id: str, update: InboxUpdate, now: int) -> None:
        plan = plan_update(
            update,
            last_rev=self.store.last_rev(agent_id),
            known=self._known_item_ids(agent_id, update),
            open_now=self.store.open_item_ids(agent_id),
        )
        if plan.stale:
            log.info("ignored inbox_update rev %d from %s: not newer", update.rev, agent_id[:8])
            return
        self.store.set_rev(agent_id, update.rev, now)
        for item in plan.new_items:
            if self._add_item(agent_id, item, now=now):
                for binding in self.store.bindings_for_agent(agent_id):
                    self._plan_card(agent_id, item.id, binding.chat_id, binding.topic_id)
        for gone in plan.gone:
            at = to_ms(gone.at) if gone.at else now
            if self.store.close_item(agent_id, gone.item_id, state=gone.state, by=gone.by, at=at):
                self.store.audit("resolved_elsewhere", at=now, agent_id=agent_id,
                                 item_id=gone.item_id, outcome=gone.state, by=gone.by)

    def _bind(self, agent_id: str, chat_id: int, topic_id: int | None, now: int) -> None:
        """Bind an agent to a chat, with a card there for each of its open items."""
        self.store.bind(agent_id, chat_id, topic_id, now)
        for item_id in sorted(self.store.open_item_ids(agent_id)):
            self._plan_card(agent_id, item_id, chat_id, topic_id)

    def _plan_card(self, agent_id: str, item_id: str, chat_id: int, topic_id: int | None) -> None:
        """A card for the item in the chat (none twice), in the binding's topic or else the
        chat's configured one. A chat the bot may not post in gets its cards when it may
        again."""
        if topic_id is None:
            topic_id = self.policy(chat_id).topic
        self.store.add_card(agent_id, item_id, chat_id, topic_id, new_token())

    def _known_item_ids(self, agent_id: str, update: InboxUpdate) -> set[str]:
        items: list[Approval | Clarification] = [*update.approvals, *update.clarifications]
        ids = [item.id for item in items]
        return {item_id for item_id in ids if self.store.has_item(agent_id, item_id)}

    def _add_item(self, agent_id: str, item: Approval | Clarification, *, now: int) -> bool:
        """Hold a new item; False if the bot already holds one with this id."""
        kind = "approval" if isinstance(item, Approval) else "clarification"
        created = item.created_at or from_ms(now)
        reminder = remind_at(created, item.expires_at)
        return self.store.add_item(
            agent_id,
            item.id,
            kind,
            json.dumps(item_to_wire(item), ensure_ascii=False),
            expires_at=to_ms(item.expires_at) if item.expires_at else None,
            remind_at=to_ms(reminder) if reminder else None,
            now_ms=now,
        )

    # -- pairing ----------------------------------------------------------------------------

    def start_pairing(
        self, uri: PairingUri, *, chat_id: int, topic_id: int | None, requested_by: int | None
    ) -> None:
        """Record a pairing in progress and queue its ``pair_request`` for the agent's relay."""
        now = self.now_ms()
        request = build_pair_request(self.identity, uri, device_name=self.identity.card.name)
        with self.store.transaction():
            self.store.add_pairing(
                uri.agent.id, uri.relay, json.dumps(uri.agent.to_json()), chat_id=chat_id,
                topic_id=topic_id, requested_by=requested_by, now_ms=now,
            )
            envelope = seal(encode_payload(request), sender=self.identity, recipient=uri.agent,
                            ts_ms=now)
            self.store.outbox_add(uri.relay, envelope.to_json(), now)
        self._on_outbox(uri.relay)

    def pairing_done(self, agent_id: str) -> bool:
        pairing = self.store.pairing(agent_id)
        return pairing is not None and pairing.accepted_at is not None

    def unbind(self, agent_id: str, chat_id: int, user_id: int | None) -> None:
        now = self.now_ms()
        with self.store.transaction():
            self.store.unbind(agent_id, chat_id)
            self.store.audit("unpaired", at=now, chat_id=chat_id, agent_id=agent_id,
                             user_id=user_id)
        self._on_change()

    # -- decisions --------------------------------------------------------------------------

    def tap(
        self,
        token: str,
        action: Action,
        *,
        chat_id: int,
        tapper: Person,
        approvers: frozenset[int],
        required: int,
        option: int | None = None,
        text: str | None = None,
    ) -> TapOutcome:
        """Apply one tap (or a typed deny reason or answer, ``text``) in ``chat_id``, and
        record it in the audit trail, allowed or not. A token of a card in another chat is
        an unknown card: the tapper's rights come from the chat the tap happened in."""
        now = self.now_ms()
        voter = Voter(tapper.telegram_user_id or 0, tapper.name, now)
        card = self.store.card_by_token(token)
        item = self.store.item(card.agent_id, card.item_id) if card else None
        if card is None or item is None or card.chat_id != chat_id:
            self.record_refused_tap(chat_id, tapper, action.name.lower(), Refusal.UNKNOWN_CARD)
            return TapOutcome(Refused(Refusal.UNKNOWN_CARD))
        parsed = parse_item(item)
        view = ItemView(
            kind=item.kind,
            open=item.state == "open",
            expired=item.expires_at is not None and item.expires_at <= now,
            bound=self.store.is_bound(card.agent_id, card.chat_id),
            options=parsed.options if isinstance(parsed, Clarification) else (),
        )
        votes = tuple(Voter(v.user_id, v.name, v.at) for v in self.store.votes(card.card_id))
        result = evaluate_tap(action, tapper=voter, item=view, approvers=approvers,
                              required=required, voters=votes, option=option, text=text)
        with self.store.transaction():
            self.store.audit(
                "tap", at=now, chat_id=card.chat_id, agent_id=card.agent_id,
                item_id=card.item_id, user_id=voter.user_id, user_name=tapper.name,
                action=action.name.lower(), allowed=not isinstance(result, Refused),
                refusal=result.reason.value if isinstance(result, Refused) else None,
            )
            if isinstance(result, Tallied):
                if action is Action.APPROVE:
                    self.store.add_vote(card.card_id, voter.user_id, tapper.name, now)
                else:
                    self.store.remove_vote(card.card_id, voter.user_id)
            elif isinstance(result, Decided) and isinstance(parsed, Approval):
                if result.decision == "approve":
                    self.store.add_vote(card.card_id, voter.user_id, tapper.name, now)
                self._decide(card, parsed, result, tapper, now)
            elif isinstance(result, Answered):
                self._answer(card, item.item_id, result.answer, tapper, now)
        self._on_change()
        return TapOutcome(result, card, self.store.item(card.agent_id, card.item_id))

    def record_refused_tap(
        self, chat_id: int, tapper: Person, action: str, reason: Refusal
    ) -> None:
        """Audit a tap that reached no card (unknown, from another chat, outdated data)."""
        self.store.audit("tap", at=self.now_ms(), chat_id=chat_id,
                         user_id=tapper.telegram_user_id, user_name=tapper.name,
                         action=action, allowed=False, refusal=reason.value)

    def _decide(
        self, card: CardRow, approval: Approval, result: Decided, person: Person, now: int
    ) -> None:
        payload = ApprovalDecision(
            decision_id=str(uuid.uuid4()),
            approval_id=approval.id,
            decision=result.decision,
            reason=result.reason,
            decided_by=person,
            decided_at=format_rfc3339(from_ms(now)),
            args_sha256=args_sha256(approval.arguments),
        )
        envelope_id = self._send_to_agent(card.agent_id, payload)
        self.store.add_decision(DecisionRow(
            payload.decision_id, card.agent_id, approval.id, card.chat_id, "approval",
            result.decision, result.reason, person.telegram_user_id or 0, person.name, now,
            envelope_id,
        ))
        state = "approved" if result.decision == "approve" else "denied"
        self.store.close_item(card.agent_id, approval.id, state=state, by=person.name, at=now,
                              chat_id=card.chat_id, reason=result.reason)
        self.store.audit(
            "decision_sent", at=now, chat_id=card.chat_id, agent_id=card.agent_id,
            item_id=approval.id, user_id=person.telegram_user_id, user_name=person.name,
            decision=result.decision, reason=result.reason, decision_id=payload.decision_id,
            approvers=[{"user_id": v.user_id, "name": v.name, "at": v.at_ms}
                       for v in result.voters],
        )

    def _answer(
        self, card: CardRow, item_id: str, answer: str, person: Person, now: int
    ) -> None:
        payload = ClarificationAnswer(
            answer_id=str(uuid.uuid4()),
            clarification_id=item_id,
            answer=answer,
            answered_by=person,
            answered_at=format_rfc3339(from_ms(now)),
        )
        envelope_id = self._send_to_agent(card.agent_id, payload)
        self.store.add_decision(DecisionRow(
            payload.answer_id, card.agent_id, item_id, card.chat_id, "clarification",
            "answer", answer, person.telegram_user_id or 0, person.name, now, envelope_id,
        ))
        self.store.close_item(card.agent_id, item_id, state="answered", by=person.name,
                              at=now, chat_id=card.chat_id, reason=answer)
        self.store.audit(
            "answer_sent", at=now, chat_id=card.chat_id, agent_id=card.agent_id,
            item_id=item_id, user_id=person.telegram_user_id, user_name=person.name,
            answer_id=payload.answer_id,
        )

    def _send_to_agent(self, agent_id: str, payload: Payload) -> str:
        peer = self.store.peer(agent_id)
        if peer is None:
            raise PayloadError(f"agent {agent_id[:8]} is no longer paired")
        return self._send(peer, payload)

    def _send(self, peer: Peer, payload: Payload) -> str:
        now = self.now_ms()
        card = PublicCard.from_json(json.loads(peer.card_json))
        envelope = seal(encode_payload(payload), sender=self.identity, recipient=card, ts_ms=now)
        self.store.outbox_add(peer.relay_url, envelope.to_json(), now)
        self._on_outbox(peer.relay_url)
        return envelope.id

    # -- time -------------------------------------------------------------------------------

    def expire_due(self) -> int:
        """Close every open item whose ``expires_at`` has passed; nothing is sent for them."""
        now = self.now_ms()
        expired = self.store.open_items_expired(now)
        with self.store.transaction():
            for item in expired:
                self.store.close_item(item.agent_id, item.item_id, state="expired", by=None,
                                      at=item.expires_at)
                self.store.audit("expired", at=now, agent_id=item.agent_id, item_id=item.item_id)
        if expired:
            self._on_change()
        return len(expired)


def new_token() -> str:
    """A random, unguessable per-card token for callback data (16 characters)."""
    return secrets.token_urlsafe(12)


def _short(value: object) -> str:
    return value[:12] if isinstance(value, str) else "?"
