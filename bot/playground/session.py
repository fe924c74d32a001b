"""``skald-telegram demo`` without a token: the playground.

Everything runs in one process and listens on 127.0.0.1 only: the local Bot API stand-in
with its web page, the built-in relay, the demo agent and the real bot. The demo agent is
paired at once with your private chat and with a group, "Ops team", whose approvals need
two of its approvers; the page shows both chats and lets you act as any of their members.

The page answers only its own key (:mod:`bot.playground.page`), a fresh secret each run: the
address that carries it is printed, and opened in the browser through a file in the state
folder, since a command line (the browser's) is visible to every user of the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import socket
import sys
import tempfile
import webbrowser
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, TextIO
from urllib.parse import urlsplit

from bot.app import Bot
from bot.config import parse_config
from bot.demo_agent import AGENT_NAME, DemoAgent, pair_chat, quiet_logs
from bot.errors import SkaldError
from bot.keyfile import load_or_create_identity
from bot.playground import DEFAULT_PORT, KEY_VARIABLE
from bot.playground.miniapp import MiniAppLinks
from bot.playground.page import page_routes, playground_url
from bot.playground.stub import LOOPBACK, TelegramStub
from bot.protocol.payloads import Person
from bot.relay.server import RelayServer
from bot.render import Renderer
from bot.signals import run_until_stopped
from bot.testing.agent import Agent
from skald_telegram.client import default_state_dir as agent_state_dir

BOT_NAME: Final = "Skald Playground"
BOT_USERNAME: Final = "skald_playground_bot"
ADA: Final = Person("Ada Lovelace", 1001, "ada")
BOB: Final = Person("Bob Builder", 1002, "bob")
CAROL: Final = Person("Carol Shaw", 1003, "carol")
DAVE: Final = Person("Dave Reed", 1004, "dave")
YOU: Final = 1001
"""Ada's user id: the page acts as her first, and her private chat has this id."""
OPS_TEAM: Final = -1001000000042
OPS_TITLE: Final = "Ops team"
OPS_APPROVERS: Final = (1001, 1002, 1003)
OPS_OBSERVERS: Final = (1004,)
OPS_QUORUM: Final = 2

LOOPBACK_NOTICE: Final = (
    "🔒 Every socket of the playground (page, Bot API, relay) listens on 127.0.0.1 only: "
    "it is for you, on this machine."
)


class PlaygroundError(SkaldError):
    """The playground cannot start (its port is taken, say)."""


@dataclass(frozen=True)
class PlaygroundOptions:
    """What the playground runs with."""

    state: Path | None = None
    """Where the relay, the bot and the agent keep their state (their identities, the bot
    token and the relay's port, so that a restart keeps a paired agent host's pairing); a
    temporary folder if unset."""
    port: int = DEFAULT_PORT
    open_browser: bool = True
    chat_pace_s: float = 1.0


async def run_playground(options: PlaygroundOptions, *, stop: asyncio.Event,
                         out: TextIO) -> int:
    """Run the playground until ``stop`` is set; the exit code."""
    def say(line: str) -> None:
        print(line, file=out, flush=True)

    say("🧪 PLAYGROUND: a local stand-in for Telegram; no token and no account needed.")
    say(LOOPBACK_NOTICE)
    with contextlib.ExitStack() as cleanup:
        state = options.state
        if state is None:
            state = Path(cleanup.enter_context(tempfile.TemporaryDirectory(prefix="skald-play-")))
        state.mkdir(mode=0o700, parents=True, exist_ok=True)
        token = _kept(state / TOKEN_FILE,
                      lambda: f"{secrets.randbelow(10**9) + 10**9}:{secrets.token_urlsafe(24)}")
        relay_port = int(_kept(state / RELAY_PORT_FILE, lambda: str(_free_port())))
        key = secrets.token_urlsafe(24)
        miniapp_port = int(_kept(state / MINIAPP_PORT_FILE, lambda: str(_free_port())))
        miniapp = MiniAppLinks(f"http://{LOOPBACK}:{miniapp_port}/app", BOT_USERNAME, token)
        stub = _stand_in(token, key, options.port, miniapp)
        try:
            async with stub, RelayServer(state / "relay", host=LOOPBACK,
                                         port=relay_port) as relay:
                identity = load_or_create_identity(state / "demo-agent.json", AGENT_NAME)
                agent = Agent(identity, relay.url)
                demo = DemoAgent(agent, out)
                await agent.start()
                try:
                    config = parse_config(_config(token, stub.api_url, options, miniapp),
                                          base=state)
                    async with Bot(config) as running:
                        renderer = Renderer(config.templates_dir)
                        for chat_id, place in ((YOU, "your private chat"),
                                               (OPS_TEAM, f"the group “{OPS_TITLE}”")):
                            if not await pair_chat(running, agent, chat_id, ADA, renderer):
                                raise PlaygroundError("the demo agent did not pair in time")
                            say(f"🔗 Paired the demo agent with {place}.")
                        say(f"📁 State: {state} (kept across restarts; --fresh for a "
                            "throwaway one)")
                        say(f"🔑 The bot's token, for telegram.api_url = {stub.api_url}: "
                            f"in {state / TOKEN_FILE} (readable by you only)")
                        say(f"📡 Relay: {relay.url}. To connect your own agent host:")
                        say(f"   skald-telegram agent serve --relay {relay.url} "
                            "--state ~/.local/state/skald-play-agent")
                        say("   skald-telegram agent pair --state "
                            "~/.local/state/skald-play-agent")
                        say("   then, in the page as Ada (an admin), send /pair <link> "
                            "with the link it prints.")
                        url = playground_url(stub.api_url, key)
                        say(f"👉 Open {url}  (the key in it is the page's password)")
                        say(f"   Try a payload: {KEY_VARIABLE}={key} skald-telegram render "
                            f"FILE.json --playground {stub.api_url}/")
                        say("   Ctrl-C stops the playground.")
                        if options.open_browser:
                            opener = _opener(state, url)
                            cleanup.callback(opener.unlink, missing_ok=True)
                            webbrowser.open(opener.as_uri())
                        demo.submit(datetime.now(UTC), where="the page")
                        await demo.report(stop)
                        say("Stopping the playground…")
                finally:
                    await agent.stop()
        except OSError as exc:
            raise PlaygroundError(
                f"cannot listen on {LOOPBACK}:{options.port}: {exc.strerror or exc} "
                "(pass --port 0 for any free port)"
            ) from exc
    return 0


