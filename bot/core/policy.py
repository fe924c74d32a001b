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
    APPROVE_GRANT = "g"
    """Approve, and grant the calls under the approval's offered key for a while."""
    REVOKE = "v"
    """End a grant (the button's token is the grant's, not a card's)."""
    EDIT = "e"
    """Edit a value before approving (the option, if any, picks the key)."""
    APPROVE_EDITED = "E"
    """Approve the edited call (the option names the edit's revision)."""


class Refusal(enum.Enum):
    """Why a tap changed nothing."""

    OUTDATED = "outdated"
    UNKNOWN_CARD = "unknown_card"
    UNBOUND = "unbound"
    NOT_APPROVER = "not_approver"
    CLOSED = "closed"
    EXPIRED = "expired"
    WRONG_BUTTON = "wrong_button"
    ALREADY_APPROVED = "already_approved"
    NOTHING_TO_WITHDRAW = "nothing_to_withdraw"


@dataclass(frozen=True)
class Voter:
    """An approver's standing approval."""

    user_id: int
    name: str
    at_ms: int


@dataclass(frozen=True)
class ItemView:
    """What the policy needs to know of the item a card shows."""

    kind: str  # "approval" | "clarification"
    open: bool
    expired: bool
    bound: bool
    """Whether the item's agent is still bound to the chat of the card."""
    options: tuple[str, ...] = ()
    grant_minutes: int = 0
    """How long a grant "Approve + …" gives here; 0 when the card offers none."""
    editable: bool = False
    """Whether the card offers a value to edit."""
    edit_revision: int = 0
    """The revision of the edit the card shows; 0 when it shows the agent's own call."""


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
    """The approval is decided: ``decider`` completed the quorum or vetoed."""

    decision: str  # "approve" | "deny"
    decider: Voter
    voters: tuple[Voter, ...]
    reason: str | None = None
    grant_minutes: int = 0
    """Approved with a grant for this long (0: no grant)."""


@dataclass(frozen=True)
class AskReason:
    """The tapper may deny: ask them for the reason first."""


@dataclass(frozen=True)
class AskEdit:
    """The tapper may edit: ask them for the new value (or first which key)."""


@dataclass(frozen=True)
class Answered:
    """The question is answered with ``answer`` (an option's text or typed text)."""

    answer: str


TapResult = Refused | Tallied | Decided | AskReason | AskEdit | Answered

_APPROVAL_ACTIONS = frozenset({Action.APPROVE, Action.DENY, Action.DENY_WITH_REASON,
                               Action.WITHDRAW, Action.APPROVE_GRANT, Action.EDIT,
                               Action.APPROVE_EDITED})


def may_decide(user_id: int, approvers: frozenset[int]) -> bool:
    """Whether ``user_id`` is one of ``approvers`` (service and anonymous ids never are)."""
    return user_id not in SERVICE_IDS and user_id in approvers


def evaluate_tap(
    action: Action,
    *,
    tapper: Voter,
    item: ItemView,
    approvers: frozenset[int],
    required: int,
    voters: tuple[Voter, ...],
    option: int | None = None,
    text: str | None = None,
) -> TapResult:
    """Decide what one tap (or a typed deny reason or answer in ``text``) does, given the
    item and the chat's standing approvals. Approvals of people who are no longer
    approvers do not count."""
    if not item.bound:
        return Refused(Refusal.UNBOUND)
    if not item.open:
        return Refused(Refusal.CLOSED)
    if item.expired:
        return Refused(Refusal.EXPIRED)
    if not may_decide(tapper.user_id, approvers):
        return Refused(Refusal.NOT_APPROVER)
    if item.kind == "clarification":
        return _answer(action, item, option, text)
    if action not in _APPROVAL_ACTIONS:
        return Refused(Refusal.WRONG_BUTTON)
    standing = tuple(v for v in voters if may_decide(v.user_id, approvers))
    already = any(v.user_id == tapper.user_id for v in standing)
    if action is Action.EDIT:
        return AskEdit() if item.editable else Refused(Refusal.WRONG_BUTTON)
    if action in (Action.APPROVE, Action.APPROVE_EDITED):
        # An approval names the version it approves: the agent's call, or one revision
        # of an edit. A tap on a version the card no longer shows counts for nothing.
        shown = option if action is Action.APPROVE_EDITED else 0
        if shown != item.edit_revision:
            return Refused(Refusal.OUTDATED)
        action = Action.APPROVE
    if action is Action.APPROVE_GRANT:
        # Never with a quorum: one person must not widen what several guard; never with
        # an edit (the agent offered its grant for its own call).
        if item.grant_minutes <= 0 or required > 1 or item.edit_revision:
            return Refused(Refusal.WRONG_BUTTON)
        return Decided("approve", tapper, (*standing, tapper),
                       grant_minutes=item.grant_minutes)
    if action is Action.APPROVE:
        if already:
            return Refused(Refusal.ALREADY_APPROVED)
        counted = (*standing, tapper)
        if len(counted) >= max(1, required):
            return Decided("approve", tapper, counted)
        return Tallied(counted, required)
    if action is Action.WITHDRAW:
        if not already:
            return Refused(Refusal.NOTHING_TO_WITHDRAW)
        return Tallied(tuple(v for v in standing if v.user_id != tapper.user_id), required)
    if action is Action.DENY_WITH_REASON and not text:
        return AskReason()
    return Decided("deny", tapper, standing, reason=text or None)


def evaluate_revoke(
    *, user_id: int, approvers: frozenset[int], bound: bool, status: str
) -> Refusal | None:
    """Whether an approver of the chat may revoke a grant with this ``status`` (see
    :func:`bot.core.grants.grant_status`); None when they may."""
    if not bound:
        return Refusal.UNBOUND
    if not may_decide(user_id, approvers):
        return Refusal.NOT_APPROVER
    if status == "active":
        return None
    return Refusal.CLOSED


def _answer(action: Action, item: ItemView, option: int | None, text: str | None) -> TapResult:
    if action is not Action.ANSWER:
        return Refused(Refusal.WRONG_BUTTON)
    if option is not None:
        if not 0 <= option < len(item.options):
            return Refused(Refusal.WRONG_BUTTON)
        return Answered(item.options[option])
    if not text:
        return Refused(Refusal.WRONG_BUTTON)
    return Answered(text)
