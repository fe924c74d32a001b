"""Applying what an agent sent: each payload type has one handler, looked up in
:attr:`Applying.APPLIERS`; every handler runs inside the batch's transaction."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from bot.bridge.base import (
    NOTHING,
    PAIRING_WINDOW_MS,
    BridgeBase,
    Changes,
    held_log,
    item_body,
    log,
    maybe_ms,
    new_token,
)
from bot.bridge.batch import Received, Snapshots
from bot.clock import from_ms, to_ms
from bot.core.grants import ACTIVITY_WINDOW_MS, ActivityRow, GrantRow, plan_grants
from bot.core.inbox import DECIDED_STATES, FINAL_STATES, plan_update, remind_at
from bot.core.model import NewItem, Peer, ReportedOutcome
from bot.protocol.identity import PublicCard
from bot.protocol.payloads import (
    Activity,
    Approval,
    Clarification,
    Grant,
    InboxRequest,
    InboxUpdate,
    Notification,
    PairAccept,
    PairReject,
    parse_payload,
)


@dataclass(frozen=True)
class Arrival:
    """Where a payload being applied came from: its sender and envelope, and when."""

    sender: PublicCard
    delivery: Received
    now: int
    snapshots: Snapshots


class Applying(BridgeBase):
    """Applies agents' payloads to the store."""

    def _apply_payload(self, delivery: Received, now: int, snapshots: Snapshots) -> Changes:
        sender, payload = delivery.opened.sender, delivery.opened.payload
        if type(payload) not in PAIRING_PAYLOADS and self._store.agents.peer(sender.id) is None:
            held_log.warning("ignored %s from %s: pairing not finished",
                             type(payload).__name__, sender.id[:8])
            return NOTHING
        applier = self.APPLIERS.get(type(payload))
        if applier is None:
            held_log.info("ignored a %s payload from %s", type(payload).__name__, sender.id[:8])
            return NOTHING
        return applier(self, payload, Arrival(sender, delivery, now, snapshots))

    def _apply_pair_accept(self, accept: PairAccept, arrival: Arrival) -> Changes:
        sender, now = arrival.sender, arrival.now
        pairing = self._store.agents.pairing(sender.id)
        if (
            pairing is None
            or pairing.accepted_at is not None
            or pairing.created_at < now - PAIRING_WINDOW_MS
            or accept.device_id != self.identity.id
        ):
            held_log.warning("ignored a pair_accept from %s that answers no pairing in progress",
                             sender.id[:8])
            return NOTHING
        name = accept.agent_name or sender.name
        self._store.agents.add_peer(
            Peer(sender.id, pairing.relay_url, json.dumps(sender.to_json()), name), now
        )
        self._bind(sender.id, pairing.chat_id, pairing.topic_id, now)
        self._store.agents.pairing_accepted(sender.id, now)
        self._store.audit.append("paired", at=now, chat_id=pairing.chat_id, agent_id=sender.id,
                                 user_id=pairing.requested_by, agent_name=name)
        held_log.info("paired with agent %s (%s)", sender.id[:8], name)
        return NOTHING

    def _apply_pair_reject(self, reject: PairReject, arrival: Arrival) -> Changes:
        sender, now = arrival.sender, arrival.now
        pairing = self._store.agents.pairing(sender.id)
        if pairing is None or pairing.accepted_at is not None:
            held_log.warning("ignored a pair_reject from %s that answers no pairing in progress",
                             sender.id[:8])
            return NOTHING
        self._store.agents.pairing_rejected(sender.id, reject.reason, now)
        self._store.audit.append("pairing_refused", at=now, chat_id=pairing.chat_id,
                                 agent_id=sender.id, user_id=pairing.requested_by,
                                 reason=reject.reason)
        held_log.info("agent %s refused the pairing: %s", sender.id[:8], reject.reason)
        return NOTHING

    def _apply_inbox_update(self, update: InboxUpdate, arrival: Arrival) -> Changes:
        agent_id, now, snapshots = arrival.sender.id, arrival.now, arrival.snapshots
        items = self._store.items
        opened = arrival.delivery.opened
        seen = opened.read.seen if opened.read else None
        before = snapshots.get(agent_id)
        if update.unchanged and arrival.delivery.basis is not before:
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
            held_log.info("ignored inbox_update rev %d from %s: not newer", update.rev,
                          agent_id[:8])
            return NOTHING
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
            self._keep_reported(agent_id, update, now)
        self._hold_grants(agent_id, update.grants, now)
        snapshots.applied(agent_id, seen)  # last: nothing after it can fail
        return NOTHING

    def _apply_notification(self, notification: Notification, arrival: Arrival) -> Changes:
        """An item the bot does not hold yet: ask the agent for its complete inbox."""
        agent_id = arrival.sender.id
        if self._store.items.has(agent_id, notification.item_id):
            return NOTHING
        peer = self._store.agents.peer(agent_id)
        if peer is None:
            return NOTHING
        return self._send(peer, InboxRequest(since_rev=self._store.agents.last_rev(agent_id)))

    def _apply_activity(self, activity: Activity, arrival: Arrival) -> Changes:
        """Hold the calls an agent ran under grants (each id once) and append them to an
        activity message in every chat the agent is bound to: the chat's last one while it
        is younger than :data:`ACTIVITY_WINDOW_MS`, else a new one."""
        agent_id, now = arrival.sender.id, arrival.now
        grants = self._store.grants
        fresh = []
        for entry in activity.entries:
            row = ActivityRow(agent_id, entry.id, entry.tool, entry.summary, entry.grant_id,
                              maybe_ms(entry.at) or now)
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
        return NOTHING

    def _keep_reported(self, agent_id: str, update: InboxUpdate, now: int) -> None:
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
                                     maybe_ms(entry.at))
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

    def _hold_grants(self, agent_id: str, reported: tuple[Grant, ...], now: int) -> None:
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
                maybe_ms(grant.granted_at), maybe_ms(grant.expires_at), grant.uses,
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
                          expires_at=maybe_ms(grant.expires_at))
        for row in plan.gone:
            state = "revoked" if row.revoke_at is not None else "ended"
            grants.end(agent_id, row.grant_id, state=state, now_ms=now)
            for chat_id in chats:
                self._store.audit.append(
                    f"grant_{state}", at=now, chat_id=chat_id, agent_id=agent_id,
                    user_name=row.revoke_by, grant_id=row.grant_id, label=row.label,
                    uses=row.uses,
                )

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

    APPLIERS: ClassVar[dict[type, Callable[..., Changes]]] = {
        PairAccept: _apply_pair_accept,
        PairReject: _apply_pair_reject,
        InboxUpdate: _apply_inbox_update,
        Activity: _apply_activity,
        Notification: _apply_notification,
    }
    """Each payload type an agent may send, and its handler: ``(payload, arrival)``."""


PAIRING_PAYLOADS = frozenset({PairAccept, PairReject})
"""Payloads applied before the pairing has finished (they finish it)."""
