"""``skald-telegram identity``: print this device's public card."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from bot.cli import add_config_option

if TYPE_CHECKING:
    from bot.config import Config
    from bot.protocol.identity import Identity

USERNAME_TIMEOUT_S = 5.0


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "identity", help="print this device's public card")
    add_config_option(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from bot.config import load_config

    config = load_config(args.config, require_token=False)
    print(json.dumps(device_identity(config).card.to_json(), indent=2))
    return 0


def device_identity(config: Config, username: str | None = None) -> Identity:
    """The device identity in the state folder, created (0600) on first use, named by
    :func:`device_name`."""
    from bot.keyfile import load_or_create_identity
    from bot.statedir import ensure_state_dir

    ensure_state_dir(config.state_dir)
    return load_or_create_identity(config.identity_path, device_name(config, username))


def device_name(config: Config, username: str | None) -> str:
    """``device.name``, else ``Telegram @<bot username>`` (as the running bot names it),
    else the name already stored, else ``Telegram bot``."""
    from bot.keyfile import load_identity

    if config.device_name:
        return config.device_name
    if username:
        return f"Telegram @{username}"
    if config.identity_path.exists():
        return load_identity(config.identity_path).name
    return "Telegram bot"


async def bot_username(config: Config) -> str | None:
    """The bot's username from ``getMe``, or None without a token or an answer."""
    import asyncio
    import contextlib

    import telegram
    from telegram import error as tg_error

    from bot.logsafety import redact_value

    if not config.token:
        return None
    redact_value(config.token)
    bot = telegram.Bot(config.token, base_url=f"{config.api_url}/bot")
    try:
        async with asyncio.timeout(USERNAME_TIMEOUT_S):
            await bot.initialize()
            return bot.username
    except (tg_error.TelegramError, TimeoutError):
        return None
    finally:
        with contextlib.suppress(tg_error.TelegramError):
            await bot.shutdown()
