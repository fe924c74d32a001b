"""What the Mini App shows of one card: everything the agent sent, unabridged, as JSON
(pure).

Secrets are masked everywhere (secret blocks, and whatever sits under a credential-named
key in the arguments) unless ``reveal`` is asked for; the caller decides who may.
"""

from __future__ import annotations

from collections.abc import Sequence

from bot.core.model import Vote
from bot.protocol.payloads import JSON, Approval, Clarification
from bot.render.masking import MASK, Masker, clean, masker
from bot.render.values import hide_credentials, secret_values


def card_details(
    item: Approval | Clarification,
    *,
    agent_name: str,
    votes: Sequence[Vote],
    required: int,
    reveal: bool,
) -> dict[str, JSON]:
    """The card's details; ``masked`` says whether anything was hidden."""
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
    blocks: list[JSON] = [
        {"type": b.type, "label": b.label, "value_type": b.value_type, "value": b.value,
         "truncated_chars": b.truncated_chars}
        for b in item.blocks
    ]
    details.update(kind="approval", tool=item.tool, summary=item.summary, blocks=blocks,
                   arguments=item.arguments, editable=list(item.editable), masked=False)
    if reveal:
        return details
    arguments, credentials = hide_credentials(item.arguments)
    texts = secret_values(item.blocks) + credentials
    for shown, block in zip(blocks, item.blocks, strict=True):
        if block.value_type == "secret" and isinstance(shown, dict):
            shown["value"] = MASK
    details["arguments"] = arguments
    mask = masker(texts)
    masked = _masked(details, mask)
    assert isinstance(masked, dict)
    masked["masked"] = bool(texts)
    return masked


def _masked(value: JSON, mask: Masker) -> JSON:
    if isinstance(value, str):
        return mask(clean(value))
    if isinstance(value, list):
        return [_masked(inner, mask) for inner in value]
    if isinstance(value, dict):
        return {mask(clean(key)): _masked(inner, mask) for key, inner in value.items()}
    return value
