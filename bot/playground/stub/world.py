"""The world the stand-in keeps: users, chats, their messages and the bot's pending updates.

It is the state Telegram holds for one bot, changed by the Bot API methods (what the bot
does) and by the test controls (what people do); every change wakes whoever waits on it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bot.playground.stub.decoding import Upload
from bot.playground.stub.errors import bad_request
from bot.playground.tg_html import Entity

SERVICE_ACCOUNT = 777000
"""Telegram's own account, which no bot id may be."""
FALLBACK_BOT_ID = 5000000001
"""The bot's id when its token does not start with a usable one."""


@dataclass(frozen=True)
class StoredDocument:
    filename: str
    data: bytes
    mime_type: str
    file_id: str


@dataclass(frozen=True)
class MessageVersion:
    """A message's content before an edit."""

    text: str
    html: str | None
    entities: list[Entity]
    reply_markup: dict[str, Any] | None


@dataclass
class StoredMessage:
    """The current state of one message in a chat, as Telegram keeps it."""

    chat_id: int
    message_id: int
    date: int
    from_id: int
    text: str
    html: str | None
    entities: list[Entity]
    reply_markup: dict[str, Any] | None = None
    thread_id: int | None = None
    reply_to: int | None = None
    document: StoredDocument | None = None
    edits: list[MessageVersion] = field(default_factory=list)
    edit_date: int | None = None
    deleted: bool = False
    service: dict[str, Any] | None = None
    force_reply: dict[str, Any] | None = None
    """The ForceReply markup the message was sent with, which the page acts on."""
    revision: int = 0
    """Grows with every change of the stand-in's messages; the page's live feed follows it."""

    def version(self) -> MessageVersion:
        return MessageVersion(self.text, self.html, list(self.entities), self.reply_markup)

    def buttons(self) -> list[dict[str, Any]]:
        rows = (self.reply_markup or {}).get("inline_keyboard", [])
        return [button for row in rows for button in row]


@dataclass
class Chat:
    id: int
    type: str
    title: str | None = None
    user_id: int | None = None
    admins: list[int] = field(default_factory=list)
    members: set[int] = field(default_factory=set)
    is_forum: bool = False
    migrated_to: int | None = None
    blocked: bool = False


