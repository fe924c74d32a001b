"""The configuration file (TOML) and environment, validated into frozen dataclasses.

Lookup order for the file: ``--config PATH``, then ``$SKALD_TELEGRAM_CONFIG``, then
``./skald-telegram.toml``. ``$TELEGRAM_BOT_TOKEN`` (or the file ``$TELEGRAM_BOT_TOKEN_FILE``
names) overrides ``telegram.token`` and
``$SKALD_TELEGRAM_STATE_DIR`` overrides ``state.dir``. Every error names the key and what is
wrong with it.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from bot.core.policy import SERVICE_IDS
from bot.dburl import is_postgres_url
from bot.errors import ConfigError

if TYPE_CHECKING:
    from bot.render.values import SecretsMode

DEFAULT_PATH = Path("skald-telegram.toml")
DEFAULT_API_URL = "https://api.telegram.org"
DEFAULT_LISTEN = "127.0.0.1:8443"
DATABASE_URL_VARIABLE = "SKALD_TELEGRAM_DATABASE_URL"
WEBHOOK_SECRET = re.compile(r"[A-Za-z0-9_-]{1,256}")
"""What Telegram accepts as a webhook's ``secret_token``."""
WEBAPP_SHORT_NAME = re.compile(r"[A-Za-z0-9_]{3,30}")
"""What BotFather accepts as a Mini App's short name."""
DEFAULT_GRANT_MINUTES = 30
MAX_GRANT_MINUTES = 24 * 60

Approvers = frozenset[int] | Literal["admins"]


@dataclass(frozen=True)
class ChatConfig:
    """Per-chat settings (``[[chats]]``); ``None`` means the chat-type default."""

    id: int
    approvers: Approvers | None = None
    required_approvals: int = 1
    secrets: SecretsMode | None = None
    topic: int | None = None
    grants: bool | None = None
    """Whether approvals may come with a grant; ``None``: on in private chats only."""
    grant_minutes: int = DEFAULT_GRANT_MINUTES
    timezone: str | None = None
    batch: bool = True
    """Whether one agent's waiting approvals are gathered in a digest with "Approve all"."""


@dataclass(frozen=True)
class ChatPolicy:
    """The effective rules for one chat, defaults applied."""

    chat_id: int
    approvers: Approvers
    required_approvals: int
    secrets: SecretsMode
    topic: int | None
    grants: bool = False
    """Whether a card offers "Approve + …" (never with a quorum above one)."""
    grant_minutes: int = DEFAULT_GRANT_MINUTES
    timezone: str = "UTC"
    """The IANA zone the chat's times are shown in."""
    batch: bool = True
    """Whether a digest gathers one agent's waiting approvals (``batch = "on"``)."""


@dataclass(frozen=True)
class WebhookConfig:
    """``[telegram] mode = "webhook"``: Telegram posts updates to :attr:`url`, which a
    reverse proxy (or Telegram itself) brings to :attr:`host`:`port`."""

    url: str
    secret: str = field(repr=False)
    host: str = "127.0.0.1"
    port: int = 8443

    @property
    def path(self) -> str:
        """The path the bot serves the webhook on: that of :attr:`url`."""
        return urlsplit(self.url).path or "/"


@dataclass(frozen=True)
class WebAppConfig:
    """``[webapp]``: the Mini App with each card's details, served by the bot on
    ``http.listen`` under :attr:`path` and reached by Telegram clients at :attr:`url`."""

    url: str
    short_name: str = ""
    """The Mini App's short name at BotFather; ``""``: no Details button in groups."""
    host: str = "127.0.0.1"
    port: int = 8443

    @property
    def path(self) -> str:
        """The path prefix the app is served under (``""`` for the root)."""
        return urlsplit(self.url).path.rstrip("/")


