"""Time as the store keeps it (Unix milliseconds) and as datetimes (aware, UTC)."""

from __future__ import annotations

from datetime import UTC, datetime


def from_ms(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def maybe_from_ms(ms: int | None) -> datetime | None:
    return from_ms(ms) if ms is not None else None


def to_ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)
