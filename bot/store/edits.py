"""Edits before approving: the edit standing on each card (the edited arguments, who made
it, its revision) and the prompts (ForceReply messages) asking a person for a new value.

A card has an edit in progress while an edit stands on it or a prompt for it waits for
its reply: batch decisions leave it out.
"""

from __future__ import annotations

import json

from bot.core.edits import EditRow
from bot.store.sql import Sql


class EditsView:
    """Reading edits and edit prompts."""

    def __init__(self, db: Sql) -> None:
        self._db = db

    def of(self, card_id: int) -> EditRow | None:
        """The edit of a card (also one edited back to the agent's call: its revision
        still counts)."""
        row = self._db.one("SELECT * FROM edits WHERE card_id = ?", (card_id,))
        if row is None:
            return None
        arguments = json.loads(row["arguments_json"]) if row["arguments_json"] else None
        return EditRow(row["card_id"], row["revision"], arguments, row["user_id"],
                       row["user_name"], row["at"])

    def prompt(self, chat_id: int, message_id: int) -> tuple[int, int, str] | None:
        """(card_id, user_id, key) of an edit prompt the bot sent."""
        row = self._db.one(
            "SELECT card_id, user_id, key FROM edit_prompts WHERE chat_id = ? AND message_id = ?",
            (chat_id, message_id))
        return (int(row["card_id"]), int(row["user_id"]), str(row["key"])) if row else None

    def in_progress(self, card_id: int) -> bool:
        """Whether an edit stands on the card or a prompt for one waits for its reply."""
        row = self._db.one(
            "SELECT EXISTS (SELECT 1 FROM edits WHERE card_id = ? AND arguments_json IS NOT"
            " NULL) OR EXISTS (SELECT 1 FROM edit_prompts WHERE card_id = ?) AS busy",
            (card_id, card_id))
        return bool(row and row["busy"])


class Edits(EditsView):
    """Reading and writing edits and edit prompts."""

    def put(self, card_id: int, arguments: dict[str, object] | None, *, user_id: int,
            user_name: str, at: int) -> int:
        """Make ``arguments`` the card's edit (None: back to the agent's call) as a new
        revision; the revision."""
        text = None if arguments is None else json.dumps(arguments, ensure_ascii=False)
        self._db.run(
            "INSERT INTO edits (card_id, revision, arguments_json, user_id, user_name, at)"
            " VALUES (?, 1, ?, ?, ?, ?) ON CONFLICT (card_id) DO UPDATE SET"
            " revision = edits.revision + 1, arguments_json = excluded.arguments_json,"
            " user_id = excluded.user_id, user_name = excluded.user_name, at = excluded.at",
            (card_id, text, user_id, user_name, at))
        row = self._db.one("SELECT revision FROM edits WHERE card_id = ?", (card_id,))
        return int(row["revision"]) if row else 0

    def add_prompt(self, chat_id: int, message_id: int, card_id: int, user_id: int,
                   key: str) -> None:
        self._db.run(
            "INSERT INTO edit_prompts (chat_id, message_id, card_id, user_id, key)"
            " VALUES (?, ?, ?, ?, ?) ON CONFLICT (chat_id, message_id) DO UPDATE SET"
            " card_id = excluded.card_id, user_id = excluded.user_id, key = excluded.key",
            (chat_id, message_id, card_id, user_id, key))

    def drop_prompt(self, chat_id: int, message_id: int) -> None:
        self._db.run("DELETE FROM edit_prompts WHERE chat_id = ? AND message_id = ?",
                     (chat_id, message_id))