@dataclass(frozen=True)
class Config:
    """Everything the bot needs to run."""

    token: str = field(default="", repr=False)
    api_url: str = DEFAULT_API_URL
    admins: frozenset[int] = frozenset()
    state_dir: Path = Path("state")
    chats: Mapping[int, ChatConfig] = field(default_factory=dict)
    templates_dir: Path | None = None
    device_name: str | None = None
    chat_pace_s: float = 1.0
    timezone: str = "UTC"
    source: Path | None = None
    webhook: WebhookConfig | None = None
    """Set in webhook mode; ``None``: long polling."""
    webapp: WebAppConfig | None = None
    """Set when ``webapp.url`` is: the Mini App with each card's details."""
    storage_url: str | None = field(default=None, repr=False)
    """``[storage] url``: a PostgreSQL database instead of the SQLite file."""
    replica_name: str | None = None
    """``[replica] name``: this replica's name (default: host and process id)."""
    lease_s: float = 3.0
    """``[replica] lease_seconds``: how long the leader's lease lasts unrenewed."""

    @property
    def identity_path(self) -> Path:
        return self.state_dir / "identity.json"

    @property
    def database_path(self) -> Path:
        return self.state_dir / "skald-telegram.sqlite3"

    @property
    def database(self) -> Path | str:
        """Where the state is: the PostgreSQL URL when set, else the SQLite file."""
        return self.storage_url or self.database_path

    @property
    def status_path(self) -> Path:
        """Rewritten by the running bot every :data:`bot.health.HEARTBEAT_S` seconds."""
        return self.state_dir / "status.json"

    def policy(
        self, chat_id: int, *, private: bool, former_ids: tuple[int, ...] = ()
    ) -> ChatPolicy:
        """The rules for a chat: its ``[[chats]]`` entry (or that of an id it had before it
        became a supergroup, ``former_ids``) over the chat-type defaults.

        A private chat's approver is its own user (the chat id); a group's are its
        administrators. Secrets are spoilered in private chats and masked in groups.
        """
        entries = [self.chats[i] for i in (chat_id, *former_ids) if i in self.chats]
        chat = entries[0] if entries else ChatConfig(id=chat_id)
        default_approvers: Approvers = frozenset({chat_id}) if private else "admins"
        grants = chat.grants if chat.grants is not None else private
        return ChatPolicy(
            chat_id=chat_id,
            approvers=chat.approvers if chat.approvers is not None else default_approvers,
            required_approvals=chat.required_approvals,
            secrets=chat.secrets or ("spoiler" if private else "masked"),
            topic=chat.topic,
            # One person must not widen what a quorum guards.
            grants=grants and chat.required_approvals <= 1,
            grant_minutes=chat.grant_minutes,
            timezone=chat.timezone or self.timezone,
            batch=chat.batch,
        )


def config_path(argument: str | None, environ: Mapping[str, str] = os.environ) -> Path:
    """Where the configuration file is, by the lookup order of this module's docstring."""
    if argument:
        return Path(argument)
    if environ.get("SKALD_TELEGRAM_CONFIG"):
        return Path(environ["SKALD_TELEGRAM_CONFIG"])
    return DEFAULT_PATH


def load_config(
    argument: str | None,
    *,
    environ: Mapping[str, str] = os.environ,
    require_token: bool = True,
) -> Config:
    """Read and validate the configuration; a missing default file means all defaults."""
    path = config_path(argument, environ)
    explicit = bool(argument or environ.get("SKALD_TELEGRAM_CONFIG"))
    if path.exists():
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read {path}: {exc}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path} is not valid TOML: {exc}") from exc
    elif explicit:
        raise ConfigError(f"configuration file {path} does not exist")
    else:
        data = {}
    config = parse_config(data, base=path.parent if path.exists() else Path.cwd(), source=path)
    if environ.get("SKALD_TELEGRAM_STATE_DIR"):
        config = replace(config, state_dir=Path(environ["SKALD_TELEGRAM_STATE_DIR"]))
    if environ.get(DATABASE_URL_VARIABLE):
        config = replace(config, storage_url=_storage_url(environ[DATABASE_URL_VARIABLE],
                                                          DATABASE_URL_VARIABLE))
    token = environ.get("TELEGRAM_BOT_TOKEN") or _token_from_file(environ) or config.token
    if require_token and not token:
        raise ConfigError(
            "telegram.token: no bot token; set TELEGRAM_BOT_TOKEN or telegram.token in "
            f"{path} (get one from @BotFather)"
        )
    if token and ":" not in token:
        raise ConfigError("telegram.token: does not look like a bot token (ID:SECRET)")
    return _replace_token(config, token)


def _token_from_file(environ: Mapping[str, str]) -> str:
    """The token in the file ``$TELEGRAM_BOT_TOKEN_FILE`` names (Docker and systemd
    secrets), or ``""`` when the variable is not set."""
    name = environ.get("TELEGRAM_BOT_TOKEN_FILE")
    if not name:
        return ""
    try:
        token = Path(name).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"TELEGRAM_BOT_TOKEN_FILE: cannot read {name}: "
                          f"{getattr(exc, 'strerror', None) or exc}") from exc
    if not token:
        raise ConfigError(f"TELEGRAM_BOT_TOKEN_FILE: {name} is empty")
    return token


