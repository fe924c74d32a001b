"""``skald-telegram demo``: try the bot in five minutes.

``demo`` runs everything in one process on embedded defaults: the built-in relay, the demo
agent (:mod:`bot.demo_agent`) and the bot. Without a token (or with ``--playground``) it runs
the playground (:mod:`bot.playground.session`): a local Telegram stand-in with a web page.
With a token, against Telegram, the first person who sends ``/start`` to the bot gets the demo
agent paired to their chat.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, TextIO

from telegram import Chat, User

from bot.app import Bot, Running
from bot.config import DEFAULT_API_URL, load_config, parse_config
from bot.demo_agent import AGENT_NAME, DemoAgent, pair_chat, quiet_logs, who
from bot.keyfile import load_or_create_identity
from bot.protocol.payloads import Person
from bot.relay.server import RelayServer
from bot.render import Renderer
from bot.signals import run_until_stopped
from bot.testing.agent import Agent

NO_TOKEN_HELP: Final = """\
skald-telegram demo against Telegram needs a bot token. To get one:

  1. Open @BotFather in Telegram (https://t.me/BotFather).
  2. Send /newbot, then choose a name and a username ending in "bot".
  3. Copy the token BotFather replies with (it looks like 123456789:AAH...).
  4. In this terminal:  export TELEGRAM_BOT_TOKEN=123456789:AAH...
  5. Run again:         skald-telegram demo
Without a token, skald-telegram demo starts the playground in your browser instead.
"""


@dataclass(frozen=True)
class DemoOptions:
    """What ``skald-telegram demo`` runs with."""

    token: str = field(repr=False)
    api_url: str = DEFAULT_API_URL
    state: Path | None = None
    """Where the relay, the bot and the agent keep their state; a temporary folder if unset."""
    chat_pace_s: float = 1.0


async def run_demo(options: DemoOptions, *, stop: asyncio.Event, out: TextIO) -> int:
    """Run relay, demo agent and bot until ``stop`` is set; the exit code."""
    with contextlib.ExitStack() as cleanup:
        state = options.state
        if state is None:
            state = Path(cleanup.enter_context(tempfile.TemporaryDirectory(prefix="skald-demo-")))
        await _run_demo_in(state, options, stop, out)
    return 0


async def _run_demo_in(state: Path, options: DemoOptions, stop: asyncio.Event,
                       out: TextIO) -> None:
    state.mkdir(mode=0o700, parents=True, exist_ok=True)
    config = parse_config(
        {
            "telegram": {"token": options.token, "api_url": options.api_url, "admins": [],
                         "chat_pace_seconds": options.chat_pace_s},
            "state": {"dir": "bot"},
        },
        base=state,
    )
    identity = load_or_create_identity(state / "demo-agent.json", AGENT_NAME)
    renderer = Renderer(config.templates_dir)
    running: asyncio.Future[Running] = asyncio.get_running_loop().create_future()
    paired = asyncio.Event()
    claimed = False

    async with contextlib.AsyncExitStack() as stack:
        relay = await stack.enter_async_context(RelayServer(state / "relay"))
        agent = Agent(identity, relay.url)
        demo = DemoAgent(agent, out)
        await agent.start()
        stack.push_async_callback(agent.stop)

        async def on_start(chat: Chat, user: User) -> None:
            nonlocal claimed
            if claimed:
                return
            claimed = done = True
            try:
                done = await _pair_with_chat(await running, agent, chat, user, demo, renderer)
            finally:
                claimed = done
            if done:
                paired.set()

        bot = await stack.enter_async_context(Bot(config, on_start=on_start))
        running.set_result(bot)
        username = bot.application.bot.username
        demo.say(_warning(username))
        demo.say(f"Relay: {relay.url}   State: {state}")
        demo.say(f"👉 Open https://t.me/{username} and send /start. Ctrl-C stops the demo.")
        await demo.serve(stop, paired.is_set)
        demo.say("Stopping the demo…")


def _warning(username: str) -> str:
    return (
        "⚠️  DEMO MODE: the first person who sends /start to "
        f"@{username} gets the demo agent paired to their chat.\n"
        "    Anyone who finds the bot first gets it; use a fresh bot, not one you use for "
        "real work."
    )


async def _pair_with_chat(running: Running, agent: Agent, chat: Chat, user: User,
                          demo: DemoAgent, renderer: Renderer) -> bool:
    """Pair the demo agent with the chat of the first ``/start`` and say so there."""
    person = Person(user.full_name, user.id, user.username)
    if await pair_chat(running, agent, chat.id, person, renderer):
        place = chat.title or "a private chat"
        demo.say(f"🔗 Paired the demo agent with {place} (chat {chat.id}) for {who(person)}.")
        return True
    demo.say("✗ Pairing with the first /start timed out; the next /start tries again.")
    return False


def demo_command(args: argparse.Namespace) -> int:
    """``skald-telegram demo``: the playground without a token (or with ``--playground``),
    real Telegram with one; exit 2 with the steps to get a token when it is malformed."""
    token, api_url = _token_and_api_url(args.config)
    if args.playground or not token:
        from bot.playground.session import playground_command

        return playground_command(args)
    if ":" not in token:
        sys.stderr.write("TELEGRAM_BOT_TOKEN does not look like a bot token (ID:SECRET).\n\n")
        sys.stderr.write(NO_TOKEN_HELP)
        return 2
    quiet_logs(args.verbose)
    options = DemoOptions(
        token=token,
        api_url=(args.api_url or api_url).rstrip("/"),
        state=Path(args.state) if args.state else None,
    )
    return asyncio.run(run_until_stopped(lambda stop: run_demo(options, stop=stop, out=sys.stdout)))


def _token_and_api_url(config_argument: str | None) -> tuple[str, str]:
    """The token from ``$TELEGRAM_BOT_TOKEN`` or the ``--config`` file, and the API URL."""
    if config_argument:
        config = load_config(config_argument, require_token=False)
        return config.token, config.api_url
    return os.environ.get("TELEGRAM_BOT_TOKEN", "").strip(), DEFAULT_API_URL
