"""The bot's state in PostgreSQL (``[storage] url``): the same schema and steps as the
SQLite file (:data:`bot.store.db.MIGRATIONS`), the same queries (:mod:`bot.store.sql`).

One connection is used at a time, from a psycopg pool that replaces it when it breaks: a
server that is away, restarting or unreachable is :class:`~bot.errors.StoreUnavailable`,
waited out as SQLite's full disk is. The schema's version is the one row of
``schema_version``. :meth:`PostgresDatabase.migrate` brings it up to date under an
advisory lock (``skald-telegram migrate``); opening for ``run`` only checks it, since
several processes may share the database.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, Final

from bot.dburl import masked_url
from bot.errors import StoreError, StoreUnavailable
from bot.store.db import MIGRATIONS, POSTGRES_STATEMENTS
from bot.store.sql import HIDDEN_ROWID, Nesting, postgres_ddl, postgres_query
from bot.storefaults import StoreHealth

try:
    import psycopg
    from psycopg_pool import ConnectionPool, PoolTimeout

    from bot.pgerrors import postgres_error
except ImportError as exc:  # the optional extra is missing
    raise StoreError("PostgreSQL needs psycopg: pip install 'skald-telegram[postgresql]'") \
        from exc

log = logging.getLogger(__name__)

CONNECT_S: Final = 10.0
"""How long opening waits for the first connection."""
GETCONN_S: Final = 1.0
"""How long a statement waits for the connection (a new one after the last broke)."""
RECONNECT_S: Final = 5.0
"""How long the pool keeps trying to replace a broken connection before it waits for the
next statement to try again."""
LOCK_KEY: Final = 0x736B616C64  # "skald"
"""The advisory lock migrations take, so that two processes never migrate at once."""
CONNECTION: Final = {
    "connect_timeout": 5,
    "application_name": "skald-telegram",
    # A server that vanished without closing the connection is noticed within seconds.
    "keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2, "keepalives_count": 3,
    "tcp_user_timeout": 10_000,
}


class PgRow(tuple[Any, ...]):
    """A result row read as :class:`bot.store.sql.Row` (by position, name, ``dict()``)."""

    names: tuple[str, ...] = ()

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            try:
                return super().__getitem__(self.names.index(key))
            except ValueError:
                raise IndexError(f"no column {key}") from None
        return super().__getitem__(key)

    def keys(self) -> list[str]:
        return list(self.names)


def _row_factory(cursor: Any) -> Any:
    """Rows without :data:`HIDDEN_ROWID` unless it is all the query asked for."""
    names = tuple(column.name for column in cursor.description or ())
    keep = [i for i, name in enumerate(names) if name != HIDDEN_ROWID] or list(range(len(names)))
    row_type = type("Row", (PgRow,), {"names": tuple(names[i] for i in keep)})

    def make(values: Sequence[Any]) -> PgRow:
        return row_type(values[i] for i in keep)  # type: ignore[no-any-return]

    return make


def _configure(connection: psycopg.Connection[Any]) -> None:
    connection.autocommit = True


class _Done:
    """What a statement did, once its connection is back in the pool."""

    def __init__(self, rowcount: int, rows: list[PgRow]) -> None:
        self.rowcount = rowcount
        self.rows = rows


class PostgresDatabase(Nesting):
    """The bot's tables in PostgreSQL, with the methods of :class:`bot.store.sql.Sql`.
    Like the SQLite :class:`~bot.store.db.Database`, one transaction at a time holds the
    connection; a statement from another thread waits for it to end."""

    def __init__(self, pool: ConnectionPool[Any], url: str) -> None:
        self._pool = pool
        self._shown = masked_url(url)
        self._lock = threading.RLock()
        self._connection: psycopg.Connection[Any] | None = None
        self._wrote = False
        self.shared = True
        self.durable_commits = 0
        self.before_commit: Callable[[], None] = lambda: None
        self.health = StoreHealth(f"the state database {self._shown}", log)

    @classmethod
    def open(cls, url: str, *, migrate: bool = False) -> PostgresDatabase:
        """Connect to the database at ``url``; with ``migrate``, bring its schema up to date,
        otherwise refuse one that is not at :data:`~bot.store.db.SCHEMA_VERSION`."""
        db = cls.connect(url)
        try:
            if migrate:
                db.migrate()
            else:
                db.check_schema()
        except BaseException:
            db.close()
            raise
        return db

    @classmethod
    def connect(cls, url: str) -> PostgresDatabase:
        """Connect to the database at ``url``, whatever its schema."""
        pool: ConnectionPool[Any] = ConnectionPool(
            url, min_size=1, max_size=1, open=False, kwargs=dict(CONNECTION),
            configure=_configure, reconnect_timeout=RECONNECT_S, name="skald-telegram")
        try:
            pool.open(wait=True, timeout=CONNECT_S)
        except (PoolTimeout, psycopg.Error) as exc:
            pool.close()
            raise StoreUnavailable(f"cannot reach the state database {masked_url(url)} "
                                   f"within {CONNECT_S:.0f} s (check [storage] url and that "
                                   "the server is up)") from exc
        return cls(pool, url)

    @property
    def location(self) -> str:
        return self._shown

    def close(self) -> None:
        with self._lock:
            self._pool.close()

    def checkpoint(self) -> None:
        """Nothing to do: the server writes its log into its files by itself."""

    def schema_version(self) -> int:
        if self.one("SELECT to_regclass('schema_version')")[0] is None:  # type: ignore[index]
            return 0
        row = self.one("SELECT version FROM schema_version")
        return int(row[0]) if row else 0

    def check_schema(self) -> None:
        """Refuse a schema this version cannot use as it is, in one line with the fix."""
        version, known = self.schema_version(), len(MIGRATIONS)
        if version > known:
            raise StoreError(f"{self._shown} was written by a newer skald-telegram (schema "
                             f"version {version}; this one knows {known} at most)")
        if version < known:
            raise StoreError(f"{self._shown} has schema version {version}, this skald-telegram "
                             f"needs {known}: run skald-telegram migrate")

    def migrate(self) -> tuple[int, int]:
        """Take the schema to :data:`~bot.store.db.SCHEMA_VERSION` in one transaction, under
        an advisory lock; returns the versions before and after. Refuses a newer one."""
        with self.transaction():
            self.run("SELECT pg_advisory_xact_lock(?)", (LOCK_KEY,))
            self.run("CREATE TABLE IF NOT EXISTS schema_version (version BIGINT NOT NULL)")
            before = self.schema_version()
            if before > len(MIGRATIONS):
                self.check_schema()
            for step in MIGRATIONS[before:]:
                if callable(step):
                    raise StoreError("a migration step only SQLite can take")
                for statement in step:
                    for text in POSTGRES_STATEMENTS.get(statement, (postgres_ddl(statement),)):
                        self._execute(text, None)
            self.run("DELETE FROM schema_version")
            self.run("INSERT INTO schema_version (version) VALUES (?)", (len(MIGRATIONS),))
        if before != len(MIGRATIONS):
            log.info("%s migrated from schema %d to %d", self._shown, before, len(MIGRATIONS))
        return before, len(MIGRATIONS)

    @contextmanager
    def _outermost(self, durable: bool) -> Iterator[None]:
        """One that is not durable commits without waiting for the server's disk
        (``synchronous_commit = off``)."""
        self._begin(durable)
        self._depth, self._wrote = 1, False
        try:
            yield
            self.before_commit()
            self._depth = 0
            self._execute("COMMIT", None)
        except BaseException:
            self._depth = 0
            self._end(rollback=True)
            raise
        self._end(rollback=False)
        self.durable_commits += durable
        if self._wrote:
            self.health.wrote()

    def _begin(self, durable: bool) -> None:
        self._connection = self._take()
        try:
            self._execute("BEGIN", None)
            if not durable:
                self._execute("SET LOCAL synchronous_commit = off", None)
        except BaseException:
            self._end(rollback=True)
            raise

    def _end(self, *, rollback: bool) -> None:
        """Give the connection back (the pool replaces it if it broke)."""
        connection, self._connection = self._connection, None
        if connection is None:
            return
        if rollback and not connection.broken:
            with suppress(psycopg.Error):
                connection.execute("ROLLBACK")
        with suppress(psycopg.Error):
            self._pool.putconn(connection)

    def _take(self) -> psycopg.Connection[Any]:
        try:
            connection: psycopg.Connection[Any] = self._pool.getconn(timeout=GETCONN_S)
        except PoolTimeout as exc:
            self.health.failed(exc)
            raise StoreUnavailable(f"cannot reach {self._shown}: no connection within "
                                   f"{GETCONN_S:.0f} s") from exc
        return connection

    def _undo_savepoint(self) -> None:
        with suppress(StoreError):  # a lost connection took the transaction with it
            self.run("ROLLBACK TO part")
            self.run("RELEASE part")

    def _execute(self, sql: str, params: tuple[Any, ...] | None) -> _Done:
        """Run one statement on the connection of the transaction in progress, or on one
        taken for it alone (committed by itself)."""
        with self._lock:
            alone = self._connection is None
            connection = self._take() if alone else self._connection
            assert connection is not None
            try:
                with connection.cursor(row_factory=_row_factory) as cursor:
                    cursor.execute(sql, params)
                    rows = list(cursor.fetchall()) if cursor.description else []
                    done = _Done(cursor.rowcount, rows)
                    status = cursor.statusmessage or ""
            except psycopg.Error as exc:
                error = postgres_error(f"database error: {exc}".strip(), exc)
                if isinstance(error, StoreUnavailable):
                    self.health.failed(exc)
                raise error from exc
            finally:
                if alone:
                    with suppress(psycopg.Error):
                        self._pool.putconn(connection)
            if status.startswith(("INSERT", "UPDATE", "DELETE")) and done.rowcount > 0:
                if alone:
                    self.durable_commits += 1
                    self.health.wrote()
                else:
                    self._wrote = True
            return done

    def run(self, sql: str, params: tuple[Any, ...] = ()) -> _Done:
        return self._execute(postgres_query(sql), params)

    def run_many(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        with self.transaction():
            for row in rows:
                self.run(sql, row)

    def one(self, sql: str, params: tuple[Any, ...] = ()) -> PgRow | None:
        rows = self.run(sql, params).rows
        return rows[0] if rows else None

    def all(self, sql: str, params: tuple[Any, ...] = ()) -> list[PgRow]:
        return self.run(sql, params).rows