def parse_config(data: Mapping[str, Any], *, base: Path, source: Path | None = None) -> Config:
    """Validate a decoded TOML document. Relative paths are taken from ``base``."""
    _only_keys(data, "", {"telegram", "state", "chats", "templates", "device", "http",
                          "webapp", "storage", "replica"})
    telegram = _table(data, "telegram")
    _only_keys(telegram, "telegram.",
               {"token", "api_url", "admins", "chat_pace_seconds", "timezone", "mode",
                "webhook_url", "webhook_secret", "webhook_secret_file"})
    http = _table(data, "http")
    _only_keys(http, "http.", {"listen"})
    state = _table(data, "state")
    _only_keys(state, "state.", {"dir"})
    templates = _table(data, "templates")
    _only_keys(templates, "templates.", {"dir"})
    device = _table(data, "device")
    _only_keys(device, "device.", {"name"})

    token = _string(telegram, "telegram.token", "")
    api_url = _string(telegram, "telegram.api_url", DEFAULT_API_URL).rstrip("/")
    if not api_url.startswith(("http://", "https://")):
        raise ConfigError(f"telegram.api_url: must start with http:// or https://, got {api_url!r}")
    pace = telegram.get("chat_pace_seconds", 1.0)
    if isinstance(pace, bool) or not isinstance(pace, int | float) or pace < 0:
        raise ConfigError("telegram.chat_pace_seconds: must be a number ≥ 0")
    chats_raw = data.get("chats", [])
    if not isinstance(chats_raw, list):
        raise ConfigError("chats: must be an array of tables ([[chats]])")
    chats: dict[int, ChatConfig] = {}
    for index, entry in enumerate(chats_raw):
        chat = _chat(entry, f"chats[{index}]")
        if chat.id in chats:
            raise ConfigError(f"chats[{index}].id: chat {chat.id} is configured twice")
        chats[chat.id] = chat
    templates_dir = templates.get("dir")
    return Config(
        token=token,
        api_url=api_url,
        admins=_user_ids(telegram.get("admins", []), "telegram.admins"),
        state_dir=base / _string(state, "state.dir", "state"),
        chats=chats,
        templates_dir=base / _string(templates, "templates.dir", "") if templates_dir else None,
        device_name=_string(device, "device.name", "") or None,
        chat_pace_s=float(pace),
        timezone=_timezone(telegram, "telegram.timezone") or "UTC",
        source=source,
        webhook=_webhook(telegram, http, base),
        webapp=_webapp(_table(data, "webapp"), http),
        storage_url=_storage(_table(data, "storage"), base),
        **_replica(_table(data, "replica")),
    )


def _replica(replica: Mapping[str, Any]) -> dict[str, Any]:
    """``[replica] name`` and ``lease_seconds``, as :class:`Config`'s fields."""
    _only_keys(replica, "replica.", {"name", "lease_seconds"})
    name = _string(replica, "replica.name", "")
    if name and not name.isprintable():
        raise ConfigError("replica.name: must be printable text")
    lease = replica.get("lease_seconds", 3.0)
    if isinstance(lease, bool) or not isinstance(lease, int | float) or not 1 <= lease <= 60:
        raise ConfigError("replica.lease_seconds: must be a number from 1 to 60")
    return {"replica_name": name or None, "lease_s": float(lease)}


def _storage(storage: Mapping[str, Any], base: Path) -> str | None:
    """``[storage] url`` or the content of ``url_file`` (never both); ``None``: the SQLite
    file in the state folder. The URL is never quoted in an error (it may hold a
    password)."""
    _only_keys(storage, "storage.", {"url", "url_file"})
    inline = _string(storage, "storage.url", "")
    file_name = _string(storage, "storage.url_file", "")
    if inline and file_name:
        raise ConfigError("storage.url: set it or storage.url_file, not both")
    if file_name:
        path = base / file_name
        try:
            inline = path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"storage.url_file: cannot read {path}: "
                              f"{getattr(exc, 'strerror', None) or exc}") from exc
        return _storage_url(inline, "storage.url_file")
    return _storage_url(inline, "storage.url") if inline else None


def _storage_url(url: str, key: str) -> str:
    if not is_postgres_url(url):
        raise ConfigError(f"{key}: must be a postgresql:// URL (leave it out for the SQLite "
                          "file in the state folder)")
    return url


