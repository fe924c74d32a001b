"""``skald-telegram hook AGENT``: a coding agent's approval hook, answered from Telegram;
``hook install AGENT`` and ``hook uninstall AGENT`` put it in (and take it out of) the
agent's settings."""

from __future__ import annotations

import argparse
import asyncio
import os
import select
import signal
import sys
from collections.abc import Coroutine
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from bot.integrations.agents import AGENTS

if TYPE_CHECKING:
    from bot.integrations.contract import HookAnswer

DEFAULT_TIMEOUT = 300.0


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "hook",
        help="answer a coding agent's approval hook from Telegram",
        description=(
            "hook AGENT reads one hook event on stdin, asks for an approval through the "
            "agent host and writes the agent's answer on stdout. hook install AGENT and "
            "hook uninstall AGENT add it to, or take it out of, the agent's settings. "
            "'hook AGENT --help' says what each takes."
        ),
    )
    targets = parser.add_subparsers(dest="target", metavar="AGENT|install|uninstall",
                                    required=True)
    for name, agent in AGENTS.items():
        answer = targets.add_parser(
            name, help=f"answer one {agent.display_name} hook event",
            description=f"Read one {agent.display_name} hook event on stdin, ask for an "
                        "approval through the agent host and write the answer on stdout.")
        _state(answer)
        _decision(answer)
    install = targets.add_parser(
        "install", help="add the hook to an agent's settings",
        description="Merge the hook into the agent's settings file and print what changed. "
                    "A --state or $SKALD_AGENT_STATE folder is pinned in the hook's command.")
    _agent(install)
    _state(install)
    _decision(install)
    _scope(install)
    uninstall = targets.add_parser(
        "uninstall", help="take the hook out of an agent's settings",
        description="Take the hook out of the agent's settings file and print what changed.")
    _agent(uninstall)
    _scope(uninstall)
    parser.set_defaults(handler=run)


def _agent(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("agent", nargs="?", choices=[*AGENTS], metavar="AGENT",
                        help=f"one of {', '.join(AGENTS)}")


def _state(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--state", metavar="DIR", help="the agent host's state folder")


def _decision(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--timeout", type=seconds, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                        help=f"how long to wait for a decision (default {DEFAULT_TIMEOUT:g})")
    parser.add_argument("--on-error", choices=("deny", "ask"), default="deny",
                        help="when no decision can be had: deny (default), or let the agent "
                             "ask in its own prompt")


def _scope(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scope", choices=("user", "project"), default="user",
                        help="the user's settings (default) or the current project's")


def run(args: argparse.Namespace) -> int:
    if args.target in ("install", "uninstall"):
        if args.agent is None:
            print(f"skald-telegram: hook {args.target} needs an AGENT: {', '.join(AGENTS)}",
                  file=sys.stderr)
            return 2
        return _change_settings(args)
    return _answer(args)


def _answer(args: argparse.Namespace) -> int:
    from bot.integrations.approval import failure, host_connector
    from bot.integrations.hook import run_hook, stopped_answer
    from bot.integrations.waiting import Watch

    contract = AGENTS[args.target].contract()
    raw = ""
    for signum in STOP_SIGNALS:
        signal.signal(signum, _stopped)
    # An agent may start the hook with these blocked; a stop must still reach it.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    try:
        raw = _read_input()
        answer = asyncio.run(_until_stopped(run_hook(
            contract, raw, host_connector(args.state), timeout=args.timeout,
            on_error=args.on_error, watch=Watch(sys.stderr, "skald-telegram hook"),
        )))
    except Stopped:
        answer = stopped_answer(contract, raw)
    except Exception as exc:  # fail closed, and never a traceback where the agent reads
        answer = contract.answer(None, failure(f"internal error: {exc}", args.on_error))
    for signum in STOP_SIGNALS:  # the answer is decided: nothing may cut it short now
        signal.signal(signum, signal.SIG_IGN)
    if answer.stdout:
        sys.stdout.write(answer.stdout + "\n")
        sys.stdout.flush()
    if answer.stderr:
        print(answer.stderr, file=sys.stderr)
    return answer.exit_code


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
"""How an agent (or a closed terminal) stops a hook; a stopped hook answers deny, since an
agent reads a hook that ends without an answer as no objection."""


READ_WAKE_S = 0.2
"""How often reading the event looks up, so that a stop signal taken by another thread
still stops it."""


def _read_input() -> str:
    """Everything on stdin, as UTF-8; a blocked read is never left waiting on a stop."""
    chunks: list[bytes] = []
    fd = sys.stdin.fileno()
    while True:
        readable, _, _ = select.select([fd], [], [], READ_WAKE_S)
        if not readable:
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks).decode("utf-8")
        chunks.append(chunk)


class Stopped(BaseException):
    """The hook received one of :data:`STOP_SIGNALS` before it had an answer."""


def _stopped(signum: int, frame: FrameType | None) -> None:
    raise Stopped(signal.Signals(signum).name)


async def _until_stopped(hook: Coroutine[Any, Any, HookAnswer]) -> HookAnswer:
    """Run ``hook``; a stop signal cancels it (its pending item is withdrawn on the way out)
    and raises :class:`Stopped` once it has ended."""
    task = asyncio.ensure_future(hook)
    loop = asyncio.get_running_loop()
    signalled: list[int] = []

    def stop(signum: int) -> None:
        if not signalled:
            signalled.append(signum)
            task.cancel()

    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, stop, signum)
    try:
        answer = await task
    except asyncio.CancelledError:
        if not signalled:
            raise
    finally:
        for signum in STOP_SIGNALS:  # back to raising Stopped until the answer is out
            loop.remove_signal_handler(signum)
            signal.signal(signum, _stopped)
    if signalled:
        raise Stopped(signal.Signals(signalled[0]).name)
    return answer


def _change_settings(args: argparse.Namespace) -> int:
    from bot.integrations.settings import hook_command, install, settings_path, uninstall

    agent = AGENTS[args.agent]
    path = settings_path(agent, args.scope, Path.home(), Path.cwd())
    if args.target == "uninstall":
        lines = uninstall(agent, path)
    else:
        extra = []
        state = args.state or os.environ.get("SKALD_AGENT_STATE")
        if state:  # the agent may start the hook without our environment: pin the folder
            extra += ["--state", str(Path(state).expanduser().resolve())]
        if args.on_error != "deny":
            extra += ["--on-error", args.on_error]
        command = hook_command(_program(), args.agent, args.timeout, extra)
        lines = install(agent, path, command, args.timeout)
    print("\n".join(lines))
    return 0


def _program() -> list[str]:
    """How the agent should start us: the ``skald-telegram`` script beside this Python if
    there is one (agents rarely share our PATH), else ``python -m bot``."""
    script = Path(sys.executable).parent / "skald-telegram"
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-m", "bot"]


def seconds(text: str) -> float:
    """An argparse type: a number of seconds from 1 to 86400."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 1 <= value <= 86400:
        raise argparse.ArgumentTypeError("must be between 1 and 86400 seconds")
    return value
