"""The project's exception hierarchy: every error we raise derives from :class:`SkaldError`.

Adapters translate library errors (``InvalidTag``, ``ConnectionClosed``, ``sqlite3.Error``,
``telegram.error.*``) into these with ``raise ... from``.
"""

from __future__ import annotations

import enum
from typing import Final


class SkaldError(Exception):
    """Root of every error this project raises on purpose."""


class ConfigError(SkaldError):
    """The configuration file or environment is invalid; the message names the key."""


class IdentityError(SkaldError):
    """A key file is missing, unreadable, malformed or too widely readable."""


class ProtocolError(SkaldError):
    """Wire data does not follow the protocol."""


class PayloadError(ProtocolError):
    """A decrypted payload is not valid JSON of the expected shape or breaks a limit."""


class PairingError(ProtocolError):
    """A pairing URI or pairing exchange is invalid."""


class RefusalReason(enum.Enum):
    """Why an envelope was refused (protocol §2); each acceptance rule has its own reason."""

    MALFORMED = "malformed"
    TOO_LARGE = "too_large"
    BAD_VERSION = "bad_version"
    NOT_FOR_ME = "not_for_me"
    UNKNOWN_SENDER = "unknown_sender"
    BAD_SIGNATURE = "bad_signature"
    DECRYPT_FAILED = "decrypt_failed"
    BAD_PAYLOAD = "bad_payload"
    REPLAY = "replay"
    FROM_FUTURE = "from_future"
    STALE = "stale"
    """Older than the replay set remembers (rule 6): it could be a replay."""


class EnvelopeRefused(ProtocolError):
    """An envelope failed one of the acceptance rules of protocol §2."""

    def __init__(self, reason: RefusalReason, detail: str) -> None:
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason
        self.detail = detail


class RenderError(SkaldError):
    """A card could not be rendered (a template is missing or broken)."""


class StoreError(SkaldError):
    """The SQLite state store failed."""


class StoreUnavailable(StoreError):
    """The store itself cannot do its work for now (the disk is full or failing, the
    database is locked, read-only or damaged), as opposed to refusing the data: whatever
    was being done is not done yet, and is worth trying again later."""


SQLITE_UNAVAILABLE: Final = frozenset({
    5,   # SQLITE_BUSY
    6,   # SQLITE_LOCKED
    7,   # SQLITE_NOMEM
    8,   # SQLITE_READONLY
    10,  # SQLITE_IOERR
    11,  # SQLITE_CORRUPT
    13,  # SQLITE_FULL
    14,  # SQLITE_CANTOPEN
    15,  # SQLITE_PROTOCOL
    26,  # SQLITE_NOTADB
})
"""SQLite's primary result codes that mean the store failed, not the statement."""


def store_error(message: str, cause: BaseException) -> StoreError:
    """The error an adapter raises (``raise store_error(...) from cause``) for an
    ``sqlite3.Error``: :class:`StoreUnavailable` when SQLite's result code says the store
    failed, a plain :class:`StoreError` otherwise (a constraint, a bug)."""
    code = getattr(cause, "sqlite_errorcode", None)
    if isinstance(code, int) and code & 0xFF in SQLITE_UNAVAILABLE:
        return StoreUnavailable(message)
    return StoreError(message)


class UpdateTaken(SkaldError):
    """Another replica marked the update being handled first: what this one did for it is
    rolled back."""


class RelayError(SkaldError):
    """The relay connection failed or the relay answered with an error."""


class InitDataError(SkaldError):
    """A Mini App's ``initData`` that is forged, stale, for another bot or malformed."""


class BotApiError(SkaldError):
    """A Telegram Bot API call failed in a way the caller must handle."""


class ChatMoved(BotApiError):
    """A group became a supergroup: its chat id changed to ``new_chat_id``."""

    def __init__(self, old_chat_id: int, new_chat_id: int) -> None:
        super().__init__(f"chat {old_chat_id} moved to {new_chat_id}")
        self.old_chat_id = old_chat_id
        self.new_chat_id = new_chat_id


class ChatUnavailable(BotApiError):
    """The bot may not post in a chat any more (removed, blocked, or the chat is gone)."""

    def __init__(self, chat_id: int, detail: str) -> None:
        super().__init__(f"chat {chat_id} is unavailable: {detail}")
        self.chat_id = chat_id


class Throttled(BotApiError):
    """Telegram asked to wait ``retry_after`` seconds before the next request."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"rate limited: retry after {retry_after:g} s")
        self.retry_after = retry_after


class MessageGone(BotApiError):
    """The message to edit no longer exists (deleted by someone)."""


class StateDirError(SkaldError):
    """The state folder cannot be created, read or written by this process."""


class BotFailed(SkaldError):
    """A part of the running bot kept failing and was given up on: the process exits 1."""
