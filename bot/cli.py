"""The ``skald-telegram`` command line: one argparse subcommand per job.

Each subcommand imports its module lazily, so ``--version`` and ``identity`` stay fast and
a missing optional piece never breaks the others.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from bot import __version__
from bot.errors import SkaldError

log = logging.getLogger(__name__)


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="skald-telegram",
        description="Approve Skald agents' tool calls and answer their questions from Telegram.",
    )
    parser.add_argument("--version", action="version", version=f"skald-telegram {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug details")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    identity = sub.add_parser("identity", help="print this device's public card")
    _add_config_option(identity)

    run = sub.add_parser("run", help="run the bot (Telegram long polling + relay sessions)")
    _add_config_option(run)

    pair = sub.add_parser("pair", help="pair with an agent and bind it to a chat")
    _add_config_option(pair)
    pair.add_argument("--chat", type=int, required=True, help="Telegram chat id to bind to")
    pair.add_argument("--timeout", type=float, default=30.0, help=argparse.SUPPRESS)
    pair.add_argument("uri", help="the agent's pairing link: 'skald-pair:v1?…'")

    health = sub.add_parser("health", help="exit 0 if the running bot's status is fresh")
    _add_config_option(health)

    audit = sub.add_parser("audit", help="export the audit trail")
    _add_config_option(audit)
    audit.add_argument("--chat", type=int, help="only this chat")
    audit.add_argument("--since", help="only records at or after this ISO 8601 time")
    audit.add_argument("--format", choices=("jsonl", "csv"), default="jsonl")

    relay = sub.add_parser("relay", help="run the built-in zero-trust relay")
    relay.add_argument("--host", default="127.0.0.1", help="address to listen on")
    relay.add_argument("--port", type=int, default=8765, help="port to listen on")
    relay.add_argument("--data", default="./relay-data", help="folder for the relay's queue")
    relay.add_argument("--queue-cap", type=int,
                       help="envelopes kept per offline recipient (default: 10000)")
    relay.add_argument("--max-age", type=int,
                       help="seconds an undelivered envelope is kept (default: 604800, 7 days)")
    relay.add_argument("--queue-bytes", type=int,
                       help="bytes kept per recipient (default: 268435456, 256 MiB)")
    relay.add_argument("--sender-queue-cap", type=int,
                       help="envelopes kept per sender and recipient (default: 2500)")
    relay.add_argument("--sender-bytes", type=int,
                       help="bytes kept per sender and recipient (default: 67108864, 64 MiB)")
    relay.add_argument("--total-bytes", type=int,
                       help="bytes kept by the whole relay (default: 2147483648, 2 GiB)")

    demo = sub.add_parser("demo", help="try it: relay, demo agent and bot in one process")
    demo.add_argument("--config", help="take telegram.token from this file")
    demo.add_argument("--state", help="keep the demo's state here (default: a temporary folder)")
    demo.add_argument("--api-url", help="Bot API server (default: https://api.telegram.org)")

    demo_agent = sub.add_parser("demo-agent", help="run the demo agent alone against a relay")
    demo_agent.add_argument("--relay", required=True, help="the relay's ws:// or wss:// URL")
    demo_agent.add_argument("--name", help="the agent's name (default: Skald demo agent)")
    demo_agent.add_argument("--state", help="keep the agent's identity here")

    doctor = sub.add_parser("doctor", help="check the setup and say how to fix what is wrong")
    _add_config_option(doctor)

    render = sub.add_parser("render", help="print the Telegram card(s) for a payload file")
    render.add_argument("file", help="an approval, a question or a whole inbox_update (JSON)")
    render.add_argument("--chat-type", choices=("private", "group"), default="private")
    render.add_argument("--templates", help="a folder of templates overriding the built-in ones")
    return parser


def _add_config_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        help="configuration file (default: $SKALD_TELEGRAM_CONFIG or ./skald-telegram.toml)",
    )


def _run(args: argparse.Namespace) -> int:
    if args.command in ("identity", "run", "pair", "audit", "health"):
        from bot import commands

        return int(getattr(commands, f"{args.command}_command")(args))
    if args.command == "relay":
        from bot.relay.server import relay_command

        return relay_command(args)
    if args.command in ("demo", "demo-agent"):
        from bot import demo

        return demo.demo_command(args) if args.command == "demo" else demo.demo_agent_command(args)
    if args.command == "doctor":
        from bot.doctor import doctor_command

        return doctor_command(args)
    if args.command == "render":
        from bot.render.command import render_command

        return render_command(args)
    raise AssertionError(args.command)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # httpx logs every request URL, and Bot API URLs contain the bot token.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpcore").setLevel(logging.WARNING)
    try:
        return _run(args)
    except SkaldError as exc:
        print(f"skald-telegram: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (``skald-telegram render … | head``): not an error.
        sys.stderr.close()
        return 0
