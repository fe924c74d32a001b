"""PostgreSQL's failures in our terms, for both of its adapters (the bot's store and the
relay's queue): a server that is away, a connection that broke or a pool that found no
connection in time is a store that cannot work for now (:class:`StoreUnavailable`, waited
out); anything else is a plain :class:`StoreError`."""

from __future__ import annotations

from typing import Final

import psycopg
from psycopg_pool import PoolTimeout

from bot.errors import StoreError, StoreUnavailable

UNAVAILABLE_CLASSES: Final = frozenset({
    "08",  # connection exception
    "40",  # transaction rollback (serialisation, deadlock)
    "53",  # insufficient resources (disk full, out of memory, too many connections)
    "55",  # object not in prerequisite state (lock not available)
    "57",  # operator intervention (shutdown, cannot connect now)
    "58",  # system error (I/O)
})
"""SQLSTATE classes that mean the server cannot work for now, not that it refused the
statement."""


def unavailable(error: BaseException) -> bool:
    """Whether a psycopg error says the database cannot work for now."""
    if isinstance(error, PoolTimeout):
        return True
    state = getattr(error, "sqlstate", None)
    if state:
        return str(state)[:2] in UNAVAILABLE_CLASSES
    return isinstance(error, psycopg.OperationalError | psycopg.InterfaceError)


def postgres_error(message: str, cause: BaseException) -> StoreError:
    """The error an adapter raises (``raise postgres_error(...) from cause``) for a psycopg
    error."""
    return (StoreUnavailable if unavailable(cause) else StoreError)(message)
