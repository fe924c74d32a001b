"""``skald-telegram render``: print the Telegram card(s) a payload file becomes."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "render", help="print the Telegram card(s) for a payload file")
    parser.add_argument("file", help="an approval, a question or a whole inbox_update (JSON)")
    parser.add_argument("--chat-type", choices=("private", "group"), default="private")
    parser.add_argument("--templates", help="a folder of templates overriding the built-in ones")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from bot.preview import render_command

    return render_command(args)
