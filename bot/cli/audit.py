"""``skald-telegram audit``: export the audit trail as JSON lines or CSV."""

from __future__ import annotations

import argparse
from typing import Any

from bot.cli import add_config_option


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser("audit", help="export the audit trail")
    add_config_option(parser)
    parser.add_argument("--chat", type=int, help="only this chat")
    parser.add_argument("--since", help="only records at or after this ISO 8601 time")
    parser.add_argument("--format", choices=("jsonl", "csv"), default="jsonl")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from bot import commands

    return commands.audit_command(args)
