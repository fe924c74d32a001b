"""The bot's Bot API rate limiter: Telegram's 30 messages a second as a sliding window.

PTB's :class:`~telegram.ext.AIORateLimiter` keeps the 20-a-minute limit of each group and
retries after a ``429``; its overall limit is a leaky bucket, which either lets a burst of
30 through on top of the next second's 30 or, with a bucket of one, makes every request
within 1/30 s of the previous one wait. A sliding window does neither: a request waits
only when the last :data:`WINDOW_S` already holds :data:`OVERALL_LIMIT` requests.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable, Coroutine
from typing import Any

from telegram.ext import AIORateLimiter, BaseRateLimiter

OVERALL_LIMIT = 30
"""Requests to chats in any :data:`WINDOW_S` (Telegram allows about 30 messages a second)."""
WINDOW_S = 1.03
"""A little over a second: requests take a few milliseconds to arrive, unevenly."""
MAX_RETRIES = 3

JSONDict = dict[str, Any]
Callback = Callable[..., Coroutine[Any, Any, bool | JSONDict | list[JSONDict]]]


class SlidingWindow:
    """At most ``limit`` entries in any ``period`` seconds, served in the order they came."""

    def __init__(self, limit: int, period: float) -> None:
        self._limit = limit
        self._period = period
        self._starts: collections.deque[float] = collections.deque()
        self._lock = asyncio.Lock()

    async def enter(self) -> None:
        """Return once fewer than ``limit`` entries were made in the last ``period``."""
        loop = asyncio.get_running_loop()
        async with self._lock:
            while True:
                now = loop.time()
                while self._starts and self._starts[0] <= now - self._period:
                    self._starts.popleft()
                if len(self._starts) < self._limit:
                    self._starts.append(now)
                    return
                await asyncio.sleep(self._starts[0] + self._period - now)


class BotRateLimiter(BaseRateLimiter[int]):
    """PTB's limiter for groups and ``429`` retries, with :class:`SlidingWindow` as the
    overall limit of requests that name a chat (as PTB applies its own)."""

    def __init__(self, limit: int = OVERALL_LIMIT, period: float = WINDOW_S) -> None:
        self._groups = AIORateLimiter(overall_max_rate=0, max_retries=MAX_RETRIES)
        self._window = SlidingWindow(limit, period)

    async def initialize(self) -> None:
        await self._groups.initialize()

    async def shutdown(self) -> None:
        await self._groups.shutdown()

    async def process_request(
        self,
        callback: Callback,
        args: Any,
        kwargs: dict[str, Any],
        endpoint: str,
        data: dict[str, Any],
        rate_limit_args: int | None,
    ) -> bool | JSONDict | list[JSONDict]:
        if data.get("chat_id") is None:
            return await self._groups.process_request(
                callback, args, kwargs, endpoint, data, rate_limit_args)

        async def windowed(*call_args: Any, **call_kwargs: Any) -> bool | JSONDict | list[JSONDict]:
            await self._window.enter()
            return await callback(*call_args, **call_kwargs)

        return await self._groups.process_request(
            windowed, args, kwargs, endpoint, data, rate_limit_args)
