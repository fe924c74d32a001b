"""What the relay answers when it refuses a frame, and how often it says so in its log.

Anyone may connect to the relay, so refusals are bounded both ways: a connection that is
refused :data:`MAX_REFUSED_FRAMES` times in a row is closed (:class:`RefusalStreak`), and
warnings about refused frames and connections are rate-limited (:class:`WarningBudget`).
A refusal's warning never shows the frame's contents.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Final

from bot.relay.frames import ErrorCode, error_frame, sent_frame
from bot.relay.queue import PutResult

MAX_REFUSED_FRAMES: Final = 10
"""Refused frames in a row after which the connection is closed (code 1008)."""
WARNINGS_PER_MINUTE: Final = 20
"""Warnings about refused frames and connections logged per minute; the rest are counted
and summed up in one line."""
STORE_FAILED: Final = "unavailable"
"""Error code for a transient failure of the relay's own queue: the sender retries."""

_FULL_DETAILS: Final = {
    PutResult.FULL: "the recipient's queue is full",
    PutResult.SENDER_FULL: "your share of the recipient's queue is full",
    PutResult.STRANGERS_FULL: "the recipient's queue for senders it has not heard is full",
    PutResult.UNSEEN_FULL: "the recipient has never connected and its queue is full",
    PutResult.ADDRESS_FULL: "your address has as much queued as it may",
    PutResult.RELAY_FULL: "the relay is full",
}


class WarningBudget:
    """Logs at most ``per_minute`` warnings a minute to ``logger``; the others are counted,
    and the count is logged (one line) when the next minute's first warning is."""

    def __init__(
        self,
        logger: logging.Logger,
        per_minute: int = WARNINGS_PER_MINUTE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = logger
        self._per_minute = per_minute
        self._clock = clock
        self._minute_started = -60.0
        self._logged = 0
        self._suppressed = 0

    def warn(self, message: str, *args: object) -> None:
        now = self._clock()
        if now - self._minute_started >= 60.0:
            if self._suppressed:
                self._log.warning("%d more such warnings in the last minute", self._suppressed)
            self._minute_started, self._logged, self._suppressed = now, 0, 0
        if self._logged < self._per_minute:
            self._logged += 1
            self._log.warning(message, *args)
        else:
            self._suppressed += 1


def refusal(
    warnings: WarningBudget, who: str, code: str, detail: str, envelope_id: str | None = None
) -> str:
    """Log a refused frame (never its contents, and not too often) and return the
    ``error`` frame for it."""
    warnings.warn("refused frame from %s: %s (%s)", who, code, detail)
    return error_frame(code, envelope_id, detail)


def send_answer(
    warnings: WarningBudget, who: str, envelope_id: str, result: PutResult | None
) -> str:
    """The answer to a ``send`` once its transaction is written: ``sent``, or why not
    (``None``: the store failed, and the sender tries again)."""
    if result is None:
        detail = "the relay queue failed, try again"
        return refusal(warnings, who, STORE_FAILED, detail, envelope_id)
    if result in (PutResult.QUEUED, PutResult.DUPLICATE):
        return sent_frame(envelope_id)  # queued now, or already waiting: stored once
    return refusal(warnings, who, ErrorCode.QUEUE_FULL, _FULL_DETAILS[result], envelope_id)


class RefusalStreak:
    """Refused frames in a row on one connection."""

    def __init__(self) -> None:
        self.in_a_row = 0

    def count(self, refused: bool) -> bool:
        """Record one answered frame; ``True`` once too many were refused in a row."""
        self.in_a_row = self.in_a_row + 1 if refused else 0
        return self.in_a_row >= MAX_REFUSED_FRAMES
