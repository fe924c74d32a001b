"""Envelopes waiting for their relay (the outbox) and the replay set of envelopes already
applied. The replay set is written in the same transaction as the processing of the
envelope it guards."""

from __future__ import annotations

import json
from collections.abc import Collection

from bot.store.sql import Sql


class OutboxView:
    """Reading the outbox and the replay set."""

    def __init__(self, db: Sql) -> None:
        self._db = db

    def pending(self, relay_url: str) -> list[dict[str, object]]:
        rows = self._db.all(
            "SELECT envelope_json FROM outbox WHERE relay_url = ? AND sent_at IS NULL"
            " ORDER BY created_at, rowid",
            (relay_url,),
        )
        return [json.loads(row["envelope_json"]) for row in rows]

    def depth(self) -> int:
        row = self._db.one("SELECT count(*) AS n FROM outbox WHERE sent_at IS NULL")
        return int(row["n"]) if row else 0

    def seen_among(self, envelope_ids: Collection[str]) -> set[str]:
        """Which of ``envelope_ids`` were applied before (the replay set, looked up for a
        batch of envelopes at once)."""
        if not envelope_ids:
            return set()
        rows = self._db.all(
            "SELECT envelope_id FROM replay"
            " WHERE envelope_id IN (SELECT value FROM json_each(?))",
            (json.dumps(list(envelope_ids)),),
        )
        return {str(r["envelope_id"]) for r in rows}


class Outbox(OutboxView):
    """Reading and writing the outbox and the replay set."""

    def add(self, relay_url: str, envelope: dict[str, object], now_ms: int) -> None:
        self._db.run(
            "INSERT INTO outbox (envelope_id, relay_url, envelope_json, created_at)"
            " VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
            (envelope["id"], relay_url, json.dumps(envelope), now_ms),
        )

    def mark_sent(self, envelope_id: str, now_ms: int) -> bool:
        """The relay took the envelope; False if it was already marked."""
        cursor = self._db.run(
            "UPDATE outbox SET sent_at = ? WHERE envelope_id = ? AND sent_at IS NULL",
            (now_ms, envelope_id),
        )
        return cursor.rowcount == 1

    def remember(self, envelope_id: str, ts_ms: int, now_ms: int) -> None:
        """Add an applied envelope to the replay set."""
        self._db.run(
            "INSERT INTO replay (envelope_id, ts, seen_at) VALUES (?, ?, ?)"
            " ON CONFLICT DO NOTHING",
            (envelope_id, ts_ms, now_ms),
        )

    def forget_before(self, cutoff_ms: int) -> int:
        """Drop replay entries first seen before ``cutoff_ms`` (retention: 30 days)."""
        return self._db.run("DELETE FROM replay WHERE seen_at < ?", (cutoff_ms,)).rowcount
