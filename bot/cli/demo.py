"""``skald-telegram demo``: relay, demo agent and bot in one process."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "demo", help="try it: relay, demo agent and bot in one process")
    parser.add_argument("--config", help="take telegram.token from this file")
    parser.add_argument("--state",
                        help="keep the demo's state here (default: a temporary folder)")
    parser.add_argument("--api-url", help="Bot API server (default: https://api.telegram.org)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from bot import demo

    return demo.demo_command(args)
