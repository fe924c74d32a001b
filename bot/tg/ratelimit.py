"""The bot's Bot API rate limiter: Telegram's 30 messages a second as a sliding window.

PTB's :class:`~telegram.ext.AIORateLimiter` keeps the 20-a-minute limit of each group and
retries after a ``429``; its overall limit is a leaky bucket, which either lets a burst of
30 through on top of the next second's 30 or, with a bucket of one, makes every request
within 1/30 s of the previous one wait. A sliding window does neither: a request waits
only while :data:`OVERALL_LIMIT` requests reached Telegram in the last :data:`WINDOW_S`.

When a request reaches Telegram the sender cannot see, only when it left and when its
answer came. Counting each until its answer would keep every second at Telegram within
the limit, but lose the answer's time every second (30 per 1.1 s when answers take
100 ms). So a request counts from when it left, unless its answer took longer than the
quickest of the recent ones: then it may have been held up on its way (a busy event loop,
a slow network) by as much, and counts from that much later. Requests that travel alike
then keep 30 a second, and one held up does not let the next second's 30 arrive on top of
it.

Within that, each chat takes its requests in turns (:class:`ChatTurns`): one at a time, a
pace apart, the most urgent first, so that a card whose item was decided loses its buttons
before new cards and reminders go out in that chat.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import heapq
import itertools
import math
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

from telegram.ext import AIORateLimiter, BaseRateLimiter

from bot.clock import SYSTEM_CLOCK, Clock

OVERALL_LIMIT = 30
"""Requests naming a chat that reach Telegram in any :data:`WINDOW_S`."""
LEG_MARGIN_S = 0.01
"""How much quicker one request's way there and another's way back may be than the
quickest round trip's: the quickest is a sum, and its two halves vary a little."""
WINDOW_S = 1.0 + LEG_MARGIN_S
RECENT = 100
"""Answers whose quickest is taken as the time an answer takes when nothing holds it up."""
MAX_RETRIES = 3

OUTCOME, REMINDER, CARD, DIGEST = 0, 1, 2, 3
"""How urgent a chat's request is, most urgent first: an edit that shows how an item
ended (its buttons go), a reminder, new cards and other edits, then digests."""
MAX_TURN_WAIT_S = 60.0
"""The longest a waiting request sleeps before it looks again (a clock may jump)."""

JSONDict = dict[str, Any]
Callback = Callable[..., Coroutine[Any, Any, bool | JSONDict | list[JSONDict]]]


class _Request:
    __slots__ = ("answered", "sent")

    def __init__(self, sent: float) -> None:
        self.sent = sent
        self.answered: float | None = None


class SlidingWindow:
    """At most ``limit`` requests reaching Telegram in any ``period`` seconds of ``clock``,
    as far as the sender can tell; waiting requests go in the order they came.

    A request counts from the moment it left, or from its answer less the quickest
    recent round trip if that is later (see the module's docstring); one still under way
    counts until it is answered.
    """

    def __init__(self, limit: int, period: float, clock: Clock = SYSTEM_CLOCK) -> None:
        self._limit = limit
        self._period = period
        self._clock = clock
        self._held: list[_Request] = []
        self._round_trips: collections.deque[float] = collections.deque(maxlen=RECENT)
        self._lock = asyncio.Lock()
        self._answer = asyncio.Event()

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Count the request run inside from the moment it leaves here."""
        request = await self._enter()
        try:
            yield
        finally:
            request.answered = self._clock.time()
            self._round_trips.append(request.answered - request.sent)
            self._answer.set()

    def _counted_from(self, request: _Request, quickest: tuple[float, float]) -> float:
        """When ``request`` may have reached Telegram at the latest, as far as the other
        answers tell (its own round trip is no measure of how quick an answer can be)."""
        if request.answered is None:
            return math.inf
        round_trip = request.answered - request.sent
        other = quickest[1] if round_trip == quickest[0] else quickest[0]
        return max(request.sent, request.answered - other)

    async def _enter(self) -> _Request:
        async with self._lock:
            while True:
                now = self._clock.time()
                # The two quickest recent round trips (none known: nothing is quick).
                two = [*heapq.nsmallest(2, self._round_trips), 0.0, 0.0]
                quickest = (two[0], two[1])
                since = now - self._period
                self._held = [r for r in self._held
                              if self._counted_from(r, quickest) > since]
                if len(self._held) < self._limit:
                    request = _Request(now)
                    self._held.append(request)
                    return request
                # Wait until a place frees up, or an answer moves one.
                free_at = min(self._counted_from(r, quickest) for r in self._held) \
                    + self._period
                self._answer.clear()
                await self._clock.wait(self._answer, min(free_at - now, self._period))


class BotRateLimiter(BaseRateLimiter[int]):
    """PTB's limiter for groups and ``429`` retries, with :class:`SlidingWindow` as the
    overall limit of requests that name a chat (as PTB applies its own); each attempt of a
    retried request counts once."""

    def __init__(self, limit: int = OVERALL_LIMIT, period: float = WINDOW_S,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self._groups = AIORateLimiter(overall_max_rate=0, max_retries=MAX_RETRIES)
        self._window = SlidingWindow(limit, period, clock)

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
            async with self._window.slot():
                return await callback(*call_args, **call_kwargs)

        return await self._groups.process_request(
            windowed, args, kwargs, endpoint, data, rate_limit_args)


class _Chat:
    """One chat's requests: those waiting (by urgency, then arrival), whether one is under
    way, and when the last was answered."""

    __slots__ = ("_event", "busy", "last_answer", "waiting")

    def __init__(self) -> None:
        self.waiting: list[tuple[int, int]] = []
        self.busy = False
        self.last_answer = -math.inf
        self._event = asyncio.Event()

    @property
    def event(self) -> asyncio.Event:
        """Set at the chat's next change."""
        return self._event

    def changed(self) -> None:
        event, self._event = self._event, asyncio.Event()
        event.set()


