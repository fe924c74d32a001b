"""``skald-telegram identity``: print this device's public card."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from bot.cli import add_config_option

if TYPE_CHECKING:
    from bot.config import Config
    from bot.protocol.identity import Identity

DEFAULT_DEVICE_NAME = "Telegram bridge"


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


def device_identity(config: Config) -> Identity:
    """The device identity in the state folder, created (0600) on first use."""
    from bot.keyfile import load_or_create_identity

    return load_or_create_identity(config.identity_path, config.device_name or DEFAULT_DEVICE_NAME)
