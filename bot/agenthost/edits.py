"""Edits before approving (protocol §3.1 ``editable``, §3.3 edited ``arguments``), pure.

The caller names the top-level keys of its arguments it can run edited; the host lists
them in the approval, except a key whose value holds a secret (a secret is never shown
for editing). An edit a device sends is taken only when it keeps every key, changes only
listed keys, keeps each value's JSON type, and puts no hidden character in what changed:
anything else is refused, and the approval stays open.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bot.hidden import holds_hidden
from bot.protocol.encoding import canonical_json, json_type
from bot.render.edits import holds_secret


def editable_keys(
    wanted: Sequence[str], arguments: Mapping[str, Any], blocks: Iterable[Mapping[str, Any]]
) -> tuple[str, ...]:
    """The keys of ``wanted`` the approval lists: those that hold no secret (by their
    name, a credential in their value, or a value a ``secret`` block masks)."""
    secrets = [str(block.get("value")) for block in blocks
               if block.get("value_type") == "secret" and block.get("value")]
    return tuple(key for key in wanted
                 if not holds_secret(key, arguments.get(key), secrets))


def edit_refusal(
    original: Mapping[str, Any], editable: Sequence[str], edited: Mapping[str, Any]
) -> str | None:
    """Why an edit of ``original`` into ``edited`` is refused, or ``None`` when it is
    taken."""
    if set(edited) != set(original):
        return "an edit may not add or remove a key"
    for key, value in edited.items():
        before = original[key]
        if canonical_json(value) == canonical_json(before):
            continue
        if key not in editable:
            return f"{key!r} is not editable"
        if json_type(value) != json_type(before):
            return f"{key!r} changed its type from {json_type(before)} to {json_type(value)}"
        if holds_hidden(value):
            return f"the edited {key!r} holds an invisible or control character"
    return None
