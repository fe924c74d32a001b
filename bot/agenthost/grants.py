"""The agent host's grants (pure: no I/O).

A grant lets the calls under one key run without asking until it expires or is revoked.
The host offers one with an approval only when the caller names a key and the arguments
hold no secret. A decision may take the offer for at most its ``max_minutes``; a key the
host did not offer for that approval is refused, and the approval itself still applies. A
grant's key and label are fixed when it is given: nothing ever widens one.

Every key lives in a namespace the host puts it in, from the field the caller used, so
that keys of one kind of caller can never cover another's calls:

- ``script:`` keys come from ``grant_key`` (``ask``, scripts, the API). A script names
  its key and label freely, so the label a person is shown starts with "offered by a
  script: key `…`": no script can dress its grant up as a hook's.
- ``hook:`` and ``gateway:`` keys come from ``grant_scope``, which the hooks and the MCP
  gateway send: the key they derived from the call, and its label. The host keys the
  grant on both together (a digest of the pair), so the words a person approves are part
  of the key: a grant covers only calls whose own hook or gateway derived the very same
  key *and* the very same words. Any process may send a ``grant_scope``, but whatever it
  sends, the label shown is the one the covered calls carry themselves.

A grant also lapses when the host has been off the relay for longer than
:data:`OFFLINE_LAPSE_MS`: a revoke a person sent cannot reach a host that is off the
relay, and this bounds how long such a grant can go on regardless.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from bot.agenthost.items import iso_ms
from bot.hidden import holds_hidden
from bot.protocol.payloads import MAX_GRANT_KEY_CHARS, MAX_GRANT_TEXT_CHARS, GrantRequest

OFFER_MAX_MINUTES: Final = 120
"""The longest grant the host offers with an approval."""
MAX_KEY_CHARS: Final = MAX_GRANT_KEY_CHARS
MAX_LABEL_CHARS: Final = MAX_GRANT_TEXT_CHARS
OFFLINE_LAPSE_MS: Final = 5 * 60_000
"""A grant lapses once the host has been off the relay this long (5 minutes)."""

ScopeKind = Literal["hook", "gateway"]
SCOPE_KINDS: Final[tuple[ScopeKind, ...]] = ("hook", "gateway")
SCRIPT_NAMESPACE: Final = "script"


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


def script_offer(key: str, label: str | None) -> Offer:
    """The offer for a key a script named (``grant_key``): in the script namespace, and
    labelled as a script's, with its key, before anything the script says of it."""
    shown = f"offered by a script: key `{key}`"
    if label and label != key:
        shown = f"{shown} — {label}"
    return Offer(_namespaced(SCRIPT_NAMESPACE, key), shown[:MAX_LABEL_CHARS])


def scope_offer(kind: ScopeKind, key: str, label: str) -> Offer:
    """The offer for a scope a hook or the gateway derived (``grant_scope``): keyed on
    the key and the label together, in that kind's namespace."""
    pair = json.dumps([key, label], ensure_ascii=False, separators=(",", ":"))
    digest = hashlib.sha256(pair.encode()).hexdigest()
    return Offer(f"{kind}:{digest}", label[:MAX_LABEL_CHARS])


def offer_for(offer: Offer | None, blocks: Iterable[Mapping[str, Any]], shown: Any = ()) \
        -> Offer | None:
    """The offer an approval carries: none without one, when a block is a secret (a grant
    must never cover a call that holds a credential), or when the offer, a block or what
    else the card shows (``shown``: the summary, the arguments) holds an invisible or
    direction-changing character (the card cannot show such a call as it runs)."""
    if offer is None:
        return None
    blocks = list(blocks)
    if any(block.get("value_type") == "secret" for block in blocks):
        return None
    if holds_hidden((offer.key, offer.label, blocks, shown)):
        return None
    return offer


def lapsed(off_relay_since_ms: int | None, now_ms: int) -> bool:
    """Whether the grants in force lapse now: the host has been off the relay since
    ``off_relay_since_ms`` (None: it is on it) for longer than :data:`OFFLINE_LAPSE_MS`."""
    return off_relay_since_ms is not None and now_ms - off_relay_since_ms > OFFLINE_LAPSE_MS


def _namespaced(namespace: str, key: str) -> str:
    full = f"{namespace}:{key}"
    if len(full) <= MAX_KEY_CHARS:
        return full
    return f"{namespace}:sha256:{hashlib.sha256(key.encode()).hexdigest()}"


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
