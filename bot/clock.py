"""Time, one convention: the bot reads a :class:`Clock` (float seconds since the epoch, as
:func:`time.time`), stores and compares Unix milliseconds (:meth:`Clock.now_ms`), shows
aware UTC datetimes, and names durations in float seconds ``…_S``.

Everything that waits for a moment of wall time (expiry, reminders, retries after a
refusal) waits through the clock, so that tests can move an injected clock forward instead
of sleeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import UTC, datetime


class Clock:
    """The system's wall clock."""

    def time(self) -> float:
        """Seconds since the epoch."""
        return time.time()

    def now_ms(self) -> int:
        """The time in Unix milliseconds."""
        return int(self.time() * 1000)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(seconds, 0.0))

    async def wait(self, event: asyncio.Event, seconds: float) -> None:
        """Return when ``event`` is set or ``seconds`` have passed (or, for a clock that
        can jump, when it jumped: callers check again what is due)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), max(seconds, 0.0))


SYSTEM_CLOCK = Clock()


def from_ms(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def maybe_from_ms(ms: int | None) -> datetime | None:
    return from_ms(ms) if ms is not None else None


def to_ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)
