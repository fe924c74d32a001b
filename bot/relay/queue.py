"""The relay server's own queue: envelopes waiting for their recipients, in SQLite (WAL).

Each recipient has an ordered queue (oldest first). An envelope stays until its recipient
acknowledges it or it grows older than the age limit; the same envelope id queued twice
for one recipient is stored once. Every change is one short transaction, committed before
the caller answers the sender, so a queued envelope survives a crash or restart.
"""

from __future__ import annotations

import enum
import logging
import sqlite3
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from bot.errors import RelayError, StoreError

log = logging.getLogger(__name__)

DB_NAME: Final = "relay-queue.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS queue (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    recipient TEXT NOT NULL,
    envelope_id TEXT NOT NULL,
    body TEXT NOT NULL,
    queued_ms INTEGER NOT NULL,
    UNIQUE (recipient, envelope_id)
);
CREATE INDEX IF NOT EXISTS queue_by_recipient ON queue (recipient, seq);
CREATE INDEX IF NOT EXISTS queue_by_age ON queue (queued_ms);
"""


class QueueFull(RelayError):
    """The recipient already has as many envelopes waiting as the cap allows."""


@dataclass(frozen=True)
class Incoming:
    """An envelope to queue: for whom, its id and its JSON text."""

    recipient: str
    envelope_id: str
    body: str


class PutResult(enum.Enum):
    QUEUED = "queued"
    DUPLICATE = "duplicate"
    """Already waiting for that recipient: stored once."""
    FULL = "full"
    """The recipient's queue is at the cap."""


@dataclass(frozen=True)
class Queued:
    """One waiting envelope: its position, id and JSON text exactly as received."""

    seq: int
    envelope_id: str
    body: str


class RelayQueue:
    """Per-recipient envelope queues in one SQLite file. Not thread-safe: one event loop."""

    def __init__(self, connection: sqlite3.Connection, *, cap: int) -> None:
        self._db = connection
        self._cap = cap
        self._counts: Counter[str] = Counter()
        self._recount()

    @classmethod
    def open(cls, data_dir: Path, *, cap: int) -> RelayQueue:
        """Open (creating if needed) the queue in ``data_dir``."""
        try:
            data_dir.mkdir(parents=True, exist_ok=True)
            connection = sqlite3.connect(data_dir / DB_NAME, isolation_level=None)
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=FULL")
            connection.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the relay queue in {data_dir}: {exc}") from exc
        return cls(connection, cap=cap)

    def close(self) -> None:
        try:
            self._db.close()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot close the relay queue: {exc}") from exc

    def put(self, recipient: str, envelope_id: str, body: str, now_ms: int) -> bool:
        """Queue ``body`` for ``recipient``; ``False`` when that id was already queued.

        Raises :class:`QueueFull` when the recipient's queue is at the cap.
        """
        (result,) = self.put_many([Incoming(recipient, envelope_id, body)], now_ms)
        if result is PutResult.FULL:
            raise QueueFull(f"{self._cap} envelopes already wait for {recipient}")
        return result is PutResult.QUEUED

    def put_many(self, items: Sequence[Incoming], now_ms: int) -> list[PutResult]:
        """Queue several envelopes in one transaction (one disk sync), each with its own
        result."""
        added: Counter[str] = Counter()
        try:
            with self._db:
                self._db.execute("BEGIN")
                results = [self._put_one(item, now_ms, added) for item in items]
        except sqlite3.Error as exc:
            raise StoreError(f"cannot queue envelopes: {exc}") from exc
        self._counts.update(added)
        return results

    def _put_one(self, item: Incoming, now_ms: int, added: Counter[str]) -> PutResult:
        if self._counts[item.recipient] + added[item.recipient] >= self._cap:
            if self._contains(item.recipient, item.envelope_id):
                return PutResult.DUPLICATE
            return PutResult.FULL
        cursor = self._db.execute(
            "INSERT OR IGNORE INTO queue (recipient, envelope_id, body, queued_ms)"
            " VALUES (?, ?, ?, ?)",
            (item.recipient, item.envelope_id, item.body, now_ms),
        )
        if cursor.rowcount == 0:
            return PutResult.DUPLICATE
        added[item.recipient] += 1
        return PutResult.QUEUED

    def pending(self, recipient: str, *, after_seq: int = 0, limit: int = 100) -> list[Queued]:
        """Up to ``limit`` envelopes for ``recipient`` queued after ``after_seq``, oldest
        first."""
        try:
            rows = self._db.execute(
                "SELECT seq, envelope_id, body FROM queue WHERE recipient = ? AND seq > ?"
                " ORDER BY seq LIMIT ?",
                (recipient, after_seq, limit),
            ).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read the relay queue: {exc}") from exc
        return [Queued(seq, envelope_id, body) for seq, envelope_id, body in rows]

    def ack(self, recipient: str, envelope_id: str) -> bool:
        """Delete an acknowledged envelope; ``False`` when it was not queued."""
        return self.ack_many(recipient, [envelope_id]) == 1

    def ack_many(self, recipient: str, envelope_ids: list[str]) -> int:
        """Delete acknowledged envelopes in one transaction; returns how many were queued."""
        try:
            with self._db:
                self._db.execute("BEGIN")
                removed = sum(
                    self._db.execute(
                        "DELETE FROM queue WHERE recipient = ? AND envelope_id = ?",
                        (recipient, envelope_id),
                    ).rowcount
                    for envelope_id in envelope_ids
                )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot delete acknowledged envelopes: {exc}") from exc
        self._counts[recipient] -= removed
        return removed

    def purge(self, older_than_ms: int) -> int:
        """Delete envelopes queued before ``older_than_ms``; returns how many."""
        try:
            cursor = self._db.execute("DELETE FROM queue WHERE queued_ms < ?", (older_than_ms,))
        except sqlite3.Error as exc:
            raise StoreError(f"cannot purge the relay queue: {exc}") from exc
        if cursor.rowcount:
            self._recount()
        return max(cursor.rowcount, 0)

    def count(self, recipient: str) -> int:
        return self._counts[recipient]

    def _contains(self, recipient: str, envelope_id: str) -> bool:
        try:
            row = self._db.execute(
                "SELECT 1 FROM queue WHERE recipient = ? AND envelope_id = ?",
                (recipient, envelope_id),
            ).fetchone()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read the relay queue: {exc}") from exc
        return row is not None

    def _recount(self) -> None:
        try:
            rows = self._db.execute(
                "SELECT recipient, COUNT(*) FROM queue GROUP BY recipient"
            ).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read the relay queue: {exc}") from exc
        self._counts = Counter({recipient: count for recipient, count in rows})
