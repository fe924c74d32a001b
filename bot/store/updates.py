"""The durable inbox of Telegram updates (see :mod:`bot.tg.update_inbox`): each update is
held here before ``getUpdates`` confirms it, and marked done once handled."""

from __future__ import annotations

from typing import Final

from bot.store.sql import Sql

KEEP_HANDLED: Final = 1000
"""Handled updates whose ids :meth:`Updates.prune` keeps."""


class Updates:
    """The ``updates`` table."""

    def __init__(self, db: Sql) -> None:
        self._db = db

    def add(self, update_id: int, body: str) -> None:
        """Hold an update fetched from Telegram (a copy delivered again is ignored)."""
        self._db.run("INSERT INTO updates (update_id, body) VALUES (?, ?)"
                     " ON CONFLICT DO NOTHING",
                     (update_id, body))

    def pending(self, limit: int = 100) -> list[tuple[int, str]]:
        """Updates held and not handled yet, oldest first."""
        rows = self._db.all("SELECT update_id, body FROM updates WHERE done = 0"
                            " ORDER BY update_id LIMIT ?", (limit,))
        return [(int(r["update_id"]), str(r["body"])) for r in rows]

    def done(self, update_id: int) -> None:
        """Handled: its content is dropped, its id kept for the offset."""
        self._db.run("UPDATE updates SET done = 1, body = '' WHERE update_id = ?", (update_id,))

    def next_offset(self) -> int | None:
        """The ``getUpdates`` offset that confirms every update held (None: none held)."""
        row = self._db.one("SELECT max(update_id) AS m FROM updates")
        return int(row["m"]) + 1 if row and row["m"] is not None else None

    def prune(self) -> None:
        """Forget handled updates but the newest :data:`KEEP_HANDLED` (the newest keeps the
        offset; the others make a copy Telegram posts again to a webhook, its answer lost,
        be recognised)."""
        self._db.run("DELETE FROM updates WHERE done = 1 AND update_id <"
                     " (SELECT min(update_id) FROM (SELECT update_id FROM updates"
                     " ORDER BY update_id DESC LIMIT ?))", (KEEP_HANDLED,))
