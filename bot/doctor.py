"""The checks of ``skald-telegram doctor``: check a setup and say how to fix what is wrong.

Each check gives one :class:`Check`: the configuration, the token (``getMe``), in webhook
mode the webhook (its settings, and that its address can be listened on), with
``webapp.url`` the Mini App (its address, and that the running bot serves it), each relay of the
paired agents (connect and authenticate), the state folder's permissions, the key file's
mode and the SQLite schema version. The exit code is 0 only if every check passes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import httpx
import telegram
from telegram import error as tg_error
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus, InvalidURI, WebSocketException

from bot.config import Config, WebAppConfig, WebhookConfig, config_path, load_config
from bot.errors import (
    BotApiError,
    ConfigError,
    IdentityError,
    ProtocolError,
    RelayError,
    StoreError,
    StoreUnavailable,
)
from bot.keyfile import load_identity
from bot.logsafety import redact_value
from bot.protocol.identity import Identity
from bot.relay.client import authenticate
from bot.relay.frames import MAX_FRAME_BYTES
from bot.statedir import creatable, process_user, readable_by_others
from bot.store import SCHEMA_VERSION, Store
from bot.storefaults import describe_folder, folder_problem
from bot.tg.webhook import bind

RELAY_TIMEOUT_S: Final = 5.0
TOKEN_TIMEOUT_S: Final = 10.0
WEBAPP_TIMEOUT_S: Final = 5.0


@dataclass(frozen=True)
class Check:
    """One check's result; ``fix`` says what to do when ``ok`` is false."""

    name: str
    ok: bool
    detail: str
    fix: str | None = None


async def diagnose(
    config_argument: str | None, *, environ: Mapping[str, str] = os.environ
) -> list[Check]:
    """Run every check; a broken configuration stops after its own check."""
    try:
        config = load_config(config_argument, environ=environ, require_token=False)
    except ConfigError as exc:
        path = config_path(config_argument, environ)
        return [Check("config", False, str(exc), f"edit {path} (see the configuration "
                                                 "reference in docs/configuration.md)")]
    checks = [check_config(config), await check_token(config)]
    if config.webhook is not None:
        checks.append(check_webhook(config.webhook))
    if config.webapp is not None:
        checks.append(await check_webapp(config.webapp))
    checks.append(check_state_dir(config.state_dir))
    if not _searchable(config.state_dir):
        skipped = "not checked: fix the state folder first"
        checks += [Check("key file", False, skipped), Check("database", False, skipped)]
        return checks
    checks.append(check_key_file(config.identity_path))
    if config.storage_url is not None:
        schema, relay_urls = check_postgres(config.storage_url)
    else:
        schema, relay_urls = check_database(config.database_path)
    checks.append(schema)
    checks.extend(await check_relays(relay_urls))
    return checks


def _searchable(folder: Path) -> bool:
    """Whether the files in ``folder`` can be looked at (a missing folder has none)."""
    try:
        return not folder.exists() or (folder.is_dir() and os.access(folder, os.R_OK | os.X_OK))
    except OSError:
        return False


def check_config(config: Config) -> Check:
    source = config.source
    if source is not None and source.exists():
        return Check("config", True, f"{source} is valid")
    return Check("config", True, f"no file at {source}; using the defaults")


async def check_token(config: Config) -> Check:
    """``getMe`` with the token; never shows the token itself."""
    if not config.token:
        return Check(
            "token", False, "no bot token",
            "set TELEGRAM_BOT_TOKEN or telegram.token (get one from @BotFather with /newbot)",
        )
    redact_value(config.token)
    bot = telegram.Bot(config.token, base_url=f"{config.api_url}/bot")
    try:
        async with asyncio.timeout(TOKEN_TIMEOUT_S):
            await bot.initialize()
            username = bot.username
    except tg_error.InvalidToken:
        # PTB's message quotes the token: say it in our own words.
        return Check("token", False, f"the Bot API at {config.api_url} refused the token",
                     "copy the token again from @BotFather (/mybots → API Token) and set "
                     "TELEGRAM_BOT_TOKEN or telegram.token")
    except (tg_error.TelegramError, TimeoutError) as exc:
        detail = str(exc) or "no answer in time"
        return Check("token", False, f"cannot reach the Bot API at {config.api_url}: {detail}",
                     "check the network and telegram.api_url")
    finally:
        with contextlib.suppress(tg_error.TelegramError):
            await bot.shutdown()
    return Check("token", True, f"@{username}")


