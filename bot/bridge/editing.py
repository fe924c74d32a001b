"""Edits before approving: a person's reply to an edit prompt turns the card into the
edited version of the call (protocol §3.1 ``editable``, §3.3 edited ``arguments``).

Each edit is a new revision of the card: the votes standing on it no longer count (in a
quorum chat everyone approves the edited version), and an "Approve edited" button names
the revision it approves. The audit trail records the value before and after, who edited,
and the digests of the agent's call and of the edited one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bot.bridge.base import NOTHING, REDRAW, Changes
from bot.bridge.decisions import Decisions
from bot.core.edits import EditRefused, edited_arguments, new_value, same_arguments
from bot.core.model import CardRow, parse_item
from bot.core.policy import Action, AskEdit, ItemView, Refusal, Refused, Voter, evaluate_tap
from bot.protocol.encoding import args_sha256
from bot.protocol.payloads import Approval, Person


@dataclass(frozen=True)
class EditReport:
    """What a reply to an edit prompt did: ``refusal`` when the replier may not edit
    (any more), ``problem`` when the reply cannot be the new value (the prompt stays
    open), ``revision`` the card's revision now (0: it shows the agent's call)."""

    card: CardRow | None = None
    refusal: Refusal | None = None
    problem: str | None = None
    revision: int = 0
    changes: Changes = field(default=NOTHING)


class Editing(Decisions):
    """Edit prompts and the edits people make with them, each one store transaction."""

    def edit_prompt_sent(self, chat_id: int, message_id: int, card_id: int, user_id: int,
                         key: str) -> None:
        """The bot asked ``user_id`` for the new value of ``key`` on a card (a ForceReply
        ``message_id``): their reply to it is the edit."""
        with self._store.transaction():
            self._store.edits.add_prompt(chat_id, message_id, card_id, user_id, key)

    def edit(
        self,
        chat_id: int,
        prompt_id: int,
        *,
        tapper: Person,
        approvers: frozenset[int],
        offered: tuple[str, ...],
        text: str,
    ) -> EditReport | None:
        """Apply a reply ``text`` to the edit prompt ``prompt_id``: None when it is no
        reply to an edit prompt of the replier's. ``offered`` are the keys the card
        offers to edit (the approval's ``editable`` keys holding no secret)."""
        prompt = self._store.edits.prompt(chat_id, prompt_id)
        if prompt is None or prompt[1] != tapper.telegram_user_id:
            return None
        card_id, _, key = prompt
        return self.edit_value(card_id, key, chat_id=chat_id, tapper=tapper,
                               approvers=approvers, offered=offered, text=text,
                               prompt_id=prompt_id)

    def edit_value(
        self,
        card_id: int,
        key: str,
        *,
        chat_id: int,
        tapper: Person,
        approvers: frozenset[int],
        offered: tuple[str, ...],
        text: str,
        revision: int | None = None,
        prompt_id: int | None = None,
    ) -> EditReport:
        """Make ``text`` the new value of ``key`` on a card: from a reply to the edit
        prompt ``prompt_id`` (which it closes), or in the Mini App, where ``revision`` is
        the card's revision the person edited (0: the agent's call). A card edited since
        is refused as outdated: the edit would stand on a version the person has not
        seen."""
        user_id = tapper.telegram_user_id or 0
        # Under the card's lock, as a tap is: an edit and a tap on one card in two
        # processes sharing the database come out as in one.
        with self._store.transaction():
            card = self._store.cards.get(card_id)
            if card is not None:
                self._store.cards.lock(card.token)
            item = self._store.items.get(card.agent_id, card.item_id) if card else None
            if card is None or item is None or card.chat_id != chat_id:
                self.record_refused_tap(chat_id, tapper, "edit", Refusal.UNKNOWN_CARD)
                return EditReport(refusal=Refusal.UNKNOWN_CARD)
            approval = parse_item(item)
            now = self.now_ms()
            may_edit = isinstance(approval, Approval) and key in offered \
                and key in approval.editable and isinstance(approval.arguments, dict)
            view = ItemView(kind=item.kind, open=item.state == "open",
                            expired=item.expires_at is not None and item.expires_at <= now,
                            bound=self._store.agents.is_bound(card.agent_id, chat_id),
                            editable=may_edit)
            result = evaluate_tap(Action.EDIT, tapper=Voter(user_id, tapper.name, now), item=view,
                                  approvers=approvers, required=1, voters=())
            if not isinstance(result, AskEdit) or not isinstance(approval, Approval):
                reason = result.reason if isinstance(result, Refused) else Refusal.WRONG_BUTTON
                self.record_refused_tap(chat_id, tapper, "edit", reason)
                return EditReport(card, refusal=reason)
            original: dict[str, Any] = approval.arguments
            standing = self._store.edits.of(card_id)
            current = standing.arguments if standing is not None and standing.arguments \
                else original
            shown = standing.revision if standing is not None and standing.arguments else 0
            if revision is not None and revision != shown:
                self.record_refused_tap(chat_id, tapper, "edit", Refusal.OUTDATED)
                return EditReport(card, refusal=Refusal.OUTDATED, revision=shown)
            try:
                edited = edited_arguments(current, key, new_value(original[key], text))
            except EditRefused as exc:
                return EditReport(card, problem=str(exc), revision=shown)
            with self._store.transaction():
                if prompt_id is not None:
                    self._store.edits.drop_prompt(chat_id, prompt_id)
                if same_arguments(edited, current):
                    return EditReport(card, revision=shown, changes=NOTHING)
                kept = None if same_arguments(edited, original) else edited
                made = self._store.edits.put(card_id, kept, user_id=user_id,
                                             user_name=tapper.name, at=now)
                dropped = self._store.cards.votes(card_id)
                for vote in dropped:
                    self._store.cards.remove_vote(card_id, vote.user_id)
                self._store.cards.mark_dirty(card_id)
                self._store.audit.append(
                    "edit", at=now, chat_id=chat_id, agent_id=card.agent_id,
                    item_id=card.item_id, user_id=user_id, user_name=tapper.name, key=key,
                    before=current[key], after=edited[key], revision=made,
                    args_sha256=args_sha256(original),
                    edited_sha256=args_sha256(kept) if kept is not None else None,
                    votes_dropped=[{"user_id": v.user_id, "name": v.name} for v in dropped],
                )
            return EditReport(card, revision=made if kept is not None else 0, changes=REDRAW)
