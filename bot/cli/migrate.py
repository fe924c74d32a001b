"""``skald-telegram migrate``: bring the state database's schema up to date."""

from __future__ import annotations

import argparse
from typing import Any

from bot.cli import add_config_option


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "migrate", help="bring the state database's schema up to date (PostgreSQL needs it)")
    add_config_option(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Says what it did in one line; a newer schema than this version knows fails."""
    from bot.config import load_config
    from bot.store import Store

    config = load_config(args.config, require_token=False)
    where, before, after = Store.migrate(config.database)
    if before == after:
        print(f"{where} is at schema {after} already: nothing to do")
    else:
        print(f"{where} migrated from schema {before} to {after}")
    return 0