def check_webhook(webhook: WebhookConfig) -> Check:
    """The settings (already valid, or the configuration check failed) and whether
    ``http.listen`` can be listened on; the secret is never shown."""
    address = f"{webhook.host}:{webhook.port}"
    try:
        bind(webhook.host, webhook.port).close()
    except BotApiError as exc:
        return Check("webhook", False, str(exc),
                     f"change http.listen, or stop what listens on {address} (when it is "
                     "this bot, running in webhook mode, all is well)")
    return Check("webhook", True, f"Telegram posts to {webhook.url}; the bot would listen on "
                                  f"{address}{webhook.path}")


async def check_webapp(webapp: WebAppConfig) -> Check:
    """The Mini App's address (checked by the configuration) and that the bot serves its
    page on ``http.listen``: only a running bot does."""
    host = f"[{webapp.host}]" if ":" in webapp.host else webapp.host
    local = f"http://{host}:{webapp.port}{webapp.path}/"
    fix = ("start the bot (it serves the Mini App on http.listen), and make the reverse "
           f"proxy bring {webapp.url} to {local}")
    try:
        async with httpx.AsyncClient(timeout=WEBAPP_TIMEOUT_S) as client:
            response = await client.get(local)
    except httpx.HTTPError as exc:
        return Check("webapp", False, f"nothing answers at {local}: "
                                      f"{exc or type(exc).__name__}", fix)
    if response.status_code != 200 or 'name="skald-base"' not in response.text:
        return Check("webapp", False, f"{local} answers HTTP {response.status_code} but not "
                                      "with the Mini App", fix)
    return Check("webapp", True, f"{webapp.url} is served by the bot at {local}")


def check_state_dir(path: Path) -> Check:
    """Exists (or can be created), is usable by this user, and is private (0700)."""
    name = "state folder"
    user = process_user()
    try:
        exists = path.exists()
    except OSError:
        exists = False
    if not exists:
        if creatable(path):
            return Check(name, True, f"{path} does not exist yet; it will be created on first run")
        return Check(name, False, f"{path} does not exist and user {user} cannot create it",
                     f"sudo mkdir -p {path} && sudo chown {user} {path} && chmod 700 {path}")
    if not path.is_dir():
        return Check(name, False, f"{path} is a file, not a folder", "set state.dir to a folder")
    mode = stat.S_IMODE(path.stat().st_mode)
    error = folder_problem(path)
    if error is not None:
        unusable = describe_folder("the state folder", path, error, setting="state.dir",
                                   user=user)
        return Check(name, False, unusable.problem.removeprefix("the state folder "),
                     unusable.fix)
    if mode & 0o077:
        return Check(name, False, f"{path} is accessible by others (mode {mode:04o}); it holds "
                     "decrypted requests", f"chmod 700 {path}")
    return Check(name, True, f"{path} (mode {mode:04o})")


def check_key_file(path: Path) -> Check:
    """Mode 0600 and readable; a missing key file is created on first run."""
    name = "key file"
    if not path.exists():
        return Check(name, True, f"{path} does not exist yet; it will be created on first run")
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        return Check(name, False, f"{path} is readable by others (mode {mode:04o})",
                     f"chmod 600 {path}")
    try:
        identity = load_identity(path)
    except IdentityError as exc:
        return Check(name, False, str(exc),
                     "restore the key file from a backup; without it, every agent must be "
                     "paired again")
    return Check(name, True, f"{path} (mode {mode:04o}, device {identity.id})")


