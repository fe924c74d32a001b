"""Time, one convention: the bot reads a :data:`Clock` (float seconds since the epoch, like
:func:`time.time`), stores and compares Unix milliseconds (:func:`now_ms`), and shows aware
UTC datetimes. Durations are float seconds, named ``…_S``; stored times end in ``_ms`` or
``_at``."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], float]
"""Seconds since the epoch; :func:`time.time` in production, a controllable one in tests."""


def now_ms(clock: Clock) -> int:
    """The clock's time in Unix milliseconds."""
    return int(clock() * 1000)


def from_ms(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def maybe_from_ms(ms: int | None) -> datetime | None:
    return from_ms(ms) if ms is not None else None


def to_ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)
