"""The grants the agent host keeps: given with an approval, counted as calls use them,
ended by a revoke or by time. Rows of the host's database, read and written inside its
transactions (:class:`~bot.agenthost.store.AgentStore` owns the connection)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from typing import Any, Final

from bot.agenthost.grants import Grant

Execute = Callable[[str, tuple[Any, ...]], sqlite3.Cursor]
"""The store's statement runner: SQL and its parameters, failures as ``StoreError``."""

_COLUMNS: Final = "grant_id, key, label, granted_by_json, granted_at, expires_at, uses, ended_at"


class GrantStore:
    """The ``grants`` table."""

    def __init__(self, execute: Execute) -> None:
        self._execute = execute

    def add(self, grant: Grant, item_id: str) -> None:
        self._execute(
            "INSERT INTO grants (grant_id, key, label, granted_by_json, granted_at, expires_at,"
            " uses, item_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (grant.grant_id, grant.key, grant.label, json.dumps(dict(grant.granted_by)),
             grant.granted_ms, grant.expires_ms, grant.uses, item_id),
        )

    def in_force(self, now_ms: int) -> list[Grant]:
        rows = self._execute(
            f"SELECT {_COLUMNS} FROM grants WHERE ended_at IS NULL AND expires_at > ?"
            " ORDER BY granted_at", (now_ms,),
        ).fetchall()
        return [_grant(row) for row in rows]

    def get(self, grant_id: str) -> Grant | None:
        row = self._execute(f"SELECT {_COLUMNS} FROM grants WHERE grant_id = ?",
                            (grant_id,)).fetchone()
        return None if row is None else _grant(row)

    def end(self, grant_id: str, now_ms: int) -> bool:
        """Revoke a grant in force; False when it had ended already (or never was)."""
        cursor = self._execute(
            "UPDATE grants SET ended_at = ? WHERE grant_id = ? AND ended_at IS NULL"
            " AND expires_at > ?", (now_ms, grant_id, now_ms))
        return cursor.rowcount == 1

    def count_use(self, grant_id: str) -> None:
        self._execute("UPDATE grants SET uses = uses + 1 WHERE grant_id = ?", (grant_id,))

    def next_expiry(self, now_ms: int) -> int | None:
        row = self._execute("SELECT MIN(expires_at) FROM grants WHERE ended_at IS NULL"
                            " AND expires_at > ?", (now_ms,)).fetchone()
        return None if row[0] is None else int(row[0])


def _grant(row: tuple[Any, ...]) -> Grant:
    return Grant(
        grant_id=row[0], key=row[1], label=row[2], granted_by=json.loads(row[3]),
        granted_ms=int(row[4]), expires_ms=int(row[5]), uses=int(row[6]),
        ended_ms=None if row[7] is None else int(row[7]),
    )
