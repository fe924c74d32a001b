"""A wall clock that tests move forward: it runs with the system's time plus an offset, and
:meth:`ShiftedClock.advance` adds to the offset and wakes everything waiting on it."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

from bot.clock import Clock


class ShiftedClock(Clock):
    """The system's time plus an offset that only grows."""

    def __init__(self) -> None:
        self._offset = 0.0
        self._jumped = asyncio.Event()

    def time(self) -> float:
        return time.time() + self._offset

    def advance(self, by: timedelta | float) -> None:
        """Move the clock forward; sleepers whose moment has come wake at once."""
        self._offset += by.total_seconds() if isinstance(by, timedelta) else by
        jumped, self._jumped = self._jumped, asyncio.Event()
        jumped.set()

    async def sleep(self, seconds: float) -> None:
        deadline = self.time() + seconds
        while (remaining := deadline - self.time()) > 0:
            await Clock.wait(self, self._jumped, remaining)

    async def wait(self, event: asyncio.Event, seconds: float) -> None:
        if event.is_set():
            return
        jumped = self._jumped
        waiters = [asyncio.ensure_future(event.wait()), asyncio.ensure_future(jumped.wait())]
        try:
            await asyncio.wait(waiters, timeout=max(seconds, 0.0),
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
