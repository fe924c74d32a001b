"""The inbox state machine (pure): an agent's snapshot against what the bot holds.

``inbox_update`` carries the complete set of waiting items. Diffing it against the items
the bot holds yields what to do: post cards for new items, close the cards of items that are
gone (with how they ended, from ``resolved`` when the agent says), or nothing at all when
the revision is not newer than the last one applied.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass
from datetime import datetime

from bot.protocol.payloads import Approval, Clarification, InboxUpdate

FINAL_STATES = frozenset({"approved", "denied", "answered", "expired", "cancelled"})
DECIDED_STATES = {"approve": "approved", "deny": "denied", "answer": "answered"}
"""The state a decision (or an answer) sent from here ends an item in."""
REMINDER_AT = 0.8
"""A reminder goes out when this fraction of an item's time to expiry has passed."""


@dataclass(frozen=True)
class Gone:
    """An open item that left the inbox, and how it ended."""

    item_id: str
    state: str
    by: str | None
    at: datetime | None


@dataclass(frozen=True)
class UpdatePlan:
    """What applying one ``inbox_update`` changes."""

    stale: bool
    new_items: tuple[Approval | Clarification, ...] = ()
    gone: tuple[Gone, ...] = ()


def plan_update(
    update: InboxUpdate, *, last_rev: int | None, known: Set[str], open_now: Set[str]
) -> UpdatePlan:
    """Diff ``update`` against the items the bot knows (``known``) and holds open."""
    if last_rev is not None and update.rev <= last_rev:
        return UpdatePlan(stale=True)
    items: list[Approval | Clarification] = [*update.approvals, *update.clarifications]
    present = {item.id for item in items}.union(update.unchanged)
    new_items = tuple(item for item in items if item.id not in known)
    resolved = {entry.id: entry for entry in update.resolved}
    gone = []
    for item_id in sorted(open_now - present):
        entry = resolved.get(item_id)
        if entry is not None and entry.outcome in FINAL_STATES:
            gone.append(Gone(item_id, entry.outcome, entry.by, entry.at))
        else:
            gone.append(Gone(item_id, "cancelled", entry.by if entry else None, None))
    return UpdatePlan(stale=False, new_items=new_items, gone=tuple(gone))


def remind_at(created: datetime, expires: datetime | None) -> datetime | None:
    """When a still-pending item earns its one reminder (None: no expiry, no reminder)."""
    if expires is None or expires <= created:
        return None
    return created + (expires - created) * REMINDER_AT
