"""The relay server's own queue: envelopes waiting for their recipients, in SQLite (WAL).

Each recipient has an ordered queue (oldest first). An envelope stays until its recipient
acknowledges it or it grows older than the age limit; the same envelope id queued twice
by one sender for one recipient is stored once (another sender's envelope with the same
id is a different envelope and is stored too). Every change is one short transaction,
committed before the caller answers the sender, so a queued envelope survives a crash or
restart.

What may wait is bounded by :class:`QueueLimits`: envelopes and bytes per recipient,
envelopes and bytes per (sender, recipient) pair, so that one sender cannot fill a
recipient's whole queue, and bytes for the whole relay. Usage is counted in memory
(recounted from the file on open and after a purge), so checking a limit costs no query.
"""

from __future__ import annotations

import enum
import logging
import sqlite3
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from bot.errors import RelayError, StoreError

log = logging.getLogger(__name__)

DB_NAME: Final = "relay-queue.sqlite3"
SCHEMA_VERSION: Final = 2
"""``PRAGMA user_version`` of the current schema; 0 is a new file or the first schema."""

MIB: Final = 1024 * 1024
DEFAULT_RECIPIENT_COUNT: Final = 10_000
DEFAULT_RECIPIENT_BYTES: Final = 256 * MIB
DEFAULT_SENDER_COUNT: Final = 2_500
DEFAULT_SENDER_BYTES: Final = 64 * MIB
DEFAULT_TOTAL_BYTES: Final = 2048 * MIB
DEFAULT_PAGE_BYTES: Final = 4 * MIB
"""How many bytes of bodies :meth:`RelayQueue.pending` loads at once by default."""

_TABLE = """
CREATE TABLE queue (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    recipient TEXT NOT NULL,
    sender TEXT NOT NULL,
    envelope_id TEXT NOT NULL,
    size INTEGER NOT NULL,
    queued_ms INTEGER NOT NULL,
    body TEXT NOT NULL,
    UNIQUE (recipient, sender, envelope_id)
)
"""
# ``body`` comes last so that reading the other columns never loads its overflow pages.
_INDEXES = """
CREATE INDEX queue_by_recipient ON queue (recipient, seq, size);
CREATE INDEX queue_by_envelope ON queue (recipient, envelope_id);
CREATE INDEX queue_by_age ON queue (queued_ms);
"""
_MIGRATE_FROM_1 = """
ALTER TABLE queue RENAME TO queue_v1;
DROP INDEX IF EXISTS queue_by_recipient;
DROP INDEX IF EXISTS queue_by_age;
{table};
INSERT INTO queue (seq, recipient, sender, envelope_id, size, queued_ms, body)
    SELECT seq, recipient, COALESCE(json_extract(body, '$.from'), ''), envelope_id,
           length(CAST(body AS BLOB)), queued_ms, body
    FROM queue_v1;
DROP TABLE queue_v1;
"""


class QueueFull(RelayError):
    """A limit would be exceeded by queuing the envelope."""


@dataclass(frozen=True)
class QueueLimits:
    """How much may wait. Sender limits apply to each (sender, recipient) pair."""

    recipient_count: int = DEFAULT_RECIPIENT_COUNT
    recipient_bytes: int = DEFAULT_RECIPIENT_BYTES
    sender_count: int = DEFAULT_SENDER_COUNT
    sender_bytes: int = DEFAULT_SENDER_BYTES
    total_bytes: int = DEFAULT_TOTAL_BYTES


@dataclass(frozen=True)
class Incoming:
    """An envelope to queue: for whom, from whom, its id and its JSON text."""

    recipient: str
    sender: str
    envelope_id: str
    body: str


class PutResult(enum.Enum):
    QUEUED = "queued"
    DUPLICATE = "duplicate"
    """Already waiting (same recipient, sender and id): stored once."""
    FULL = "full"
    """The recipient's queue is at its envelope or byte limit."""
    SENDER_FULL = "sender_full"
    """This sender's share of the recipient's queue is used up."""
    RELAY_FULL = "relay_full"
    """The relay holds as many bytes as it may."""


@dataclass(frozen=True)
class Queued:
    """One waiting envelope: its position, id and JSON text exactly as received."""

    seq: int
    envelope_id: str
    size: int
    """The body's length in UTF-8 bytes."""
    body: str