def check_database(path: Path) -> tuple[Check, list[str]]:
    """The schema version, and the relays of the paired agents."""
    name = "database"
    if not path.exists():
        return Check(name, True, f"{path} does not exist yet; it will be created on first run"), []
    exposed = [p for p in _database_files(path) if readable_by_others(p) is not None]
    if exposed:
        modes = ", ".join(f"{p.name} {readable_by_others(p):04o}" for p in exposed)
        return Check(name, False, f"readable by others ({modes}); it holds decrypted requests",
                     "chmod 600 " + " ".join(str(p) for p in exposed)), []
    try:
        store = Store.open(path)
    except StoreError as exc:
        # The store's one line ends with the fix when it knows what fits the cause.
        detail, _, fix = str(exc).partition("; fix: ")
        return Check(name, False, detail,
                     fix or "upgrade skald-telegram, or restore the state folder from a "
                            "backup"), []
    try:
        version = store.db.schema_version()
        relays = sorted({peer.relay_url for peer in store.agents.peers()})
    finally:
        store.close()
    if version != SCHEMA_VERSION:
        return Check(name, False, f"{path} has schema {version}, expected {SCHEMA_VERSION}",
                     "upgrade skald-telegram, or restore the state folder from a backup"), relays
    return Check(name, True, f"{path} (schema {version})"), relays


def check_postgres(url: str) -> tuple[Check, list[str]]:
    """Whether the PostgreSQL database answers, at which schema version, and the relays of
    the paired agents. Its URL is shown without its password."""
    name = "database"
    try:
        store = Store.open(url)
    except StoreUnavailable as exc:
        return Check(name, False, str(exc), "start the PostgreSQL server, or correct "
                                            "[storage] url"), []
    except StoreError as exc:
        fix = ("run skald-telegram migrate" if "migrate" in str(exc)
               else "upgrade skald-telegram")
        return Check(name, False, str(exc).split(": run", 1)[0], fix), []
    try:
        version = store.db.schema_version()
        relays = sorted({peer.relay_url for peer in store.agents.peers()})
        return Check(name, True, f"{store.location} (schema {version})"), relays
    finally:
        store.close()


def _database_files(path: Path) -> list[Path]:
    """The database and its ``-wal`` and ``-shm`` files, those that exist."""
    candidates = [path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")]
    return [p for p in candidates if p.exists()]


async def check_relays(urls: Iterable[str]) -> list[Check]:
    """One check per relay; none paired is fine."""
    urls = list(urls)
    if not urls:
        return [Check("relays", True, "no agent paired yet (pair one with /pair in a chat)")]
    return list(await asyncio.gather(*(check_relay(url) for url in urls)))


async def check_relay(url: str, identity: Identity | None = None) -> Check:
    """Connect to a relay and authenticate (challenge, ``auth``, ``ready``), then close.

    A throwaway identity is used by default: authenticating as the device itself would make
    the relay close the running bot's session (one session per id).
    """
    name = f"relay {url}"
    me = identity or Identity.generate("doctor")
    fix = ("check that the relay runs and that this host can reach it; if the agent moved, "
           "pair it again")
    try:
        async with asyncio.timeout(RELAY_TIMEOUT_S):
            async with connect(url, open_timeout=None, max_size=MAX_FRAME_BYTES,
                               compression=None) as ws:
                await authenticate(ws, me)
    except RelayError as exc:
        return Check(name, False, str(exc), fix)
    except TimeoutError:
        return Check(name, False, f"no answer within {RELAY_TIMEOUT_S:g} s", fix)
    except InvalidStatus as exc:
        return Check(name, False, f"not a Skald relay (HTTP {exc.response.status_code})", fix)
    except InvalidURI as exc:
        return Check(name, False, f"not a relay URL: {exc}", "pair the agent again")
    except (OSError, WebSocketException, ProtocolError) as exc:
        return Check(name, False, f"cannot connect: {exc or type(exc).__name__}", fix)
    return Check(name, True, "reachable; authentication works")


def format_checks(checks: Iterable[Check]) -> str:
    """One line per check, ``✓``/``✗``, and the fix under each failed one."""
    lines = []
    for check in checks:
        lines.append(f"{'✓' if check.ok else '✗'} {check.name}: {check.detail}")
        if not check.ok and check.fix:
            lines.append(f"    fix: {check.fix}")
    return "\n".join(lines) + "\n"
