"""Cards (one Telegram message per item and chat), the votes standing on them (quorum) and
the deny-reason prompts sent for them.

A card waiting to be posted or edited has a non-zero change counter (``dirty``); the card
worker clears it once the message shows the current state.
"""

from __future__ import annotations

import secrets

from bot.core.model import CardRow, Vote
from bot.store.sql import Row, Sql


class CardsView:
    """Reading cards, votes and prompts."""

    def __init__(self, db: Sql) -> None:
        self._db = db

    def get(self, card_id: int) -> CardRow | None:
        row = self._db.one("SELECT * FROM cards WHERE card_id = ?", (card_id,))
        return _card(row) if row else None

    def by_token(self, token: str) -> CardRow | None:
        row = self._db.one("SELECT * FROM cards WHERE token = ?", (token,))
        return _card(row) if row else None

    def by_ref(self, ref: str) -> CardRow | None:
        """The card with the Mini App reference ``ref``."""
        row = self._db.one("SELECT * FROM cards WHERE ref = ?", (ref,))
        return _card(row) if row else None

    def by_message(self, chat_id: int, message_id: int) -> CardRow | None:
        row = self._db.one(
            "SELECT * FROM cards WHERE chat_id = ? AND message_id = ?", (chat_id, message_id)
        )
        return _card(row) if row else None

    def dirty(self, chat_id: int, limit: int = 100) -> list[CardRow]:
        """Cards of a chat that do not show their current state yet: the posted cards of
        items that ended first (their buttons must go), then all the others, each oldest
        first."""
        ended = self._db.all(
            "SELECT c.* FROM cards c JOIN items i"
            " ON i.agent_id = c.agent_id AND i.item_id = c.item_id"
            " WHERE c.chat_id = ? AND c.dirty > 0 AND c.message_id IS NOT NULL"
            " AND i.state != 'open' ORDER BY c.card_id LIMIT ?",
            (chat_id, limit),
        )
        rows = self._db.all(
            "SELECT * FROM cards WHERE dirty > 0 AND chat_id = ? ORDER BY card_id LIMIT ?",
            (chat_id, limit),
        )
        first = [_card(r) for r in ended]
        taken = {card.card_id for card in first}
        return first + [_card(r) for r in rows if r["card_id"] not in taken]

    def chats_with_dirty(self) -> list[int]:
        """Chats (not marked forbidden) with cards waiting to be posted or edited."""
        rows = self._db.all(
            "SELECT DISTINCT c.chat_id FROM cards c LEFT JOIN chats h ON h.chat_id = c.chat_id"
            " WHERE c.dirty > 0 AND coalesce(h.forbidden, 0) = 0"
        )
        return [int(r["chat_id"]) for r in rows]

    def due_reminder(self, now_ms: int) -> list[CardRow]:
        rows = self._db.all(
            "SELECT c.* FROM cards c JOIN items i"
            " ON i.agent_id = c.agent_id AND i.item_id = c.item_id"
            " WHERE i.state = 'open' AND i.remind_at IS NOT NULL AND i.remind_at <= ?"
            " AND c.reminder = 'none' AND c.message_id IS NOT NULL",
            (now_ms,),
        )
        return [_card(r) for r in rows]

    def next_reminder(self) -> int | None:
        # The first in the remind_at index that qualifies: not an aggregate over all.
        row = self._db.one(
            "SELECT i.remind_at AS t FROM cards c JOIN items i"
            " ON i.agent_id = c.agent_id AND i.item_id = c.item_id"
            " WHERE i.state = 'open' AND i.remind_at IS NOT NULL AND c.reminder = 'none'"
            " AND c.message_id IS NOT NULL ORDER BY i.remind_at LIMIT 1"
        )
        return int(row["t"]) if row and row["t"] is not None else None

    def votes(self, card_id: int) -> list[Vote]:
        rows = self._db.all(
            "SELECT user_id, name, at FROM votes WHERE card_id = ? ORDER BY at, user_id",
            (card_id,),
        )
        return [Vote(**dict(r)) for r in rows]

    def prompt(self, chat_id: int, message_id: int) -> tuple[int, int] | None:
        """(card_id, user_id) of a deny-reason prompt (a ForceReply) the bot sent."""
        row = self._db.one(
            "SELECT card_id, user_id FROM prompts WHERE chat_id = ? AND message_id = ?",
            (chat_id, message_id),
        )
        return (int(row["card_id"]), int(row["user_id"])) if row else None


