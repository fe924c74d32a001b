"""Who may decide an item in a chat, and what a tap does to its quorum (pure).

Decisions are authorised on the tapping user's id only (``callback_query.from_user.id``),
never on a message's ``sender_chat`` or Telegram's service ids. An approval goes out when
``required`` distinct approvers have approved; any approver's deny ends it at once (a veto).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

ANONYMOUS_ADMIN_ID = 1087968824
SERVICE_CHAT_ID = 777000
FAKE_CHANNEL_ID = 136817688
SERVICE_IDS = frozenset({ANONYMOUS_ADMIN_ID, SERVICE_CHAT_ID, FAKE_CHANNEL_ID})


class Action(enum.Enum):
    """What a button asks for."""

    APPROVE = "a"
    DENY = "d"
    DENY_WITH_REASON = "r"
    WITHDRAW = "w"
    ANSWER = "o"


class Refusal(enum.Enum):
    """Why a tap changed nothing."""

    NOT_APPROVER = "not_approver"
    CLOSED = "closed"
    EXPIRED = "expired"
    ALREADY_APPROVED = "already_approved"
    NOTHING_TO_WITHDRAW = "nothing_to_withdraw"


@dataclass(frozen=True)
class Voter:
    """An approver's standing approval."""

    user_id: int
    name: str
    at_ms: int


@dataclass(frozen=True)
class Refused:
    reason: Refusal


@dataclass(frozen=True)
class Tallied:
    """An approval was counted (or withdrawn) and the quorum is not reached yet."""

    voters: tuple[Voter, ...]
    required: int


@dataclass(frozen=True)
class Decided:
    """The item is decided: ``decider`` completed the quorum or vetoed."""

    decision: str  # "approve" | "deny"
    decider: Voter
    voters: tuple[Voter, ...]


@dataclass(frozen=True)
class Permitted:
    """The tapper may act (deny with reason: ask for the reason; answer: send it)."""


TapResult = Refused | Tallied | Decided | Permitted


def may_decide(user_id: int, approvers: frozenset[int]) -> bool:
    """Whether ``user_id`` is one of ``approvers`` (service and anonymous ids never are)."""
    return user_id not in SERVICE_IDS and user_id in approvers


def evaluate_tap(
    action: Action,
    *,
    tapper: Voter,
    approvers: frozenset[int],
    required: int,
    voters: tuple[Voter, ...],
    item_open: bool,
    expired: bool,
) -> TapResult:
    """Decide what one tap does, given the item's state and the chat's standing approvals."""
    if not item_open:
        return Refused(Refusal.CLOSED)
    if expired:
        return Refused(Refusal.EXPIRED)
    if not may_decide(tapper.user_id, approvers):
        return Refused(Refusal.NOT_APPROVER)
    already = any(v.user_id == tapper.user_id for v in voters)
    if action is Action.APPROVE:
        if already:
            return Refused(Refusal.ALREADY_APPROVED)
        counted = (*voters, tapper)
        if len(counted) >= max(1, required):
            return Decided("approve", tapper, counted)
        return Tallied(counted, required)
    if action is Action.WITHDRAW:
        if not already:
            return Refused(Refusal.NOTHING_TO_WITHDRAW)
        return Tallied(tuple(v for v in voters if v.user_id != tapper.user_id), required)
    if action is Action.DENY:
        return Decided("deny", tapper, voters)
    return Permitted()
