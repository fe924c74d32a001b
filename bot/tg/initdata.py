"""A Mini App's ``initData``, checked as Telegram documents it (pure).

``secret_key = HMAC_SHA256(key="WebAppData", msg=bot_token)``; the ``hash`` field must be the
hex ``HMAC_SHA256(key=secret_key, msg=data_check_string)``, where the data-check-string is
every other field, sorted by key, as ``key=value`` lines joined by ``\\n``. The hash is
compared in constant time and ``auth_date`` must be at most :data:`MAX_AGE_S` seconds old.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode

from bot.errors import InitDataError

MAX_AGE_S: Final = 3600
MAX_SKEW_S: Final = 300
"""How far in the future ``auth_date`` may be (clocks differ a little)."""
MAX_LENGTH: Final = 8192


@dataclass(frozen=True)
class InitData:
    """What a valid ``initData`` says: who opened the app, and with which start parameter."""

    user_id: int
    first_name: str
    last_name: str = ""
    username: str | None = None
    auth_date: int = 0
    """Unix seconds."""
    start_param: str | None = None

    @property
    def full_name(self) -> str:
        return f"{self.first_name} {self.last_name}".strip()


def _secret_key(token: str) -> bytes:
    return hmac.new(b"WebAppData", token.encode(), hashlib.sha256).digest()


def _hash(fields: Mapping[str, str], token: str) -> str:
    check = "\n".join(f"{key}={fields[key]}" for key in sorted(fields) if key != "hash")
    return hmac.new(_secret_key(token), check.encode(), hashlib.sha256).hexdigest()


def sign_init_data(fields: Mapping[str, str], token: str) -> str:
    """``fields`` as Telegram signs them for the bot with ``token``."""
    return urlencode({**fields, "hash": _hash(fields, token)})


def check_init_data(raw: str, token: str, now: float) -> InitData:
    """The user and start parameter of ``raw``, or InitDataError saying what is wrong."""
    if len(raw) > MAX_LENGTH:
        raise InitDataError("initData is too long")
    try:
        pairs = parse_qsl(raw, keep_blank_values=True, strict_parsing=True)
    except ValueError as exc:
        raise InitDataError("initData is not a query string") from exc
    fields = dict(pairs)
    if len(fields) != len(pairs):
        raise InitDataError("initData repeats a field")
    given = fields.get("hash", "")
    if not hmac.compare_digest(given.encode(), _hash(fields, token).encode()):
        raise InitDataError("initData is not signed for this bot")
    auth_date = _auth_date(fields.get("auth_date", ""), now)
    user = _user(fields.get("user", ""))
    return InitData(user_id=user["id"], first_name=user["first_name"] or "",
                    last_name=user["last_name"] or "", username=user["username"],
                    auth_date=auth_date, start_param=fields.get("start_param") or None)


def _auth_date(value: str, now: float) -> int:
    if not value.isdigit() or len(value) > 12:
        raise InitDataError("initData has no auth_date")
    at = int(value)
    if now - at > MAX_AGE_S:
        raise InitDataError("initData is older than an hour")
    if at - now > MAX_SKEW_S:
        raise InitDataError("initData is dated in the future")
    return at


def _user(value: str) -> dict[str, Any]:
    """The user's id and, where they are strings, their names."""
    try:
        user = json.loads(value)
    except ValueError as exc:
        raise InitDataError("initData has no user") from exc
    user_id = user.get("id") if isinstance(user, dict) else None
    if isinstance(user_id, bool) or not isinstance(user_id, int) or user_id <= 0:
        raise InitDataError("initData has no user")
    texts = {key: user.get(key) if isinstance(user.get(key), str) else None
             for key in ("first_name", "last_name", "username")}
    return {"id": user_id, **texts}
