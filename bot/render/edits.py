"""Edits before approving, as a card and a prompt show them (pure): which values a card
offers to edit (never one holding a secret), a value as the person retypes it, and the
change an edit made, as a diff from the agent's value to the edited one.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bot.protocol.encoding import canonical_json
from bot.protocol.payloads import JSON, Approval, Block
from bot.render.credentials import credentials_in, is_credential_key, strings_in
from bot.render.masking import Masker
from bot.render.values import BlockView, block_view, hide_credentials, secret_values

COPY_TEXT_CHARS = 256
"""The longest text a ``copy_text`` button copies (Bot API ``CopyTextButton``)."""
DIFF_CONTEXT_LINES = 2


@dataclass(frozen=True)
class EditShown:
    """The edit a card shows: the complete edited arguments, and who made the edit."""

    arguments: dict[str, Any]
    by: str


def holds_secret(key: str, value: Any, secrets: Sequence[str]) -> bool:
    """Whether the value under ``key`` holds a secret: by the key's name or a name inside
    it, a credential written into it, or a value a ``secret`` block masks."""
    if is_credential_key(key) or _credential_named(value):
        return True
    texts = list(strings_in([value]))
    if any(credentials_in(text) for text in texts):
        return True
    return any(secret in text for secret in secrets if secret for text in texts)


def offered_keys(approval: Approval) -> tuple[str, ...]:
    """The keys of ``approval`` a card offers to edit: those it lists as ``editable``
    whose value holds no secret (a secret is never shown for editing)."""
    arguments = approval.arguments
    if not approval.editable or not isinstance(arguments, dict):
        return ()
    # What a card masks anywhere: secret blocks, and values under credential-named keys
    # (which show masked wherever they occur, in another argument too).
    secrets = secret_values(approval.blocks) + hide_credentials(arguments)[1]
    return tuple(key for key in approval.editable
                 if key in arguments and not holds_secret(key, arguments[key], secrets))


def typed_text(value: JSON) -> str:
    """A value as a person types it back: a string as it is, anything else as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def copy_text(value: JSON) -> str | None:
    """The text a copy button copies for ``value``; None when Telegram cannot copy it."""
    text = typed_text(value)
    return text if 0 < len(text) <= COPY_TEXT_CHARS else None


def change_views(original: Mapping[str, Any], edited: Mapping[str, Any], *,
                 mask: Masker) -> list[BlockView]:
    """One diff per value the edit changed (the agent's value → the edited one), in the
    order of the agent's arguments."""
    views = []
    for key, before in original.items():
        after = edited.get(key)
        if canonical_json(before) == canonical_json(after):
            continue
        block = Block("block", f"{key} (edited)", change_diff(before, after), "diff")
        views.append(block_view(block, mask=mask, secrets="masked"))
    return views


def change_diff(before: JSON, after: JSON) -> str:
    """The change from ``before`` to ``after`` as diff lines: every line of a short
    value, the changed lines with a little context for a long one."""
    old, new = typed_text(before).split("\n"), typed_text(after).split("\n")
    if len(old) + len(new) <= 2 * (DIFF_CONTEXT_LINES + 1):
        return "\n".join([*("- " + line for line in old), *("+ " + line for line in new)])
    lines = difflib.unified_diff(old, new, lineterm="", n=DIFF_CONTEXT_LINES)
    return "\n".join(line for line in lines if not line.startswith(("---", "+++")))


def _credential_named(value: Any) -> bool:
    """Whether a key inside ``value`` (at any depth) names a credential."""
    if isinstance(value, Mapping):
        return any(is_credential_key(str(key)) or _credential_named(inner)
                   for key, inner in value.items())
    if isinstance(value, list | tuple):
        return any(_credential_named(inner) for inner in value)
    return False
