"""The relay server's own queue: envelopes waiting for their recipients, in SQLite (WAL).

Each recipient has an ordered queue (oldest first). An envelope stays until its recipient
acknowledges it or it grows older than the age limit; the same envelope id queued twice
by one sender for one recipient is stored once (another sender's envelope with the same
id is a different envelope and is stored too). Changes are written in batches, one
transaction each (:meth:`RelayQueue.apply`), committed before the caller answers the
sender or forgets an acknowledgement, so a queued envelope survives a crash or restart.

Anyone can make an identity, so what may wait is bounded by :class:`QueueLimits`, and the
bounds are drawn so that throwaway identities cannot crowd out real correspondents:

- per recipient: envelopes and bytes in all;
- per (sender, recipient) pair: envelopes and bytes, so that one sender cannot fill a
  recipient's queue;
- per recipient, from *strangers* (senders whose envelopes it has never acknowledged): a
  small share in all, however many identities they use. A sender becomes a contact of a
  recipient when the recipient acknowledges one of its envelopes;
- per recipient that has never connected to this relay: a small queue, kept for a short
  time only (:meth:`RelayQueue.purge`);
- per address (the sending connection's network address): envelopes and bytes in all;
- for the whole relay: bytes.

Usage is counted in memory (recounted from the file on open and after a purge), so
checking a limit costs no query.
"""

from __future__ import annotations

import contextlib
import enum
import json
import logging
import sqlite3
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, TypeVar

from bot.durable import Place, Step, open_sqlite
from bot.errors import store_error
from bot.relay.limits import MIB, QueueLimits

log = logging.getLogger(__name__)

_K = TypeVar("_K")

DB_NAME: Final = "relay-queue.sqlite3"
WHAT: Final = "the relay queue"
PLACE: Final = Place(WHAT, "the relay's data folder", "--data")
CHECK_S: Final = 5.0
"""How long the integrity check at start may take at most."""
CACHE_KIB: Final = 32 * 1024
"""The writer's page cache: what is in flight at ten thousand envelopes a second (its
rows and indexes) stays in memory instead of being read back from the file."""
PRAGMAS: Final = (f"cache_size=-{CACHE_KIB}",)

DEFAULT_PAGE_BYTES: Final = 4 * MIB
"""How many bytes of bodies :meth:`RelayQueue.pending` loads at once by default."""

_TABLES: Final = (
    """CREATE TABLE queue (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        recipient TEXT NOT NULL,
        sender TEXT NOT NULL,
        address TEXT NOT NULL,
        envelope_id TEXT NOT NULL,
        size INTEGER NOT NULL,
        queued_ms INTEGER NOT NULL,
        body TEXT NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS recipients (
        id TEXT PRIMARY KEY,
        first_ms INTEGER NOT NULL
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS contacts (
        recipient TEXT NOT NULL,
        sender TEXT NOT NULL,
        PRIMARY KEY (recipient, sender)
    ) WITHOUT ROWID""",
)
# ``body`` comes last so that reading the other columns never loads its overflow pages.
# One index both keeps an envelope from being stored twice (recipient, id, sender) and
# finds what an ack names (recipient, id): every index costs a page written per envelope
# queued and per envelope acknowledged.
_INDEXES: Final = (
    "CREATE INDEX queue_by_recipient ON queue (recipient, seq, size)",
    "CREATE UNIQUE INDEX queue_by_envelope ON queue (recipient, envelope_id, sender)",
    "CREATE INDEX queue_by_age ON queue (queued_ms)",
)
_FIND_ACKED = (
    "SELECT json_group_array(json_array(q.seq, q.recipient, q.sender, q.address, q.size,"
    " q.envelope_id))"
    " FROM json_each(?) AS a JOIN queue AS q ON q.seq = (SELECT seq"
    " FROM queue INDEXED BY queue_by_envelope WHERE recipient = json_extract(a.value, '$[0]')"
    " AND envelope_id = json_extract(a.value, '$[1]') ORDER BY seq LIMIT 1)"
)
"""The oldest waiting envelope for each (recipient, id) in a JSON list, as one JSON list."""
_INSERT_MANY = (
    "INSERT OR IGNORE INTO queue"
    " (recipient, sender, address, envelope_id, size, queued_ms, body) VALUES "
)
_ROW = "(?, ?, ?, ?, ?, ?, ?)"
INSERT_CHUNK: Final = 500
"""Envelopes queued by one statement at most."""
@dataclass(frozen=True)
class Incoming:
    """An envelope to queue: for whom, from whom, its id and JSON text, and the network
    address it came from."""

    recipient: str
    sender: str
    envelope_id: str
    body: str
    address: str = ""


