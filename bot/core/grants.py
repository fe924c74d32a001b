"""Grants as the bot sees them (pure): what a card may offer, the grants an agent reports
against those the bot holds, and what an activity or grants message shows.

A grant lets the calls under one key run without asking for a limited time. The agent
alone decides what a key covers; the bot only passes the offer on, shows what ran under it
and sends a revoke when an approver asks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from bot.hidden import holds_hidden
from bot.protocol.payloads import Approval, Grant, GrantOffer, item_to_wire

ACTIVITY_WINDOW_MS = 60_000
"""A chat gets at most one new activity message per this long; later entries are appended
to the last one by editing it."""
ACTIVITY_LINES_SHOWN = 20
"""The newest lines an activity message shows (older ones are counted, not listed)."""

GrantState = Literal["active", "revoked", "ended"]
NoteKind = Literal["activity", "grants"]


@dataclass(frozen=True)
class GrantRow:
    """A grant an agent reported in force (and how it ended, once it did)."""

    agent_id: str
    grant_id: str
    key: str
    label: str
    granted_by: str
    granted_at: int | None
    expires_at: int | None
    uses: int
    token: str
    """Random per grant: the callback data of its Revoke buttons."""
    state: GrantState
    revoke_by: str | None
    revoke_at: int | None
    """When an approver asked to revoke it (the agent confirms by no longer listing it)."""
    ended_at: int | None


@dataclass(frozen=True)
class ActivityRow:
    """One call an agent ran under a grant, as it reported it."""

    agent_id: str
    entry_id: str
    tool: str
    summary: str
    grant_id: str | None
    at: int


@dataclass(frozen=True)
class NoteRow:
    """A message of the bot that is not a card: an activity log or a ``/grants`` list."""

    note_id: int
    kind: NoteKind
    chat_id: int
    topic_id: int | None
    message_id: int | None
    opened_at: int
    dirty: int


@dataclass(frozen=True)
class GrantedRow:
    """The grant an approver gave with an approval on a card."""

    agent_id: str
    item_id: str
    chat_id: int
    label: str
    minutes: int
    until: int
    user_name: str


@dataclass(frozen=True)
class GrantsPlan:
    """What applying the grants of one ``inbox_update`` changes."""

    new: tuple[Grant, ...] = ()
    changed: tuple[Grant, ...] = ()
    """Still in force, with new uses or expiry."""
    gone: tuple[GrantRow, ...] = ()
    """Held as active and no longer listed: revoked (if asked) or ended."""


def offered_minutes(offer: GrantOffer | None, *, allowed: bool, minutes: int) -> int:
    """How long a grant a card offers: the chat's ``grant_minutes`` capped by the offer's
    ``max_minutes``; 0 when the approval offers none or the chat allows none."""
    if offer is None or not allowed:
        return 0
    return max(0, min(minutes, offer.max_minutes))


def may_be_granted(approval: Approval, agent_name: str) -> bool:
    """Whether a grant may cover ``approval``: not when any text of it or the agent's name
    holds an invisible, direction-changing or control character (such a card offers no
    grant, and a tap asking for one anyway is refused)."""
    return not holds_hidden((agent_name, item_to_wire(approval)))


def plan_grants(reported: Iterable[Grant], held: Mapping[str, GrantRow]) -> GrantsPlan:
    """Diff the grants an agent lists now against the ones the bot holds for it."""
    listed = {grant.id: grant for grant in reported}
    new, changed = [], []
    for grant_id, grant in listed.items():
        row = held.get(grant_id)
        if row is None:
            new.append(grant)
        elif row.state == "active" and (row.uses, row.expires_at) != (
            grant.uses, _ms(grant)
        ):
            changed.append(grant)
    gone = tuple(row for grant_id, row in sorted(held.items())
                 if row.state == "active" and grant_id not in listed)
    return GrantsPlan(tuple(new), tuple(changed), gone)


def in_force(row: GrantRow, now_ms: int) -> bool:
    """Whether a grant still lets calls through, as far as the bot knows."""
    return row.state == "active" and (row.expires_at is None or row.expires_at > now_ms)


def minutes_left(row: GrantRow, now_ms: int) -> int | None:
    """Whole minutes (rounded up) until a grant expires; None without an expiry."""
    if row.expires_at is None:
        return None
    return max(0, -(-(row.expires_at - now_ms) // 60_000))


def grant_status(row: GrantRow | None, now_ms: int) -> str:
    """One word for a grant as a message shows it: ``active``, ``revoking`` (asked, not yet
    confirmed), ``revoked``, ``ended``, ``expired`` or ``unknown``."""
    if row is None:
        return "unknown"
    if row.state != "active":
        return row.state
    if not in_force(row, now_ms):
        return "expired"
    return "revoking" if row.revoke_at is not None else "active"


def _ms(grant: Grant) -> int | None:
    return None if grant.expires_at is None else int(grant.expires_at.timestamp() * 1000)