class ChangeSignal:
    """Wakes every waiter on each change of state; fired from plain (non-async) code too."""

    def __init__(self) -> None:
        self._waiters: set[asyncio.Future[None]] = set()

    def fire(self) -> None:
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()

    async def wait_until(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Wait until `predicate()` holds; False if `timeout` seconds pass first."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                while not predicate():
                    waiter = loop.create_future()
                    self._waiters.add(waiter)
                    try:
                        await waiter
                    finally:
                        self._waiters.discard(waiter)
        except TimeoutError:
            return False
        return True


class World:
    """One bot's Telegram: who exists, which chats, what was said, what waits to be fetched."""

    def __init__(self, token: str, bot_name: str, bot_username: str) -> None:
        prefix = token.partition(":")[0]
        usable = prefix.isdigit() and int(prefix) != SERVICE_ACCOUNT
        self.bot_id = int(prefix) if usable else FALLBACK_BOT_ID
        self.bot_name = bot_name
        self.bot_username = bot_username
        self.users: dict[int, dict[str, Any]] = {}
        self.chats: dict[int, Chat] = {}
        self.messages: dict[int, dict[int, StoredMessage]] = {}
        self.updates: list[dict[str, Any]] = []
        self.files: dict[str, StoredDocument] = {}
        self.commands: dict[str, list[dict[str, Any]]] = {}
        """The bot's command lists, by scope and language."""
        self.callback_answers: dict[str, dict[str, Any]] = {}
        """The bot's answerCallbackQuery parameters, by query id."""
        self.open_queries: set[str] = set()
        self.changed = ChangeSignal()
        self.revision = 0
        self.closing = False
        self._next_message_id: dict[int, int] = {}
        self._next_update_id = 1
        self._next_query_id = 1

    # --- who and where -------------------------------------------------------------------

    def bot_user(self) -> dict[str, Any]:
        return {
            "id": self.bot_id,
            "is_bot": True,
            "first_name": self.bot_name,
            "username": self.bot_username,
        }

    def add_user(self, user: dict[str, Any]) -> None:
        self.users[user["id"]] = user

    def user(self, user_id: int) -> dict[str, Any]:
        if user_id == self.bot_id:
            return self.bot_user()
        if user_id not in self.users:
            raise ValueError(f"unknown user {user_id}: add it with add_user() first")
        return self.users[user_id]

    def add_chat(self, chat: Chat) -> Chat:
        for user_id in [*chat.admins, *chat.members, *filter(None, [chat.user_id])]:
            self.user(user_id)
        self.chats[chat.id] = chat
        return chat

    def chat(self, chat_id: int) -> Chat:
        if chat_id not in self.chats:
            raise ValueError(f"unknown chat {chat_id}: add it with add_private_chat/add_group")
        return self.chats[chat_id]

    def migrate(self, old_id: int, new_id: int) -> int:
        """Upgrade a group to a supergroup; the member who did it."""
        old = self.chat(old_id)
        old.migrated_to = new_id
        self.chats[new_id] = Chat(
            new_id, "supergroup", old.title, None, list(old.admins), set(old.members), old.is_forum
        )
        return old.admins[0] if old.admins else next(iter(old.members))

    # --- messages ------------------------------------------------------------------------

    def stored(self, chat_id: int, message_id: int) -> StoredMessage:
        message = self.messages.get(chat_id, {}).get(message_id)
        if message is None:
            raise ValueError(f"no message {message_id} in chat {chat_id}")
        return message

    def live(self, chat_id: int, message_id: Any) -> StoredMessage | None:
        """The message unless it was never there or is deleted."""
        message = self.messages.get(chat_id, {}).get(message_id)
        return None if message is None or message.deleted else message

    def store(self, chat: Chat, *, from_id: int, text: str, html: str | None,
              entities: list[Entity], **extra: Any) -> StoredMessage:
        """A new message in ``chat``; ``extra`` sets the other :class:`StoredMessage` fields."""
        message_id = self._next_message_id.get(chat.id, 1)
        self._next_message_id[chat.id] = message_id + 1
        message = StoredMessage(chat_id=chat.id, message_id=message_id, date=int(time.time()),
                                from_id=from_id, text=text, html=html, entities=entities,
                                **extra)
        self.messages.setdefault(chat.id, {})[message_id] = message
        self.touch(message)
        return message

    def touch(self, message: StoredMessage) -> None:
        self.revision += 1
        message.revision = self.revision

    def changed_since(self, revision: int) -> list[StoredMessage]:
        """Every message created, edited or deleted after `revision`, oldest change first."""
        changed = [
            m for chat in self.messages.values() for m in chat.values() if m.revision > revision
        ]
        return sorted(changed, key=lambda m: m.revision)

    def keep_document(self, value: Any, chat_id: int) -> StoredDocument:
        """An uploaded file, kept under a new file id, or one sent before, by its id."""
        if isinstance(value, Upload):
            file_id = f"BQAC-{chat_id}-{len(self.files) + 1}"
            document = StoredDocument(value.filename, value.data, value.content_type, file_id)
            self.files[file_id] = document
            return document
        if isinstance(value, str) and value in self.files:
            return self.files[value]
        raise bad_request("wrong remote file identifier specified: can't unserialize it")

    # --- updates and queries -------------------------------------------------------------

    def inject(self, update: dict[str, Any]) -> dict[str, Any]:
        """Queue an update for getUpdates, numbering it unless it has an update_id."""
        if "update_id" not in update:
            update = {"update_id": self._next_update_id, **update}
        self._next_update_id = max(self._next_update_id, update["update_id"]) + 1
        self.updates.append(update)
        self.changed.fire()
        return update

    def open_query(self) -> str:
        """A new callback query id, open until the bot answers it."""
        query_id = f"{self.bot_id}{self._next_query_id:08d}"
        self._next_query_id += 1
        self.open_queries.add(query_id)
        return query_id
