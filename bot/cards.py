"""What a card looks like now, from what the store holds (pure).

A card's text is the item rendered with a status (pending with a quorum tally, or how it
ended and where); its keyboard depends on the same state. Callback data is
``1:<card token>:<action>[:<option>]``: opaque, at most 64 bytes, and useless for any other
card because the token is random per card.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from bot.clock import from_ms, maybe_from_ms
from bot.policy import Action
from bot.protocol.payloads import Approval, Clarification, parse_approval, parse_clarification
from bot.render import CardStatus, RenderedCard, Renderer, SecretsMode, Tap
from bot.store import CardRow, ItemRow, Vote

CALLBACK_VERSION = "1"
MAX_OPTION_BUTTONS = 24
MAX_OPTION_LABEL = 40


@dataclass(frozen=True)
class Button:
    """One inline button: its label, opaque callback data and optional colour style."""

    label: str
    data: str
    style: str | None = None


Keyboard = tuple[tuple[Button, ...], ...]


@dataclass(frozen=True)
class Callback:
    """A decoded button press."""

    token: str
    action: Action
    option: int | None = None


def callback_data(token: str, action: Action, option: int | None = None) -> str:
    parts = [CALLBACK_VERSION, token, action.value]
    if option is not None:
        parts.append(str(option))
    return ":".join(parts)


def parse_callback_data(data: object) -> Callback | None:
    """The button behind ``data``; None for data this version did not make."""
    if not isinstance(data, str) or len(data.encode()) > 64:
        return None
    parts = data.split(":")
    if len(parts) not in (3, 4) or parts[0] != CALLBACK_VERSION:
        return None
    try:
        action = Action(parts[2])
        option = int(parts[3]) if len(parts) == 4 else None
    except ValueError:
        return None
    if (option is None) != (action is not Action.ANSWER) or not parts[1]:
        return None
    return Callback(parts[1], action, option)


def card_status(
    item: ItemRow,
    card: CardRow,
    *,
    votes: list[Vote],
    required: int,
    chat_title: str,
    bound: bool = True,
) -> CardStatus:
    """The status a card shows; ``chat_title`` names the chat where the item was decided,
    ``bound`` whether the item's agent is still bound to the card's chat."""
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
        private = item.outcome_chat_id > 0
        elsewhere = "private chat" if private else (chat_title or "another chat")
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
    )


def keyboard(
    item: ItemRow, card: CardRow, *, votes: list[Vote], required: int, bound: bool = True
) -> Keyboard:
    """The buttons a card carries now; none once the item is closed or unbound here."""
    if item.state != "open" or not bound:
        return ()
    if item.kind == "clarification":
        question = parse_clarification(json.loads(item.body_json))
        buttons = [
            Button(_label(option), callback_data(card.token, Action.ANSWER, index))
            for index, option in enumerate(question.options[:MAX_OPTION_BUTTONS])
        ]
        return tuple(tuple(buttons[i:i + 2]) for i in range(0, len(buttons), 2))
    rows: list[tuple[Button, ...]] = [
        (
            Button("✅ Approve", callback_data(card.token, Action.APPROVE), "success"),
            Button("❌ Deny", callback_data(card.token, Action.DENY), "danger"),
        ),
        (Button("✍️ Deny with reason", callback_data(card.token, Action.DENY_WITH_REASON)),),
    ]
    if required > 1 and votes:
        rows.append((Button("↩️ Withdraw my approval", callback_data(card.token,
                                                                    Action.WITHDRAW)),))
    return tuple(rows)


def parse_item(item: ItemRow) -> Approval | Clarification:
    """The stored item as the payload dataclass it was received as."""
    body = json.loads(item.body_json)
    if item.kind == "clarification":
        return parse_clarification(body)
    return parse_approval(body)


def render_card(
    renderer: Renderer,
    item: ItemRow,
    status: CardStatus,
    *,
    agent_name: str,
    secrets: SecretsMode,
    now: datetime,
    zone: str | None = None,
) -> RenderedCard:
    parsed = parse_item(item)
    if isinstance(parsed, Clarification):
        return renderer.question_card(parsed, agent_name=agent_name, now=now, status=status,
                                      zone=zone)
    return renderer.approval_card(
        parsed, agent_name=agent_name, secrets=secrets, now=now, status=status, zone=zone
    )


def _label(option: str) -> str:
    text = " ".join(option.split())
    return text if len(text) <= MAX_OPTION_LABEL else text[: MAX_OPTION_LABEL - 1] + "…"


