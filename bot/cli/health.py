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
    from bot.config import load_config
    from bot.health import check_status

    config = load_config(args.config, require_token=False)
    healthy, detail = check_status(config.status_path)
    print(detail)
    return 0 if healthy else 1
