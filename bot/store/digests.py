"""Digests (one message per agent and chat listing its waiting approvals) and each
version of the list a digest showed.

A digest waiting to be posted, edited or removed has a non-zero change counter
(``dirty``), as cards do; the digest worker clears it once the message is up to date.
"""

from __future__ import annotations

from bot.core.digest import DigestRow
from bot.store.sql import Row, Sql


class DigestsView:
    """Reading digests and their versions."""

    def __init__(self, db: Sql) -> None:
        self._db = db

    def of(self, chat_id: int, agent_id: str) -> DigestRow | None:
        row = self._db.one("SELECT * FROM digests WHERE chat_id = ? AND agent_id = ?",
                           (chat_id, agent_id))
        return _digest(row) if row else None

    def by_token(self, token: str) -> DigestRow | None:
        row = self._db.one("SELECT * FROM digests WHERE token = ?", (token,))
        return _digest(row) if row else None

    def get(self, digest_id: int) -> DigestRow | None:
        row = self._db.one("SELECT * FROM digests WHERE digest_id = ?", (digest_id,))
        return _digest(row) if row else None

    def all(self) -> list[DigestRow]:
        return [_digest(r) for r in self._db.all("SELECT * FROM digests ORDER BY digest_id")]

    def dirty(self) -> list[DigestRow]:
        """Digests whose message does not show their current version yet, oldest first."""
        rows = self._db.all("SELECT * FROM digests WHERE dirty > 0 ORDER BY digest_id")
        return [_digest(r) for r in rows]

    def waiting(self) -> list[tuple[int, str, int | None, str]]:
        """(chat id, agent id, card topic, item id) of every open approval whose card is
        posted in a chat the agent is bound to, oldest card first."""
        rows = self._db.all(
            "SELECT c.chat_id, c.agent_id, c.topic_id, c.item_id FROM cards c"
            " JOIN items i ON i.agent_id = c.agent_id AND i.item_id = c.item_id"
            " JOIN bindings b ON b.agent_id = c.agent_id AND b.chat_id = c.chat_id"
            " WHERE i.state = 'open' AND i.kind = 'approval' AND c.message_id IS NOT NULL"
            " ORDER BY c.card_id")
        return [(r["chat_id"], r["agent_id"], r["topic_id"], r["item_id"]) for r in rows]

    def items(self, digest_id: int, version: int) -> tuple[str, ...]:
        """The item ids version ``version`` of a digest listed, in order."""
        rows = self._db.all(
            "SELECT item_id FROM digest_items WHERE digest_id = ? AND version = ?"
            " ORDER BY seq", (digest_id, version))
        return tuple(r["item_id"] for r in rows)


class Digests(DigestsView):
    """Reading and writing digests."""

    def add(self, chat_id: int, agent_id: str, topic_id: int | None, token: str) -> int:
        row = self._db.one(
            "INSERT INTO digests (chat_id, agent_id, topic_id, token) VALUES (?, ?, ?, ?)"
            " RETURNING digest_id", (chat_id, agent_id, topic_id, token))
        return int(row[0]) if row else 0

    def add_version(self, digest_id: int, items: tuple[str, ...]) -> int:
        """A new version listing ``items``; the digest is to be redrawn."""
        self._db.run("UPDATE digests SET version = version + 1, dirty = dirty + 1"
                     " WHERE digest_id = ?", (digest_id,))
        row = self._db.one("SELECT version FROM digests WHERE digest_id = ?", (digest_id,))
        version = int(row["version"]) if row else 0
        self._db.run_many(
            "INSERT INTO digest_items (digest_id, version, seq, item_id) VALUES (?, ?, ?, ?)",
            [(digest_id, version, seq, item_id) for seq, item_id in enumerate(items)])
        return version

    def mark(self, digest_id: int) -> None:
        self._db.run("UPDATE digests SET dirty = dirty + 1 WHERE digest_id = ?", (digest_id,))

    def posted(self, digest_id: int, message_id: int | None) -> None:
        self._db.run("UPDATE digests SET message_id = ? WHERE digest_id = ?",
                     (message_id, digest_id))

    def clean(self, digest_id: int, generation: int) -> None:
        """The message shows the digest as of change ``generation``."""
        self._db.run("UPDATE digests SET dirty = 0 WHERE digest_id = ? AND dirty = ?",
                     (digest_id, generation))


def _digest(row: Row) -> DigestRow:
    return DigestRow(row["digest_id"], row["chat_id"], row["agent_id"], row["topic_id"],
                     row["token"], row["version"], row["message_id"], row["dirty"])
