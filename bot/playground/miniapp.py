"""The Mini App in the playground: a Details button's address, turned into the bot's
local address of the app with ``initData`` signed by the playground's bot token exactly as
Telegram signs it, so that the bot's own validation runs on it."""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import parse_qs, quote, urlsplit

from bot.tg.initdata import sign_init_data

PLAYGROUND_APP_URL: Final = "https://miniapp.playground.invalid/app"
"""The playground's public Mini App address: never fetched, only mapped to the local one."""
SHORT_NAME: Final = "details"


@dataclass(frozen=True)
class MiniAppLinks:
    """Where the bot serves the app locally, and what the playground signs with."""

    local_url: str
    bot_username: str
    token: str = field(repr=False)
    public_url: str = PLAYGROUND_APP_URL
    short_name: str = SHORT_NAME

    def open(self, link: str, *, user: Mapping[str, Any], chat_type: str,
             now: float) -> str | None:
        """The local address that opens ``link`` (a ``web_app`` button's or a Direct Link)
        for ``user``; None for a link to anything else."""
        parts = urlsplit(link)
        query = parse_qs(parts.query)
        fields = {"query_id": secrets.token_urlsafe(12), "auth_date": str(int(now)),
                  "user": json.dumps({k: user[k] for k in ("id", "first_name", "last_name",
                                                           "username") if k in user},
                                     ensure_ascii=False, separators=(",", ":"))}
        if link.split("?")[0] == self.public_url and query.get("ref"):
            address = f"{self.local_url}?ref={quote(query['ref'][0])}"
        elif (parts.scheme, parts.netloc, parts.path) == (
                "https", "t.me", f"/{self.bot_username}/{self.short_name}") \
                and query.get("startapp"):
            address = self.local_url
            fields.update(start_param=query["startapp"][0], chat_type=chat_type,
                          chat_instance=str(secrets.randbits(62)))
        else:
            return None
        return (f"{address}#tgWebAppData={quote(sign_init_data(fields, self.token))}"
                "&tgWebAppVersion=8.0")