class ChatTurns:
    """Each chat's requests one at a time, ``pace`` seconds of ``clock`` from the answer to
    one to the start of the next (a request reaches Telegram between its start and its
    answer, so two never arrive closer than the pace), and the most urgent first: a chat's
    waiting requests go by urgency (:data:`OUTCOME` first), then in the order they came."""

    def __init__(self, pace: float, clock: Clock = SYSTEM_CLOCK) -> None:
        self._pace = pace
        self._clock = clock
        self._chats: dict[int, _Chat] = {}
        self._arrivals = itertools.count()
        self._paused_until = -math.inf

    def pause(self, seconds: float) -> None:
        """Telegram asked the bot to wait: no chat's next request starts before then."""
        self._paused_until = max(self._paused_until, self._clock.time() + seconds)

    async def ready(self, chat_id: int, urgency: int) -> None:
        """Return once a request this urgent could start in the chat, without taking the
        turn: the caller then chooses what to send, seeing what came in meanwhile."""
        chat = self._chats.setdefault(chat_id, _Chat())
        await self._wait(chat, lambda: not chat.waiting or chat.waiting[0][0] >= urgency)

    async def next_change(self, chat_id: int, timeout: float) -> None:
        """Until a request of the chat waits, starts or ends, or ``timeout`` passes."""
        chat = self._chats.setdefault(chat_id, _Chat())
        await self._clock.wait(chat.event, timeout)

    @contextlib.asynccontextmanager
    async def turn(self, chat_id: int, urgency: int) -> AsyncIterator[None]:
        """Run the request inside once it is the chat's turn; the pace counts from when
        the block ends."""
        chat = self._chats.setdefault(chat_id, _Chat())
        place = (urgency, next(self._arrivals))
        heapq.heappush(chat.waiting, place)
        chat.changed()
        try:
            await self._wait(chat, lambda: chat.waiting[0] == place)
        finally:
            chat.waiting.remove(place)
            heapq.heapify(chat.waiting)
            chat.changed()
        chat.busy = True
        try:
            yield
        finally:
            chat.busy = False
            chat.last_answer = self._clock.time()
            chat.changed()

    async def _wait(self, chat: _Chat, first: Callable[[], bool]) -> None:
        """Until no request of the chat is under way, ``first()`` holds and the pace (and
        any pause) has passed."""
        while True:
            event = chat.event
            delay = MAX_TURN_WAIT_S
            if not chat.busy and first():
                delay = max(chat.last_answer + self._pace, self._paused_until) \
                    - self._clock.time()
                if delay <= 0:
                    return
            await self._clock.wait(event, min(delay, MAX_TURN_WAIT_S))
