"""The bot's use cases: the only writer of its state, independent of Telegram and sockets.

It applies what agents send (envelopes in, store changes out), turns what people decide
into sealed envelopes in the outbox, and records what the Telegram side saw and did (chats,
posted cards, prompts, reminders). Each use case is one store transaction and returns the
:class:`Changes` it made; the caller acts on them (wakes the card worker, flushes a relay)
only after the commit. A crash between any two steps leaves a state the next start
finishes: cards are rows waiting to be shown, decisions are outbox rows waiting for the
relay.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import dataclasses
import functools
import json
import logging
import operator
import secrets
import traceback
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from bot.clock import Clock, from_ms, to_ms
from bot.config import ChatPolicy, Config
from bot.core.grants import (
    ACTIVITY_WINDOW_MS,
    ActivityRow,
    GrantedRow,
    GrantRow,
    grant_status,
    may_be_granted,
    offered_minutes,
    plan_grants,
)
from bot.core.inbox import DECIDED_STATES, FINAL_STATES, plan_update, remind_at
from bot.core.model import (
    CardRow,
    ChatKind,
    DecisionRow,
    ItemRow,
    NewItem,
    Pairing,
    Peer,
    ReportedOutcome,
    parse_item,
)
from bot.core.policy import (
    Action,
    Answered,
    Decided,
    ItemView,
    Refusal,
    Refused,
    Tallied,
    TapResult,
    Voter,
    evaluate_revoke,
    evaluate_tap,
    may_decide,
)
from bot.errors import (
    EnvelopeRefused,
    PairingError,
    PayloadError,
    RefusalReason,
    StoreUnavailable,
)
from bot.protocol.encoding import args_sha256, format_rfc3339
from bot.protocol.envelope import Opened, Unsealed, accept, seal, unseal
from bot.protocol.identity import Identity, PublicCard
from bot.protocol.pairing import PairingUri, build_pair_request
from bot.protocol.payloads import (
    Activity,
    Approval,
    ApprovalDecision,
    Clarification,
    ClarificationAnswer,
    Grant,
    GrantRequest,
    GrantRevoke,
    InboxRequest,
    InboxUpdate,
    Notification,
    PairAccept,
    PairReject,
    Payload,
    Person,
    encode_payload,
    item_to_wire,
    parse_payload,
)
from bot.protocol.replay import RETENTION_MS
from bot.protocol.snapshot import SeenSnapshot, rev_hint, snapshot_rev
from bot.store import Store

log = logging.getLogger(__name__)


class _HeldLog:
    """The log of what delivered envelopes did: written at once, or, while a batch of them
    is applied (:meth:`holding`), once its transaction has committed, so that nothing is
    logged as done that was not, and a batch delivered again after the store failed logs
    nothing twice."""

    def __init__(self) -> None:
        self._held: contextvars.ContextVar[list[tuple[int, str, tuple[object, ...]]] | None] \
            = contextvars.ContextVar("held_log", default=None)

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """Hold the lines logged in the block; write them if it ends without an error."""
        lines: list[tuple[int, str, tuple[object, ...]]] = []
        token = self._held.set(lines)
        try:
            yield
        finally:
            self._held.reset(token)
        for level, message, args in lines:
            log.log(level, message, *args)

    def log(self, level: int, message: str, *args: object) -> None:
        held = self._held.get()
        if held is None:
            log.log(level, message, *args)
        else:
            held.append((level, message, args))

    def info(self, message: str, *args: object) -> None:
        self.log(logging.INFO, message, *args)

    def warning(self, message: str, *args: object) -> None:
        self.log(logging.WARNING, message, *args)

    def error(self, message: str, *args: object) -> None:
        self.log(logging.ERROR, message, *args)


noted = _HeldLog()

PAIRING_WINDOW_MS = 10 * 60 * 1000
"""How long a pairing in progress waits for the agent's pair_accept."""
PAIRING_TIMEOUT_S = 30.0
"""How long ``/pair`` and ``skald-telegram pair`` wait for the agent to accept."""
REVOKE_CONFIRM_S = 3.0
"""How long a Revoke tap waits for the agent to confirm (its next ``inbox_update`` no
longer lists the grant) before it says the revoke takes effect when the agent is back: the
bot cannot see whether an agent is on the relay, only whether it answers."""
REPLAY_PRUNE_EVERY_MS = 3600 * 1000
OFF_LOOP_BYTES = 16 * 1024
"""Deliveries whose ciphertext adds up to at least this are opened and applied in a thread."""


@dataclass(frozen=True)
class Changes:
    """What a use case changed, for the caller to act on after the commit."""

    cards: bool = False
    """Cards to show or redraw, due times that moved, or a pairing that finished."""
    relays: frozenset[str] = frozenset()
    """Relays with new envelopes waiting in the outbox."""

    def __or__(self, other: Changes) -> Changes:
        return Changes(self.cards or other.cards, self.relays | other.relays)


NOTHING = Changes()
REDRAW = Changes(cards=True)


@dataclass(frozen=True)
class TapReport:
    """What a tap did, for the Telegram side to tell the tapper."""

    result: TapResult
    card: CardRow | None = None
    item: ItemRow | None = None
    changes: Changes = field(default=NOTHING)


@dataclass(frozen=True)
class RevokeReport:
    """What a Revoke tap did: ``refusal`` None when the revoke was sent."""

    refusal: Refusal | None
    grant: GrantRow | None = None
    changes: Changes = field(default=NOTHING)


@dataclass(frozen=True)
class _Received:
    """An envelope opened in a batch, and the snapshot of its sender it was read against
    (None: read in full, or read against nothing)."""

    opened: Opened
    basis: SeenSnapshot | None
    supersedes: tuple[Unsealed, ...] = ()
    """The same agent's older snapshots beside this one in the batch (nothing else of the
    agent's in between), left unread and unchecked: this one is the agent's complete inbox
    after them. Opened should this one fail to apply."""


