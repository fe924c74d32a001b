"""A replay set held in memory, for tests, benchmarks and the in-memory agent."""

from __future__ import annotations

from bot.protocol.replay import RETENTION_MS


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
