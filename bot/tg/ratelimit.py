"""The bot's Bot API rate limiter: Telegram's 30 messages a second as a sliding window.

PTB's :class:`~telegram.ext.AIORateLimiter` keeps the 20-a-minute limit of each group and
retries after a ``429``; its overall limit is a leaky bucket, which either lets a burst of
30 through on top of the next second's 30 or, with a bucket of one, makes every request
within 1/30 s of the previous one wait. A sliding window does neither: a request waits
only while :data:`OVERALL_LIMIT` requests are under way or ended less than
:data:`WINDOW_S` ago. Counting from the end of a request (when Telegram has surely
received it) keeps every second of arrivals at Telegram within the limit, however unevenly
requests travel.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

from telegram.ext import AIORateLimiter, BaseRateLimiter

OVERALL_LIMIT = 30
"""Requests naming a chat, under way or ended within :data:`WINDOW_S`."""
WINDOW_S = 1.0
MAX_RETRIES = 3

JSONDict = dict[str, Any]
Callback = Callable[..., Coroutine[Any, Any, bool | JSONDict | list[JSONDict]]]


class SlidingWindow:
    """At most ``limit`` requests under way or ended in the last ``period`` seconds;
    waiting requests go in the order they came."""

    def __init__(self, limit: int, period: float) -> None:
        self._limit = limit
        self._period = period
        self._ended: collections.deque[float] = collections.deque()
        self._under_way = 0
        self._lock = asyncio.Lock()
        self._one_ended = asyncio.Event()

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold one place in the window for the request run inside."""
        await self._enter()
        try:
            yield
        finally:
            self._under_way -= 1
            self._ended.append(asyncio.get_running_loop().time())
            self._one_ended.set()

    async def _enter(self) -> None:
        loop = asyncio.get_running_loop()
        async with self._lock:
            while True:
                now = loop.time()
                while self._ended and self._ended[0] <= now - self._period:
                    self._ended.popleft()
                if self._under_way + len(self._ended) < self._limit:
                    self._under_way += 1
                    return
                self._one_ended.clear()
                if self._ended:
                    await asyncio.sleep(self._ended[0] + self._period - now)
                else:  # every place is held by a request under way
                    await self._one_ended.wait()


class BotRateLimiter(BaseRateLimiter[int]):
    """PTB's limiter for groups and ``429`` retries, with :class:`SlidingWindow` as the
    overall limit of requests that name a chat (as PTB applies its own). It also tells how
    long the last request to a chat waited before it went out (:meth:`waited`)."""

    def __init__(self, limit: int = OVERALL_LIMIT, period: float = WINDOW_S) -> None:
        self._groups = AIORateLimiter(overall_max_rate=0, max_retries=MAX_RETRIES)
        self._window = SlidingWindow(limit, period)
        self._waited: dict[object, float] = {}

    def waited(self, chat_id: int) -> float:
        """Seconds the last request to ``chat_id`` waited in this limiter."""
        return self._waited.get(chat_id, 0.0)

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
        chat_id = data.get("chat_id")
        if chat_id is None:
            return await self._groups.process_request(
                callback, args, kwargs, endpoint, data, rate_limit_args)
        loop = asyncio.get_running_loop()
        arrived = loop.time()

        async def windowed(*call_args: Any, **call_kwargs: Any) -> bool | JSONDict | list[JSONDict]:
            async with self._window.slot():
                self._waited[chat_id] = loop.time() - arrived
                return await callback(*call_args, **call_kwargs)

        return await self._groups.process_request(
            windowed, args, kwargs, endpoint, data, rate_limit_args)
