"""A PostgreSQL URL in messages: shown without its password, never quoted whole."""

from __future__ import annotations

from typing import Final
from urllib.parse import urlsplit, urlunsplit

MASK: Final = "•••"
SCHEMES: Final = ("postgresql://", "postgres://")


def is_postgres_url(value: str) -> bool:
    return value.startswith(SCHEMES)


def masked_url(url: str) -> str:
    """``postgresql://user:•••@host/db``: the URL with its password (in the authority or
    a ``password=`` parameter) replaced, and nothing else of the query kept."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return url.split("://", 1)[0] + "://" + MASK
    user = parts.username or ""
    if parts.password is not None or "password=" in parts.query:
        user = f"{user}:{MASK}"
    netloc = f"{user}@" if user else ""
    netloc += f"[{host}]" if ":" in host else host
    netloc += f":{port}" if port is not None else ""
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
