"""The agent host's grants (pure: no I/O).

A grant lets the calls under one key run without asking until it expires or is revoked.
The host offers one with an approval only when the caller names a key (the hooks and the
gateway derive a narrow one; ``ask`` and the API pass theirs) and the arguments hold no
secret. A decision may take the offer for at most its ``max_minutes``; a key the host did
not offer for that approval is refused, and the approval itself still applies. A grant's
key and label are fixed when it is given: nothing ever widens one.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from bot.agenthost.items import iso_ms
from bot.protocol.payloads import MAX_GRANT_KEY_CHARS, MAX_GRANT_TEXT_CHARS, GrantRequest
from bot.render.hidden import holds_hidden

OFFER_MAX_MINUTES: Final = 120
"""The longest grant the host offers with an approval."""
MAX_KEY_CHARS: Final = MAX_GRANT_KEY_CHARS
MAX_LABEL_CHARS: Final = MAX_GRANT_TEXT_CHARS


@dataclass(frozen=True)
class Grant:
    """A grant as the host keeps it."""

    grant_id: str
    key: str
    label: str
    granted_by: Mapping[str, Any]
    granted_ms: int
    expires_ms: int
    uses: int = 0
    ended_ms: int | None = None
    """When it was revoked (it simply expires at ``expires_ms`` otherwise)."""

    def in_force(self, now_ms: int) -> bool:
        return self.ended_ms is None and self.expires_ms > now_ms

    @property
    def by_name(self) -> str:
        return str(self.granted_by.get("name") or "someone")

    def minutes_left(self, now_ms: int) -> int:
        """Whole minutes left, rounded up."""
        return max(0, -(-(self.expires_ms - now_ms) // 60_000))

    def wire(self) -> dict[str, Any]:
        """The grant as ``inbox_update.grants`` lists it (protocol §3.1)."""
        return {
            "id": self.grant_id, "key": self.key, "label": self.label,
            "granted_by": dict(self.granted_by), "granted_at": iso_ms(self.granted_ms),
            "expires_at": iso_ms(self.expires_ms), "uses": self.uses,
        }

    def listing_json(self) -> dict[str, Any]:
        """The local API's entry for a grant in force."""
        return {"grant_id": self.grant_id, "label": self.label, "granted_by": self.by_name,
                "expires_at": iso_ms(self.expires_ms), "uses": self.uses, "key": self.key}


@dataclass(frozen=True)
class Offer:
    """What an approval offers: its key and label (``max_minutes`` is the host's)."""

    key: str
    label: str

    def wire(self) -> dict[str, Any]:
        return {"key": self.key, "label": self.label, "max_minutes": OFFER_MAX_MINUTES}


def offer_for(key: str | None, label: str | None, blocks: Iterable[Mapping[str, Any]]) -> \
        Offer | None:
    """The offer an approval carries: none without a key, when a block is a secret (a
    grant must never cover a call that holds a credential), or when the key, the label
    or a block holds an invisible or direction-changing character (the card cannot show
    such a call as it runs)."""
    if not key:
        return None
    blocks = list(blocks)
    if any(block.get("value_type") == "secret" for block in blocks):
        return None
    if holds_hidden((key, label, blocks)):
        return None
    return Offer(key[:MAX_KEY_CHARS], (label or key)[:MAX_LABEL_CHARS])


def give(
    offer: Offer | None, request: GrantRequest, person: Mapping[str, Any], now_ms: int
) -> Grant | str:
    """The grant a decision gives, or why it is refused."""
    if offer is None or request.key != offer.key:
        return "the grant's key is not the one offered for this approval"
    minutes = min(request.minutes, OFFER_MAX_MINUTES)
    return Grant(
        grant_id=f"gr_{secrets.token_urlsafe(9)}", key=offer.key, label=offer.label,
        granted_by=dict(person), granted_ms=now_ms, expires_ms=now_ms + minutes * 60_000,
    )


def covering(grants: Iterable[Grant], key: str | None, now_ms: int) -> Grant | None:
    """The grant in force for exactly ``key`` (the one ending last), if any."""
    if not key:
        return None
    found = [g for g in grants if g.key == key and g.in_force(now_ms)]
    return max(found, key=lambda g: g.expires_ms) if found else None


def covered_reason(grant: Grant, now_ms: int) -> str:
    """What the caller of a covered call is told, e.g. "approved by Ada's grant
    (`git status` in this session, 12 min left)"."""
    return (f"approved by {grant.by_name}'s grant ({grant.label}, "
            f"{grant.minutes_left(now_ms)} min left)")


def activity_entry(grant: Grant, tool: str, summary: str, now_ms: int) -> dict[str, Any]:
    """One ``activity`` entry (protocol §3.7) for a call a grant covered."""
    return {"id": f"act_{secrets.token_urlsafe(9)}", "tool": tool, "summary": summary,
            "grant_id": grant.grant_id, "at": iso_ms(now_ms)}
