"""A card's inline keyboard and its callback data.

Callback data is ``1:<card token>:<action>[:<option>]``: opaque, at most 64 bytes (Telegram's
limit), and useless for any other card because the token is random per card.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from bot.config import WebAppConfig
from bot.core.model import CardRow, ItemRow, Vote
from bot.core.policy import Action
from bot.hidden import strip
from bot.protocol.payloads import parse_clarification
from bot.render.hosts import honest_hosts

CALLBACK_VERSION = "1"
MAX_CALLBACK_BYTES = 64
MAX_OPTION_BUTTONS = 24
MAX_OPTION_LABEL = 40
MAX_GRANT_LABEL = 48
DETAILS_LABEL = "🔍 Details"
_OPTION_NEEDED = frozenset({Action.ANSWER, Action.APPROVE_EDITED})
_OPTION_TAKEN = _OPTION_NEEDED | {Action.EDIT}
"""An edit's option picks the key (absent: ask which one)."""


@dataclass(frozen=True)
class Button:
    """One inline button: its label, opaque callback data and optional colour style; or,
    with ``link``, a button opening that address (as a Mini App when ``web_app``)."""

    label: str
    data: str
    style: str | None = None
    link: str | None = None
    web_app: bool = False
    copy: str | None = None
    """Text the button copies to the clipboard (a ``copy_text`` button)."""


Keyboard = tuple[tuple[Button, ...], ...]


@dataclass(frozen=True)
class ButtonPress:
    """Decoded callback data: which card, which action, which option (an answer's option,
    an edit's key, or the revision an "Approve edited" approves)."""

    token: str
    action: Action
    option: int | None = None


def callback_data(token: str, action: Action, option: int | None = None) -> str:
    parts = [CALLBACK_VERSION, token, action.value]
    if option is not None:
        parts.append(str(option))
    return ":".join(parts)


def parse_callback_data(data: object) -> ButtonPress | None:
    """The button behind ``data``; None for data this version did not make."""
    if not isinstance(data, str) or len(data.encode()) > MAX_CALLBACK_BYTES:
        return None
    parts = data.split(":")
    if len(parts) not in (3, 4) or parts[0] != CALLBACK_VERSION:
        return None
    try:
        action = Action(parts[2])
        option = int(parts[3]) if len(parts) == 4 else None
    except ValueError:
        return None
    if not parts[1] or (option is None and action in _OPTION_NEEDED) or (
            option is not None and action not in _OPTION_TAKEN):
        return None
    return ButtonPress(parts[1], action, option)


def keyboard(
    item: ItemRow,
    card: CardRow,
    *,
    votes: list[Vote],
    required: int,
    bound: bool = True,
    grant: tuple[str, int] | None = None,
    details: Button | None = None,
    editable: bool = False,
    edit_revision: int = 0,
) -> Keyboard:
    """The buttons a card carries now; none once the item is closed or unbound here.
    ``grant`` (label, minutes) adds "Approve + {label} for {minutes} min"; ``editable``
    adds "✏️ Edit"; a card showing revision ``edit_revision`` of an edit carries "Approve
    edited", "Deny" and "Edit again" instead; ``details`` (:func:`details_button`) comes
    last."""
    if item.state != "open" or not bound:
        return ()
    if edit_revision:
        rows = _edited_rows(card, edit_revision, withdraw=required > 1 and bool(votes))
        return (*rows, (details,)) if details is not None else rows
    rows = _decision_rows(item, card, votes=votes, required=required, grant=grant)
    if editable and item.kind == "approval":
        rows = (*rows, (Button("✏️ Edit", callback_data(card.token, Action.EDIT)),))
    return (*rows, (details,)) if details is not None else rows


def details_button(card: CardRow, webapp: WebAppConfig | None,
                   bot_username: str) -> Button | None:
    """The "🔍 Details" button opening the Mini App on the card: a ``web_app`` button in a
    private chat; in a group (where Telegram allows none) a link to the app's Direct Link,
    which needs ``webapp.short_name``. None without the app or the card's reference."""
    if webapp is None or card.ref is None:
        return None
    if card.chat_id > 0:
        return Button(DETAILS_LABEL, "", link=f"{webapp.url}?ref={card.ref}", web_app=True)
    if not webapp.short_name or not bot_username:
        return None
    return Button(DETAILS_LABEL, "",
                  link=f"https://t.me/{bot_username}/{webapp.short_name}?startapp={card.ref}")


def _decision_rows(
    item: ItemRow,
    card: CardRow,
    *,
    votes: list[Vote],
    required: int,
    grant: tuple[str, int] | None,
) -> Keyboard:
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
    if grant is not None and required <= 1:
        label, minutes = grant
        rows.insert(1, (Button(f"✅ Approve + {_label(label, MAX_GRANT_LABEL)} for {minutes} min",
                               callback_data(card.token, Action.APPROVE_GRANT)),))
    if required > 1 and votes:
        rows.append((Button("↩️ Withdraw my approval", callback_data(card.token,
                                                                    Action.WITHDRAW)),))
    return tuple(rows)


def _edited_rows(card: CardRow, revision: int, *, withdraw: bool) -> Keyboard:
    rows: list[tuple[Button, ...]] = [
        (
            Button("✅ Approve edited",
                   callback_data(card.token, Action.APPROVE_EDITED, revision), "success"),
            Button("❌ Deny", callback_data(card.token, Action.DENY), "danger"),
        ),
        (Button("✏️ Edit again", callback_data(card.token, Action.EDIT)),),
    ]
    if withdraw:
        rows.append((Button("↩️ Withdraw my approval", callback_data(card.token,
                                                                    Action.WITHDRAW)),))
    return tuple(rows)


def edit_key_keyboard(token: str, keys: tuple[tuple[str, str | None], ...]) -> Keyboard:
    """The choice of key to edit, from (key, text to copy or None): "✏️ key", with a
    button copying its current value beside it where Telegram can copy it."""
    rows = []
    for index, (key, copy) in enumerate(keys):
        row = [Button(f"✏️ {_label(key)}", callback_data(token, Action.EDIT, index))]
        if copy is not None:
            row.append(Button("📋 Copy value", "", copy=copy))
        rows.append(tuple(row))
    return tuple(rows)


def revoke_keyboard(grants: list[tuple[str, str]]) -> Keyboard:
    """One "Revoke" button per grant in force, from (grant token, label)."""
    return tuple(
        (Button(f"⛔ Revoke {_label(label, MAX_GRANT_LABEL)}",
                callback_data(token, Action.REVOKE), "danger"),)
        for token, label in grants
    )


def _label(option: str, limit: int = MAX_OPTION_LABEL) -> str:
    """A button's text: one line, hidden characters marked and deceptive host names as
    ``xn--`` (a button cannot warn)."""
    text = " ".join(strip(honest_hosts(option.replace("`", ""))[0]).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
