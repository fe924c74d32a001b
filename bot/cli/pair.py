"""``skald-telegram pair``: pair with an agent beside a stopped bot and bind it to a chat."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from bot.cli import add_config_option

if TYPE_CHECKING:
    from bot.config import Config
    from bot.relay_pool import RelayPool


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "pair", help="pair with an agent and bind it to a chat")
    add_config_option(parser)
    parser.add_argument("--chat", type=int, required=True, help="Telegram chat id to bind to")
    parser.add_argument("uri", help="the agent's pairing link: 'skald-pair:v1?…'")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    return pair(args.config, args.uri, args.chat)


def pair(config_argument: str | None, uri_text: str, chat_id: int,
         timeout: float | None = None) -> int:
    """Pair through the agent's relay and bind the agent to ``chat_id``; the exit code.
    ``timeout`` defaults to :data:`bot.bridge.PAIRING_TIMEOUT_S`."""
    import asyncio

    from bot.bridge import PAIRING_TIMEOUT_S
    from bot.config import load_config
    from bot.errors import SkaldError
    from bot.health import check_status
    from bot.protocol.pairing import parse_pairing_uri

    config = load_config(config_argument, require_token=False)
    try:
        parse_pairing_uri(uri_text)
    except SkaldError as exc:
        print(f"skald-telegram: bad pairing link: {exc}", file=sys.stderr)
        return 1
    running, _detail = check_status(config.status_path)
    if running:
        # Both would hold a session with the relay under the same device id, and the
        # relay keeps only one: they would take turns kicking each other off.
        print("skald-telegram: the bot is running with this state folder; send "
              "/pair <link> in the chat instead, or stop the bot first", file=sys.stderr)
        return 1
    return asyncio.run(_pair(config, uri_text, chat_id, timeout or PAIRING_TIMEOUT_S))


RELAY_UNREACHABLE_S = 5.0
"""How long ``pair`` tries to connect to the relay before saying it cannot."""


async def _unreachable(pool: RelayPool, url: str) -> str:
    """Return the last connection error once the relay at ``url`` has not been reachable
    for :data:`RELAY_UNREACHABLE_S` seconds (never returns while it is connected)."""
    import asyncio

    waited = 0.0
    while True:
        status = next((s for s in pool.statuses() if s.url == url), None)
        if status is not None and status.connected:
            waited = 0.0
        elif waited >= RELAY_UNREACHABLE_S:
            return (status.last_error if status else None) or "no answer"
        await asyncio.sleep(0.1)
        waited += 0.1


async def _pair(config: Config, uri_text: str, chat_id: int, timeout: float) -> int:
    import asyncio

    from bot.bridge import Bridge, wait_until_paired
    from bot.cli.identity import bot_username, device_identity
    from bot.clock import SYSTEM_CLOCK
    from bot.errors import PairingError
    from bot.protocol.pairing import parse_pairing_uri
    from bot.relay_pool import RelayPool
    from bot.store import Store

    uri = parse_pairing_uri(uri_text)
    identity = device_identity(config, await bot_username(config))
    store = Store.open(config.database)
    changed = asyncio.Event()
    bridge = Bridge(identity=identity, store=store, config=config, clock=SYSTEM_CLOCK)
    pool = RelayPool(bridge, after=lambda _changes: changed.set())
    try:
        pool.act_on(bridge.start_pairing(uri, chat_id=chat_id, topic_id=None, requested_by=None))
        print(f"Pairing with {uri.agent.name} ({uri.agent.id[:8]}) through {uri.relay}: "
              f"waiting up to {timeout:g} s for the agent to accept…", file=sys.stderr)
        waiting = asyncio.ensure_future(
            wait_until_paired(bridge.view, uri.agent.id, changed, timeout))
        unreachable = asyncio.ensure_future(_unreachable(pool, uri.relay))
        try:
            await asyncio.wait({waiting, unreachable}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            unreachable.cancel()
        if not waiting.done():
            waiting.cancel()
            bridge.cancel_pairing(uri.agent.id)
            print(f"skald-telegram: cannot reach the relay at {uri.relay}: "
                  f"{unreachable.result()}", file=sys.stderr)
            return 1
        try:
            waiting.result()
        except PairingError as exc:
            print(f"skald-telegram: {exc}", file=sys.stderr)
            return 1
        except TimeoutError:
            bridge.cancel_pairing(uri.agent.id)
            print(f"skald-telegram: pairing timed out after {timeout:g} s (the agent did not "
                  "answer)", file=sys.stderr)
            return 1
        print(f"Paired with {uri.agent.name}; its requests will go to chat {chat_id}.")
        return 0
    finally:
        await pool.stop()
        store.close()
