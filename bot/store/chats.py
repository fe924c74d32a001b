"""What the bot knows of Telegram chats and users: titles, types, whether it may post,
former ids (a group that became a supergroup) and cached administrator lists."""

from __future__ import annotations

from typing import cast

from bot.core.model import ChatKind
from bot.store.sql import Sql

_MOVED_WITH_A_CHAT = {"bindings": "agent_id", "cards": "agent_id, item_id",
                      "prompts": "message_id", "chat_admins": "user_id", "notes": "",
                      "granted": ""}
"""The tables with a chat id, each with the rest of its key with the chat (if any): a row
moving to the new id replaces the one the new chat holds with the same key."""


class ChatsView:
    """Reading chats and users."""

    def __init__(self, db: Sql) -> None:
        self._db = db

    def title(self, chat_id: int) -> str:
        row = self._db.one("SELECT title FROM chats WHERE chat_id = ?", (chat_id,))
        return str(row["title"]) if row else ""

    def kind(self, chat_id: int) -> ChatKind | None:
        """The chat's type as Telegram last reported it; None for a chat never seen."""
        # A row without a title was made by a write that did not know the chat's type.
        row = self._db.one("SELECT kind FROM chats WHERE chat_id = ? AND title != ''",
                           (chat_id,))
        return cast(ChatKind, str(row["kind"])) if row else None

    def forbidden(self, chat_id: int) -> bool:
        row = self._db.one("SELECT forbidden FROM chats WHERE chat_id = ?", (chat_id,))
        return bool(row["forbidden"]) if row else False

    def former_ids(self, chat_id: int) -> list[int]:
        """The ids a chat had before it became a supergroup (its settings and history)."""
        rows = self._db.all("SELECT old_id FROM chat_aliases WHERE new_id = ?", (chat_id,))
        return [int(r["old_id"]) for r in rows]

    def admins(self, chat_id: int) -> tuple[dict[int, str], int | None]:
        """The cached administrators of a chat and when they were fetched (None: never)."""
        rows = self._db.all(
            "SELECT user_id, name, fetched_at FROM chat_admins WHERE chat_id = ?", (chat_id,)
        )
        if not rows:
            return {}, None
        return {int(r["user_id"]): str(r["name"]) for r in rows}, int(rows[0]["fetched_at"])

    def user_name(self, user_id: int) -> str | None:
        row = self._db.one("SELECT name FROM users WHERE user_id = ?", (user_id,))
        return str(row["name"]) if row else None


class Chats(ChatsView):
    """Reading and writing chats and users."""

    def note(self, chat_id: int, title: str, kind: ChatKind) -> None:
        self._db.run(
            "INSERT INTO chats (chat_id, title, kind) VALUES (?, ?, ?) ON CONFLICT (chat_id)"
            " DO UPDATE SET title = excluded.title, kind = excluded.kind"
            " WHERE chats.title != excluded.title OR chats.kind != excluded.kind",
            (chat_id, title, kind),
        )

    def set_forbidden(self, chat_id: int, forbidden: bool) -> None:
        self._db.run(
            "INSERT INTO chats (chat_id, forbidden) VALUES (?, ?)"
            " ON CONFLICT (chat_id) DO UPDATE SET forbidden = excluded.forbidden",
            (chat_id, int(forbidden)),
        )

    def migrate(self, old_id: int, new_id: int) -> None:
        """Move a chat's bindings, cards, prompts and settings to its new (supergroup) id."""
        with self._db.transaction():
            for table, key in _MOVED_WITH_A_CHAT.items():
                if key:
                    self._db.run(f"DELETE FROM {table} WHERE chat_id = ? AND ({key}) IN"
                                 f" (SELECT {key} FROM {table} WHERE chat_id = ?)",
                                 (new_id, old_id))
                self._db.run(f"UPDATE {table} SET chat_id = ? WHERE chat_id = ?",
                             (new_id, old_id))
            self._db.run("UPDATE decisions SET chat_id = ? WHERE chat_id = ?", (new_id, old_id))
            self._db.run("UPDATE items SET outcome_chat_id = ? WHERE outcome_chat_id = ?",
                         (new_id, old_id))
            self._db.run(
                "INSERT INTO chats (chat_id, title, kind, forbidden)"
                " SELECT ?, title, 'supergroup', 0 FROM chats WHERE chat_id = ?"
                " ON CONFLICT (chat_id) DO UPDATE SET title = excluded.title,"
                " kind = excluded.kind, forbidden = excluded.forbidden",
                (new_id, old_id),
            )
            self._db.run("INSERT INTO chat_aliases (old_id, new_id) VALUES (?, ?)"
                         " ON CONFLICT (old_id) DO UPDATE SET new_id = excluded.new_id",
                         (old_id, new_id))

    def set_admins(self, chat_id: int, admins: dict[int, str], now_ms: int) -> None:
        with self._db.transaction():
            self._db.run("DELETE FROM chat_admins WHERE chat_id = ?", (chat_id,))
            for user_id, name in admins.items():
                self._db.run(
                    "INSERT INTO chat_admins (chat_id, user_id, name, fetched_at)"
                    " VALUES (?, ?, ?, ?)",
                    (chat_id, user_id, name, now_ms),
                )

    def forget_admins(self, chat_id: int) -> None:
        self._db.run("DELETE FROM chat_admins WHERE chat_id = ?", (chat_id,))

    def note_user(self, user_id: int, name: str, username: str | None) -> None:
        self._db.run(
            "INSERT INTO users (user_id, name, username) VALUES (?, ?, ?) ON CONFLICT (user_id)"
            " DO UPDATE SET name = excluded.name, username = excluded.username"
            " WHERE users.name != excluded.name"
            " OR coalesce(users.username, '') != coalesce(excluded.username, '')",
            (user_id, name, username),
        )
