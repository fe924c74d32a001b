"""``skald-telegram demo-agent``: the demo agent alone, with a pairing link and QR code."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "demo-agent", help="run the demo agent alone against a relay")
    parser.add_argument("--relay", required=True, help="the relay's ws:// or wss:// URL")
    parser.add_argument("--name", help="the agent's name (default: Skald demo agent)")
    parser.add_argument("--state", help="keep the agent's identity here")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from bot import demo_agent

    return demo_agent.demo_agent_command(args)
