"""``skald-telegram run``: run the bot."""

from __future__ import annotations

import argparse
from typing import Any

from bot.cli import add_config_option


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "run", help="run the bot (Telegram long polling + relay sessions)")
    add_config_option(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import asyncio

    from bot.app import run_until_signalled
    from bot.config import load_config

    asyncio.run(run_until_signalled(load_config(args.config)))
    return 0
