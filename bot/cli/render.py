"""``skald-telegram render``: print the Telegram card(s) a payload file becomes."""

from __future__ import annotations

import argparse
from typing import Any

from bot.playground import DEFAULT_URL, KEY_VARIABLE


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "render", help="print the Telegram card(s) for a payload file",
        description="Print the Telegram card(s) a payload file becomes. Examples to start "
                    "from: docs/examples/approval-diff.json (an approval with a diff), "
                    "docs/examples/question.json (a question) and "
                    "docs/examples/approval-secret.json (a command holding a secret).")
    parser.add_argument("file", help="an approval, a question or a whole inbox_update (JSON)")
    parser.add_argument("--chat-type", choices=("private", "group"), default="private",
                        help="render the card as a private chat (default) or a group sees it")
    parser.add_argument("--templates", help="a folder of templates overriding the built-in ones")
    parser.add_argument("--playground", nargs="?", const=DEFAULT_URL, metavar="URL",
                        help="post the cards into a running playground (skald-telegram demo "
                             "without a token) instead of printing them; the playground needs "
                             f"its key: run the line it prints (the key in ${KEY_VARIABLE}) or "
                             "give the address it prints (the key in ?key=…); URL defaults to "
                             f"{DEFAULT_URL}")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.playground:
        from bot.playground.post import post_command

        return post_command(args)
    from bot.preview import render_command

    return render_command(args)