@dataclass
class _Usage:
    """What waits now, counted in memory."""

    count: Counter[str] = field(default_factory=Counter)
    bytes: Counter[str] = field(default_factory=Counter)
    pair_count: Counter[tuple[str, str]] = field(default_factory=Counter)
    pair_bytes: Counter[tuple[str, str]] = field(default_factory=Counter)
    total_bytes: int = 0

    def add(self, recipient: str, sender: str, size: int, count: int = 1) -> None:
        pair = (recipient, sender)
        self.count[recipient] += count
        self.bytes[recipient] += size
        self.pair_count[pair] += count
        self.pair_bytes[pair] += size
        self.total_bytes += size

    def remove(self, recipient: str, sender: str, size: int) -> None:
        self.add(recipient, sender, -size, count=-1)
        pair = (recipient, sender)
        for counter, key in ((self.count, recipient), (self.bytes, recipient)):
            if counter[key] <= 0:
                del counter[key]
        for pair_counter in (self.pair_count, self.pair_bytes):
            if pair_counter[pair] <= 0:
                del pair_counter[pair]

    def refusal(self, item: Incoming, size: int, limits: QueueLimits) -> PutResult | None:
        """Which limit queuing ``item`` would break, if any."""
        pair = (item.recipient, item.sender)
        if self.total_bytes + size > limits.total_bytes:
            return PutResult.RELAY_FULL
        if (
            self.count[item.recipient] + 1 > limits.recipient_count
            or self.bytes[item.recipient] + size > limits.recipient_bytes
        ):
            return PutResult.FULL
        if (
            self.pair_count[pair] + 1 > limits.sender_count
            or self.pair_bytes[pair] + size > limits.sender_bytes
        ):
            return PutResult.SENDER_FULL
        return None