def _webhook(telegram: Mapping[str, Any], http: Mapping[str, Any],
             base: Path) -> WebhookConfig | None:
    """The webhook settings in webhook mode; ``None`` in polling mode (the default), where
    settings given for it are still checked, so that switching over finds no surprise."""
    mode = telegram.get("mode", "polling")
    if mode not in ("polling", "webhook"):
        raise ConfigError(f'telegram.mode: must be "polling" or "webhook", got {mode!r}')
    url = _string(telegram, "telegram.webhook_url", "")
    if url:
        _check_webhook_url(url)
    secret = _webhook_secret(telegram, base)
    host, port = _listen(_string(http, "http.listen", DEFAULT_LISTEN))
    if mode == "polling":
        return None
    if not url:
        raise ConfigError('telegram.webhook_url: required with mode = "webhook" (the https '
                          "URL Telegram posts updates to)")
    if secret is None:
        raise ConfigError('telegram.webhook_secret: required with mode = "webhook" (or '
                          "telegram.webhook_secret_file)")
    return WebhookConfig(url=url, secret=secret, host=host, port=port)


def _check_webhook_url(url: str) -> None:
    _check_https_url(url, "telegram.webhook_url", "Telegram posts only to https")


def _check_https_url(url: str, key: str, why: str) -> None:
    """An ``https://`` URL with a host and no query or fragment."""
    parts = urlsplit(url)
    if parts.scheme != "https" or not parts.hostname:
        raise ConfigError(f"{key}: must be an https:// URL ({why}), got {url!r}")
    if parts.query or parts.fragment:
        raise ConfigError(f"{key}: must have no query or fragment")


def _webapp(webapp: Mapping[str, Any], http: Mapping[str, Any]) -> WebAppConfig | None:
    """The Mini App's settings, or ``None`` without ``webapp.url``."""
    _only_keys(webapp, "webapp.", {"url", "short_name"})
    url = _string(webapp, "webapp.url", "")
    short_name = _string(webapp, "webapp.short_name", "")
    if short_name and not WEBAPP_SHORT_NAME.fullmatch(short_name):
        raise ConfigError("webapp.short_name: must be the Mini App's short name at BotFather "
                          f"(3 to 30 characters of A-Z, a-z, 0-9 and _), got {short_name!r}")
    if not url:
        if short_name:
            raise ConfigError("webapp.short_name: set webapp.url too (the Mini App's address)")
        return None
    _check_https_url(url, "webapp.url", "Telegram opens Mini Apps only over https")
    host, port = _listen(_string(http, "http.listen", DEFAULT_LISTEN))
    return WebAppConfig(url=url.rstrip("/"), short_name=short_name, host=host, port=port)


def _webhook_secret(telegram: Mapping[str, Any], base: Path) -> str | None:
    """``webhook_secret`` or the content of ``webhook_secret_file`` (never both); the value
    is never quoted in an error."""
    inline = _string(telegram, "telegram.webhook_secret", "")
    file_name = _string(telegram, "telegram.webhook_secret_file", "")
    if inline and file_name:
        raise ConfigError("telegram.webhook_secret: set it or telegram.webhook_secret_file, "
                          "not both")
    key, secret = "telegram.webhook_secret", inline
    if file_name:
        key, path = "telegram.webhook_secret_file", base / file_name
        try:
            secret = path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{key}: cannot read {path}: "
                              f"{getattr(exc, 'strerror', None) or exc}") from exc
    elif "webhook_secret" not in telegram:
        return None
    if not WEBHOOK_SECRET.fullmatch(secret):
        raise ConfigError(f"{key}: must be 1 to 256 characters of A-Z, a-z, 0-9, _ and - "
                          "(what Telegram accepts as a secret token)")
    return secret


