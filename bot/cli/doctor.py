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
    """0 only if every check passes."""
    import asyncio
    import sys

    from bot.doctor import diagnose, format_checks

    checks = asyncio.run(diagnose(args.config))
    sys.stdout.write(format_checks(checks))
    return 0 if all(check.ok for check in checks) else 1
