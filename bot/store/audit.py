"""The audit trail: append-only. This module has no statement that updates or deletes it,
and triggers in the schema refuse both."""

from __future__ import annotations

import json

from bot.core.model import AuditRow
from bot.store.sql import Sql


class AuditView:
    """Reading the audit trail."""

    def __init__(self, db: Sql) -> None:
        self._db = db

    def rows(
        self,
        *,
        chat_id: int | None = None,
        since_ms: int | None = None,
        events: tuple[str, ...] | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[AuditRow]:
        """Audit rows, oldest first; ``chat_id`` includes the ids the chat had before it
        became a supergroup."""
        where: list[str] = ["1 = 1"]
        params: list[object] = []
        if chat_id is not None:
            # A record about an item without a chat of its own (it expired, or was
            # resolved elsewhere) belongs to every chat the item was shown in.
            chats = "(SELECT ? UNION SELECT old_id FROM chat_aliases WHERE new_id = ?)"
            where.append(
                f"(chat_id IN {chats} OR (chat_id IS NULL AND item_id IS NOT NULL AND EXISTS"
                " (SELECT 1 FROM cards c WHERE c.agent_id = audit.agent_id"
                f" AND c.item_id = audit.item_id AND c.chat_id IN {chats})))"
            )
            params.extend((chat_id, chat_id, chat_id, chat_id))
        if since_ms is not None:
            where.append("at >= ?")
            params.append(since_ms)
        if events:
            where.append(f"event IN ({', '.join('?' for _ in events)})")
            params.extend(events)
        order = "DESC" if newest_first else "ASC"
        sql = f"SELECT * FROM audit WHERE {' AND '.join(where)} ORDER BY seq {order}"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return [
            AuditRow(
                seq=r["seq"], at=r["at"], event=r["event"], chat_id=r["chat_id"],
                agent_id=r["agent_id"], item_id=r["item_id"], user_id=r["user_id"],
                user_name=r["user_name"], detail=json.loads(r["detail"]),
            )
            for r in self._db.all(sql, tuple(params))
        ]


class Audit(AuditView):
    """Reading and appending to the audit trail."""

    def append(
        self,
        event: str,
        *,
        at: int,
        chat_id: int | None = None,
        agent_id: str | None = None,
        item_id: str | None = None,
        user_id: int | None = None,
        user_name: str | None = None,
        **detail: object,
    ) -> None:
        self._db.run(
            "INSERT INTO audit (at, event, chat_id, agent_id, item_id, user_id, user_name,"
            " detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (at, event, chat_id, agent_id, item_id, user_id, user_name,
             json.dumps(detail, ensure_ascii=False, sort_keys=True)),
        )
