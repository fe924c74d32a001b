"""What the Mini App shows of one card: everything the agent sent, unabridged, as JSON
(pure).

Secrets are masked everywhere (secret blocks, and whatever sits under a credential-named
key in the arguments) unless ``reveal`` is asked for; the caller decides who may.

An edited card shows what the chat's card shows: the edited call instead of the agent's
description of its own (no summary, no blocks), who edited, each change as a diff, and
the arguments as they will run. ``editable`` lists the keys the card offers to edit (never
one holding a secret), ``edit_values`` their current values as a person types them.
"""

from __future__ import annotations

from collections.abc import Sequence

from bot.core.edits import EditRow, changed_keys
from bot.core.model import Vote
from bot.protocol.payloads import JSON, Approval, Clarification
from bot.render.edits import change_diff, offered_keys, typed_text
from bot.render.masking import MASK, Masker, clean, masker
from bot.render.values import hide_credentials, secret_values


def card_details(
    item: Approval | Clarification,
    *,
    agent_name: str,
    votes: Sequence[Vote],
    required: int,
    reveal: bool,
    edit: EditRow | None = None,
) -> dict[str, JSON]:
    """The card's details; ``masked`` says whether anything was hidden, ``revision`` which
    version of the call an approval is (0: the agent's own, else the ``edit`` standing on
    the card)."""
    details: dict[str, JSON] = {
        "agent": agent_name,
        "id": item.id,
        "created_at": item.created_at.isoformat() if item.created_at else None,
        "expires_at": item.expires_at.isoformat() if item.expires_at else None,
        "votes": [{"user_id": v.user_id, "name": v.name, "at_ms": v.at} for v in votes],
        "required": required,
    }
    if isinstance(item, Clarification):
        details.update(kind="clarification", question=item.question,
                       options=list(item.options), masked=False)
        return details
    edited = edit.arguments if edit is not None and isinstance(item.arguments, dict) \
        else None
    blocks: list[JSON] = [
        {"type": b.type, "label": b.label, "value_type": b.value_type, "value": b.value,
         "truncated_chars": b.truncated_chars}
        for b in item.blocks
    ] if edited is None else []
    running = item.arguments if edited is None else edited
    offered = offered_keys(item)
    current = running if isinstance(running, dict) else {}
    details.update(kind="approval", tool=item.tool,
                   summary=item.summary if edited is None else "", blocks=blocks,
                   arguments=running, editable=list(offered),
                   edit_values={key: typed_text(current.get(key)) for key in offered},
                   revision=0, edit=None, masked=False)
    if edit is not None and edited is not None:
        details.update(revision=edit.revision, edit=_edit_shown(edit, item.arguments, edited))
    if reveal:
        return details
    arguments, credentials = hide_credentials(running)
    texts = secret_values(item.blocks) + credentials
    if edited is not None:  # the agent's values show in the diffs
        texts += hide_credentials(item.arguments)[1]
    for shown, block in zip(blocks, item.blocks if edited is None else (), strict=True):
        if block.value_type == "secret" and isinstance(shown, dict):
            shown["value"] = MASK
    details["arguments"] = arguments
    mask = masker(texts)
    masked = _masked(details, mask)
    assert isinstance(masked, dict)
    masked["masked"] = bool(texts)
    return masked


def _edit_shown(edit: EditRow, original: dict[str, JSON],
                edited: dict[str, JSON]) -> JSON:
    """Who edited, and each changed value: the agent's, the edited one, and the diff."""
    return {"by": edit.user_name, "user_id": edit.user_id, "at_ms": edit.at,
            "changes": [{"key": key, "before": original[key], "after": edited.get(key),
                         "diff": change_diff(original[key], edited.get(key))}
                        for key in changed_keys(original, edited)]}


def _masked(value: JSON, mask: Masker) -> JSON:
    if isinstance(value, str):
        return mask(clean(value))
    if isinstance(value, list):
        return [_masked(inner, mask) for inner in value]
    if isinstance(value, dict):
        return {mask(clean(key)): _masked(inner, mask) for key, inner in value.items()}
    return value