def _listen(value: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:8443`` for an IPv6 address)."""
    host, colon, port = value.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not colon or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ConfigError(f'http.listen: must be host:port such as "{DEFAULT_LISTEN}", '
                          f"got {value!r}")
    return host, int(port)


def _chat(entry: object, where: str) -> ChatConfig:
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: must be a table")
    _only_keys(entry, f"{where}.",
               {"id", "approvers", "required_approvals", "secrets", "topic", "timezone",
                "grants", "grant_minutes", "batch"})
    chat_id = entry.get("id")
    if isinstance(chat_id, bool) or not isinstance(chat_id, int):
        raise ConfigError(f"{where}.id: must be a Telegram chat id (an integer)")
    approvers_raw = entry.get("approvers")
    approvers: Approvers | None
    if approvers_raw is None:
        approvers = None
    elif approvers_raw == "admins":
        approvers = "admins"
    else:
        approvers = _user_ids(approvers_raw, f"{where}.approvers")
    required = entry.get("required_approvals", 1)
    if isinstance(required, bool) or not isinstance(required, int) or required < 1:
        raise ConfigError(f"{where}.required_approvals: must be an integer ≥ 1, got {required!r}")
    if isinstance(approvers, frozenset) and required > len(approvers):
        raise ConfigError(
            f"{where}.required_approvals: {required} approvals can never be reached with "
            f"{len(approvers)} approver(s)"
        )
    secrets = entry.get("secrets")
    if secrets not in (None, "spoiler", "masked"):
        raise ConfigError(f"{where}.secrets: must be \"spoiler\" or \"masked\", got {secrets!r}")
    topic = entry.get("topic")
    if topic is not None and (isinstance(topic, bool) or not isinstance(topic, int)):
        raise ConfigError(f"{where}.topic: must be a forum topic's message_thread_id (integer)")
    grants, grant_minutes = _grants(entry, where, required)
    return ChatConfig(
        id=chat_id,
        approvers=approvers,
        required_approvals=required,
        secrets=secrets,
        topic=topic,
        grants=grants,
        grant_minutes=grant_minutes,
        timezone=_timezone(entry, f"{where}.timezone"),
        batch=_batch(entry, where),
    )


def _batch(entry: Mapping[str, Any], where: str) -> bool:
    """A chat's ``batch`` ("on", the default, or "off")."""
    raw = entry.get("batch", "on")
    if raw not in ("on", "off"):
        raise ConfigError(f"{where}.batch: must be \"on\" or \"off\", got {raw!r}")
    return bool(raw == "on")


def _grants(entry: Mapping[str, Any], where: str, required: int) -> tuple[bool | None, int]:
    """A chat's ``grants`` ("on"/"off", absent: the chat type's default) and
    ``grant_minutes``."""
    raw = entry.get("grants")
    if raw not in (None, "on", "off"):
        raise ConfigError(f"{where}.grants: must be \"on\" or \"off\", got {raw!r}")
    if raw == "on" and required > 1:
        raise ConfigError(
            f"{where}.grants: \"on\" cannot go with required_approvals = {required} "
            "(one approver would widen what the quorum guards)"
        )
    minutes = entry.get("grant_minutes", DEFAULT_GRANT_MINUTES)
    if isinstance(minutes, bool) or not isinstance(minutes, int) or \
            not 1 <= minutes <= MAX_GRANT_MINUTES:
        raise ConfigError(
            f"{where}.grant_minutes: must be an integer from 1 to {MAX_GRANT_MINUTES}, "
            f"got {minutes!r}"
        )
    return (None if raw is None else raw == "on"), minutes


def _timezone(table: Mapping[str, Any], key: str) -> str | None:
    """An IANA time zone name (``Europe/Berlin``), checked against the zone database."""
    name = table.get("timezone")
    if name is None:
        return None
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{key}: must be an IANA time zone name such as \"Europe/Berlin\"")
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ConfigError(f"{key}: unknown time zone {name!r} (use an IANA name such as "
                          "\"Europe/Berlin\" or \"UTC\")") from exc
    return name


def _table(data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{key}: must be a table ([{key}])")
    return value


def _string(table: Mapping[str, Any], key: str, default: str) -> str:
    value = table.get(key.rsplit(".", 1)[-1], default)
    if not isinstance(value, str):
        raise ConfigError(f"{key}: must be a string")
    return value


def _user_ids(value: object, key: str) -> frozenset[int]:
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value
    ):
        raise ConfigError(f"{key}: must be a list of Telegram user ids (positive integers)")
    service = sorted(SERVICE_IDS.intersection(value))
    if service:
        # Taps never come from these ids (they stand for anonymous admins, channels and
        # Telegram itself), so listing one is a mistake that would silently grant nothing.
        raise ConfigError(
            f"{key}: {', '.join(map(str, service))} is a Telegram service id, not a person; "
            "list the user ids of people"
        )
    return frozenset(value)


def _only_keys(table: Mapping[str, Any], prefix: str, allowed: set[str]) -> None:
    for key in table:
        if key not in allowed:
            known = ", ".join(sorted(allowed))
            raise ConfigError(f"{prefix}{key}: unknown setting (known: {known})")


def _replace_token(config: Config, token: str) -> Config:
    return replace(config, token=token)
