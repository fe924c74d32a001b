"""The records the bot holds (pure): agents, bindings, items, cards, votes, decisions and
audit rows, as frozen dataclasses, and an item's body parsed back into its payload.

Times are Unix milliseconds (see :mod:`bot.clock`).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any, Literal

from bot.protocol.payloads import Approval, Clarification, parse_approval, parse_clarification

ChatKind = Literal["private", "group", "supergroup", "channel"]
"""A chat's type as Telegram reports it (``chat.type``)."""


@dataclass(frozen=True)
class Peer:
    """A paired agent."""

    agent_id: str
    relay_url: str
    card_json: str
    name: str


@dataclass(frozen=True)
class Binding:
    """An agent bound to a chat (and optionally a forum topic in it)."""

    agent_id: str
    chat_id: int
    topic_id: int | None


@dataclass(frozen=True)
class Pairing:
    """A pairing the bot started: which agent, through which relay, for which chat."""

    agent_id: str
    relay_url: str
    card_json: str
    chat_id: int
    topic_id: int | None
    requested_by: int | None
    created_at: int
    accepted_at: int | None


@dataclass(frozen=True)
class NewItem:
    """An item an agent just sent, as the bot is about to hold it."""

    item_id: str
    kind: str  # "approval" | "clarification"
    body_json: str
    expires_at: int | None
    remind_at: int | None


@dataclass(frozen=True)
class ItemRow:
    """An inbox item as the bot holds it."""

    agent_id: str
    item_id: str
    kind: str  # "approval" | "clarification"
    body_json: str
    state: str  # open | approved | denied | answered | expired | cancelled
    outcome_by: str | None
    outcome_at: int | None
    outcome_chat_id: int | None
    outcome_reason: str | None
    expires_at: int | None
    remind_at: int | None
    created_at: int


@dataclass(frozen=True)
class CardRow:
    """One Telegram message showing one item in one chat."""

    card_id: int
    agent_id: str
    item_id: str
    chat_id: int
    topic_id: int | None
    token: str
    message_id: int | None
    dirty: int
    """0 when the message shows the current state; otherwise a change counter."""
    attachment_sent: bool
    reminder: str  # none | sent
    posted_at: int | None
    ref: str | None = None
    """The card's opaque reference in the Mini App's address."""


@dataclass(frozen=True)
class Vote:
    """An approver's standing approval on a card (quorum)."""

    user_id: int
    name: str
    at: int


@dataclass(frozen=True)
class DecisionRow:
    """A decision or answer the bot sent for an item."""

    decision_id: str
    agent_id: str
    item_id: str
    chat_id: int
    kind: str
    value: str
    reason: str | None
    user_id: int
    user_name: str
    at: int
    envelope_id: str


@dataclass(frozen=True)
class ReportedOutcome:
    """How the agent says an item decided here ended (its ``resolved`` entry), as first
    reported after the decision."""

    agent_id: str
    item_id: str
    outcome: str
    outcome_by: str | None
    outcome_at: int | None


@dataclass(frozen=True)
class AuditRow:
    """One append-only audit record."""

    seq: int
    at: int
    event: str
    chat_id: int | None
    agent_id: str | None
    item_id: str | None
    user_id: int | None
    user_name: str | None
    detail: dict[str, Any]


PARSED_ITEMS_KEPT = 4


def parse_item(item: ItemRow) -> Approval | Clarification:
    """The stored item as the payload dataclass it was received as (the last few are
    kept: a card is drawn, tapped and drawn again from the same stored text)."""
    return _parsed(item.kind, item.body_json)


@functools.lru_cache(maxsize=PARSED_ITEMS_KEPT)
def _parsed(kind: str, body_json: str) -> Approval | Clarification:
    body = json.loads(body_json)
    if kind == "clarification":
        return parse_clarification(body)
    return parse_approval(body)
