"""The relay's queue in PostgreSQL, shared by several relay nodes.

A device's queue is the rows of ``relay_mailbox`` for it (keyed by recipient and sequence);
an acknowledgement deletes its row. Each batch is one transaction, committed (PostgreSQL's
``synchronous_commit``) before the writer answers ``sent``. In that same transaction it
notifies the other nodes (``NOTIFY``, delivered only on commit):

- :data:`WAKE`: the id of each device something was queued for, so that the node holding
  its session sends it (:mod:`bot.relay.pgwake`);
- :data:`SESSION`: the id of each device that connected, so that a session it had on
  another node ends there;
- :data:`DELIVERED`: ``sender id`` of each envelope acknowledged, for the §4 receipt of a
  sender whose session is on another node.

Envelopes for one recipient take a transaction-scoped advisory lock per recipient before
they are inserted, so that their sequence numbers are committed in order: a session that
has sent everything up to a sequence never misses an older row committed later.

Limits are counted in memory as the SQLite queue counts them: from the database at open,
after a failed batch, at each recount (:meth:`PostgresQueue.recount`, which the relay
runs periodically) and before a limit refuses an envelope (other nodes may have delivered
what this one counts), plus what this node queued since. Between two recounts, a quota can
be overshot by what the other nodes queued meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Final, TypeVar

import psycopg
from psycopg_pool import ConnectionPool

from bot.clock import SYSTEM_CLOCK, Clock
from bot.dburl import masked_url
from bot.errors import RelayError, StoreError
from bot.pgerrors import postgres_error
from bot.relay.limits import QueueLimits
from bot.relay.queue import (
    DEFAULT_PAGE_BYTES,
    Acknowledged,
    Applied,
    Batch,
    Incoming,
    PutResult,
    Queued,
    Usage,
    message_bytes,
)
from bot.storefaults import one_line

log = logging.getLogger(__name__)

_R = TypeVar("_R")
_Connection = psycopg.Connection[tuple[object, ...]]

SCHEMA_VERSION: Final = 1
CONNECT_TIMEOUT_S: Final = 5
RECOUNT_BEFORE_REFUSING_S: Final = 1.0
"""A refusal by a limit recounts from the database first, at most this often."""
READERS: Final = 4
"""Connections the sessions read their queues through, at most."""
WAKE: Final = "skald_relay_wake"
SESSION: Final = "skald_relay_session"
DELIVERED: Final = "skald_relay_delivered"
_SCHEMA_LOCK: Final = 0x736B616C64  # any constant: two nodes starting never race
_TABLES: Final = (
    "CREATE TABLE IF NOT EXISTS relay_schema (version integer NOT NULL)",
    """CREATE TABLE IF NOT EXISTS relay_mailbox (
        seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        recipient text NOT NULL,
        sender text NOT NULL,
        address text NOT NULL,
        envelope_id text NOT NULL,
        size integer NOT NULL,
        queued_ms bigint NOT NULL,
        body text NOT NULL,
        UNIQUE (recipient, envelope_id, sender)
    )""",
    "CREATE INDEX IF NOT EXISTS relay_mailbox_by_recipient ON relay_mailbox (recipient, seq)",
    "CREATE INDEX IF NOT EXISTS relay_mailbox_by_age ON relay_mailbox (queued_ms)",
    """CREATE TABLE IF NOT EXISTS relay_recipients (
        id text PRIMARY KEY, first_ms bigint NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS relay_contacts (
        recipient text NOT NULL, sender text NOT NULL, PRIMARY KEY (recipient, sender))""",
)
_LOCK_RECIPIENTS = (
    "SELECT pg_advisory_xact_lock(k) FROM"
    " (SELECT DISTINCT hashtextextended(r, 0) AS k FROM unnest(%s::text[]) AS r ORDER BY k) s"
)
_DELETE_ACKED = (
    "WITH a AS (SELECT r, e, count(*) AS n FROM unnest(%s::text[], %s::text[]) AS a(r, e)"
    " GROUP BY r, e),"
    " d AS (SELECT q.seq FROM a CROSS JOIN LATERAL (SELECT seq FROM relay_mailbox"
    " WHERE recipient = a.r AND envelope_id = a.e ORDER BY seq LIMIT a.n) AS q)"
    " DELETE FROM relay_mailbox AS m USING d WHERE m.seq = d.seq"
    " RETURNING m.recipient, m.sender, m.address, m.size, m.envelope_id"
)
"""Delete the oldest waiting envelope for each (recipient, id) acknowledged, as many of
them as it was acknowledged."""
_INSERT = (
    "WITH i AS (INSERT INTO relay_mailbox"
    " (recipient, sender, address, envelope_id, size, queued_ms, body)"
    " SELECT r, s, a, e, z, %s, b FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[],"
    " %s::integer[], %s::text[]) WITH ORDINALITY AS u(r, s, a, e, z, b, o) ORDER BY o"
    " ON CONFLICT (recipient, envelope_id, sender) DO NOTHING"
    " RETURNING seq, recipient, sender, envelope_id)"
    f" SELECT seq, recipient, sender, envelope_id, pg_notify('{WAKE}', recipient) FROM i"
)
"""Insert envelopes in order, and wake the nodes for their recipients (PostgreSQL sends
one notice per recipient and transaction, and none if the insert is rolled back)."""
_PAGE = (
    "SELECT seq, envelope_id, size, body FROM (SELECT seq, envelope_id, size, body,"
    " sum(size) OVER (ORDER BY seq) AS total FROM relay_mailbox"
    " WHERE recipient = %s AND seq > %s ORDER BY seq LIMIT %s) AS p"
    " WHERE total <= %s OR total = size ORDER BY seq"
)
"""The next envelopes for a recipient, as many as fit in a number of bytes (at least one)."""
_NEWER = (
    "SELECT w.r, q.seq, q.envelope_id, q.size, q.body"
    " FROM unnest(%s::text[], %s::bigint[]) AS w(r, after) CROSS JOIN LATERAL"
    " (SELECT seq, envelope_id, size, body FROM (SELECT seq, envelope_id, size, body,"
    " sum(size) OVER (ORDER BY seq) AS total FROM relay_mailbox"
    " WHERE recipient = w.r AND seq > w.after ORDER BY seq LIMIT %s) AS p"
    " WHERE total <= %s OR total = size) AS q"
    " ORDER BY w.r, q.seq"
)
"""The next envelopes of several recipients at once, each after its own position and
within a number of envelopes and bytes (at least one)."""
_NOTIFY = "SELECT pg_notify(%s, v) FROM unnest(%s::text[]) AS v"


class _WasWaiting(Exception):
    """An envelope of a batch was waiting already: queue them again one by one."""


def pg_error(what: str, cause: psycopg.Error) -> StoreError:
    """Ours for a psycopg error: ``what: the first line of its message``."""
    return postgres_error(f"{what}: {one_line(str(cause)) or type(cause).__name__}", cause)


class PostgresQueue:
    """Per-recipient envelope queues in a PostgreSQL database.

    Writes go through one connection of their own (one batch at a time, in a worker
    thread); sessions read through a small pool. A connection that broke is opened again
    at the next write; a failure in between is a :class:`StoreUnavailable`."""

    def __init__(
        self, url: str, readers: ConnectionPool, *, limits: QueueLimits, clock: Clock
    ) -> None:
        self._url = url
        self._clock = clock
        self._readers = readers
        self._limits = limits
        self._db: _Connection | None = None
        self._usage = Usage()
        self._stale = True
        self._counted_at = 0.0
        self.writer_pids: set[int] = set()
        """The server processes this node has written through: its own notifications."""

    @classmethod
    def open(
        cls, url: str, *, limits: QueueLimits | None = None, clock: Clock = SYSTEM_CLOCK
    ) -> PostgresQueue:
        """Connect, make the tables if the database has none, and count what waits."""
        # The pool retries on its own and says so in several lines each time; the relay's
        # health record reports a failing queue once a minute instead.
        logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
        try:
            psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT_S).close()
            readers = ConnectionPool(
                url,
                min_size=1,
                max_size=READERS,
                timeout=CONNECT_TIMEOUT_S,
                kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT_S},
                open=False,
            )
            readers.open(wait=True, timeout=CONNECT_TIMEOUT_S)
        except psycopg.Error as exc:
            raise RelayError(
                f"cannot reach the relay queue at {masked_url(url)}: {one_line(str(exc))}"
            ) from exc
        queue = cls(url, readers, limits=limits or QueueLimits(), clock=clock)
        try:
            queue._make_schema()
            queue.recount()
        except (StoreError, RelayError):
            queue.close()
            raise
        return queue

    @property
    def url(self) -> str:
        return self._url

    def _connection(self) -> _Connection:
        if self._db is None or self._db.closed or self._db.broken:
            if self._db is not None:
                self._db.close()
            self._db = psycopg.connect(
                self._url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S
            )
            self.writer_pids.add(self._db.info.backend_pid)
        return self._db

    def _make_schema(self) -> None:
        try:
            db = self._connection()
            with db.transaction():
                db.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                for statement in _TABLES:
                    db.execute(statement)
                row = db.execute("SELECT max(version) FROM relay_schema").fetchone()
                version = row[0] if row else None
                if version is None:
                    db.execute("INSERT INTO relay_schema (version) VALUES (%s)", (SCHEMA_VERSION,))
        except psycopg.Error as exc:
            raise pg_error(f"cannot open the relay queue at {masked_url(self._url)}", exc) from exc
        if isinstance(version, int) and version > SCHEMA_VERSION:
            raise RelayError(
                f"the relay queue at {masked_url(self._url)} has schema {version}, newer than"
                f" this relay knows ({SCHEMA_VERSION}): run a newer skald-telegram"
            )

    def close(self) -> None:
        try:
            if self._db is not None:
                self._db.close()
            self._readers.close()
        except psycopg.Error as exc:
            raise pg_error("cannot close the relay queue", exc) from exc

    def apply(self, batch: Batch, now_ms: int) -> Applied:
        """Write a batch in one transaction: record who connected, delete acknowledged
        envelopes, queue new ones (each with its result), and notify the other nodes."""
        try:
            if self._stale:
                self.recount()
            db = self._connection()
            with db.transaction():
                if batch.puts:
                    db.execute(_LOCK_RECIPIENTS, ([item.recipient for item in batch.puts],))
                self._connect_all(db, batch.connected, now_ms)
                senders = self._delete_all(db, batch.acks)
                queued = self._put_all(db, batch.puts, now_ms)
        except psycopg.Error as exc:
            self._stale = True  # what the failed transaction counted is recounted
            raise pg_error("cannot write to the relay queue", exc) from exc
        except BaseException:
            self._stale = True
            raise
        return Applied(
            [result for result, _ in queued], [seq for _, seq in queued], len(senders), senders
        )

    def _connect_all(
        self, db: _Connection, connected: list[str], now_ms: int
    ) -> None:
        if not connected:
            return
        db.execute(
            "INSERT INTO relay_recipients (id, first_ms) SELECT r, %s FROM unnest(%s::text[])"
            " AS r ON CONFLICT DO NOTHING",
            (now_ms, connected),
        )
        self._usage.connected.update(connected)
        db.execute(_NOTIFY, (SESSION, connected))

    def _delete_all(
        self, db: _Connection, acks: list[Acknowledged]
    ) -> list[tuple[str, str]]:
        """Delete acknowledged envelopes; the sender and id of each one deleted."""
        if not acks:
            return []
        rows = db.execute(
            _DELETE_ACKED,
            ([ack.recipient for ack in acks], [ack.envelope_id for ack in acks]),
        ).fetchall()
        contacts: list[tuple[str, str]] = []
        senders: list[tuple[str, str]] = []
        for recipient, sender, address, size, envelope_id in rows:
            assert isinstance(recipient, str) and isinstance(sender, str)
            assert isinstance(address, str) and isinstance(size, int)
            self._usage.remove(recipient, sender, address, size)
            if self._usage.add_contact(recipient, sender):
                contacts.append((recipient, sender))
            senders.append((sender, str(envelope_id)))
        if contacts:
            db.execute(
                "INSERT INTO relay_contacts (recipient, sender) SELECT * FROM"
                " unnest(%s::text[], %s::text[]) ON CONFLICT DO NOTHING",
                ([r for r, _ in contacts], [s for _, s in contacts]),
            )
        if senders:
            db.execute(_NOTIFY, (DELIVERED, [f"{s} {e}" for s, e in senders]))
        return senders

    def _put_all(
        self, db: _Connection, items: list[Incoming], now_ms: int
    ) -> list[tuple[PutResult, int]]:
        """Queue envelopes in order, those within the limits with one statement; each
        with its result and position (0 when not queued)."""
        results: list[tuple[PutResult, int]] = []
        places: dict[tuple[str, str, str], int] = {}
        sizes: list[int] = []
        accepted: list[Incoming] = []
        for item in items:
            key = (item.recipient, item.sender, item.envelope_id)
            if key in places:
                results.append((PutResult.DUPLICATE, 0))  # already in this batch
                continue
            size = message_bytes(item.body)
            refusal = self._refusal(db, item, size, list(zip(accepted, sizes, strict=True)))
            if refusal is not None:
                waiting = self._contains(db, item)
                results.append((PutResult.DUPLICATE if waiting else refusal, 0))
                continue
            self._usage.add(item.recipient, item.sender, item.address, size)
            places[key] = len(results)
            results.append((PutResult.QUEUED, 0))
            sizes.append(size)
            accepted.append(item)
        if not accepted:
            return results
        try:
            with db.transaction():  # a savepoint
                inserted = self._insert(db, accepted, sizes, now_ms)
                if len(inserted) != len(accepted):
                    raise _WasWaiting
        except _WasWaiting:
            for item, size in zip(accepted, sizes, strict=True):
                self._usage.remove(item.recipient, item.sender, item.address, size)
            return [self._put_one(db, item, now_ms) for item in items]
        for seq, recipient, sender, envelope_id in inserted:
            results[places[(recipient, sender, envelope_id)]] = (PutResult.QUEUED, seq)
        return results

    def _put_one(
        self, db: _Connection, item: Incoming, now_ms: int
    ) -> tuple[PutResult, int]:
        """Queue one envelope: the result, and its position when it was queued (else 0)."""
        size = message_bytes(item.body)
        refusal = self._refusal(db, item, size, [])
        if refusal is not None:
            return PutResult.DUPLICATE if self._contains(db, item) else refusal, 0
        inserted = self._insert(db, [item], [size], now_ms)
        if not inserted:
            return PutResult.DUPLICATE, 0
        self._usage.add(item.recipient, item.sender, item.address, size)
        return PutResult.QUEUED, inserted[0][0]

    def _insert(
        self,
        db: _Connection,
        items: list[Incoming],
        sizes: list[int],
        now_ms: int,
    ) -> list[tuple[int, str, str, str]]:
        """Insert envelopes in order; the sequence, recipient, sender and id of each one
        inserted (one already waiting is not)."""
        rows = db.execute(
            _INSERT,
            (
                now_ms,
                [item.recipient for item in items],
                [item.sender for item in items],
                [item.address for item in items],
                [item.envelope_id for item in items],
                sizes,
                [item.body for item in items],
            ),
        ).fetchall()
        return [(int(str(seq)), str(r), str(s), str(e)) for seq, r, s, e, _ in rows]

    def _contains(self, db: _Connection, item: Incoming) -> bool:
        row = db.execute(
            "SELECT 1 FROM relay_mailbox WHERE recipient = %s AND envelope_id = %s"
            " AND sender = %s",
            (item.recipient, item.envelope_id, item.sender),
        ).fetchone()
        return row is not None

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

        def read(db: _Connection) -> list[tuple[object, ...]]:
            return db.execute(_PAGE, (recipient, after_seq, limit, max_bytes)).fetchall()

        return [
            Queued(int(str(seq)), str(eid), int(str(size)), str(body))
            for seq, eid, size, body in self._read(read)
        ]

    def _read(self, work: Callable[[_Connection], _R]) -> _R:
        """``work`` on a reader connection, once more on another if the first was broken
        (one that died while it waited in the pool)."""
        for attempt in (1, 2):
            try:
                with self._readers.connection() as db:
                    return work(db)
            except psycopg.OperationalError as exc:
                if attempt == 2 or not db.broken:
                    raise pg_error("cannot read the relay queue", exc) from exc
            except psycopg.Error as exc:
                raise pg_error("cannot read the relay queue", exc) from exc
        raise AssertionError("unreachable")

    async def load(
        self, recipient: str, *, after_seq: int, limit: int, max_bytes: int
    ) -> list[Queued]:
        """:meth:`pending` in a worker thread: the event loop goes on while the server
        answers (or does not: a server away costs the connect timeout)."""
        return await asyncio.to_thread(
            self.pending, recipient, after_seq=after_seq, limit=limit, max_bytes=max_bytes
        )

    def newer(
        self, after: dict[str, int], *, limit: int, max_bytes: int
    ) -> dict[str, list[Queued]]:
        """For each recipient in ``after``, the envelopes queued after the position given,
        oldest first, at most ``limit`` of them and ``max_bytes`` of bodies (but at least
        one): :meth:`pending` for several recipients in one query."""
        rows = self._read(lambda db: db.execute(
            _NEWER, (list(after), list(after.values()), limit, max_bytes)
        ).fetchall())
        found: dict[str, list[Queued]] = {}
        for recipient, seq, envelope_id, size, body in rows:
            found.setdefault(str(recipient), []).append(
                Queued(int(str(seq)), str(envelope_id), int(str(size)), str(body))
            )
        return found

    def newest(self, recipients: list[str]) -> dict[str, int]:
        """The newest sequence waiting for each of ``recipients`` that has any."""
        rows = self._read(lambda db: db.execute(
            "SELECT recipient, max(seq) FROM relay_mailbox"
            " WHERE recipient = ANY(%s::text[]) GROUP BY recipient",
            (recipients,),
        ).fetchall())
        return {str(recipient): int(str(seq)) for recipient, seq in rows}

    def purge(self, older_than_ms: int, *, unseen_older_than_ms: int | None = None) -> int:
        """Delete envelopes queued before ``older_than_ms``, and those for recipients that
        have never connected queued before ``unseen_older_than_ms``; returns how many."""
        try:
            db = self._connection()
            with db.transaction():
                removed = db.execute(
                    "DELETE FROM relay_mailbox WHERE queued_ms < %s", (older_than_ms,)
                ).rowcount
                if unseen_older_than_ms is not None:
                    removed += db.execute(
                        "DELETE FROM relay_mailbox AS m WHERE queued_ms < %s AND NOT EXISTS"
                        " (SELECT 1 FROM relay_recipients AS r WHERE r.id = m.recipient)",
                        (unseen_older_than_ms,),
                    ).rowcount
        except psycopg.Error as exc:
            raise pg_error("cannot purge the relay queue", exc) from exc
        if removed:
            self.recount()
        return max(removed, 0)

    def recount(self) -> None:
        """Count what waits, in all nodes, afresh (run by the writer, between batches)."""
        try:
            db = self._connection()
            with db.transaction():
                db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                self._usage = _count(db)
        except psycopg.Error as exc:
            raise pg_error("cannot read the relay queue", exc) from exc
        self._stale = False
        self._counted_at = self._clock.time()

    def saw(self, device: str) -> None:
        """``device`` connected to another node: the limits of a device never seen are no
        longer its limits."""
        self._usage.connected.add(device)

    def _refusal(
        self,
        db: _Connection,
        item: Incoming,
        size: int,
        accepted: list[tuple[Incoming, int]],
    ) -> PutResult | None:
        """Which limit queuing ``item`` would break. Before refusing, the counts are taken
        afresh (at most every :data:`RECOUNT_BEFORE_REFUSING_S`): other nodes may have
        delivered what this one counts, or seen the recipient connect. ``accepted`` is
        what this batch queues before ``item``."""
        refusal = self._usage.refusal(item, size, self._limits)
        if refusal is None or self._clock.time() - self._counted_at < RECOUNT_BEFORE_REFUSING_S:
            return refusal
        self._usage = _count(db)
        self._counted_at = self._clock.time()
        for earlier, earlier_size in accepted:
            self._usage.add(earlier.recipient, earlier.sender, earlier.address, earlier_size)
        return self._usage.refusal(item, size, self._limits)


def _count(db: _Connection) -> Usage:
    """What waits, and who is known, as the database holds it now."""
    connected = db.execute("SELECT id FROM relay_recipients").fetchall()
    contacts = db.execute("SELECT recipient, sender FROM relay_contacts").fetchall()
    rows = db.execute(
        "SELECT recipient, sender, address, count(*), sum(size) FROM relay_mailbox"
        " GROUP BY recipient, sender, address"
    ).fetchall()
    usage = Usage(
        connected={str(recipient) for (recipient,) in connected},
        contacts={(str(recipient), str(sender)) for recipient, sender in contacts},
    )
    for recipient, sender, address, count, size in rows:
        usage.add(str(recipient), str(sender), str(address), int(str(size)), int(str(count)))
    return usage