class Cards(CardsView):
    """Reading and writing cards, votes and prompts."""

    def lock(self, token: str) -> None:
        """Inside a transaction: hold the card of ``token`` until it ends, so that another
        process's change to it waits (a no-op where one process has the database)."""
        if self._db.shared:
            self._db.run("SELECT card_id FROM cards WHERE token = ? FOR UPDATE", (token,))

    def add_many(self, cards: list[tuple[str, str, int, int | None, str]]) -> None:
        """Plan cards, each ``(agent_id, item_id, chat_id, topic_id, token)``: one for an
        item in a chat (a chat that already has one keeps it), each with a random
        reference for the Mini App."""
        self._db.run_many(
            "INSERT INTO cards (agent_id, item_id, chat_id, topic_id, token, ref)"
            " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            [(*card, new_ref()) for card in cards],
        )

    def sending(self, card_id: int, now_ms: int) -> None:
        """A message of the card is about to go out (``posted_at`` without a
        ``message_id``: its first post began then)."""
        self._db.run("UPDATE cards SET posted_at = ? WHERE card_id = ?", (now_ms, card_id))

    def posted(self, card_id: int, message_id: int, now_ms: int) -> None:
        self._db.run(
            "UPDATE cards SET message_id = ?, posted_at = ? WHERE card_id = ?",
            (message_id, now_ms, card_id),
        )

    def clear_topic(self, card_id: int) -> None:
        """Post the card in the chat itself (its forum topic is gone)."""
        self._db.run("UPDATE cards SET topic_id = NULL WHERE card_id = ?", (card_id,))

    def repost(self, card_id: int) -> None:
        """The card's message is gone: post it again (with its attachment)."""
        self._db.run(
            "UPDATE cards SET message_id = NULL, attachment_sent = 0, dirty = dirty + 1"
            " WHERE card_id = ?",
            (card_id,),
        )

    def clean(self, card_id: int, generation: int) -> bool:
        """Mark a card as shown, unless it changed again since ``generation`` was read."""
        cursor = self._db.run(
            "UPDATE cards SET dirty = 0 WHERE card_id = ? AND dirty = ?", (card_id, generation)
        )
        return cursor.rowcount == 1

    def mark_dirty(self, card_id: int) -> None:
        self._db.run("UPDATE cards SET dirty = dirty + 1 WHERE card_id = ?", (card_id,))

    def attachment_sent(self, card_id: int) -> None:
        self._db.run("UPDATE cards SET attachment_sent = 1 WHERE card_id = ?", (card_id,))

    def set_reminder(self, card_id: int, state: str) -> None:
        self._db.run("UPDATE cards SET reminder = ? WHERE card_id = ?", (state, card_id))

    def add_vote(self, card_id: int, user_id: int, name: str, at: int) -> None:
        self._db.run(
            "INSERT INTO votes (card_id, user_id, name, at) VALUES (?, ?, ?, ?)"
            " ON CONFLICT DO NOTHING",
            (card_id, user_id, name, at),
        )
        self.mark_dirty(card_id)

    def remove_vote(self, card_id: int, user_id: int) -> None:
        self._db.run("DELETE FROM votes WHERE card_id = ? AND user_id = ?", (card_id, user_id))
        self.mark_dirty(card_id)

    def add_prompt(self, chat_id: int, message_id: int, card_id: int, user_id: int) -> None:
        self._db.run(
            "INSERT INTO prompts (chat_id, message_id, card_id, user_id) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (chat_id, message_id) DO UPDATE SET card_id = excluded.card_id,"
            " user_id = excluded.user_id",
            (chat_id, message_id, card_id, user_id),
        )


def new_ref() -> str:
    """A card's Mini App reference: 16 random bytes, URL-safe (what ``startapp`` takes)."""
    return secrets.token_urlsafe(16)


def _card(row: Row) -> CardRow:
    values = dict(row)
    values["attachment_sent"] = bool(values["attachment_sent"])
    return CardRow(**values)
