"""``skald-telegram demo``: relay, demo agent and bot in one process."""

from __future__ import annotations

import argparse
from typing import Any

from bot.playground import DEFAULT_PORT


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "demo", help="try it: relay, demo agent and bot in one process (the playground "
                       "in a browser without a token)")
    parser.add_argument("--config", help="take telegram.token from this file")
    parser.add_argument("--state",
                        help="keep the demo's state here (default: a temporary folder; for "
                             "the playground, ~/.local/state/skald-telegram/playground)")
    parser.add_argument("--fresh", action="store_true",
                        help="playground: a throwaway state folder (a new bot identity)")
    parser.add_argument("--api-url", help="Bot API server (default: https://api.telegram.org)")
    parser.add_argument("--playground", action="store_true",
                        help="run the local playground even with a token (the default without)")
    parser.add_argument("--no-browser", action="store_true",
                        help="playground: print the page's address, do not open a browser")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help="playground: the page and Bot API port on 127.0.0.1 "
                             f"(default {DEFAULT_PORT}; 0 for any free port)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from bot import demo

    return demo.demo_command(args)
