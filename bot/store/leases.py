"""Leases in the database (the ``leases`` table): which replica leads (holds the relay
sessions and the workers), and which replicas are alive (their claims on held updates
stand). A lease is a holder and the moment it runs out; its holder renews it well before."""

from __future__ import annotations

from typing import Final

from bot.store.sql import Sql

LEADER: Final = "leader"


def replica_lease(replica: str) -> str:
    """The name of the lease that says ``replica`` is alive."""
    return f"replica {replica}"


class Leases:
    """The ``leases`` table."""

    def __init__(self, db: Sql) -> None:
        self._db = db

    def take(self, name: str, holder: str, now_ms: int, ttl_ms: int) -> str:
        """Take the lease ``name`` for ``holder`` until ``now_ms + ttl_ms`` if it is free,
        ``holder``'s already, or ran out; returns who holds it afterwards."""
        with self._db.transaction(durable=False):
            self._db.run(
                "INSERT INTO leases (name, holder, expires_at) VALUES (?, ?, ?)"
                " ON CONFLICT (name) DO UPDATE SET holder = excluded.holder,"
                " expires_at = excluded.expires_at"
                " WHERE leases.holder = excluded.holder OR leases.expires_at < ?",
                (name, holder, now_ms + ttl_ms, now_ms))
            row = self._db.one("SELECT holder FROM leases WHERE name = ?", (name,))
        return str(row["holder"]) if row else ""

    def renew(self, name: str, holder: str, now_ms: int, ttl_ms: int) -> None:
        """Hold the lease ``name`` (one nobody else takes) until ``now_ms + ttl_ms``."""
        self._db.run("INSERT INTO leases (name, holder, expires_at) VALUES (?, ?, ?)"
                     " ON CONFLICT (name) DO UPDATE SET holder = excluded.holder,"
                     " expires_at = excluded.expires_at", (name, holder, now_ms + ttl_ms))

    def holder(self, name: str, now_ms: int) -> str | None:
        """Who holds the lease ``name`` now (None: nobody)."""
        row = self._db.one("SELECT holder FROM leases WHERE name = ? AND expires_at >= ?",
                           (name, now_ms))
        return str(row["holder"]) if row else None

    def alive(self, now_ms: int) -> int:
        """How many replicas' leases are running."""
        row = self._db.one("SELECT count(*) AS n FROM leases WHERE name LIKE 'replica %'"
                           " AND expires_at >= ?", (now_ms,))
        return int(row["n"]) if row else 0

    def release(self, name: str, holder: str) -> None:
        """Give the lease ``name`` up, if ``holder`` holds it."""
        self._db.run("DELETE FROM leases WHERE name = ? AND holder = ?", (name, holder))
