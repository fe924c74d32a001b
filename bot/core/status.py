"""What a card shows now, from what the store holds (pure): its status, pending with a
quorum tally, or how it ended and where. The renderer draws it (:mod:`bot.render`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final, Literal

from bot.clock import from_ms, maybe_from_ms
from bot.core.grants import GrantedRow
from bot.core.model import CardRow, ItemRow, ReportedOutcome, Vote

CONFIRM_WAIT_S: Final = 1.0
"""How long a decision made here waits for its agent's word (the agent's next update lists
the item ended, milliseconds away when the relay and the agent are there) before its card
and its tapper's answer show it without: the card then goes from its buttons to the
outcome the agent confirmed in one edit, and neither takes the processor from the decision
on its way."""

CardState = Literal["pending", "approved", "denied", "answered", "expired", "cancelled", "unbound"]


@dataclass(frozen=True)
class Tap:
    """One approval towards a quorum: who tapped and when."""

    name: str
    at: datetime


@dataclass(frozen=True)
class GrantGiven:
    """A grant given with an approval: what (the offer's label), by whom, for how long."""

    label: str
    by: str
    minutes: int
    until: datetime


@dataclass(frozen=True)
class CardStatus:
    """Where an item stands; decided states add bold status lines under the card body."""

    state: CardState
    by: str | None = None
    """Who decided (display name)."""
    at: datetime | None = None
    reason: str | None = None
    """Why it was denied."""
    answer: str | None = None
    """The answer given to a question."""
    elsewhere: str | None = None
    """Where it was decided when not on this card, e.g. ``"in Ops team"``."""
    approvals: tuple[Tap, ...] = ()
    """The quorum tally so far."""
    required: int = 1
    grant: GrantGiven | None = None
    """The grant given with the approval, if any."""
    sending: bool = False
    """The decision made here waits for the relay to take it."""
    reported: str | None = None
    """How the agent says the item ended, when that is not the decision made here
    (``"expired"``: the decision reached it too late)."""
    reported_by: str | None = None
    """Who the agent says decided it, then."""


def card_status(
    item: ItemRow,
    card: CardRow,
    *,
    votes: list[Vote],
    required: int,
    chat_title: str,
    outcome_private: bool,
    bound: bool = True,
    granted: GrantedRow | None = None,
    sending: bool = False,
    reported: ReportedOutcome | None = None,
) -> CardStatus:
    """The status a card shows; ``chat_title`` names the chat where the item was decided
    and ``outcome_private`` says whether that chat is a private one; ``bound`` whether the
    item's agent is still bound to the card's chat; ``granted`` the grant given with its
    approval; ``sending`` whether the decision made here waits for its relay still;
    ``reported`` how the agent says the item ended, once it has (shown when that is not
    the decision made here)."""
    if item.state == "open" and not bound:
        return CardStatus(state="unbound")
    if item.state == "open":
        return CardStatus(
            state="pending",
            approvals=tuple(Tap(v.name, from_ms(v.at)) for v in votes),
            required=required,
        )
    elsewhere = None
    if item.outcome_chat_id is None and item.state != "expired":
        elsewhere = item.outcome_by or "the agent"
    elif item.outcome_chat_id is not None and item.outcome_chat_id != card.chat_id:
        # A private chat's title is its user's name, which the status already shows.
        elsewhere = "private chat" if outcome_private else (chat_title or "another chat")
    overruled = reported if reported is not None and reported.outcome != item.state else None
    reason = item.outcome_reason if item.state == "denied" else None
    answer = item.outcome_reason if item.state == "answered" else None
    return CardStatus(
        state=item.state,  # type: ignore[arg-type]
        approvals=tuple(Tap(v.name, from_ms(v.at)) for v in votes),
        required=required,
        by=item.outcome_by,
        at=maybe_from_ms(item.outcome_at),
        reason=reason,
        answer=answer,
        elsewhere=elsewhere,
        grant=None if granted is None or item.state != "approved" or overruled else GrantGiven(
            granted.label, granted.user_name, granted.minutes, from_ms(granted.until)),
        sending=sending and overruled is None,
        reported=overruled.outcome if overruled else None,
        reported_by=overruled.outcome_by if overruled else None,
    )