class _Snapshots:
    """The last snapshot applied of each agent, as a batch of envelopes sees it while it
    applies them: the bridge's, then those the batch applies, kept once it committed."""

    def __init__(self, kept: dict[str, SeenSnapshot]) -> None:
        self._kept = kept
        self._applied: dict[str, SeenSnapshot | None] = {}

    def get(self, agent_id: str) -> SeenSnapshot | None:
        if agent_id in self._applied:
            return self._applied[agent_id]
        return self._kept.get(agent_id)

    def applied(self, agent_id: str, seen: SeenSnapshot | None) -> None:
        """An agent's snapshot was applied; None: it was read in full (the next one is
        read in full too)."""
        self._applied[agent_id] = seen

    def keep(self) -> None:
        """After the commit: read the agents' next snapshots against these."""
        for agent_id, seen in self._applied.items():
            if seen is None:
                self._kept.pop(agent_id, None)
            else:
                self._kept[agent_id] = seen


@dataclass
class _BatchReplay:
    """The envelopes of a batch that the replay set holds (looked up together), and those
    of the batch opened so far (not stored yet)."""

    stored: set[str]
    ids: set[str] = field(default_factory=set)

    def seen(self, envelope_id: str) -> bool:
        return envelope_id in self.ids or envelope_id in self.stored


