"""``skald-telegram mcp``: a stdio MCP server for asking a person (``request_approval``,
``ask_human``); ``skald-telegram mcp gateway -- COMMAND ARGS…`` puts another MCP server
behind an approval. Both need the optional extra ``skald-telegram[mcp]``."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any, Final

from bot.cli.hook import seconds
from bot.errors import SkaldError

DEFAULT_TIMEOUT = 600.0
MISSING_EXTRA: Final = ("the mcp command needs the MCP extra: "
                        "pip install 'skald-telegram[mcp]'")


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "mcp",
        help="an MCP server for approvals and questions, or an approval gateway",
        usage="skald-telegram mcp [-h] [--state DIR] [gateway [--policy FILE] "
              "[--timeout SECONDS] [--name SERVER] [--filesystem] -- COMMAND ARGS...]",
        description=(
            "Without arguments: a stdio MCP server with the tools request_approval and "
            "ask_human. 'mcp gateway [--policy FILE] -- COMMAND ARGS...': a stdio MCP server "
            "that offers the tools of the MCP server COMMAND and asks before calling them."
        ),
    )
    parser.add_argument("--state", metavar="DIR", help="the agent host's state folder")
    modes = parser.add_subparsers(dest="mcp_mode", metavar="gateway", title="optional mode",
                                  help="omit it for the request_approval / ask_human server")
    gateway = modes.add_parser(
        "gateway",
        help="put the MCP server COMMAND behind an approval",
        description="A stdio MCP server that offers the tools of the MCP server COMMAND "
                    "and decides each call by the policy, asking in Telegram by default.",
    )
    gateway.add_argument("--state", metavar="DIR", default=argparse.SUPPRESS,
                         help="the agent host's state folder")
    gateway.add_argument("--policy", metavar="FILE",
                         help="TOML policy, [tools] glob = allow|ask|deny "
                              "(default: ask for every tool)")
    gateway.add_argument("--timeout", type=seconds, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                         help=f"how long to wait for a decision (default {DEFAULT_TIMEOUT:g})")
    gateway.add_argument("--name", metavar="SERVER",
                         help="the server's name on the cards, as the MCP client's "
                              "configuration calls it (default: the name the upstream gives)")
    gateway.add_argument("--filesystem", action="store_true",
                         help="COMMAND is a filesystem MCP server on this machine (such as "
                              "@modelcontextprotocol/server-filesystem): the cards of its "
                              "write_file and edit_file show the diff against the file on disk")
    gateway.add_argument("upstream", nargs=argparse.REMAINDER, metavar="-- COMMAND ARGS",
                         help="the upstream MCP server to start")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        import mcp  # noqa: F401  # the optional extra: only these commands need it
    except ImportError:
        raise SkaldError(MISSING_EXTRA) from None
    import anyio

    from bot.integrations.approval import host_connector

    # stdout carries the MCP protocol: everything else goes to stderr, quietly.
    logging.getLogger().setLevel(logging.WARNING if not args.verbose else logging.DEBUG)
    connect = host_connector(args.state)
    if args.mcp_mode is None:
        from bot.integrations.mcp_server import build_server

        anyio.run(build_server(connect).run_stdio_async)
        return 0
    command = args.upstream[1:] if args.upstream[:1] == ["--"] else args.upstream
    if not command:
        print("skald-telegram: mcp gateway needs the upstream server: "
              "mcp gateway -- COMMAND ARGS...", file=sys.stderr)
        return 2
    from bot.integrations.gateway import run_gateway
    from bot.integrations.policy import load_policy

    policy = load_policy(args.policy)
    anyio.run(lambda: run_gateway(command, policy, connect, timeout=args.timeout,
                                         server_name=args.name,
                                         filesystem=args.filesystem))
    return 0