@dataclass(frozen=True)
class Acknowledged:
    """An envelope its recipient has acknowledged: to be deleted."""

    recipient: str
    envelope_id: str


@dataclass
class Batch:
    """Changes written together in one transaction: sessions that connected,
    acknowledgements (applied first: they make room) and envelopes to queue."""

    connected: list[str] = field(default_factory=list)
    acks: list[Acknowledged] = field(default_factory=list)
    puts: list[Incoming] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.connected or self.acks or self.puts)


class PutResult(enum.Enum):
    QUEUED = "queued"
    DUPLICATE = "duplicate"
    """Already waiting (same recipient, sender and id): stored once."""
    FULL = "full"
    """The recipient's queue is at its envelope or byte limit."""
    SENDER_FULL = "sender_full"
    """This sender's share of the recipient's queue is used up."""
    STRANGERS_FULL = "strangers_full"
    """The share of the recipient's queue for senders it has never acknowledged is used up."""
    UNSEEN_FULL = "unseen_full"
    """The recipient has never connected, and its small queue is full."""
    ADDRESS_FULL = "address_full"
    """The sender's network address has as much queued as it may."""
    RELAY_FULL = "relay_full"
    """The relay holds as many bytes as it may."""


@dataclass(frozen=True)
class Applied:
    """What a batch did: a result per envelope queued, in order, with the position of
    each one queued (0 for the others), and how many of the acknowledged envelopes were
    waiting."""

    results: list[PutResult]
    seqs: list[int]
    removed: int
    senders: list[tuple[str, str]] = field(default_factory=list)
    """The sender and id of each acknowledged envelope deleted: whom to tell (§4 ``delivered``)."""


@dataclass(frozen=True)
class Queued:
    """One waiting envelope: its position, id and JSON text exactly as received."""

    seq: int
    envelope_id: str
    size: int
    """The body's length in UTF-8 bytes."""
    body: str


