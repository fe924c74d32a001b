"""The replay set (protocol §2 rule 6): envelope ids already accepted, kept 30 days.

The durable sets live in the agent host's store and in the bot's (which the bot looks up
for a batch of envelopes at once); tests and tools that need no persistence use
:class:`bot.testing.replay.MemoryReplayGuard`.
"""

from __future__ import annotations

from typing import Protocol

RETENTION_MS = 30 * 24 * 60 * 60 * 1000
"""How long an accepted envelope id is remembered (protocol §2 rule 6: at least 30 days)."""

MAX_AGE_MS = RETENTION_MS - 5 * 60 * 1000
"""Envelopes with an older ``ts`` are refused as stale. It is shorter than the retention
by the 5 minutes an envelope's ``ts`` may lie in the future: an id is forgotten no earlier
than :data:`RETENTION_MS` after it was seen, and by then its envelope is refused."""


class ReplayGuard(Protocol):
    """Answers whether an envelope id was accepted before."""

    def seen(self, envelope_id: str) -> bool: ...
