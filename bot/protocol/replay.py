"""The replay set (protocol §2 rule 6): envelope ids already accepted, kept 30 days.

The durable implementation lives in the store; :class:`MemoryReplayGuard` serves tests
and tools that need no persistence.
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


class MemoryReplayGuard:
    """A replay set held in memory (lost on restart)."""

    def __init__(self) -> None:
        self._accepted: dict[str, int] = {}

    def seen(self, envelope_id: str) -> bool:
        return envelope_id in self._accepted

    def remember(self, envelope_id: str, ts_ms: int) -> None:
        self._accepted.setdefault(envelope_id, ts_ms)

    def forget_expired(self, now_ms: int) -> int:
        """Drop ids remembered more than :data:`RETENTION_MS` before ``now_ms``; return
        how many were dropped."""
        cutoff = now_ms - RETENTION_MS
        expired = [key for key, ts in self._accepted.items() if ts < cutoff]
        for key in expired:
            del self._accepted[key]
        return len(expired)
