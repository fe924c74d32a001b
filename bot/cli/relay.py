"""``skald-telegram relay``: run the built-in zero-trust relay."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "relay", help="run the built-in zero-trust relay")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=8765, help="port to listen on")
    parser.add_argument("--data", default="./relay-data", help="folder for the relay's queue")
    parser.add_argument("--queue-cap", type=int,
                        help="envelopes kept per offline recipient (default: 10000)")
    parser.add_argument("--max-age", type=int,
                        help="seconds an undelivered envelope is kept (default: 604800, 7 days)")
    parser.add_argument("--queue-bytes", type=int,
                        help="bytes kept per recipient (default: 268435456, 256 MiB)")
    parser.add_argument("--sender-queue-cap", type=int,
                        help="envelopes kept per sender and recipient (default: 2500)")
    parser.add_argument("--sender-bytes", type=int,
                        help="bytes kept per sender and recipient (default: 67108864, 64 MiB)")
    parser.add_argument("--total-bytes", type=int,
                        help="bytes kept by the whole relay (default: 2147483648, 2 GiB)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from bot.relay.server import relay_command

    return relay_command(args)
