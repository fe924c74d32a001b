"""A digest: one message per agent and chat gathering the agent's approvals waiting there,
with "Approve all" and "Deny all". Each change to the list it shows is a new version, kept,
so that a tap decides exactly the items of the version the tapper saw."""

from __future__ import annotations

from dataclasses import dataclass

MIN_ITEMS = 2
"""A digest is shown while at least this many approvals of one agent wait in a chat."""


@dataclass(frozen=True)
class DigestRow:
    """The digest of one agent in one chat (``version`` 0: never listed anything)."""

    digest_id: int
    chat_id: int
    agent_id: str
    topic_id: int | None
    token: str
    version: int
    message_id: int | None
    dirty: int


def wanted_items(open_items: list[str], *, batch: bool) -> tuple[str, ...]:
    """What a digest lists, from the agent's approvals open in the chat (oldest first):
    nothing when batches are off or fewer than :data:`MIN_ITEMS` wait."""
    return tuple(open_items) if batch and len(open_items) >= MIN_ITEMS else ()
