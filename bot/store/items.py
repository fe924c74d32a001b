"""Inbox items as the bot holds them, and the decisions and answers it sent for them."""

from __future__ import annotations

import json
from collections.abc import Collection

from bot.core.model import CardRow, DecisionRow, ItemRow, NewItem, ReportedOutcome
from bot.store.sql import Sql


class ItemsView:
    """Reading items and decisions."""

    def __init__(self, db: Sql) -> None:
        self._db = db

    def get(self, agent_id: str, item_id: str) -> ItemRow | None:
        row = self._db.one(
            "SELECT * FROM items WHERE agent_id = ? AND item_id = ?", (agent_id, item_id)
        )
        return ItemRow(**dict(row)) if row else None

    def open_ids(self, agent_id: str) -> set[str]:
        rows = self._db.all(
            "SELECT item_id FROM items WHERE agent_id = ? AND state = 'open'", (agent_id,)
        )
        return {str(r["item_id"]) for r in rows}

    def open_among(self, agent_id: str, item_ids: Collection[str]) -> set[str]:
        """Which of ``item_ids`` are open."""
        return self._among(agent_id, item_ids, " AND state = 'open'")

    def held_among(self, agent_id: str, item_ids: Collection[str]) -> set[str]:
        """Which of ``item_ids`` the bot holds, in any state."""
        return self._among(agent_id, item_ids, "")

    def _among(self, agent_id: str, item_ids: Collection[str], condition: str) -> set[str]:
        if not item_ids:
            return set()
        rows = self._db.all(
            "SELECT item_id FROM items WHERE agent_id = ?"
            " AND item_id IN (SELECT value FROM json_each(?))" + condition,
            (agent_id, json.dumps(list(item_ids))),
        )
        return {str(r["item_id"]) for r in rows}

    def has(self, agent_id: str, item_id: str) -> bool:
        row = self._db.one(
            "SELECT 1 FROM items WHERE agent_id = ? AND item_id = ?", (agent_id, item_id)
        )
        return row is not None

    def expired(self, now_ms: int) -> list[ItemRow]:
        """Open items whose ``expires_at`` has passed."""
        rows = self._db.all(
            "SELECT * FROM items WHERE state = 'open' AND expires_at IS NOT NULL"
            " AND expires_at <= ?",
            (now_ms,),
        )
        return [ItemRow(**dict(r)) for r in rows]

    def next_expiry(self) -> int | None:
        row = self._db.one(
            "SELECT min(expires_at) AS t FROM items WHERE state = 'open'"
            " AND expires_at IS NOT NULL"
        )
        return int(row["t"]) if row and row["t"] is not None else None

    def open_in_chat(self, chat_id: int) -> list[tuple[ItemRow, CardRow]]:
        """The open items with a card in the chat, oldest first, each with its card."""
        rows = self._db.all(
            "SELECT i.*, c.card_id AS c_card_id, c.agent_id AS c_agent_id,"
            " c.item_id AS c_item_id, c.chat_id AS c_chat_id, c.topic_id AS c_topic_id,"
            " c.token AS c_token, c.message_id AS c_message_id, c.dirty AS c_dirty,"
            " c.attachment_sent AS c_attachment_sent, c.reminder AS c_reminder,"
            " c.posted_at AS c_posted_at"
            " FROM cards c JOIN items i ON i.agent_id = c.agent_id AND i.item_id = c.item_id"
            " WHERE c.chat_id = ? AND i.state = 'open' ORDER BY i.created_at, c.card_id",
            (chat_id,),
        )
        result = []
        for row in rows:
            values = dict(row)
            card = {key[2:]: values.pop(key) for key in list(values) if key.startswith("c_")}
            card["attachment_sent"] = bool(card["attachment_sent"])
            result.append((ItemRow(**values), CardRow(**card)))
        return result

    def open_count(self) -> int:
        row = self._db.one("SELECT count(*) AS n FROM items WHERE state = 'open'")
        return int(row["n"]) if row else 0

    def decision_by_envelope(self, envelope_id: str) -> DecisionRow | None:
        row = self._db.one("SELECT * FROM decisions WHERE envelope_id = ?", (envelope_id,))
        return DecisionRow(**dict(row)) if row else None

    def sending(self, agent_id: str, item_id: str) -> bool:
        """Whether the decision or answer made here for the item still waits for its relay
        to take it (``sent``)."""
        row = self._db.one(
            "SELECT 1 FROM decisions d JOIN outbox o ON o.envelope_id = d.envelope_id"
            " WHERE d.agent_id = ? AND d.item_id = ? AND o.sent_at IS NULL",
            (agent_id, item_id),
        )
        return row is not None

    def reported(self, agent_id: str, item_id: str) -> ReportedOutcome | None:
        """How the agent said an item decided here ended, if it has said."""
        row = self._db.one(
            "SELECT * FROM reported WHERE agent_id = ? AND item_id = ?", (agent_id, item_id)
        )
        return ReportedOutcome(**dict(row)) if row else None

    def unreported_decisions(
        self, agent_id: str, item_ids: Collection[str]
    ) -> dict[str, DecisionRow]:
        """The decisions made here for ``item_ids`` whose outcome the agent has not
        reported yet, by item."""
        if not item_ids:
            return {}
        rows = self._db.all(
            "SELECT d.* FROM decisions d WHERE d.agent_id = ?"
            " AND d.item_id IN (SELECT value FROM json_each(?))"
            " AND NOT EXISTS (SELECT 1 FROM reported r"
            " WHERE r.agent_id = d.agent_id AND r.item_id = d.item_id)",
            (agent_id, json.dumps(list(item_ids))),
        )
        return {str(row["item_id"]): DecisionRow(**dict(row)) for row in rows}


