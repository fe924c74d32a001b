"""The durable inbox of Telegram updates (see :mod:`bot.tg.update_inbox`): each update is
held here before ``getUpdates`` confirms it, and marked done once handled."""

from __future__ import annotations

from typing import Final

from bot.store.sql import Sql

CLAIM_AT_ONCE: Final = 10
"""Updates a replica claims at a time: others take on the rest meanwhile."""
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

    def claim(self, replica: str, now_ms: int,
              limit: int = CLAIM_AT_ONCE) -> list[tuple[int, str]]:
        """Updates not handled yet that ``replica`` takes on, oldest first: those nobody
        claimed, its own, and those of a replica whose lease (:class:`~bot.store.leases.
        Leases`) ran out. Rows another replica is claiming at this moment are skipped."""
        if not self._db.shared:  # one process: nothing to claim from anyone
            return self.pending(limit)
        with self._db.transaction(durable=False):  # a claim lost is made again
            rows = self._db.all(
                "UPDATE updates SET claimed_by = ? WHERE update_id IN (SELECT update_id"
                " FROM updates WHERE done = 0 AND (claimed_by IS NULL OR claimed_by = ? OR"
                " NOT EXISTS (SELECT 1 FROM leases WHERE name = 'replica ' || updates.claimed_by"
                " AND expires_at >= ?)) ORDER BY update_id LIMIT ? FOR UPDATE SKIP LOCKED)"
                " RETURNING update_id, body", (replica, replica, now_ms, limit))
        return sorted((int(r["update_id"]), str(r["body"])) for r in rows)

    def done(self, update_id: int) -> bool:
        """Handled: its content is dropped, its id kept for the offset. False when it was
        marked handled already (by another replica)."""
        return self._db.run("UPDATE updates SET done = 1, body = '' WHERE update_id = ?"
                            " AND done = 0", (update_id,)).rowcount > 0

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
