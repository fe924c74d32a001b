"""Decisions and grants: a tap (or typed reason or answer) checked against the chat's
policy and, when it decides, sealed into the outbox for the agent; a Revoke tap; the
``/grants`` listing."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field

from bot.bridge.base import NOTHING, REDRAW, BridgeBase, Changes
from bot.clock import from_ms
from bot.config import ChatPolicy
from bot.core.edits import EditRow
from bot.core.grants import GrantedRow, GrantRow, grant_status, may_be_granted, offered_minutes
from bot.core.inbox import DECIDED_STATES
from bot.core.model import CardRow, DecisionRow, ItemRow, parse_item
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
from bot.protocol.encoding import args_sha256, format_rfc3339
from bot.protocol.payloads import (
    Approval,
    ApprovalDecision,
    Clarification,
    ClarificationAnswer,
    GrantRequest,
    GrantRevoke,
    Person,
)

REVOKE_CONFIRM_S = 3.0
"""How long a Revoke tap waits for the agent to confirm (its next ``inbox_update`` no
longer lists the grant) before it says the revoke takes effect when the agent is back: the
bot cannot see whether an agent is on the relay, only whether it answers."""


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


class Decisions(BridgeBase):
    """People's decisions and grants, each one store transaction."""

    def tap(
        self,
        token: str,
        action: Action,
        *,
        chat_id: int,
        tapper: Person,
        approvers: frozenset[int],
        option: int | None = None,
        text: str | None = None,
        editable: bool = False,
    ) -> TapReport:
        """Apply one tap (or a typed deny reason or answer, ``text``) in ``chat_id``, and
        record it in the audit trail, allowed or not. A token of a card in another chat is
        an unknown card: the tapper's rights come from the chat the tap happened in, and its
        rules (approvals required, grants) from the configuration. ``editable``: the card
        offers a value to edit (none holds a secret). An approval of an edited card sends
        the edited call."""
        now = self.now_ms()
        voter = Voter(tapper.telegram_user_id or 0, tapper.name, now)
        # Everything read and written under the card's lock: two taps on one card, in two
        # processes sharing the database, come out as in one.
        with self._store.transaction():
            self._store.cards.lock(token)
            card = self._store.cards.by_token(token)
            item = self._store.items.get(card.agent_id, card.item_id) if card else None
            if card is None or item is None or card.chat_id != chat_id:
                self.record_refused_tap(chat_id, tapper, action.name.lower(),
                                        Refusal.UNKNOWN_CARD)
                return TapReport(Refused(Refusal.UNKNOWN_CARD))
            parsed = parse_item(item)
            policy = self.policy(chat_id)
            edited = self._store.edits.of(card.card_id)
            edited_args = edited.arguments if edited is not None else None
            view = ItemView(
                kind=item.kind,
                open=item.state == "open",
                expired=item.expires_at is not None and item.expires_at <= now,
                bound=self._store.agents.is_bound(card.agent_id, card.chat_id),
                options=parsed.options if isinstance(parsed, Clarification) else (),
                grant_minutes=self._offered_minutes(parsed, policy, card.agent_id),
                editable=editable and isinstance(parsed, Approval) and bool(parsed.editable),
                edit_revision=edited.revision if edited is not None and edited_args else 0,
            )
            votes = tuple(Voter(v.user_id, v.name, v.at)
                          for v in self._store.cards.votes(card.card_id))
            result = evaluate_tap(action, tapper=voter, item=view, approvers=approvers,
                                  required=policy.required_approvals, voters=votes,
                                  option=option, text=text)
            changes = REDRAW
            if view.open:  # the card's tally shows only votes that still count
                self._drop_lapsed_votes(card, votes, approvers, now)
            self._store.audit.append(
                "tap", at=now, chat_id=card.chat_id, agent_id=card.agent_id,
                item_id=card.item_id, user_id=voter.user_id, user_name=tapper.name,
                action=action.name.lower(), allowed=not isinstance(result, Refused),
                refusal=result.reason.value if isinstance(result, Refused) else None,
            )
            if isinstance(result, Tallied):
                if action in (Action.APPROVE, Action.APPROVE_EDITED):
                    self._store.cards.add_vote(card.card_id, voter.user_id, tapper.name, now)
                else:
                    self._store.cards.remove_vote(card.card_id, voter.user_id)
            elif isinstance(result, Decided) and isinstance(parsed, Approval):
                if result.decision == "approve":
                    self._store.cards.add_vote(card.card_id, voter.user_id, tapper.name, now)
                changes |= self._decide(card, parsed, result, tapper, now,
                                        edited=edited if edited_args else None)
            elif isinstance(result, Answered):
                changes |= self._answer(card, item.item_id, result.answer, tapper, now)
            item = self._store.items.get(card.agent_id, card.item_id)
        return TapReport(result, card, item, changes)

    def grant_minutes(self, item: Approval | Clarification, chat_id: int, agent_id: str) -> int:
        """How long a grant a card of ``item`` offers in the chat (0: none)."""
        return self._offered_minutes(item, self.policy(chat_id), agent_id)

    def _offered_minutes(
        self, item: Approval | Clarification, policy: ChatPolicy, agent_id: str
    ) -> int:
        peer = self._store.agents.peer(agent_id)
        if not isinstance(item, Approval) or not may_be_granted(item, peer.name if peer else ""):
            return 0
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
        self, card: CardRow, approval: Approval, result: Decided, person: Person, now: int,
        *, edited: EditRow | None = None,
    ) -> Changes:
        offer = approval.grant_offer if result.grant_minutes else None
        arguments = edited.arguments if edited is not None and result.decision == "approve" \
            else None
        payload = ApprovalDecision(
            decision_id=str(uuid.uuid4()),
            approval_id=approval.id,
            decision=result.decision,
            reason=result.reason,
            decided_by=person,
            decided_at=format_rfc3339(from_ms(now)),
            args_sha256=args_sha256(approval.arguments),
            grant=GrantRequest(offer.key, result.grant_minutes) if offer else None,
            arguments=arguments,
            edited_sha256=args_sha256(arguments) if arguments is not None else None,
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
            **_edit_detail(edited if arguments is not None else None),
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


def _edit_detail(edited: EditRow | None) -> dict[str, object]:
    """What the audit trail records of the edit a decision sent."""
    if edited is None or edited.arguments is None:
        return {}
    return {"edited": True, "edited_sha256": args_sha256(edited.arguments),
            "edit_revision": edited.revision, "edited_by": edited.user_name}


async def wait_until_revoked(
    bridge: BridgeBase, token: str, changed: asyncio.Event, timeout: float = REVOKE_CONFIRM_S
) -> bool:
    """Whether the agent confirms the revoke of the grant of ``token`` (it no longer lists
    the grant) within ``timeout`` seconds of the bridge's clock; ``changed`` is set after
    each applied change."""
    deadline = bridge.now_ms() + int(timeout * 1000)
    while (grant := bridge.view.grants.by_token(token)) is not None and grant.state == "active":
        left = deadline - bridge.now_ms()
        if left <= 0:
            return False
        changed.clear()
        # Others clear ``changed`` too: look again now and then rather than miss a change.
        await bridge.clock.wait(changed, min(left / 1000, 0.25))
    return True
