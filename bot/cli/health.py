"""``skald-telegram health``: exit 0 if the running bot's status is fresh."""

from __future__ import annotations

import argparse
from typing import Any

from bot.cli import add_config_option


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "health", help="exit 0 if the running bot's status is fresh")
    add_config_option(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from bot import commands

    return commands.health_command(args)