class Bridge:
    """Applies agents' envelopes, people's decisions and what Telegram reported to the
    store: the one writer of the bot's state."""

    def __init__(self, *, identity: Identity, store: Store, config: Config, clock: Clock) -> None:
        self.identity = identity
        self._store = store
        self.view = store.view()
        """The bot's state, read-only, for the Telegram side."""
        self.config = config
        self._clock = clock
        self._seen: dict[str, SeenSnapshot] = {}
        """Each agent's last snapshot applied, to read its next one (memory only). Items
        enter the store only from snapshots, and never leave it: every item of it is held,
        and every item the bot holds open is one of it."""

    def now_ms(self) -> int:
        return self._clock.now_ms()

    @property
    def clock(self) -> Clock:
        return self._clock

    def policy(self, chat_id: int) -> ChatPolicy:
        """A chat's rules from the configuration, following supergroup migrations. A chat
        whose type Telegram has not reported yet gets a group's (stricter) defaults."""
        return self.config.policy(
            chat_id, private=self._store.chats.kind(chat_id) == "private",
            former_ids=tuple(self._store.chats.former_ids(chat_id)),
        )

    # -- relays -----------------------------------------------------------------------------

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
        with noted.holding():
            received = self._open_all(self._unseal_all(raws, now), now, self._seen)
            if not received:
                return NOTHING
            snapshots = _Snapshots(self._seen)
            changes = NOTHING
            with self._store.transaction():
                for delivery in received:
                    changes |= self._apply_received(delivery, now, snapshots)
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
    ) -> list[_Received]:
        """Open each unsealed envelope, reading each snapshot against the same agent's one
        before it (in this batch, or else ``seen``); refused ones are logged and left out.

        Of a stretch of one agent's snapshots (nothing else from the agent in between),
        only the newest that opens is read and checked: each is the agent's complete
        inbox, so whatever the others say, applying it leaves nothing of them (an item that
        came and went in between never reaches a chat). The others are only decrypted, to
        tell that they are older snapshots (:func:`snapshot_rev`)."""
        batch = _Batch(reading=dict(seen), replay=_BatchReplay(
            self._store.outbox.seen_among({item.envelope.id for item in unsealed})))
        received: list[_Received] = []
        for group in _stretches(unsealed):
            if len(group) > 1:
                received += batch.accept_stretch(group, now)
            elif (delivery := batch.accept(group[0][1], now)) is not None:
                received.append(delivery)
        return received

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
                _dropped(raw.get("id"), sender, refusal)
        return unsealed

    def _apply_received(self, delivery: _Received, now: int, snapshots: _Snapshots) -> Changes:
        """Apply one opened envelope inside the batch's transaction, or refuse it alone
        (and apply the snapshots it superseded instead)."""
        envelope, payload = delivery.opened.envelope, delivery.opened.payload
        try:
            with self._store.savepoint():
                self._store.outbox.remember(envelope.id, envelope.ts, now)
                changes = self._apply(delivery, now, snapshots)
        except StoreUnavailable:
            raise  # the disk, not the sender: not handled yet, delivered again later
        except Exception as exc:
            # One sender's payload must not stall everyone else's behind it on the shared
            # relay session: it is refused (acknowledged, nothing applied) like any other.
            # The error's text may quote decrypted content: log its type and place only.
            where = traceback.extract_tb(exc.__traceback__)[-1]
            noted.error("refused envelope %s from %s: applying its %s failed with %s at %s:%s",
                        _short(envelope.id), envelope.sender[:8], type(payload).__name__,
                        type(exc).__name__, where.filename, where.lineno)
            # Its id is kept, so that a copy delivered again is a replay.
            self._store.outbox.remember(envelope.id, envelope.ts, now)
            return self._apply_superseded(delivery, now, snapshots)
        if delivery.supersedes:
            noted.info("applied %s from agent %s, the newest of %d of its snapshots in the same "
                       "delivery", type(payload).__name__, envelope.sender[:8],
                       len(delivery.supersedes) + 1)
        else:
            noted.info("applied %s from agent %s", type(payload).__name__, envelope.sender[:8])
        return changes | REDRAW

    def _apply_superseded(
        self, delivery: _Received, now: int, snapshots: _Snapshots
    ) -> Changes:
        """The snapshots a refused one superseded, opened and applied in its place."""
        if not delivery.supersedes:
            return NOTHING
        sender = delivery.opened.envelope.sender
        noted.info("opening the %d snapshots of %s it superseded instead",
                   len(delivery.supersedes), sender[:8])
        applied = snapshots.get(sender)
        opened = self._open_all(delivery.supersedes, now,
                                {} if applied is None else {sender: applied})
        return functools.reduce(operator.or_, [
            self._apply_received(part, now, snapshots) for part in opened], NOTHING)

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

    def _apply(self, delivery: _Received, now: int, snapshots: _Snapshots) -> Changes:
        sender, payload = delivery.opened.sender, delivery.opened.payload
        if isinstance(payload, PairAccept):
            self._apply_pair_accept(sender, payload, now)
        elif isinstance(payload, PairReject):
            self._apply_pair_reject(sender, payload, now)
        elif self._store.agents.peer(sender.id) is None:
            noted.warning("ignored %s from %s: pairing not finished", type(payload).__name__,
                          sender.id[:8])
        elif isinstance(payload, InboxUpdate):
            self._apply_inbox_update(sender.id, payload, now, delivery, snapshots)
        elif isinstance(payload, Activity):
            self._apply_activity(sender.id, payload, now)
        elif isinstance(payload, Notification):
            if not self._store.items.has(sender.id, payload.item_id):
                peer = self._store.agents.peer(sender.id)
                if peer is not None:
                    return self._send(
                        peer, InboxRequest(since_rev=self._store.agents.last_rev(sender.id)))
        else:
            noted.info("ignored a %s payload from %s", type(payload).__name__, sender.id[:8])
        return NOTHING

    def _apply_pair_accept(self, sender: PublicCard, accept: PairAccept, now: int) -> None:
        pairing = self._store.agents.pairing(sender.id)
        if (
            pairing is None
            or pairing.accepted_at is not None
            or pairing.created_at < now - PAIRING_WINDOW_MS
            or accept.device_id != self.identity.id
        ):
            noted.warning("ignored a pair_accept from %s that answers no pairing in progress",
                          sender.id[:8])
            return
        name = accept.agent_name or sender.name
        self._store.agents.add_peer(
            Peer(sender.id, pairing.relay_url, json.dumps(sender.to_json()), name), now
        )
        self._bind(sender.id, pairing.chat_id, pairing.topic_id, now)
        self._store.agents.pairing_accepted(sender.id, now)
        self._store.audit.append("paired", at=now, chat_id=pairing.chat_id, agent_id=sender.id,
                         user_id=pairing.requested_by, agent_name=name)
        noted.info("paired with agent %s (%s)", sender.id[:8], name)

    def _apply_pair_reject(self, sender: PublicCard, reject: PairReject, now: int) -> None:
        pairing = self._store.agents.pairing(sender.id)
        if pairing is None or pairing.accepted_at is not None:
            noted.warning("ignored a pair_reject from %s that answers no pairing in progress",
                          sender.id[:8])
            return
        self._store.agents.pairing_rejected(sender.id, reject.reason, now)
        self._store.audit.append("pairing_refused", at=now, chat_id=pairing.chat_id,
                                 agent_id=sender.id, user_id=pairing.requested_by,
                                 reason=reject.reason)
        noted.info("agent %s refused the pairing: %s", sender.id[:8], reject.reason)

    def _apply_inbox_update(
        self, agent_id: str, update: InboxUpdate, now: int, delivery: _Received,
        snapshots: _Snapshots,
    ) -> None:
        items = self._store.items
        opened = delivery.opened
        seen = opened.read.seen if opened.read else None
        before = snapshots.get(agent_id)
        if update.unchanged and delivery.basis is not before:
            # Read against a snapshot not applied (refused, stale or forgotten): its
            # unchanged items may not be held.
            full = parse_payload(opened.plaintext)
            assert isinstance(full, InboxUpdate)
            update, seen = full, None
        new_ids = [*(a.id for a in update.approvals), *(c.id for c in update.clarifications)]
        if before is None:
            open_now = items.open_ids(agent_id)
        else:
            # Only items of the last snapshot applied can be open: those not in this one.
            open_now = items.open_among(
                agent_id, set(before.item_ids()).difference(update.unchanged, new_ids))
        known = items.held_among(agent_id, new_ids).union(update.unchanged)
        plan = plan_update(
            update,
            last_rev=self._store.agents.last_rev(agent_id),
            known=known,
            open_now=open_now,
        )
        if plan.stale:
            noted.info("ignored inbox_update rev %d from %s: not newer", update.rev, agent_id[:8])
            return
        self._store.agents.set_rev(agent_id, update.rev, now)
        texts = opened.read.texts if opened.read else {}  # new items' JSON, as received
        items.add_many(agent_id, [self._new_item(item, now, texts.get(item.id))
                                  for item in plan.new_items], now_ms=now)
        for binding in self._store.agents.bindings_for_agent(agent_id):
            self._plan_cards(agent_id, [item.id for item in plan.new_items],
                             binding.chat_id, binding.topic_id)
        for gone in plan.gone:
            at = to_ms(gone.at) if gone.at else now
            if items.close(agent_id, gone.item_id, state=gone.state, by=gone.by, at=at):
                self._store.audit.append("resolved_elsewhere", at=now, agent_id=agent_id,
                                 item_id=gone.item_id, outcome=gone.state, by=gone.by)
        if update.resolved:
            self._note_reported(agent_id, update, now)
        self._apply_grants(agent_id, update.grants, now)
        snapshots.applied(agent_id, seen)  # last: nothing after it can fail

    def _note_reported(self, agent_id: str, update: InboxUpdate, now: int) -> None:
        """Keep (once) how the agent says each item decided here ended, and audit it; a
        card whose decision the agent did not take (it expired first, or was decided
        elsewhere) is edited to say so."""
        items = self._store.items
        ended = [entry for entry in update.resolved if entry.outcome in FINAL_STATES]
        decisions = items.unreported_decisions(agent_id, {entry.id for entry in ended})
        for entry in ended:
            decision = decisions.pop(entry.id, None)
            if decision is None:
                continue
            report = ReportedOutcome(agent_id, entry.id, entry.outcome, entry.by,
                                     _maybe_ms(entry.at))
            items.add_reported(report)
            taken = entry.outcome == DECIDED_STATES.get(decision.value)
            self._store.audit.append(
                "outcome_reported", at=now, chat_id=decision.chat_id, agent_id=agent_id,
                item_id=entry.id, user_id=decision.user_id, user_name=decision.user_name,
                decision_id=decision.decision_id, decision=decision.value,
                outcome=entry.outcome, by=entry.by, taken=taken,
            )
            if not taken:
                log.warning("agent %s reports %s as %s: the decision made here (%s) did not "
                            "take effect", agent_id[:8], entry.id, entry.outcome,
                            decision.value)
                items.redraw(agent_id, entry.id)

    def _apply_grants(self, agent_id: str, reported: tuple[Grant, ...], now: int) -> None:
        """Hold the grants the agent lists in force; one no longer listed has ended
        (revoked, when an approver asked for it)."""
        grants = self._store.grants
        plan = plan_grants(reported, grants.of_agent(agent_id))
        if not (plan.new or plan.changed or plan.gone):
            return
        chats: list[int | None] = [
            b.chat_id for b in self._store.agents.bindings_for_agent(agent_id)] or [None]
        for grant in plan.new:
            row = GrantRow(
                agent_id, grant.id, grant.key, grant.label, grant.granted_by.name,
                _maybe_ms(grant.granted_at), _maybe_ms(grant.expires_at), grant.uses,
                new_token(), "active", None, None, None,
            )
            grants.add(agent_id, row)
            for chat_id in chats:
                self._store.audit.append(
                    "grant_in_force", at=now, chat_id=chat_id, agent_id=agent_id,
                    user_id=grant.granted_by.telegram_user_id, user_name=grant.granted_by.name,
                    grant_id=grant.id, label=grant.label, expires_at=row.expires_at,
                )
        for grant in plan.changed:
            grants.update(agent_id, grant.id, uses=grant.uses,
                          expires_at=_maybe_ms(grant.expires_at))
        for row in plan.gone:
            state = "revoked" if row.revoke_at is not None else "ended"
            grants.end(agent_id, row.grant_id, state=state, now_ms=now)
            for chat_id in chats:
                self._store.audit.append(
                    f"grant_{state}", at=now, chat_id=chat_id, agent_id=agent_id,
                    user_name=row.revoke_by, grant_id=row.grant_id, label=row.label,
                    uses=row.uses,
                )

    def _apply_activity(self, agent_id: str, activity: Activity, now: int) -> None:
        """Hold the calls an agent ran under grants (each id once) and append them to an
        activity message in every chat the agent is bound to: the chat's last one while it
        is younger than :data:`ACTIVITY_WINDOW_MS`, else a new one."""
        grants = self._store.grants
        fresh = []
        for entry in activity.entries:
            row = ActivityRow(agent_id, entry.id, entry.tool, entry.summary, entry.grant_id,
                              _maybe_ms(entry.at) or now)
            if grants.add_activity(row):
                fresh.append(row)
        bindings = self._store.agents.bindings_for_agent(agent_id)
        chats: list[int | None] = [b.chat_id for b in bindings] or [None]
        for chat_id in chats:
            for row in fresh:
                grant = grants.get(agent_id, row.grant_id) if row.grant_id else None
                self._store.audit.append(
                    "grant_used", at=now, chat_id=chat_id, agent_id=agent_id,
                    user_name=grant.granted_by if grant else None, grant_id=row.grant_id,
                    entry_id=row.entry_id, tool=row.tool, summary=row.summary,
                )
        for binding in bindings if fresh else []:
            note = grants.latest_note(binding.chat_id, "activity")
            if note is None or note.opened_at <= now - ACTIVITY_WINDOW_MS:
                topic = binding.topic_id if binding.topic_id is not None \
                    else self.policy(binding.chat_id).topic
                note_id = grants.add_note("activity", binding.chat_id, topic, now)
            else:
                note_id = note.note_id
            for row in fresh:
                grants.add_note_line(note_id, agent_id, row.entry_id)
            grants.mark_note(note_id)

    def _bind(self, agent_id: str, chat_id: int, topic_id: int | None, now: int) -> None:
        """Bind an agent to a chat, with a card there for each of its open items."""
        self._store.agents.bind(agent_id, chat_id, topic_id, now)
        self._plan_cards(agent_id, sorted(self._store.items.open_ids(agent_id)),
                         chat_id, topic_id)

    def _plan_cards(
        self, agent_id: str, item_ids: list[str], chat_id: int, topic_id: int | None
    ) -> None:
        """A card for each item in the chat (none twice), in the binding's topic or else
        the chat's configured one. A chat the bot may not post in gets its cards when it
        may again."""
        if not item_ids:
            return
        if topic_id is None:
            topic_id = self.policy(chat_id).topic
        self._store.cards.add_many(
            [(agent_id, item_id, chat_id, topic_id, new_token()) for item_id in item_ids])

    @staticmethod
    def _new_item(item: Approval | Clarification, now: int, body_json: str | None) -> NewItem:
        """A new item as the store holds it (``body_json``: its stored form, if already
        encoded)."""
        created = item.created_at or from_ms(now)
        reminder = remind_at(created, item.expires_at)
        return NewItem(
            item.id,
            "approval" if isinstance(item, Approval) else "clarification",
            body_json or item_body(item),
            expires_at=to_ms(item.expires_at) if item.expires_at else None,
            remind_at=to_ms(reminder) if reminder else None,
        )

    # -- pairing ----------------------------------------------------------------------------

    def start_pairing(
        self, uri: PairingUri, *, chat_id: int, topic_id: int | None, requested_by: int | None
    ) -> Changes:
        """Record a pairing in progress and queue its ``pair_request`` for the agent's relay."""
        now = self.now_ms()
        request = build_pair_request(self.identity, uri, device_name=self.identity.card.name)
        with self._store.transaction():
            self._store.agents.add_pairing(
                uri.agent.id, uri.relay, json.dumps(uri.agent.to_json()), chat_id=chat_id,
                topic_id=topic_id, requested_by=requested_by, now_ms=now,
            )
            envelope = seal(encode_payload(request), sender=self.identity, recipient=uri.agent,
                            ts_ms=now)
            self._store.outbox.add(uri.relay, envelope.to_json(), now)
        return Changes(relays=frozenset({uri.relay}))

    def pairing_done(self, agent_id: str) -> bool:
        pairing = self._store.agents.pairing(agent_id)
        return pairing is not None and pairing.accepted_at is not None

    def pairing_refused(self, agent_id: str) -> str | None:
        """Why the agent refused the pairing (``used``, ``expired``, …), or None."""
        return self._store.agents.pairing_rejection(agent_id)

    def cancel_pairing(self, agent_id: str) -> None:
        """Give up a pairing the agent has not accepted, so that no relay session is kept
        open for it."""
        self._store.agents.cancel_pairing(agent_id)

    def unbind(self, agent_id: str, chat_id: int, user_id: int | None) -> Changes:
        now = self.now_ms()
        with self._store.transaction():
            self._store.agents.unbind(agent_id, chat_id)
            self._store.audit.append("unpaired", at=now, chat_id=chat_id, agent_id=agent_id,
                                     user_id=user_id)
        return REDRAW

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
    ) -> TapReport:
        """Apply one tap (or a typed deny reason or answer, ``text``) in ``chat_id``, and
        record it in the audit trail, allowed or not. A token of a card in another chat is
        an unknown card: the tapper's rights come from the chat the tap happened in."""
        now = self.now_ms()
        voter = Voter(tapper.telegram_user_id or 0, tapper.name, now)
        card = self._store.cards.by_token(token)
        item = self._store.items.get(card.agent_id, card.item_id) if card else None
        if card is None or item is None or card.chat_id != chat_id:
            self.record_refused_tap(chat_id, tapper, action.name.lower(), Refusal.UNKNOWN_CARD)
            return TapReport(Refused(Refusal.UNKNOWN_CARD))
        parsed = parse_item(item)
        view = ItemView(
            kind=item.kind,
            open=item.state == "open",
            expired=item.expires_at is not None and item.expires_at <= now,
            bound=self._store.agents.is_bound(card.agent_id, card.chat_id),
            options=parsed.options if isinstance(parsed, Clarification) else (),
            grant_minutes=self.grant_minutes(parsed, chat_id, card.agent_id),
        )
        votes = tuple(Voter(v.user_id, v.name, v.at) for v in self._store.cards.votes(card.card_id))
        result = evaluate_tap(action, tapper=voter, item=view, approvers=approvers,
                              required=required, voters=votes, option=option, text=text)
        changes = REDRAW
        with self._store.transaction():
            if view.open:  # the card's tally shows only votes that still count
                self._drop_lapsed_votes(card, votes, approvers, now)
            self._store.audit.append(
                "tap", at=now, chat_id=card.chat_id, agent_id=card.agent_id,
                item_id=card.item_id, user_id=voter.user_id, user_name=tapper.name,
                action=action.name.lower(), allowed=not isinstance(result, Refused),
                refusal=result.reason.value if isinstance(result, Refused) else None,
            )
            if isinstance(result, Tallied):
                if action is Action.APPROVE:
                    self._store.cards.add_vote(card.card_id, voter.user_id, tapper.name, now)
                else:
                    self._store.cards.remove_vote(card.card_id, voter.user_id)
            elif isinstance(result, Decided) and isinstance(parsed, Approval):
                if result.decision == "approve":
                    self._store.cards.add_vote(card.card_id, voter.user_id, tapper.name, now)
                changes |= self._decide(card, parsed, result, tapper, now)
            elif isinstance(result, Answered):
                changes |= self._answer(card, item.item_id, result.answer, tapper, now)
        item = self._store.items.get(card.agent_id, card.item_id)
        return TapReport(result, card, item, changes)

    def grant_minutes(self, item: Approval | Clarification, chat_id: int, agent_id: str) -> int:
        """How long a grant a card of ``item`` offers in the chat (0: none)."""
        peer = self._store.agents.peer(agent_id)
        if not isinstance(item, Approval) or not may_be_granted(item, peer.name if peer else ""):
            return 0
        policy = self.policy(chat_id)
        return offered_minutes(item.grant_offer, allowed=policy.grants,
                               minutes=policy.grant_minutes)

    def _drop_lapsed_votes(
        self, card: CardRow, votes: tuple[Voter, ...], approvers: frozenset[int], now: int
    ) -> None:
        for vote in votes:
            if not may_decide(vote.user_id, approvers):
                self._store.cards.remove_vote(card.card_id, vote.user_id)
                self._store.audit.append(
                    "vote_lapsed", at=now, chat_id=card.chat_id, agent_id=card.agent_id,
                    item_id=card.item_id, user_id=vote.user_id, user_name=vote.name,
                    reason="no longer an approver",
                )

    def record_refused_tap(
        self, chat_id: int, tapper: Person, action: str, reason: Refusal
    ) -> None:
        """Audit a tap that reached no card (unknown, from another chat, outdated data)."""
        self._store.audit.append("tap", at=self.now_ms(), chat_id=chat_id,
                                 user_id=tapper.telegram_user_id, user_name=tapper.name,
                                 action=action, allowed=False, refusal=reason.value)

    def _decide(
        self, card: CardRow, approval: Approval, result: Decided, person: Person, now: int
    ) -> Changes:
        offer = approval.grant_offer if result.grant_minutes else None
        payload = ApprovalDecision(
            decision_id=str(uuid.uuid4()),
            approval_id=approval.id,
            decision=result.decision,
            reason=result.reason,
            decided_by=person,
            decided_at=format_rfc3339(from_ms(now)),
            args_sha256=args_sha256(approval.arguments),
            grant=GrantRequest(offer.key, result.grant_minutes) if offer else None,
        )
        envelope_id, changes = self._send_to_agent(card.agent_id, payload)
        self._store.items.add_decision(DecisionRow(
            payload.decision_id, card.agent_id, approval.id, card.chat_id, "approval",
            result.decision, result.reason, person.telegram_user_id or 0, person.name, now,
            envelope_id,
        ))
        state = DECIDED_STATES[result.decision]
        self._store.items.close(card.agent_id, approval.id, state=state, by=person.name,
                                at=now, chat_id=card.chat_id, reason=result.reason)
        self._store.audit.append(
            "decision_sent", at=now, chat_id=card.chat_id, agent_id=card.agent_id,
            item_id=approval.id, user_id=person.telegram_user_id, user_name=person.name,
            decision=result.decision, reason=result.reason, decision_id=payload.decision_id,
            approvers=[{"user_id": v.user_id, "name": v.name, "at": v.at_ms}
                       for v in result.voters],
        )
        if offer is not None:
            until = now + result.grant_minutes * 60_000
            self._store.grants.add_granted(GrantedRow(
                card.agent_id, approval.id, card.chat_id, offer.label, result.grant_minutes,
                until, person.name,
            ))
            self._store.audit.append(
                "grant_given", at=now, chat_id=card.chat_id, agent_id=card.agent_id,
                item_id=approval.id, user_id=person.telegram_user_id, user_name=person.name,
                label=offer.label, minutes=result.grant_minutes, until=until,
                decision_id=payload.decision_id,
            )
        return changes

    # -- grants -----------------------------------------------------------------------------

    def revoke_grant(
        self, token: str, *, chat_id: int, tapper: Person, approvers: frozenset[int]
    ) -> RevokeReport:
        """An approver of ``chat_id`` tapped Revoke: send ``grant_revoke`` to the agent
        (the grant shows as revoked once the agent's next update no longer lists it).
        Every tap is audited, allowed or not."""
        now = self.now_ms()
        grant = self._store.grants.by_token(token)
        if grant is None:
            self.record_refused_tap(chat_id, tapper, "revoke", Refusal.UNKNOWN_CARD)
            return RevokeReport(Refusal.UNKNOWN_CARD)
        refusal = evaluate_revoke(
            user_id=tapper.telegram_user_id or 0, approvers=approvers,
            bound=self._store.agents.is_bound(grant.agent_id, chat_id),
            status=grant_status(grant, now),
        )
        changes = NOTHING
        with self._store.transaction():
            self._store.audit.append(
                "tap", at=now, chat_id=chat_id, agent_id=grant.agent_id,
                user_id=tapper.telegram_user_id, user_name=tapper.name, action="revoke",
                allowed=refusal is None, refusal=refusal.value if refusal else None,
                grant_id=grant.grant_id,
            )
            if refusal is None:
                _envelope, changes = self._send_to_agent(grant.agent_id, GrantRevoke(
                    grant.grant_id, tapper, format_rfc3339(from_ms(now))))
                self._store.grants.revoke_requested(grant.agent_id, grant.grant_id,
                                                    by=tapper.name, now_ms=now)
                self._store.audit.append(
                    "grant_revoke_sent", at=now, chat_id=chat_id, agent_id=grant.agent_id,
                    user_id=tapper.telegram_user_id, user_name=tapper.name,
                    grant_id=grant.grant_id, label=grant.label,
                )
        return RevokeReport(refusal, self._store.grants.by_token(token), changes | REDRAW)

    def revoke_confirmed(self, token: str) -> bool:
        """Whether the agent confirmed that the grant of ``token`` ended (it no longer
        lists it)."""
        grant = self._store.grants.by_token(token)
        return grant is None or grant.state != "active"

    def list_grants(self, chat_id: int, topic_id: int | None) -> Changes:
        """Someone sent ``/grants``: a message listing the grants in force for the chat's
        agents, edited later as they are revoked or end."""
        now = self.now_ms()
        grants = self._store.grants
        with self._store.transaction():
            note_id = grants.add_note("grants", chat_id, topic_id, now)
            for grant in grants.active_for_chat(chat_id, now):
                grants.add_note_line(note_id, grant.agent_id, grant.grant_id)
        return REDRAW

    def note_posted(self, note_id: int, message_id: int) -> None:
        self._store.grants.note_posted(note_id, message_id)

    def note_shown(self, note_id: int, generation: int) -> None:
        self._store.grants.note_clean(note_id, generation)

    def note_gone(self, note_id: int) -> None:
        self._store.grants.note_gone(note_id)

    def _answer(
        self, card: CardRow, item_id: str, answer: str, person: Person, now: int
    ) -> Changes:
        payload = ClarificationAnswer(
            answer_id=str(uuid.uuid4()),
            clarification_id=item_id,
            answer=answer,
            answered_by=person,
            answered_at=format_rfc3339(from_ms(now)),
        )
        envelope_id, changes = self._send_to_agent(card.agent_id, payload)
        self._store.items.add_decision(DecisionRow(
            payload.answer_id, card.agent_id, item_id, card.chat_id, "clarification",
            "answer", answer, person.telegram_user_id or 0, person.name, now, envelope_id,
        ))
        self._store.items.close(card.agent_id, item_id, state="answered", by=person.name,
                                at=now, chat_id=card.chat_id, reason=answer)
        self._store.audit.append(
            "answer_sent", at=now, chat_id=card.chat_id, agent_id=card.agent_id,
            item_id=item_id, user_id=person.telegram_user_id, user_name=person.name,
            answer_id=payload.answer_id,
        )
        return changes

    def _send_to_agent(self, agent_id: str, payload: Payload) -> tuple[str, Changes]:
        """Queue ``payload`` for a paired agent: the envelope's id, and the relay to wake."""
        peer = self._store.agents.peer(agent_id)
        if peer is None:
            raise PayloadError(f"agent {agent_id[:8]} is no longer paired")
        return self._seal_to(peer, payload), Changes(relays=frozenset({peer.relay_url}))

    def _send(self, peer: Peer, payload: Payload) -> Changes:
        self._seal_to(peer, payload)
        return Changes(relays=frozenset({peer.relay_url}))

    def _seal_to(self, peer: Peer, payload: Payload) -> str:
        now = self.now_ms()
        card = PublicCard.from_json(json.loads(peer.card_json))
        envelope = seal(encode_payload(payload), sender=self.identity, recipient=card, ts_ms=now)
        self._store.outbox.add(peer.relay_url, envelope.to_json(), now)
        return envelope.id

    # -- time -------------------------------------------------------------------------------

    def expire_due(self) -> Changes:
        """Close every open item whose ``expires_at`` has passed; nothing is sent for them."""
        now = self.now_ms()
        expired = self._store.items.expired(now)
        with self._store.transaction():
            for item in expired:
                self._store.items.close(item.agent_id, item.item_id, state="expired", by=None,
                                        at=item.expires_at)
                self._store.audit.append("expired", at=now, agent_id=item.agent_id,
                                         item_id=item.item_id)
        return REDRAW if expired else NOTHING

    def claim_reminder(self, card_id: int) -> None:
        """Mark a card's reminder as sent before it goes out, so a failed send is not
        repeated."""
        self._store.cards.set_reminder(card_id, "sent")

    def reminder_sent(self, card: CardRow, approvers: list[int]) -> None:
        self._store.audit.append("reminder_sent", at=self.now_ms(), chat_id=card.chat_id,
                                 agent_id=card.agent_id, item_id=card.item_id,
                                 approvers=approvers)

    def prune_replay(self) -> int:
        """Forget applied envelopes older than the replay window's retention."""
        return self._store.outbox.forget_before(self.now_ms() - RETENTION_MS)

    # -- what Telegram reported -------------------------------------------------------------

    def note_chat(self, chat_id: int, title: str, kind: ChatKind) -> None:
        """A chat as an update showed it (its type is Telegram's ``chat.type``)."""
        self._store.chats.note(chat_id, title, kind)

    def note_user(self, user_id: int, name: str, username: str | None) -> None:
        self._store.chats.note_user(user_id, name, username)

    def chat_migrated(self, old_id: int, new_id: int, *, force: bool = False) -> Changes:
        """A group became a supergroup: move its bindings, cards, prompts and settings to
        the new id (once; the audit trail records it). Without ``force`` a chat the bot
        holds nothing for is left alone."""
        chats = self._store.chats
        if not (force or self._store.agents.bindings_for_chat(old_id) or chats.title(old_id)):
            return NOTHING
        with self._store.transaction():
            first = old_id not in chats.former_ids(new_id)
            chats.migrate(old_id, new_id)
            if first:
                self._store.audit.append("chat_migrated", at=self.now_ms(), chat_id=new_id,
                                         old_chat_id=old_id)
        log.info("chat %s became supergroup %s; moved its bindings and cards", old_id, new_id)
        return REDRAW

    def chat_membership(self, chat_id: int, present: bool) -> Changes:
        """The bot was added to a chat (again) or left or was removed from it."""
        self._store.chats.set_forbidden(chat_id, not present)
        return REDRAW if present else NOTHING

    def chat_unavailable(self, chat_id: int) -> None:
        """Telegram refuses posts in the chat: stop until the bot is added again."""
        self._store.chats.set_forbidden(chat_id, True)

    def admins_changed(self, chat_id: int) -> None:
        """Forget a chat's cached administrators (someone gained or lost the role)."""
        self._store.chats.forget_admins(chat_id)

    def admins_fetched(self, chat_id: int, admins: dict[int, str]) -> None:
        with self._store.transaction():
            self._store.chats.set_admins(chat_id, admins, self.now_ms())
            for user_id, name in admins.items():
                self._store.chats.note_user(user_id, name, None)

    def prompt_sent(self, chat_id: int, message_id: int, card_id: int, user_id: int) -> None:
        """A deny-reason prompt (a ForceReply) for ``user_id`` went out for a card."""
        self._store.cards.add_prompt(chat_id, message_id, card_id, user_id)

    # -- cards as the card worker shows them ------------------------------------------------

    # What Telegram already shows is recorded without waiting for the disk: a killed
    # process keeps it, and only a power loss can make the worker show it once more.

    def card_sending(self, card_id: int) -> None:
        """A message of the card is about to go out: the store must take a write first
        (one that fails stops the message before Telegram shows what is not recorded).
        Lost with the power, it changes nothing: the card is posted again either way."""
        with self._store.transaction(durable=False):
            self._store.cards.sending(card_id, self.now_ms())

    def card_posted(self, card: CardRow, message_id: int, shown: int | None = None) -> None:
        """The card's message is out; with ``shown``, it also shows the state read at that
        generation (nothing is left to attach)."""
        now = self.now_ms()
        with self._store.transaction(durable=False):
            self._store.cards.posted(card.card_id, message_id, now)
            self._store.audit.append("card_posted", at=now, chat_id=card.chat_id,
                                     agent_id=card.agent_id, item_id=card.item_id,
                                     message_id=message_id)
            if shown is not None:
                self._store.cards.clean(card.card_id, shown)

    def card_shown(self, card_id: int, generation: int) -> None:
        """The card's message shows the state read at ``generation``."""
        with self._store.transaction(durable=False):
            self._store.cards.clean(card_id, generation)

    def card_message_gone(self, card_id: int) -> None:
        """Someone deleted the card's message: post it again."""
        self._store.cards.repost(card_id)

    def card_topic_gone(self, card_id: int) -> None:
        """The card's forum topic is gone: post it in the chat itself."""
        self._store.cards.clear_topic(card_id)

    def card_attachment_sent(self, card_id: int, generation: int) -> None:
        """The full content went out under the card, which shows ``generation``."""
        with self._store.transaction(durable=False):
            self._store.cards.attachment_sent(card_id)
            self._store.cards.clean(card_id, generation)

    # -- Telegram's updates, held until handled (bot.tg.update_inbox) -----------------------

    def hold_updates(self, updates: list[tuple[int, str]]) -> None:
        """Store fetched updates (id, JSON) before ``getUpdates`` confirms them.

        Without waiting for the disk: a killed process keeps them, and the handler's own
        commit (durable for a tap) makes them durable too, so a tap costs one ``fsync``.
        """
        with self._store.transaction(durable=False):
            for update_id, body in updates:
                self._store.updates.add(update_id, body)

    def held_updates(self) -> list[tuple[int, str]]:
        return self._store.updates.pending()

    def next_update_offset(self) -> int | None:
        return self._store.updates.next_offset()

    def update_handled(self, update_id: int) -> None:
        """Mark an update handled: inside a transaction in progress, as part of it;
        otherwise (its handler changed nothing) without waiting for the disk, like
        :meth:`hold_updates`."""
        with self._store.transaction(durable=False):
            self._store.updates.done(update_id)

    def prune_updates(self) -> None:
        self._store.updates.prune()

    def before_each_commit(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` inside every transaction, just before it commits."""
        self._store.db.before_commit = hook


async def wait_until_paired(
    bridge: Bridge, agent_id: str, changed: asyncio.Event, timeout: float = PAIRING_TIMEOUT_S
) -> None:
    """Return once the agent accepted the pairing; ``changed`` is set after each applied
    change. Raises :class:`TimeoutError` after ``timeout`` seconds."""
    async with asyncio.timeout(timeout):
        while not bridge.pairing_done(agent_id):
            reason = bridge.pairing_refused(agent_id)
            if reason is not None:
                raise PairingError(
                    f"the agent refused the pairing: {REFUSALS.get(reason, reason)}")
            changed.clear()
            await changed.wait()


async def wait_until_revoked(
    bridge: Bridge, token: str, changed: asyncio.Event, timeout: float = REVOKE_CONFIRM_S
) -> bool:
    """Whether the agent confirms the revoke of the grant of ``token`` within ``timeout``
    seconds of the bridge's clock; ``changed`` is set after each applied change."""
    deadline = bridge.now_ms() + int(timeout * 1000)
    while not bridge.revoke_confirmed(token):
        left = deadline - bridge.now_ms()
        if left <= 0:
            return False
        changed.clear()
        # Others clear ``changed`` too: look again now and then rather than miss a change.
        await bridge.clock.wait(changed, min(left / 1000, 0.25))
    return True


REFUSALS = {
    "used": "this link was used already: ask the agent for a new one",
    "expired": "this link has expired: ask the agent for a new one",
    "unknown": "the agent does not know this link",
    "bad_proof": "the link's secret does not match",
}
"""What each ``pair_reject`` reason means, for people."""


_Hinted = tuple[int, Unsealed]
"""An envelope, and the revision its snapshot seems to have (:func:`rev_hint`)."""


def _stretches(unsealed: Sequence[Unsealed]) -> list[list[_Hinted]]:
    """The batch in groups, in order of each group's first envelope: each stretch of one
    agent's envelopes that all seem to hold snapshots (two or more, nothing else of the
    agent's in between), and every other envelope alone."""
    senders = collections.Counter(item.envelope.sender for item in unsealed)
    groups: list[list[_Hinted]] = []
    open_stretch: dict[str, list[_Hinted]] = {}
    for item in unsealed:
        sender = item.envelope.sender
        hint = None
        if senders[sender] > 1 and item.plaintext is not None:
            hint = rev_hint(item.plaintext)
        if hint is None:
            open_stretch.pop(sender, None)
            groups.append([(-1, item)])
            continue
        stretch = open_stretch.get(sender)
        if stretch is None:
            stretch = open_stretch[sender] = []
            groups.append(stretch)
        stretch.append((hint, item))
    return groups


@dataclass
class _Batch:
    """What a batch's envelopes are opened against: each agent's snapshot read last, and
    the replay set."""

    reading: dict[str, SeenSnapshot]
    replay: _BatchReplay

    def accept(self, item: Unsealed, now: int) -> _Received | None:
        """One envelope opened, or None (refused: logged)."""
        sender = item.envelope.sender
        basis = self.reading.get(sender)
        try:
            opened = accept(item, now_ms=now, replay=self.replay, seen=self.reading)
        except EnvelopeRefused as refusal:
            _dropped(item.envelope.id, sender, refusal)
            return None
        self.replay.ids.add(opened.envelope.id)
        if isinstance(opened.payload, InboxUpdate):
            seen = opened.read.seen if opened.read else None
            if seen is None:
                self.reading.pop(sender, None)
            else:
                self.reading[sender] = seen
        return _Received(opened, basis)

    def accept_stretch(self, stretch: list[_Hinted], now: int) -> list[_Received]:
        """The newest snapshot of a stretch that opens, standing for the others, when they
        are all older snapshots; or else each that opens, in order."""
        refused: set[int] = set()
        for at in sorted(range(len(stretch)), key=lambda at: (-stretch[at][0], at)):
            newest = self.accept(stretch[at][1], now)
            if newest is None:
                refused.add(at)
                continue
            others = [(index, item) for index, (_, item) in enumerate(stretch)
                      if index != at and index not in refused]
            if _all_older(newest, at, others):
                return [dataclasses.replace(newest, supersedes=tuple(i for _, i in others))]
            noted.info("snapshots from %s not told apart: opening %d one by one",
                       newest.opened.sender.id[:8], len(others) + 1)
            self._forget(newest)
            return [delivery for index, (_, item) in enumerate(stretch)
                    if index not in refused and (delivery := self.accept(item, now))]
        return []

    def _forget(self, delivery: _Received) -> None:
        """Undo :meth:`accept` of an envelope, to accept it again in its turn."""
        sender = delivery.opened.sender.id
        self.replay.ids.discard(delivery.opened.envelope.id)
        if delivery.basis is None:
            self.reading.pop(sender, None)
        else:
            self.reading[sender] = delivery.basis


def _all_older(newest: _Received, at: int, others: list[tuple[int, Unsealed]]) -> bool:
    """Whether each of ``others`` (by its place in the stretch) holds a snapshot older than
    ``newest``'s, at ``at``, or as old and after it; checked against its layout."""
    update, read = newest.opened.payload, newest.opened.read
    if not isinstance(update, InboxUpdate):
        return False
    layout = read.layout if read else None
    for index, item in others:
        rev = None if item.plaintext is None else snapshot_rev(item.plaintext, layout)
        if rev is None or rev > update.rev or (rev == update.rev and index < at):
            return False
    return True


@functools.lru_cache(maxsize=1024)
def _stored_card(card_json: str) -> PublicCard:
    """A peer's card as the store keeps it (checked again only when its text changes: every
    envelope needs its sender's)."""
    return PublicCard.from_json(json.loads(card_json))


def item_body(item: Approval | Clarification) -> str:
    """An item as the store keeps it."""
    return json.dumps(item_to_wire(item), ensure_ascii=False)


def _dropped(envelope_id: object, sender: object, refusal: EnvelopeRefused) -> None:
    level = logging.INFO if refusal.reason is RefusalReason.REPLAY else logging.WARNING
    noted.log(level, "dropped envelope %s from %s: %s", _short(envelope_id), _short(sender),
              refusal)


def new_token() -> str:
    """A random, unguessable per-card token for callback data (16 characters)."""
    return secrets.token_urlsafe(12)


def _maybe_ms(moment: datetime | None) -> int | None:
    return None if moment is None else to_ms(moment)


def _short(value: object) -> str:
    return value[:12] if isinstance(value, str) else "?"