class RelayQueue:
    """Per-recipient envelope queues in one SQLite file. Not thread-safe: one event loop."""

    def __init__(self, connection: sqlite3.Connection, *, limits: QueueLimits) -> None:
        self._db = connection
        self._limits = limits
        self._usage = _Usage()
        self._recount()

    @classmethod
    def open(cls, data_dir: Path, *, limits: QueueLimits | None = None) -> RelayQueue:
        """Open (creating or upgrading if needed) the queue in ``data_dir``."""
        try:
            data_dir.mkdir(parents=True, exist_ok=True)
            connection = sqlite3.connect(data_dir / DB_NAME, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the relay queue in {data_dir}: {exc}") from exc
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=FULL")
            _ensure_schema(connection)
        except sqlite3.Error as exc:
            connection.close()
            raise StoreError(f"cannot open the relay queue in {data_dir}: {exc}") from exc
        except StoreError:
            connection.close()
            raise
        return cls(connection, limits=limits or QueueLimits())

    def close(self) -> None:
        try:
            self._db.close()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot close the relay queue: {exc}") from exc

    def put(self, item: Incoming, now_ms: int) -> bool:
        """Queue one envelope; ``False`` when it was already queued.

        Raises :class:`QueueFull` when a limit would be exceeded.
        """
        (result,) = self.put_many([item], now_ms)
        if result not in (PutResult.QUEUED, PutResult.DUPLICATE):
            raise QueueFull(f"cannot queue {item.envelope_id} for {item.recipient}: {result.value}")
        return result is PutResult.QUEUED

    def put_many(self, items: Sequence[Incoming], now_ms: int) -> list[PutResult]:
        """Queue several envelopes in one transaction (one disk sync), each with its own
        result."""
        try:
            with self._db:
                self._db.execute("BEGIN")
                return [self._put_one(item, now_ms) for item in items]
        except sqlite3.Error as exc:
            self._recount()  # rolled back: forget what this transaction added
            raise StoreError(f"cannot queue envelopes: {exc}") from exc

    def _put_one(self, item: Incoming, now_ms: int) -> PutResult:
        size = len(item.body.encode("utf-8"))
        refusal = self._usage.refusal(item, size, self._limits)
        if refusal is not None:
            return PutResult.DUPLICATE if self._contains(item) else refusal
        cursor = self._db.execute(
            "INSERT OR IGNORE INTO queue (recipient, sender, envelope_id, size, queued_ms, body)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (item.recipient, item.sender, item.envelope_id, size, now_ms, item.body),
        )
        if cursor.rowcount == 0:
            return PutResult.DUPLICATE
        self._usage.add(item.recipient, item.sender, size)
        return PutResult.QUEUED

    def pending(
        self,
        recipient: str,
        *,
        after_seq: int = 0,
        limit: int = 100,
        max_bytes: int = DEFAULT_PAGE_BYTES,
    ) -> list[Queued]:
        """The next envelopes for ``recipient`` queued after ``after_seq``, oldest first:
        at most ``limit`` of them and ``max_bytes`` of bodies (but always at least one)."""
        try:
            sizes = self._db.execute(
                "SELECT seq, size FROM queue WHERE recipient = ? AND seq > ? ORDER BY seq LIMIT ?",
                (recipient, after_seq, limit),
            ).fetchall()
            last = _last_within(sizes, max_bytes)
            if last is None:
                return []
            rows = self._db.execute(
                "SELECT seq, envelope_id, size, body FROM queue"
                " WHERE recipient = ? AND seq > ? AND seq <= ? ORDER BY seq",
                (recipient, after_seq, last),
            ).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read the relay queue: {exc}") from exc
        return [Queued(*row) for row in rows]

    def ack(self, recipient: str, envelope_id: str) -> bool:
        """Delete an acknowledged envelope; ``False`` when it was not queued."""
        return self.ack_many(recipient, [envelope_id]) == 1

    def ack_many(self, recipient: str, envelope_ids: list[str]) -> int:
        """Delete acknowledged envelopes in one transaction; returns how many were queued.

        An ack names only the id: when two senders used the same id, each ack deletes the
        oldest one, which is the one delivered (and so acknowledged) first.
        """
        deleted: list[tuple[str, int]] = []
        try:
            with self._db:
                self._db.execute("BEGIN")
                for envelope_id in envelope_ids:
                    deleted += self._db.execute(
                        "DELETE FROM queue WHERE seq = (SELECT seq FROM queue"
                        " WHERE recipient = ? AND envelope_id = ? ORDER BY seq LIMIT 1)"
                        " RETURNING sender, size",
                        (recipient, envelope_id),
                    ).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot delete acknowledged envelopes: {exc}") from exc
        for sender, size in deleted:
            self._usage.remove(recipient, sender, size)
        return len(deleted)

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
        """Envelopes waiting for ``recipient``."""
        return self._usage.count[recipient]

    def bytes_for(self, recipient: str) -> int:
        """Bytes of envelopes waiting for ``recipient``."""
        return self._usage.bytes[recipient]

    @property
    def total_bytes(self) -> int:
        """Bytes of envelopes waiting for anyone."""
        return self._usage.total_bytes

    def _contains(self, item: Incoming) -> bool:
        row = self._db.execute(
            "SELECT 1 FROM queue WHERE recipient = ? AND sender = ? AND envelope_id = ?",
            (item.recipient, item.sender, item.envelope_id),
        ).fetchone()
        return row is not None

    def _recount(self) -> None:
        try:
            rows = self._db.execute(
                "SELECT recipient, sender, COUNT(*), SUM(size) FROM queue"
                " GROUP BY recipient, sender"
            ).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read the relay queue: {exc}") from exc
        self._usage = _Usage()
        for recipient, sender, count, size in rows:
            self._usage.add(recipient, sender, size, count)


def _last_within(sizes: list[tuple[int, int]], max_bytes: int) -> int | None:
    """The seq of the last row that fits in ``max_bytes`` (the first always fits)."""
    last: int | None = None
    total = 0
    for seq, size in sizes:
        total += size
        if last is not None and total > max_bytes:
            break
        last = seq
    return last


def _ensure_schema(db: sqlite3.Connection) -> None:
    """Create the schema in a new file, upgrade an older one, refuse a newer one."""
    version = int(db.execute("PRAGMA user_version").fetchone()[0])
    if version == SCHEMA_VERSION:
        return
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"the relay queue has schema version {version}; this relay knows"
            f" {SCHEMA_VERSION} at most"
        )
    has_queue = db.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'queue'"
    ).fetchone()
    script = _MIGRATE_FROM_1.format(table=_TABLE) if has_queue else _TABLE + ";"
    db.executescript(f"BEGIN; {script} {_INDEXES} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;")
    if has_queue:
        log.info("relay queue upgraded to schema version %d", SCHEMA_VERSION)
