"""The bodies of the ``skald-telegram`` subcommands that work on the bot's own state."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import io
import json
import sys
import time
from collections.abc import Iterable
from datetime import UTC, datetime

from bot.bridge import Bridge
from bot.clock import from_ms
from bot.config import Config, load_config
from bot.errors import ConfigError, SkaldError
from bot.health import check_status
from bot.keyfile import load_identity, load_or_create_identity
from bot.protocol.encoding import format_rfc3339, parse_rfc3339
from bot.protocol.identity import Identity
from bot.protocol.pairing import parse_pairing_uri
from bot.relays import RelayPool
from bot.statedir import ensure_state_dir
from bot.store import AuditRow, Store

PAIRING_TIMEOUT_S = 30.0
USERNAME_TIMEOUT_S = 5.0


def device_identity(config: Config, username: str | None = None) -> Identity:
    """The device identity in the state folder, created (0600) on first use, named by
    :func:`device_name`."""
    ensure_state_dir(config.state_dir)
    return load_or_create_identity(config.identity_path, device_name(config, username))


def device_name(config: Config, username: str | None) -> str:
    """``device.name``, else ``Telegram @<bot username>`` (as the running bot names it),
    else the name already stored, else ``Telegram bot``."""
    if config.device_name:
        return config.device_name
    if username:
        return f"Telegram @{username}"
    if config.identity_path.exists():
        return load_identity(config.identity_path).name
    return "Telegram bot"


async def bot_username(config: Config) -> str | None:
    """The bot's username from ``getMe``, or None without a token or an answer."""
    if not config.token:
        return None
    import telegram
    from telegram import error as tg_error

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


def identity_command(args: argparse.Namespace) -> int:
    config = load_config(args.config, require_token=False)
    identity = device_identity(config)
    print(json.dumps(identity.card.to_json(), indent=2))
    return 0


def run_command(args: argparse.Namespace) -> int:
    from bot.app import run_command as run_bot

    return run_bot(load_config(args.config))


def pair_command(args: argparse.Namespace) -> int:
    config = load_config(args.config, require_token=False)
    try:
        uri = parse_pairing_uri(args.uri)
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
    return asyncio.run(_pair(config, uri.relay, args.uri, args.chat, args.timeout))


async def _pair(config: Config, relay: str, uri_text: str, chat_id: int, timeout: float) -> int:
    uri = parse_pairing_uri(uri_text)
    identity = device_identity(config, await bot_username(config))
    store = Store.open(config.database_path)
    done = asyncio.Event()
    bridge = Bridge(identity=identity, store=store, config=config,
                    clock=time.time, on_change=done.set, on_outbox=lambda url: pool.wake(url))
    pool = RelayPool(bridge)
    try:
        bridge.start_pairing(uri, chat_id=chat_id, topic_id=None, requested_by=None)
        pool.ensure(relay)
        print(f"Pairing with {uri.agent.name} ({uri.agent.id[:8]}) through {relay}: "
              f"waiting up to {timeout:g} s for the agent to accept…", file=sys.stderr)
        deadline = asyncio.get_running_loop().time() + timeout
        while not bridge.pairing_done(uri.agent.id):
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                connected = any(s.connected for s in pool.statuses())
                hint = "the agent did not answer" if connected else "could not reach the relay"
                print(f"skald-telegram: pairing timed out after {timeout:g} s ({hint})",
                      file=sys.stderr)
                return 1
            done.clear()
            try:
                await asyncio.wait_for(done.wait(), remaining)
            except TimeoutError:
                continue
        print(f"Paired with {uri.agent.name}; its requests will go to chat {chat_id}.")
        return 0
    finally:
        await pool.stop()
        store.close()


def health_command(args: argparse.Namespace) -> int:
    config = load_config(args.config, require_token=False)
    healthy, detail = check_status(config.status_path)
    print(detail)
    return 0 if healthy else 1


def audit_command(args: argparse.Namespace) -> int:
    config = load_config(args.config, require_token=False)
    since = None
    if args.since:
        moment = parse_rfc3339(args.since)
        if moment is None:
            try:
                moment = datetime.fromisoformat(args.since)
            except ValueError as exc:
                raise ConfigError(f"--since: not an ISO 8601 date or time: {args.since!r}") from exc
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=UTC)
        since = int(moment.timestamp() * 1000)
    ensure_state_dir(config.state_dir, create=False)
    if not config.database_path.is_file():
        print(f"skald-telegram: no database at {config.database_path} (check state.dir, "
              "or --config)", file=sys.stderr)
        return 1
    store = Store.open(config.database_path)
    try:
        rows = store.audit_rows(chat_id=args.chat, since_ms=since)
    finally:
        store.close()
    sys.stdout.write(format_audit(rows, args.format))
    return 0


AUDIT_FIELDS = ("seq", "at", "event", "chat_id", "agent_id", "item_id", "user_id", "user_name",
                "detail")


def audit_record(row: AuditRow) -> dict[str, object]:
    return {
        "seq": row.seq,
        "at": format_rfc3339(from_ms(row.at)),
        "event": row.event,
        "chat_id": row.chat_id,
        "agent_id": row.agent_id,
        "item_id": row.item_id,
        "user_id": row.user_id,
        "user_name": row.user_name,
        "detail": row.detail,
    }


def format_audit(rows: Iterable[AuditRow], fmt: str) -> str:
    """The audit trail as JSON lines or CSV (``detail`` as a JSON column)."""
    records = [audit_record(row) for row in rows]
    if fmt == "jsonl":
        return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=AUDIT_FIELDS, lineterminator="\n")
    writer.writeheader()
    for record in records:
        writer.writerow({**record, "detail": json.dumps(record["detail"], ensure_ascii=False)})
    return out.getvalue()