@dataclass
class Usage:
    """What waits now, counted in memory, and who is known: recipients that have
    connected, and (recipient, sender) pairs whose envelopes the recipient acknowledged."""

    count: Counter[str] = field(default_factory=Counter)
    bytes: Counter[str] = field(default_factory=Counter)
    pair_count: Counter[tuple[str, str]] = field(default_factory=Counter)
    pair_bytes: Counter[tuple[str, str]] = field(default_factory=Counter)
    stranger_count: Counter[str] = field(default_factory=Counter)
    stranger_bytes: Counter[str] = field(default_factory=Counter)
    address_count: Counter[str] = field(default_factory=Counter)
    address_bytes: Counter[str] = field(default_factory=Counter)
    total_bytes: int = 0
    connected: set[str] = field(default_factory=set)
    contacts: set[tuple[str, str]] = field(default_factory=set)

    def add(self, recipient: str, sender: str, address: str, size: int, count: int = 1) -> None:
        pair = (recipient, sender)
        self.count[recipient] += count
        self.bytes[recipient] += size
        self.pair_count[pair] += count
        self.pair_bytes[pair] += size
        if pair not in self.contacts:
            self.stranger_count[recipient] += count
            self.stranger_bytes[recipient] += size
        self.address_count[address] += count
        self.address_bytes[address] += size
        self.total_bytes += size
        if count < 0:
            _drop_empty(self.count, self.bytes, key=recipient)
            _drop_empty(self.pair_count, self.pair_bytes, key=pair)
            _drop_empty(self.stranger_count, self.stranger_bytes, key=recipient)
            _drop_empty(self.address_count, self.address_bytes, key=address)

    def remove(self, recipient: str, sender: str, address: str, size: int) -> None:
        self.add(recipient, sender, address, -size, count=-1)

    def add_contact(self, recipient: str, sender: str) -> bool:
        """Record that ``recipient`` acknowledged ``sender``; ``False`` if it already had."""
        pair = (recipient, sender)
        if pair in self.contacts:
            return False
        self.contacts.add(pair)
        self.stranger_count[recipient] -= self.pair_count[pair]
        self.stranger_bytes[recipient] -= self.pair_bytes[pair]
        _drop_empty(self.stranger_count, self.stranger_bytes, key=recipient)
        return True

    def refusal(self, item: Incoming, size: int, limits: QueueLimits) -> PutResult | None:
        """Which limit queuing ``item`` would break, if any."""
        recipient = item.recipient
        pair = (recipient, item.sender)
        if self.total_bytes + size > limits.total_bytes:
            return PutResult.RELAY_FULL
        if (
            self.address_count[item.address] + 1 > limits.address_count
            or self.address_bytes[item.address] + size > limits.address_bytes
        ):
            return PutResult.ADDRESS_FULL
        if (
            self.count[recipient] + 1 > limits.recipient_count
            or self.bytes[recipient] + size > limits.recipient_bytes
        ):
            return PutResult.FULL
        if recipient not in self.connected and (
            self.count[recipient] + 1 > limits.unseen_count
            or self.bytes[recipient] + size > limits.unseen_bytes
        ):
            return PutResult.UNSEEN_FULL
        if pair not in self.contacts and (
            self.stranger_count[recipient] + 1 > limits.stranger_count
            or self.stranger_bytes[recipient] + size > limits.stranger_bytes
        ):
            return PutResult.STRANGERS_FULL
        if (
            self.pair_count[pair] + 1 > limits.sender_count
            or self.pair_bytes[pair] + size > limits.sender_bytes
        ):
            return PutResult.SENDER_FULL
        return None


