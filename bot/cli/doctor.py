"""``skald-telegram doctor``: check the setup and say how to fix what is wrong."""

from __future__ import annotations

import argparse
from typing import Any

from bot.cli import add_config_option


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "doctor", help="check the setup and say how to fix what is wrong")
    add_config_option(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from bot.doctor import doctor_command

    return doctor_command(args)
