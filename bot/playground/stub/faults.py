"""Failure injection and Telegram's rate limits: when a call is refused before it is handled.

Tests script refusals (:meth:`Faults.fail_next`, :meth:`Faults.rate_limit_storm`); with
``rate_limits`` on, sends and edits past Telegram's limits are refused with 429 as Telegram
refuses them. Every paced call is remembered, so tests can measure the bot's pace.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from bot.playground.stub.errors import ApiError, too_many_requests

PACED_METHODS = frozenset(
    {"sendMessage", "sendDocument", "editMessageText", "editMessageReplyMarkup"}
)
OVERALL_RATE = 30
"""Messages a bot may send or edit in one second, all chats together (Telegram's bot FAQ)."""
GROUP_RATE = 20
"""Messages a bot may send or edit in one group in one minute (Telegram's bot FAQ)."""


@dataclass
class _Failure:
    error_code: int
    description: str
    parameters: dict[str, Any] | None
    remaining: int


class Faults:
    """The refusals waiting for the next calls, and the pace of the calls so far."""

    def __init__(self, *, rate_limits: bool) -> None:
        self.rate_limits = rate_limits
        self.throttled = 0
        """Requests answered 429 by :attr:`rate_limits` (not by :meth:`rate_limit_storm`)."""
        self._failures: dict[str, list[_Failure]] = {}
        self._paced: list[tuple[float, int]] = []

    def fail_next(
        self,
        method: str,
        *,
        error_code: int,
        description: str,
        parameters: dict[str, Any] | None = None,
        times: int = 1,
    ) -> None:
        """Answer the next `times` calls of `method` with this error instead of handling them."""
        failure = _Failure(error_code, description, parameters, times)
        self._failures.setdefault(method.lower(), []).append(failure)

    def rate_limit_storm(self, times: int, retry_after: int) -> None:
        """The next `times` sendMessage calls get 429 "retry after `retry_after`"."""
        refusal = too_many_requests(retry_after)
        self.fail_next(
            "sendMessage",
            error_code=refusal.error_code,
            description=refusal.description,
            parameters=refusal.parameters,
            times=times,
        )

    def check(self, method: str, params: dict[str, Any], now: float) -> None:
        """Raise the refusal due for this call of ``method`` (its canonical name), if any."""
        chat_id = params.get("chat_id")
        if method in PACED_METHODS and isinstance(chat_id, int):
            if self.rate_limits:
                try:
                    self._check_rate(now, chat_id)
                except ApiError:
                    self.throttled += 1
                    raise
            self._paced.append((now, chat_id))
        failures = self._failures.get(method.lower())
        if failures:
            failure = failures[0]
            failure.remaining -= 1
            if failure.remaining <= 0:
                failures.pop(0)
            raise ApiError(failure.error_code, failure.description, failure.parameters)

    def _check_rate(self, now: float, chat_id: int) -> None:
        """Refuse a send or edit past Telegram's limits, as Telegram does (429)."""
        overall = [t for t, _ in self._paced if now - t < 1.0]
        if len(overall) >= OVERALL_RATE:
            raise too_many_requests(1)
        if chat_id < 0:
            in_group = [t for t, chat in self._paced if chat == chat_id and now - t < 60.0]
            if len(in_group) >= GROUP_RATE:
                raise too_many_requests(max(1, math.ceil(60.0 - (now - in_group[0]))))

    def max_rate(self, chat_id: int | None = None, *, window: float = 1.0) -> int:
        """Most paced calls (sends and edits) inside any `window` seconds, for one chat or all."""
        times = sorted(t for t, chat in self._paced if chat_id is None or chat == chat_id)
        best = start = 0
        for end, moment in enumerate(times):
            while moment - times[start] >= window:
                start += 1
            best = max(best, end - start + 1)
        return best
