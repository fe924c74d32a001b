"""``skald-telegram pair``: pair with an agent beside a stopped bot and bind it to a chat."""

from __future__ import annotations

import argparse
from typing import Any

from bot.cli import add_config_option


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "pair", help="pair with an agent and bind it to a chat")
    add_config_option(parser)
    parser.add_argument("--chat", type=int, required=True, help="Telegram chat id to bind to")
    parser.add_argument("--timeout", type=float, default=30.0, help=argparse.SUPPRESS)
    parser.add_argument("uri", help="the agent's pairing link: 'skald-pair:v1?…'")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from bot import commands

    return commands.pair_command(args)
