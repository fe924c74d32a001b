"""The relay's limits and their defaults: plain constants, cheap to import (the command
line's help shows them), used by :mod:`bot.relay.queue` and :mod:`bot.relay.server`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

MIB: Final = 1024 * 1024
DEFAULT_RECIPIENT_COUNT: Final = 10_000
DEFAULT_RECIPIENT_BYTES: Final = 256 * MIB
DEFAULT_SENDER_COUNT: Final = 2_500
DEFAULT_SENDER_BYTES: Final = 64 * MIB
DEFAULT_STRANGER_COUNT: Final = 1_000
DEFAULT_STRANGER_BYTES: Final = 16 * MIB
DEFAULT_UNSEEN_COUNT: Final = 100
DEFAULT_UNSEEN_BYTES: Final = 4 * MIB
DEFAULT_ADDRESS_COUNT: Final = 20_000
DEFAULT_ADDRESS_BYTES: Final = 512 * MIB
DEFAULT_TOTAL_BYTES: Final = 2048 * MIB
DEFAULT_MAX_AGE_S: Final = 7 * 24 * 3600
DEFAULT_UNSEEN_MAX_AGE_S: Final = 24 * 3600
DEFAULT_PORT: Final = 8765
DEFAULT_MAX_CONNECTIONS: Final = 4096
DEFAULT_MAX_UNAUTHENTICATED_PER_ADDRESS: Final = 32
DEFAULT_MAX_AUTHENTICATED_PER_ADDRESS: Final = 128
DEFAULT_IDLE_TIMEOUT_S: Final = 900.0
"""A session that neither sends a frame nor gets a delivery for this long is closed."""
DEFAULT_RESCAN_S: Final = 2.0
"""On a shared PostgreSQL queue: how often each session's queue is checked for envelopes
no notification announced."""


@dataclass(frozen=True)
class QueueLimits:
    """How much may wait. Sender limits apply to each (sender, recipient) pair, stranger
    and unseen limits to each recipient, address limits to each network address."""

    recipient_count: int = DEFAULT_RECIPIENT_COUNT
    recipient_bytes: int = DEFAULT_RECIPIENT_BYTES
    sender_count: int = DEFAULT_SENDER_COUNT
    sender_bytes: int = DEFAULT_SENDER_BYTES
    stranger_count: int = DEFAULT_STRANGER_COUNT
    stranger_bytes: int = DEFAULT_STRANGER_BYTES
    unseen_count: int = DEFAULT_UNSEEN_COUNT
    unseen_bytes: int = DEFAULT_UNSEEN_BYTES
    address_count: int = DEFAULT_ADDRESS_COUNT
    address_bytes: int = DEFAULT_ADDRESS_BYTES
    total_bytes: int = DEFAULT_TOTAL_BYTES


@dataclass(frozen=True)
class ConnectionLimits:
    """How many connections the relay holds: in all, and per network address before and
    after authentication."""

    total: int = DEFAULT_MAX_CONNECTIONS
    unauthenticated_per_address: int = DEFAULT_MAX_UNAUTHENTICATED_PER_ADDRESS
    authenticated_per_address: int = DEFAULT_MAX_AUTHENTICATED_PER_ADDRESS