TOKEN_FILE: Final = "bot-token"
RELAY_PORT_FILE: Final = "relay-port"
MINIAPP_PORT_FILE: Final = "miniapp-port"
"""The ports kept in the state folder: cards posted before a restart still link to them."""


def default_state_dir() -> Path:
    """``$XDG_STATE_HOME/skald-telegram/playground`` (XDG's default:
    ``~/.local/state/skald-telegram/playground``), beside the agent host's folder."""
    return agent_state_dir().parent / "playground"


def _kept(path: Path, make: Callable[[], str]) -> str:
    """The value kept in ``path`` (0600), made and kept there by ``make`` the first time."""
    try:
        return path.read_text("utf-8").strip()
    except FileNotFoundError:
        pass
    value = make()
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        file.write(value + "\n")
    return value


def _free_port() -> int:
    """A loopback port free now."""
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        port: int = probe.getsockname()[1]
        return port


def _opener(state: Path, url: str) -> Path:
    """A page in the state folder (0600) that sends the browser on to ``url``."""
    path = state / "open-playground.html"
    path.unlink(missing_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as page:
        page.write(f'<!doctype html><meta http-equiv="refresh" content="0; url={url}">\n')
    return path


def _stand_in(token: str, key: str, port: int, miniapp: MiniAppLinks) -> TelegramStub:
    stub = TelegramStub(token, port=port, bot_name=BOT_NAME, bot_username=BOT_USERNAME,
                        rate_limits=True)
    for person in (ADA, BOB, CAROL, DAVE):
        first, _, last = person.name.partition(" ")
        stub.add_user(_user_id(person), first, last or None, username=person.username)
    stub.add_private_chat(YOU)
    members = [user for user in (*OPS_APPROVERS, *OPS_OBSERVERS) if user != YOU]
    stub.add_group(OPS_TEAM, OPS_TITLE, admins=[YOU], members=members)
    roles = {**dict.fromkeys(OPS_APPROVERS, "approver"), **dict.fromkeys(OPS_OBSERVERS,
                                                                         "observer")}
    stub.add_routes(page_routes(stub, key=key, roles={OPS_TEAM: roles}, miniapp=miniapp))
    return stub


def _user_id(person: Person) -> int:
    assert person.telegram_user_id is not None
    return person.telegram_user_id


def _config(token: str, api_url: str, options: PlaygroundOptions,
            miniapp: MiniAppLinks) -> dict[str, object]:
    return {
        "webapp": {"url": miniapp.public_url, "short_name": miniapp.short_name},
        "http": {"listen": urlsplit(miniapp.local_url).netloc},
        "telegram": {"token": token, "api_url": api_url, "admins": [YOU],
                     "chat_pace_seconds": options.chat_pace_s},
        "state": {"dir": "bot"},
        "chats": [{"id": OPS_TEAM, "required_approvals": OPS_QUORUM,
                   "approvers": list(OPS_APPROVERS)}],
    }


def playground_command(args: argparse.Namespace) -> int:
    """``skald-telegram demo`` in playground mode."""
    quiet_logs(args.verbose)
    if args.fresh:
        state = None
    else:
        state = Path(args.state).expanduser() if args.state else default_state_dir()
    options = PlaygroundOptions(
        state=state,
        port=args.port,
        open_browser=not args.no_browser,
    )
    return asyncio.run(
        run_until_stopped(lambda stop: run_playground(options, stop=stop, out=sys.stdout))
    )