class Items(ItemsView):
    """Reading and writing items and decisions."""

    def add_many(self, agent_id: str, items: list[NewItem], *, now_ms: int) -> None:
        """Insert new open items (one the bot already holds, in any state, is left as it is)."""
        self._db.run_many(
            "INSERT INTO items (agent_id, item_id, kind, body_json, expires_at,"
            " remind_at, created_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            [(agent_id, item.item_id, item.kind, item.body_json, item.expires_at,
              item.remind_at, now_ms) for item in items],
        )

    def close(
        self,
        agent_id: str,
        item_id: str,
        *,
        state: str,
        by: str | None,
        at: int | None,
        chat_id: int | None = None,
        reason: str | None = None,
    ) -> bool:
        """Move an open item to a final state and mark its cards for editing.

        Returns False (and changes nothing) when the item is not open: the first decision
        anywhere wins.
        """
        cursor = self._db.run(
            "UPDATE items SET state = ?, outcome_by = ?, outcome_at = ?, outcome_chat_id = ?,"
            " outcome_reason = ? WHERE agent_id = ? AND item_id = ? AND state = 'open'",
            (state, by, at, chat_id, reason, agent_id, item_id),
        )
        if cursor.rowcount != 1:
            return False
        self.redraw(agent_id, item_id)
        return True

    def redraw(self, agent_id: str, item_id: str) -> None:
        """Mark the item's cards for editing."""
        self._db.run(
            "UPDATE cards SET dirty = dirty + 1 WHERE agent_id = ? AND item_id = ?",
            (agent_id, item_id),
        )

    def add_reported(self, report: ReportedOutcome) -> bool:
        """Keep the outcome the agent reported for an item decided here; False when one
        is kept already (the agent lists an item as resolved in many updates)."""
        cursor = self._db.run(
            "INSERT INTO reported (agent_id, item_id, outcome, outcome_by,"
            " outcome_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            (report.agent_id, report.item_id, report.outcome, report.outcome_by,
             report.outcome_at),
        )
        return cursor.rowcount == 1

    def add_decision(self, decision: DecisionRow) -> None:
        self._db.run(
            "INSERT INTO decisions (decision_id, agent_id, item_id, chat_id, kind, value,"
            " reason, user_id, user_name, at, envelope_id)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                decision.decision_id,
                decision.agent_id,
                decision.item_id,
                decision.chat_id,
                decision.kind,
                decision.value,
                decision.reason,
                decision.user_id,
                decision.user_name,
                decision.at,
                decision.envelope_id,
            ),
        )
