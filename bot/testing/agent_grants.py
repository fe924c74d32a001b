"""The grants the test agent gives with approvals (protocol §3.1, §3.3, §3.6): kept when a
decision names the key the approval offered, in force until they expire or are revoked,
and counted when a call falls under one."""

from __future__ import annotations

import os

from bot.clock import Clock, from_ms
from bot.protocol.encoding import format_rfc3339
from bot.protocol.payloads import ApprovalDecision


class AgentGrants:
    """Grants by id, each as its wire object, with the moment it ends."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._grants: dict[str, dict[str, object]] = {}
        self._ends: dict[str, int] = {}

    def in_force(self) -> list[dict[str, object]]:
        """The grants that have neither expired nor been revoked."""
        now = self._clock.now_ms()
        return [dict(grant) for grant_id, grant in self._grants.items()
                if self._ends[grant_id] > now]

    def covering(self, key: str) -> str | None:
        """The id of a grant in force under ``key``, its use counted; else None."""
        now = self._clock.now_ms()
        for grant_id, grant in self._grants.items():
            if grant["key"] == key and self._ends[grant_id] > now:
                grant["uses"] = int(str(grant["uses"])) + 1
                return grant_id
        return None

    def give(self, approval: dict[str, object], decision: ApprovalDecision) -> str | None:
        """Keep a decision's grant if it names the key offered for that approval; why
        not, when it does not."""
        requested = decision.grant
        if requested is None:
            return None
        offer = approval.get("grant_offer")
        if not isinstance(offer, dict) or offer.get("key") != requested.key:
            return "grant for a key not offered"
        minutes = min(requested.minutes, int(offer.get("max_minutes", 0)))
        grant_id = f"gr_{len(self._grants) + 1}"
        now = self._clock.now_ms()
        self._ends[grant_id] = now + minutes * 60_000
        self._grants[grant_id] = {
            "id": grant_id, "key": requested.key, "label": offer.get("label", requested.key),
            "granted_by": {"name": decision.decided_by.name,
                           "telegram_user_id": decision.decided_by.telegram_user_id},
            "granted_at": format_rfc3339(from_ms(now)),
            "expires_at": format_rfc3339(from_ms(self._ends[grant_id])),
            "uses": 0,
        }
        return None

    def revoke(self, grant_id: str) -> None:
        """End a grant; an unknown or ended one is harmless."""
        if self._grants.pop(grant_id, None) is not None:
            self._ends.pop(grant_id, None)


def activity_id() -> str:
    """A fresh ``activity`` entry id."""
    return f"act_{os.urandom(6).hex()}"
