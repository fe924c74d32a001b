"""Logging that cannot leak: the bot token is redacted from every record at every level,
and the libraries that log request URLs or parameters stay out of debug.

Bot API URLs carry the token (``…/bot<TOKEN>/sendMessage``) and python-telegram-bot's debug
log carries every request's parameters (card texts with their secrets), so ``-v`` raises
only our own loggers to debug.
"""

from __future__ import annotations

import logging
import re
from typing import Final

QUIET_LOGGERS: Final = {"telegram": logging.INFO, "httpx": logging.WARNING,
                        "httpcore": logging.WARNING}
"""Loggers kept at this level or above whatever ``-v`` asks for."""

REDACTED: Final = "<redacted>"
_TOKEN_SHAPE = re.compile(r"(?<![0-9])[0-9]{3,}:[A-Za-z0-9_-]{20,}")
"""What a Bot API token looks like (``123456789:AA…``), known to us or not."""

_secrets: set[str] = set()


def redact_value(secret: str) -> None:
    """Redact ``secret`` (a bot token) from every record from now on."""
    if secret:
        _secrets.add(secret)


def redact(text: str) -> str:
    """``text`` with every registered secret and anything shaped like a token replaced."""
    for secret in sorted(_secrets, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return _TOKEN_SHAPE.sub(REDACTED, text)


class RedactingFilter(logging.Filter):
    """Rewrites a record's message, traceback and stack with secrets redacted."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        record.msg, record.args = redact(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


def configure_logging(*, verbose: bool) -> None:
    """Log one line per event to stderr, secrets redacted; ``verbose`` for debug details."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for name, level in QUIET_LOGGERS.items():
        logging.getLogger(name).setLevel(level)
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
