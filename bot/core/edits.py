"""Edits before approving, as the bot makes them (pure): a person's typed reply read as the
new value of one editable key, and the edited arguments it makes (protocol §3.1
``editable``, §3.3 edited ``arguments``).

A reply keeps the value's JSON type: a string is taken as typed, any other value must be
JSON of the same type (``30``, ``true``, ``["a", "b"]``). Invisible or control characters
are refused (the agent would refuse them too, and a card could not show them plainly).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from bot.errors import SkaldError
from bot.hidden import holds_hidden
from bot.protocol.encoding import JSON, canonical_json, json_type


@dataclass(frozen=True)
class EditRow:
    """The edit standing on a card: ``arguments`` the complete edited arguments (None
    once edited back to the agent's own), ``revision`` counting every edit made on the
    card (an "Approve edited" button names the revision it approves)."""

    card_id: int
    revision: int
    arguments: dict[str, Any] | None
    user_id: int
    user_name: str
    at: int


class EditRefused(SkaldError):
    """A reply that cannot be the new value: the message says why, for the person."""


def new_value(before: JSON, text: str) -> JSON:
    """The value a reply ``text`` gives a key whose value is ``before``."""
    if json_type(before) == "string":
        value: JSON = text
    else:
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            raise EditRefused(f"the new value must be a {json_type(before)} "
                              "written as JSON") from None
        if json_type(value) != json_type(before):
            raise EditRefused(f"the new value must be a {json_type(before)}, "
                              f"not a {json_type(value)}")
    if holds_hidden(value):
        raise EditRefused("the new value holds an invisible or control character")
    return value


def edited_arguments(current: dict[str, Any], key: str, value: JSON) -> dict[str, Any]:
    """``current`` with ``key`` set to ``value`` (every other key as it is)."""
    if key not in current:
        raise EditRefused(f"{key!r} is not an argument of this call")
    return {**current, key: value}


def changed_keys(original: dict[str, Any], edited: dict[str, Any]) -> tuple[str, ...]:
    """The keys whose value differs between the agent's arguments and the edited ones,
    in the agent's order."""
    return tuple(key for key in original
                 if canonical_json(original[key]) != canonical_json(edited.get(key)))


def same_arguments(a: JSON, b: JSON) -> bool:
    return canonical_json(a) == canonical_json(b)