def message_bytes(text: str) -> int:
    """The length of ``text`` in UTF-8 (lone surrogates count as three bytes), without
    encoding it when it is ASCII, as envelopes nearly always are."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))


def _drop_empty(count: Counter[_K], size: Counter[_K], *, key: _K) -> None:
    """Forget a key whose count fell to zero (the counters only hold what waits)."""
    if count[key] <= 0:
        count.pop(key, None)
        size.pop(key, None)


class RelayQueue:
    """Per-recipient envelope queues in one SQLite file.

    Writes (:meth:`apply`, :meth:`purge`) may run in a worker thread, one at a time, while
    :meth:`pending` reads what is committed through a connection of its own (WAL lets
    readers run beside the writer).
    """

    def __init__(
        self, connection: sqlite3.Connection, reader: sqlite3.Connection, *, limits: QueueLimits
    ) -> None:
        self._db = connection
        self._reader = reader
        self._limits = limits
        self._usage = Usage()
        self._recount()

    @classmethod
    def open(
        cls, data_dir: Path, *, limits: QueueLimits | None = None, check_s: float = CHECK_S
    ) -> RelayQueue:
        """Open (creating or upgrading if needed) the queue in ``data_dir``, after checking
        that the folder can be written and the file is sound (for up to ``check_s``)."""
        path = data_dir / DB_NAME
        connection = open_sqlite(path, PLACE, MIGRATIONS, pragmas=PRAGMAS, check_s=check_s)
        try:
            reader = sqlite3.connect(path, isolation_level=None)
        except sqlite3.Error as exc:
            connection.close()
            raise store_error(PLACE.unusable(path, exc), exc) from exc
        return cls(connection, reader, limits=limits or QueueLimits())

    def close(self) -> None:
        try:
            self._reader.close()
            self._db.close()
        except sqlite3.Error as exc:
            raise store_error(f"cannot close the relay queue: {exc}", exc) from exc

    def apply(self, batch: Batch, now_ms: int) -> Applied:
        """Write a batch in one transaction (one disk sync): record who connected, delete
        acknowledged envelopes, then queue new ones, each with its own result.

        A batch takes a handful of statements however many envelopes it holds, so that
        when it runs in a worker thread the interpreter lock changes hands a few times per
        transaction rather than at every envelope. While another connection writes, this
        waits for it (up to :data:`bot.durable.BUSY_TIMEOUT_S`).

        An ack names only the id: when two senders used the same id, each ack deletes the
        oldest one, which is the one delivered (and so acknowledged) first.
        """
        usage = self._usage
        try:
            self._db.execute("BEGIN IMMEDIATE")
            for recipient in batch.connected:
                if recipient not in usage.connected:
                    self._db.execute(
                        "INSERT OR IGNORE INTO recipients (id, first_ms) VALUES (?, ?)",
                        (recipient, now_ms),
                    )
                    usage.connected.add(recipient)
            senders = self._delete_all(batch.acks)
            queued = self._put_all(batch.puts, now_ms)
            self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            self._abandon()
            raise store_error(f"cannot write to the relay queue: {exc}", exc) from exc
        except BaseException:
            self._abandon()  # never leave the transaction open for the next batch
            raise
        return Applied(
            [result for result, _ in queued], [seq for _, seq in queued], len(senders), senders
        )

    def _abandon(self) -> None:
        """Roll back a failed transaction and forget what it changed in the counts."""
        if self._db.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")
        self._recount()

    def _delete_all(self, acks: list[Acknowledged]) -> list[tuple[str, str]]:
        """Delete acknowledged envelopes with a few statements for the whole batch, or one
        by one when a recipient acknowledges one id twice (each deletes the next oldest);
        the sender and id of each one deleted."""
        keys = [(ack.recipient, ack.envelope_id) for ack in acks]
        if len(keys) < 2 or len(set(keys)) < len(keys):
            return [found for ack in acks if (found := self._delete(ack)) is not None]
        (found,) = self._db.execute(_FIND_ACKED, (json.dumps(keys),)).fetchone()
        rows: list[tuple[int, str, str, str, int, str]] = json.loads(found)
        if not rows:
            return []
        self._db.execute(
            "DELETE FROM queue WHERE seq IN (SELECT value FROM json_each(?))",
            (json.dumps([row[0] for row in rows]),),
        )
        contacts = []
        for _, recipient, sender, address, size, _ in rows:
            self._usage.remove(recipient, sender, address, size)
            if self._usage.add_contact(recipient, sender):
                contacts.append((recipient, sender))
        if contacts:
            self._db.execute(
                "INSERT OR IGNORE INTO contacts (recipient, sender)"
                " SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]')"
                " FROM json_each(?)",
                (json.dumps(contacts),),
            )
        return [(row[2], row[5]) for row in rows]

    def _put_all(self, items: list[Incoming], now_ms: int) -> list[tuple[PutResult, int]]:
        """Queue envelopes in order, each with its result and position, those within the
        limits with one statement; if one of them turns out to be waiting already, all of
        them again one by one (the limits then count it as :meth:`_put_one` does)."""
        if len(items) < 2:
            return [self._put_one(item, now_ms) for item in items]
        results: list[tuple[PutResult, int]] = []
        rows: list[tuple[str, str, str, str, int, int, str]] = []
        places: list[int] = []
        keys: set[tuple[str, str, str]] = set()
        for item in items:
            key = (item.recipient, item.sender, item.envelope_id)
            if key in keys:
                results.append((PutResult.DUPLICATE, 0))  # already in this batch
                continue
            size = message_bytes(item.body)
            refusal = self._usage.refusal(item, size, self._limits)
            if refusal is not None:
                results.append((PutResult.DUPLICATE if self._contains(item) else refusal, 0))
                continue
            self._usage.add(item.recipient, item.sender, item.address, size)
            keys.add(key)
            places.append(len(results))
            results.append((PutResult.QUEUED, 0))
            row = (item.recipient, item.sender, item.address, item.envelope_id, size, now_ms)
            rows.append((*row, item.body))
        if not rows:
            return results
        self._db.execute("SAVEPOINT puts")
        for start in range(0, len(rows), INSERT_CHUNK):
            chunk = rows[start : start + INSERT_CHUNK]
            cursor = self._db.execute(
                _INSERT_MANY + ", ".join([_ROW] * len(chunk)),
                [value for row in chunk for value in row],
            )
            if cursor.rowcount != len(chunk):
                self._db.execute("ROLLBACK TO puts")
                self._db.execute("RELEASE puts")
                for recipient, sender, address, _, size, _, _ in rows:
                    self._usage.remove(recipient, sender, address, size)
                return [self._put_one(item, now_ms) for item in items]
            last = int(cursor.lastrowid or 0)
            for offset, place in enumerate(places[start : start + INSERT_CHUNK]):
                results[place] = (PutResult.QUEUED, last - len(chunk) + 1 + offset)
        self._db.execute("RELEASE puts")
        return results

    def _delete(self, ack: Acknowledged) -> tuple[str, str] | None:
        row = self._db.execute(
            "DELETE FROM queue WHERE seq = (SELECT seq FROM queue INDEXED BY queue_by_envelope"
            " WHERE recipient = ? AND envelope_id = ? ORDER BY seq LIMIT 1)"
            " RETURNING sender, address, size",
            (ack.recipient, ack.envelope_id),
        ).fetchone()
        if row is None:
            return None
        sender, address, size = row
        self._usage.remove(ack.recipient, sender, address, size)
        if self._usage.add_contact(ack.recipient, sender):
            self._db.execute(
                "INSERT OR IGNORE INTO contacts (recipient, sender) VALUES (?, ?)",
                (ack.recipient, sender),
            )
        return sender, ack.envelope_id

    def _put_one(self, item: Incoming, now_ms: int) -> tuple[PutResult, int]:
        """Queue one envelope: the result, and its position when it was queued (else 0)."""
        size = message_bytes(item.body)
        refusal = self._usage.refusal(item, size, self._limits)
        if refusal is not None:
            return PutResult.DUPLICATE if self._contains(item) else refusal, 0
        cursor = self._db.execute(
            "INSERT OR IGNORE INTO queue"
            " (recipient, sender, address, envelope_id, size, queued_ms, body)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                item.recipient,
                item.sender,
                item.address,
                item.envelope_id,
                size,
                now_ms,
                item.body,
            ),
        )
        if cursor.rowcount == 0:
            return PutResult.DUPLICATE, 0
        self._usage.add(item.recipient, item.sender, item.address, size)
        return PutResult.QUEUED, int(cursor.lastrowid or 0)

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
            sizes = self._reader.execute(
                "SELECT seq, size FROM queue WHERE recipient = ? AND seq > ? ORDER BY seq LIMIT ?",
                (recipient, after_seq, limit),
            ).fetchall()
            last = _last_within(sizes, max_bytes)
            if last is None:
                return []
            rows = self._reader.execute(
                "SELECT seq, envelope_id, size, body FROM queue"
                " WHERE recipient = ? AND seq > ? AND seq <= ? ORDER BY seq",
                (recipient, after_seq, last),
            ).fetchall()
        except sqlite3.Error as exc:
            raise store_error(f"cannot read the relay queue: {exc}", exc) from exc
        return [Queued(*row) for row in rows]

    async def load(
        self, recipient: str, *, after_seq: int, limit: int, max_bytes: int
    ) -> list[Queued]:
        """:meth:`pending` for the event loop: a local file answers at once."""
        return self.pending(recipient, after_seq=after_seq, limit=limit, max_bytes=max_bytes)

    def purge(self, older_than_ms: int, *, unseen_older_than_ms: int | None = None) -> int:
        """Delete envelopes queued before ``older_than_ms``, and those for recipients that
        have never connected queued before ``unseen_older_than_ms``; returns how many."""
        try:
            with self._db:
                self._db.execute("BEGIN")
                removed = self._db.execute(
                    "DELETE FROM queue WHERE queued_ms < ?", (older_than_ms,)
                ).rowcount
                if unseen_older_than_ms is not None:
                    removed += self._db.execute(
                        "DELETE FROM queue WHERE queued_ms < ?"
                        " AND recipient NOT IN (SELECT id FROM recipients)",
                        (unseen_older_than_ms,),
                    ).rowcount
        except sqlite3.Error as exc:
            raise store_error(f"cannot purge the relay queue: {exc}", exc) from exc
        if removed:
            self._recount()
        return max(removed, 0)

    def _contains(self, item: Incoming) -> bool:
        row = self._db.execute(
            "SELECT 1 FROM queue WHERE recipient = ? AND sender = ? AND envelope_id = ?",
            (item.recipient, item.sender, item.envelope_id),
        ).fetchone()
        return row is not None

    def _recount(self) -> None:
        try:
            connected = self._db.execute("SELECT id FROM recipients").fetchall()
            contacts = self._db.execute("SELECT recipient, sender FROM contacts").fetchall()
            rows = self._db.execute(
                "SELECT recipient, sender, address, COUNT(*), SUM(size) FROM queue"
                " GROUP BY recipient, sender, address"
            ).fetchall()
        except sqlite3.Error as exc:
            raise store_error(f"cannot read the relay queue: {exc}", exc) from exc
        usage = Usage(
            connected={recipient for (recipient,) in connected},
            contacts={(recipient, sender) for recipient, sender in contacts},
        )
        for recipient, sender, address, count, size in rows:
            usage.add(recipient, sender, address, size, count)
        self._usage = usage


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


def _to_schema_4(db: sqlite3.Connection) -> None:
    """Make the tables of a new file, or rebuild the queue of schema 0 to 3 with the
    columns and indexes of schema 4, filling in what an older schema did not keep."""
    columns = {str(row[1]) for row in db.execute("PRAGMA table_info(queue)")}
    if not columns:
        for statement in (*_TABLES, *_INDEXES):
            db.execute(statement)
        return
    sender = "sender" if "sender" in columns else "COALESCE(json_extract(body, '$.from'), '')"
    size = "size" if "size" in columns else "length(CAST(body AS BLOB))"
    address = "address" if "address" in columns else "''"
    db.execute("ALTER TABLE queue RENAME TO queue_old")
    for index in ("queue_by_recipient", "queue_by_envelope", "queue_by_age"):
        db.execute(f"DROP INDEX IF EXISTS {index}")
    for statement in (*_TABLES, *_INDEXES):
        db.execute(statement)
    db.execute("INSERT INTO queue (seq, recipient, sender, address, envelope_id, size,"
               f" queued_ms, body) SELECT seq, recipient, {sender}, {address}, envelope_id,"
               f" {size}, queued_ms, body FROM queue_old")
    db.execute("DROP TABLE queue_old")
    # What was queued before keeps the limits it was queued under: its recipients count
    # as connected and its senders as contacts.
    db.execute("INSERT OR IGNORE INTO recipients SELECT DISTINCT recipient, 0 FROM queue")
    db.execute("INSERT OR IGNORE INTO contacts SELECT DISTINCT recipient, sender FROM queue")


MIGRATIONS: Final[tuple[Step, ...]] = ((), (), (), _to_schema_4)
"""``PRAGMA user_version`` 0 is a new file or the first schema. Schemas 0 to 3 differ from
4 only in the queue's columns and indexes, so one step rebuilds any of them."""
SCHEMA_VERSION: Final = len(MIGRATIONS)
