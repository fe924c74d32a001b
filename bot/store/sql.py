"""What the store's modules need from a database, on SQLite or PostgreSQL alike.

Each query is written once, in the SQL both understand (``?`` placeholders,
``INSERT … ON CONFLICT``, ``RETURNING``, ``json_each(?)`` over a JSON array); the
PostgreSQL adapter (:mod:`bot.store.postgres`) turns it into its own dialect with
:func:`postgres_query`, and the schema's steps with :func:`postgres_ddl`.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from functools import lru_cache
from typing import Any, Protocol

from bot.errors import StoreError
from bot.storefaults import StoreHealth


class Row(Protocol):
    """One result row: by position, by column name, and ``dict(row)``."""

    def __getitem__(self, key: int | str, /) -> Any: ...

    def keys(self) -> list[str]: ...

    def __iter__(self) -> Iterator[Any]: ...

    def __len__(self) -> int: ...


class Outcome(Protocol):
    """What a statement did."""

    @property
    def rowcount(self) -> int: ...


class Sql(Protocol):
    """One database holding the bot's state: short synchronous statements, and
    transactions that nested calls join. Failures are :class:`~bot.errors.StoreError`,
    :class:`~bot.errors.StoreUnavailable` when the database itself cannot work for now."""

    health: StoreHealth
    shared: bool
    """Whether several processes may use the database at once (PostgreSQL): rows are then
    locked (``FOR UPDATE``) where two of them could change the same ones."""
    durable_commits: int
    before_commit: Callable[[], None]
    """Runs inside every outermost transaction just before it commits."""

    @property
    def location(self) -> str:
        """Where the database is, for messages (a file, or a URL without its password)."""

    def transaction(self, *, durable: bool = True) -> AbstractContextManager[None]: ...

    def savepoint(self) -> AbstractContextManager[None]: ...

    def run(self, sql: str, params: tuple[Any, ...] = ()) -> Outcome: ...

    def run_many(self, sql: str, rows: list[tuple[Any, ...]]) -> None: ...

    def one(self, sql: str, params: tuple[Any, ...] = ()) -> Row | None: ...

    def all(self, sql: str, params: tuple[Any, ...] = ()) -> Sequence[Row]: ...

    def schema_version(self) -> int: ...

    def checkpoint(self) -> None: ...

    def close(self) -> None: ...


class Nesting:
    """Transactions that nested calls join: only the outermost one begins and commits
    (:meth:`_outermost`), holding the database's lock for its thread until then."""

    _lock: threading.RLock
    _depth = 0

    @contextmanager
    def transaction(self, *, durable: bool = True) -> Iterator[None]:
        """Run the block in one transaction (nested calls join the outer one).

        A durable commit waits for the disk. One that is not survives a killed process but
        may be lost with the machine's power (or the database server's crash); it suits
        writes that only record what Telegram or the relay already did, where losing one
        means doing it again, and it is made durable by the next durable commit.
        """
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield
                finally:
                    self._depth -= 1
                return
            with self._outermost(durable):
                yield

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """Inside a transaction: undo the block's writes if it raises (the error goes on),
        leaving the rest of the transaction as it was."""
        with self._lock:
            if not self._depth:
                raise StoreError("a savepoint needs a transaction")
            self.run("SAVEPOINT part")
            try:
                yield
            except BaseException:
                self._undo_savepoint()
                raise
            self.run("RELEASE part")

    def _outermost(self, durable: bool) -> AbstractContextManager[None]:
        raise NotImplementedError

    def _undo_savepoint(self) -> None:
        """Roll back to the savepoint and release it, if the transaction is still there."""
        raise NotImplementedError

    def run(self, sql: str, params: tuple[Any, ...] = ()) -> Outcome:
        raise NotImplementedError


HIDDEN_ROWID = "rowid"
"""SQLite's implicit row number, which a few queries order by: a PostgreSQL table gets it
as an identity column that ``SELECT *`` leaves out, as SQLite does."""

_CREATE_TABLE = re.compile(r"(CREATE TABLE (?:IF NOT EXISTS )?\w+ \()")
_AUTOINCREMENT = re.compile(r"\bINTEGER PRIMARY KEY AUTOINCREMENT\b")
_INTEGER = re.compile(r"\bINTEGER\b")


@lru_cache(maxsize=1024)
def postgres_query(sql: str) -> str:
    """``sql`` with PostgreSQL's placeholders (``%s``, a literal ``%`` doubled) and its
    reading of a JSON array parameter."""
    out: list[str] = []
    quoted = False
    for char in sql:
        if char == "'":
            quoted = not quoted
        if char == "?" and not quoted:
            out.append("%s")
        elif char == "%":
            out.append("%%")
        else:
            out.append(char)
    return "".join(out).replace("json_each(%s)", "json_array_elements_text(%s::json)")


def postgres_ddl(statement: str) -> str:
    """A schema statement for PostgreSQL: 64-bit integers (SQLite's are), identity
    columns for ``AUTOINCREMENT``, and the hidden :data:`HIDDEN_ROWID`."""
    statement = _AUTOINCREMENT.sub("BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY",
                                   statement)
    statement = _INTEGER.sub("BIGINT", statement)
    return _CREATE_TABLE.sub(
        rf"\1 {HIDDEN_ROWID} BIGINT GENERATED ALWAYS AS IDENTITY,", statement, count=1)
