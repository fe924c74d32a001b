"""The ``skald-telegram`` command line: one module per subcommand.

Each module in :data:`SUBCOMMANDS` has ``register(sub)``, which adds its parser and sets
``handler`` to a function ``(args) -> exit code``. Modules import their heavy dependencies
inside the handler, so ``--version`` and ``identity`` stay fast and a missing optional
piece never breaks the others.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import Final

from bot import __version__
from bot.errors import SkaldError
from bot.logsafety import configure_logging
from bot.statedir import PRIVATE_UMASK

log = logging.getLogger(__name__)

# Importing httpx (the Bot API client's transport, and the hook's) imports httpx's own
# command-line tool, and with it click, rich and pygments where they are installed; no
# command here uses it. Marked as absent, it is never loaded: megabytes of memory in every
# process and milliseconds of every start (httpx falls back to a stub of its own).
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]  # None: "not there"

SUBCOMMANDS: Final = (
    "identity",
    "run",
    "pair",
    "health",
    "audit",
    "relay",
    "demo",
    "demo_agent",
    "doctor",
    "migrate",
    "render",
    "agent",
    "ask",
    "hook",
    "mcp",
)
"""The modules of :mod:`bot.cli`, one per subcommand, in ``--help`` order."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="skald-telegram",
        description="Approve Skald agents' tool calls and answer their questions from Telegram.",
    )
    parser.add_argument("--version", action="version", version=f"skald-telegram {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug details")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(f"bot.cli.{name}").register(sub)
    return parser


def add_config_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        help="configuration file (default: $SKALD_TELEGRAM_CONFIG or ./skald-telegram.toml)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    configure_logging(verbose=args.verbose)
    os.umask(PRIVATE_UMASK)
    # Opt in to PTB's future behaviour (RetryAfter.retry_after as a timedelta) so that
    # reading it warns neither in the gateway nor in PTB's rate limiter.
    os.environ.setdefault("PTB_TIMEDELTA", "1")
    try:
        return int(args.handler(args))
    except SkaldError as exc:
        print(f"skald-telegram: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (``skald-telegram render … | head``): not an error.
        sys.stderr.close()
        return 0
