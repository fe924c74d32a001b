"""``skald-telegram relay``: run the built-in zero-trust relay until SIGTERM or Ctrl-C.

Every limit is a flag; ``--help`` shows each default, taken from the constants of
:mod:`bot.relay.limits`.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from bot.heap import keep_large_buffers
from bot.relay import limits
from bot.signals import until_signalled

if TYPE_CHECKING:
    from bot.relay.server import RelayServer

log = logging.getLogger(__name__)


def _mib(size: int) -> str:
    return f"{size}, {size // limits.MIB} MiB"


def _days(seconds: float) -> str:
    days = seconds / 86400
    return f"{seconds:g}, {days:g} day{'s' if days != 1 else ''}"


_LIMITS: tuple[tuple[str, str, float, str], ...] = (
    # (flag, what it bounds, default, how the default reads)
    ("--queue-cap", "envelopes kept per recipient", limits.DEFAULT_RECIPIENT_COUNT, ""),
    ("--queue-bytes", "bytes kept per recipient", limits.DEFAULT_RECIPIENT_BYTES, "mib"),
    (
        "--sender-queue-cap",
        "envelopes kept per sender and recipient",
        limits.DEFAULT_SENDER_COUNT,
        "",
    ),
    ("--sender-bytes", "bytes kept per sender and recipient", limits.DEFAULT_SENDER_BYTES, "mib"),
    (
        "--stranger-queue-cap",
        "envelopes kept per recipient from senders it has never acknowledged",
        limits.DEFAULT_STRANGER_COUNT,
        "",
    ),
    (
        "--stranger-bytes",
        "bytes kept per recipient from senders it has never acknowledged",
        limits.DEFAULT_STRANGER_BYTES,
        "mib",
    ),
    (
        "--unseen-queue-cap",
        "envelopes kept for a recipient that has never connected",
        limits.DEFAULT_UNSEEN_COUNT,
        "",
    ),
    (
        "--unseen-bytes",
        "bytes kept for a recipient that has never connected",
        limits.DEFAULT_UNSEEN_BYTES,
        "mib",
    ),
    (
        "--address-queue-cap",
        "envelopes kept from one network address",
        limits.DEFAULT_ADDRESS_COUNT,
        "",
    ),
    ("--address-bytes", "bytes kept from one network address", limits.DEFAULT_ADDRESS_BYTES, "mib"),
    ("--total-bytes", "bytes kept by the whole relay", limits.DEFAULT_TOTAL_BYTES, "mib"),
    ("--max-age", "seconds an undelivered envelope is kept", limits.DEFAULT_MAX_AGE_S, "days"),
    (
        "--unseen-max-age",
        "seconds an envelope for a recipient that has never connected is kept",
        limits.DEFAULT_UNSEEN_MAX_AGE_S,
        "days",
    ),
    ("--max-connections", "connections in all", limits.DEFAULT_MAX_CONNECTIONS, ""),
    (
        "--max-unauthenticated-per-address",
        "connections from one address that have not authenticated yet",
        limits.DEFAULT_MAX_UNAUTHENTICATED_PER_ADDRESS,
        "",
    ),
    (
        "--max-authenticated-per-address",
        "authenticated sessions from one address",
        limits.DEFAULT_MAX_AUTHENTICATED_PER_ADDRESS,
        "",
    ),
    (
        "--idle-timeout",
        "seconds after which a session that carried nothing is closed; 0: never",
        limits.DEFAULT_IDLE_TIMEOUT_S,
        "",
    ),
)


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "relay",
        help="run the built-in zero-trust relay",
        description="Run the built-in zero-trust relay until SIGTERM or Ctrl-C.",
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default: %(default)s)"
    )
    parser.add_argument(
        "--port",
        type=int,
        default=limits.DEFAULT_PORT,
        help="port to listen on (default: %(default)s)",
    )
    parser.add_argument(
        "--data", default="./relay-data", help="folder for the relay's queue (default: %(default)s)"
    )
    parser.add_argument(
        "--store",
        metavar="URL",
        help="keep the queue in this PostgreSQL database (postgresql://…), shared by every"
        " relay node given the same URL (default: none: SQLite in the data folder)",
    )
    for flag, what, default, unit in _LIMITS:
        shown = (
            _mib(int(default))
            if unit == "mib"
            else _days(default)
            if unit == "days"
            else f"{default:g}"
        )
        parser.add_argument(
            flag,
            type=float if isinstance(default, float) else int,
            default=default,
            metavar="N",
            help=f"{what} (default: {shown})",
        )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from bot.errors import RelayError
    from bot.relay.server import RelayServer

    for flag, *_ in _LIMITS:
        value = getattr(args, _dest(flag))
        if value < 0:
            raise RelayError(f"{flag} must not be negative (got {value:g})")
    relay = RelayServer(
        Path(args.data),
        host=args.host,
        port=args.port,
        queue_cap=args.queue_cap,
        queue_bytes=args.queue_bytes,
        sender_queue_cap=args.sender_queue_cap,
        sender_bytes=args.sender_bytes,
        stranger_queue_cap=args.stranger_queue_cap,
        stranger_bytes=args.stranger_bytes,
        unseen_queue_cap=args.unseen_queue_cap,
        unseen_bytes=args.unseen_bytes,
        address_queue_cap=args.address_queue_cap,
        address_bytes=args.address_bytes,
        total_bytes=args.total_bytes,
        max_age_s=args.max_age,
        unseen_max_age_s=args.unseen_max_age,
        connections=limits.ConnectionLimits(
            total=args.max_connections,
            unauthenticated_per_address=args.max_unauthenticated_per_address,
            authenticated_per_address=args.max_authenticated_per_address,
        ),
        idle_timeout=args.idle_timeout,
        store=args.store,
    )
    asyncio.run(_serve_until_signalled(relay))
    return 0


def _dest(flag: str) -> str:
    return flag.removeprefix("--").replace("-", "_")


GC_THRESHOLDS: Final = (2000, 10, 100)
"""The collector's thresholds in the relay process (Python's defaults: 700, 10, 10)."""
SWITCH_INTERVAL_S: Final = 0.001
"""How long a thread may hold the interpreter lock while another waits (default 5 ms)."""


def _tune_for_serving() -> None:
    """Keep the event loop's pauses short while it serves.

    The process holds many long-lived objects (each session's connection, tasks and
    buffers), and a full collection visits them all: about 90 ms for a thousand sessions,
    during which no frame moves. Objects from start-up are frozen out of collections;
    a larger young generation lets each envelope's objects die before a collection sees
    them, so fewer reach the old generation, which is collected ten times less often than
    by default. The queue's transactions run in a worker thread that takes the interpreter
    lock between statements: with a shorter switch interval it waits at most 1 ms for the
    event loop each time, not 5. Large frames' buffers are reused, not mapped afresh
    (:mod:`bot.heap`)."""
    keep_large_buffers()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    sys.setswitchinterval(SWITCH_INTERVAL_S)


async def _serve_until_signalled(relay: RelayServer) -> None:
    async with relay:
        _tune_for_serving()
        log.info("relay listening on %s", relay.url)
        await until_signalled()
        log.info("relay shutting down")
