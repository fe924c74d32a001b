"""The bot's schema (on SQLite and, through :mod:`bot.store.postgres`, on PostgreSQL),
and its SQLite file: opening it (:mod:`bot.durable`), and transactions.

Every multi-step change runs in one transaction (:meth:`Database.transaction`), so a SIGKILL
between any two lines leaves a state the next start can finish.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Final

from bot.durable import Place, Step, open_sqlite
from bot.errors import StoreError, StoreUnavailable, store_error
from bot.store.sql import Nesting
from bot.storefaults import StoreHealth

log = logging.getLogger(__name__)

PLACE: Final = Place("the state database", "the state folder", "state.dir")

_AUDIT_NO_UPDATE: Final = """CREATE TRIGGER IF NOT EXISTS audit_no_update BEFORE UPDATE ON audit
    BEGIN SELECT RAISE(ABORT, 'the audit trail is append-only'); END"""
_AUDIT_NO_DELETE: Final = """CREATE TRIGGER IF NOT EXISTS audit_no_delete BEFORE DELETE ON audit
    BEGIN SELECT RAISE(ABORT, 'the audit trail is append-only'); END"""
_NEW_REFS: Final = "UPDATE cards SET ref = lower(hex(randomblob(16)))"

_SCHEMA: Final = (
    """CREATE TABLE IF NOT EXISTS peers (
        agent_id TEXT PRIMARY KEY,
        relay_url TEXT NOT NULL,
        card_json TEXT NOT NULL,
        name TEXT NOT NULL,
        paired_at INTEGER NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS bindings (
        agent_id TEXT NOT NULL,
        chat_id INTEGER NOT NULL,
        topic_id INTEGER,
        bound_at INTEGER NOT NULL,
        PRIMARY KEY (agent_id, chat_id)
    )""",
    """CREATE TABLE IF NOT EXISTS chats (
        chat_id INTEGER PRIMARY KEY,
        title TEXT NOT NULL DEFAULT '',
        kind TEXT NOT NULL DEFAULT 'private',
        forbidden INTEGER NOT NULL DEFAULT 0
    )""",
    """CREATE TABLE IF NOT EXISTS chat_aliases (
        old_id INTEGER PRIMARY KEY,
        new_id INTEGER NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS chat_admins (
        chat_id INTEGER NOT NULL,
        user_id INTEGER NOT NULL,
        name TEXT NOT NULL,
        fetched_at INTEGER NOT NULL,
        PRIMARY KEY (chat_id, user_id)
    )""",
    """CREATE TABLE IF NOT EXISTS agent_state (
        agent_id TEXT PRIMARY KEY,
        last_rev INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS items (
        agent_id TEXT NOT NULL,
        item_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        body_json TEXT NOT NULL,
        state TEXT NOT NULL DEFAULT 'open',
        outcome_by TEXT,
        outcome_at INTEGER,
        outcome_chat_id INTEGER,
        outcome_reason TEXT,
        expires_at INTEGER,
        remind_at INTEGER,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (agent_id, item_id)
    )""",
    "CREATE INDEX IF NOT EXISTS items_open ON items (state, expires_at)",
    "CREATE INDEX IF NOT EXISTS items_agent ON items (agent_id, state)",
    "CREATE INDEX IF NOT EXISTS items_remind ON items (state, remind_at)",
    """CREATE TABLE IF NOT EXISTS cards (
        card_id INTEGER PRIMARY KEY AUTOINCREMENT,
        agent_id TEXT NOT NULL,
        item_id TEXT NOT NULL,
        chat_id INTEGER NOT NULL,
        topic_id INTEGER,
        token TEXT NOT NULL UNIQUE,
        message_id INTEGER,
        dirty INTEGER NOT NULL DEFAULT 1,
        attachment_sent INTEGER NOT NULL DEFAULT 0,
        reminder TEXT NOT NULL DEFAULT 'none',
        posted_at INTEGER,
        UNIQUE (agent_id, item_id, chat_id)
    )""",
    "CREATE INDEX IF NOT EXISTS cards_dirty ON cards (dirty, chat_id)",
    """CREATE INDEX IF NOT EXISTS cards_edits ON cards (chat_id, card_id)
        WHERE dirty > 0 AND message_id IS NOT NULL""",
    """CREATE TABLE IF NOT EXISTS votes (
        card_id INTEGER NOT NULL,
        user_id INTEGER NOT NULL,
        name TEXT NOT NULL,
        at INTEGER NOT NULL,
        PRIMARY KEY (card_id, user_id)
    )""",
    """CREATE TABLE IF NOT EXISTS prompts (
        chat_id INTEGER NOT NULL,
        message_id INTEGER NOT NULL,
        card_id INTEGER NOT NULL,
        user_id INTEGER NOT NULL,
        PRIMARY KEY (chat_id, message_id)
    )""",
    """CREATE TABLE IF NOT EXISTS decisions (
        decision_id TEXT PRIMARY KEY,
        agent_id TEXT NOT NULL,
        item_id TEXT NOT NULL,
        chat_id INTEGER NOT NULL,
        kind TEXT NOT NULL,
        value TEXT NOT NULL,
        reason TEXT,
        user_id INTEGER NOT NULL,
        user_name TEXT NOT NULL,
        at INTEGER NOT NULL,
        envelope_id TEXT NOT NULL,
        UNIQUE (agent_id, item_id)
    )""",
    """CREATE TABLE IF NOT EXISTS reported (
        agent_id TEXT NOT NULL,
        item_id TEXT NOT NULL,
        outcome TEXT NOT NULL,
        outcome_by TEXT,
        outcome_at INTEGER,
        PRIMARY KEY (agent_id, item_id)
    )""",
    """CREATE TABLE IF NOT EXISTS outbox (
        envelope_id TEXT PRIMARY KEY,
        relay_url TEXT NOT NULL,
        envelope_json TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        sent_at INTEGER
    )""",
    "CREATE INDEX IF NOT EXISTS outbox_pending ON outbox (relay_url, sent_at)",
    """CREATE TABLE IF NOT EXISTS replay (
        envelope_id TEXT PRIMARY KEY,
        ts INTEGER NOT NULL,
        seen_at INTEGER NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS pairings (
        agent_id TEXT PRIMARY KEY,
        relay_url TEXT NOT NULL,
        card_json TEXT NOT NULL,
        chat_id INTEGER NOT NULL,
        topic_id INTEGER,
        requested_by INTEGER,
        created_at INTEGER NOT NULL,
        accepted_at INTEGER
    )""",
    """CREATE TABLE IF NOT EXISTS pairing_rejections (
        agent_id TEXT PRIMARY KEY,
        reason TEXT NOT NULL,
        at INTEGER NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS users (
        user_id INTEGER PRIMARY KEY,
        name TEXT NOT NULL,
        username TEXT
    )""",
    """CREATE TABLE IF NOT EXISTS updates (
        update_id INTEGER PRIMARY KEY,
        body TEXT NOT NULL,
        done INTEGER NOT NULL DEFAULT 0
    )""",
    "CREATE INDEX IF NOT EXISTS updates_pending ON updates (done, update_id)",
    """CREATE TABLE IF NOT EXISTS audit (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        at INTEGER NOT NULL,
        event TEXT NOT NULL,
        chat_id INTEGER,
        agent_id TEXT,
        item_id TEXT,
        user_id INTEGER,
        user_name TEXT,
        detail TEXT NOT NULL DEFAULT '{}'
    )""",
    "CREATE INDEX IF NOT EXISTS audit_chat ON audit (chat_id, seq)",
    _AUDIT_NO_UPDATE,
    _AUDIT_NO_DELETE,
    """CREATE TABLE IF NOT EXISTS grants (
        agent_id TEXT NOT NULL,
        grant_id TEXT NOT NULL,
        key TEXT NOT NULL,
        label TEXT NOT NULL,
        granted_by TEXT NOT NULL,
        granted_at INTEGER,
        expires_at INTEGER,
        uses INTEGER NOT NULL DEFAULT 0,
        token TEXT NOT NULL UNIQUE,
        state TEXT NOT NULL DEFAULT 'active',
        revoke_by TEXT,
        revoke_at INTEGER,
        ended_at INTEGER,
        PRIMARY KEY (agent_id, grant_id)
    )""",
    """CREATE TABLE IF NOT EXISTS granted (
        agent_id TEXT NOT NULL,
        item_id TEXT NOT NULL,
        chat_id INTEGER NOT NULL,
        label TEXT NOT NULL,
        minutes INTEGER NOT NULL,
        until INTEGER NOT NULL,
        user_name TEXT NOT NULL,
        PRIMARY KEY (agent_id, item_id)
    )""",
    """CREATE TABLE IF NOT EXISTS activity (
        agent_id TEXT NOT NULL,
        entry_id TEXT NOT NULL,
        tool TEXT NOT NULL,
        summary TEXT NOT NULL,
        grant_id TEXT,
        at INTEGER NOT NULL,
        PRIMARY KEY (agent_id, entry_id)
    )""",
    """CREATE TABLE IF NOT EXISTS notes (
        note_id INTEGER PRIMARY KEY AUTOINCREMENT,
        kind TEXT NOT NULL,
        chat_id INTEGER NOT NULL,
        topic_id INTEGER,
        message_id INTEGER,
        opened_at INTEGER NOT NULL,
        dirty INTEGER NOT NULL DEFAULT 1
    )""",
    "CREATE INDEX IF NOT EXISTS notes_chat ON notes (chat_id, kind, opened_at)",
    """CREATE TABLE IF NOT EXISTS note_lines (
        note_id INTEGER NOT NULL,
        seq INTEGER NOT NULL,
        agent_id TEXT NOT NULL,
        ref TEXT NOT NULL,
        PRIMARY KEY (note_id, seq)
    )""",
    "CREATE INDEX IF NOT EXISTS note_lines_ref ON note_lines (agent_id, ref)",
)


MIGRATIONS: Final[tuple[Step, ...]] = (
    # Every table is made only if missing: a file from before versioned migrations holds
    # them already, with its version in a ``meta`` table that this step drops.
    (*_SCHEMA, "DROP TABLE IF EXISTS meta"),
    # Digests of waiting approvals, and each version of the list one showed.
    (
        """CREATE TABLE digests (
            digest_id INTEGER PRIMARY KEY AUTOINCREMENT,
            chat_id INTEGER NOT NULL,
            agent_id TEXT NOT NULL,
            topic_id INTEGER,
            token TEXT NOT NULL UNIQUE,
            version INTEGER NOT NULL DEFAULT 0,
            message_id INTEGER,
            dirty INTEGER NOT NULL DEFAULT 0,
            UNIQUE (chat_id, agent_id)
        )""",
        """CREATE TABLE digest_items (
            digest_id INTEGER NOT NULL,
            version INTEGER NOT NULL,
            seq INTEGER NOT NULL,
            item_id TEXT NOT NULL,
            PRIMARY KEY (digest_id, version, seq)
        )""",
    ),
    # Each card's opaque reference for the Mini App (never its item id or button token).
    ("ALTER TABLE cards ADD COLUMN ref TEXT",
     _NEW_REFS,
     "CREATE UNIQUE INDEX IF NOT EXISTS cards_ref ON cards (ref)"),
    # Edits before approving: the edit standing on a card, and the prompts asking for one.
    (
        """CREATE TABLE edits (
            card_id INTEGER PRIMARY KEY,
            revision INTEGER NOT NULL,
            arguments_json TEXT,
            user_id INTEGER NOT NULL,
            user_name TEXT NOT NULL,
            at INTEGER NOT NULL
        )""",
        """CREATE TABLE edit_prompts (
            chat_id INTEGER NOT NULL,
            message_id INTEGER NOT NULL,
            card_id INTEGER NOT NULL,
            user_id INTEGER NOT NULL,
            key TEXT NOT NULL,
            PRIMARY KEY (chat_id, message_id)
        )""",
        "CREATE INDEX edit_prompts_card ON edit_prompts (card_id)",
    ),
    # Several replicas on one database: the leader's lease and each replica's, and which
    # replica handles a held update.
    (
        """CREATE TABLE leases (
            name TEXT PRIMARY KEY,
            holder TEXT NOT NULL,
            expires_at INTEGER NOT NULL
        )""",
        "ALTER TABLE updates ADD COLUMN claimed_by TEXT",
    ),
)
"""The schema's steps; ``PRAGMA user_version`` says how many a file has taken."""
SCHEMA_VERSION: Final = len(MIGRATIONS)

POSTGRES_STATEMENTS: Final[dict[str, tuple[str, ...]]] = {
    _AUDIT_NO_UPDATE: (
        """CREATE OR REPLACE FUNCTION audit_append_only() RETURNS trigger LANGUAGE plpgsql
        AS $$ BEGIN RAISE EXCEPTION 'the audit trail is append-only'; END $$""",
        """CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
        FOR EACH ROW EXECUTE FUNCTION audit_append_only()""",
        """CREATE TRIGGER audit_no_truncate BEFORE TRUNCATE ON audit
        FOR EACH STATEMENT EXECUTE FUNCTION audit_append_only()""",
    ),
    _AUDIT_NO_DELETE: ("""CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
        FOR EACH ROW EXECUTE FUNCTION audit_append_only()""",),
    _NEW_REFS: ("UPDATE cards SET ref = md5(random()::text || card_id::text)",),
}
"""The steps' statements that PostgreSQL says otherwise; every other one is translated by
:func:`bot.store.sql.postgres_ddl`."""


def file_version(path: Path) -> int:
    """The schema version of the SQLite file at ``path`` (0 when there is none yet)."""
    if not path.is_file():
        return 0
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as raw:
            return int(raw.execute("PRAGMA user_version").fetchone()[0])
    except sqlite3.Error as exc:
        raise StoreError(PLACE.unusable(path, exc)) from exc


class Database(Nesting):
    """One SQLite connection. Methods are synchronous and short; call them from the event
    loop, or from a thread the loop waits for (a large envelope is applied in one).

    A transaction holds the connection for its thread from start to commit: a statement or
    transaction from another thread waits until then, so it is never part of it."""

    def __init__(self, connection: sqlite3.Connection, path: Path) -> None:
        self._connection = connection
        self.path = path
        self._lock = threading.RLock()
        self.shared = False
        self.durable_commits = 0
        """Commits that waited for the disk so far."""
        self.before_commit: Callable[[], None] = lambda: None
        """Runs inside every outermost transaction just before it commits."""
        self.health = StoreHealth(f"the state database {path}", log)
        """Whether writes succeed; the failures of the store itself are logged there."""

    @classmethod
    def open(cls, path: Path) -> Database:
        """Open (creating if needed) the database at ``path`` and bring its schema up to date."""
        # SQLite would copy the write-ahead log into the file inside a commit, on the
        # caller's thread, taking tens of milliseconds: :meth:`checkpoint` does it.
        connection = open_sqlite(path, PLACE, MIGRATIONS, pragmas=("wal_autocheckpoint=0",))
        connection.row_factory = sqlite3.Row
        return cls(connection, path)

    def close(self) -> None:
        with self._lock:
            self._connection.close()

    def checkpoint(self) -> None:
        """Copy what the write-ahead log holds into the database file, through a connection
        of its own and without waiting for readers or the writer: for a thread, now and
        then, while the database is open (closing it checkpoints too)."""
        try:
            with contextlib.closing(sqlite3.connect(self.path, timeout=5)) as connection:
                connection.execute("PRAGMA wal_checkpoint(PASSIVE)")
        except sqlite3.Error as exc:
            raise store_error(f"cannot checkpoint {self.path}: {exc}", exc) from exc

    @property
    def location(self) -> str:
        return str(self.path)

    def schema_version(self) -> int:
        row = self.one("PRAGMA user_version")
        return int(row[0]) if row else 0

    @contextmanager
    def _outermost(self, durable: bool) -> Iterator[None]:
        """A durable commit waits for the disk (``synchronous=FULL``), one that is not for
        the write-ahead log only (``synchronous=NORMAL``)."""
        try:
            if not durable:
                self._connection.execute("PRAGMA synchronous=NORMAL")
            self._connection.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            self._restore_durability(durable)
            self.health.failed(exc)
            raise store_error(f"cannot start a transaction: {exc}", exc) from exc
        changes = self._connection.total_changes
        self._depth = 1
        try:
            yield
            self.before_commit()
        except BaseException:
            self._depth = 0
            self._roll_back()
            self._restore_durability(durable)
            raise
        self._depth = 0
        try:
            self._connection.execute("COMMIT")
        except sqlite3.Error as exc:
            self.health.failed(exc)
            self._roll_back()  # a busy database keeps the transaction open: end it
            raise store_error(f"cannot commit: {exc}", exc) from exc
        finally:
            self._restore_durability(durable)
        self.durable_commits += durable
        if self._connection.total_changes != changes:
            self.health.wrote()

    def _undo_savepoint(self) -> None:
        # A full disk or an I/O error ends the whole transaction in SQLite: then there is
        # nothing left to undo, and the error goes on.
        if self._connection.in_transaction:
            self.run("ROLLBACK TO part")
            self.run("RELEASE part")

    def _roll_back(self) -> None:
        """End the transaction in progress, if SQLite has not ended it already; an error
        doing so leaves the connection as it is (the caller's error says why)."""
        if self._connection.in_transaction:
            with suppress(sqlite3.Error):
                self._connection.execute("ROLLBACK")

    def _restore_durability(self, durable: bool) -> None:
        """Every other commit (single statements included) waits for the disk again."""
        if not durable:
            with suppress(sqlite3.Error):
                self._connection.execute("PRAGMA synchronous=FULL")

    def run(self, sql: str, params: tuple[Any, ...] = ()) -> sqlite3.Cursor:
        with self._lock:
            if self._depth and not self._connection.in_transaction:
                # SQLite ended the transaction after a failure someone caught: what follows
                # must not be committed on its own, statement by statement.
                raise StoreUnavailable("the transaction in progress was rolled back")
            changes = self._connection.total_changes
            try:
                cursor = self._connection.execute(sql, params)
            except sqlite3.Error as exc:
                self.health.failed(exc)
                raise store_error(f"database error: {exc}", exc) from exc
            # A write outside a transaction commits by itself, and waits for the disk.
            if not self._depth and self._connection.total_changes != changes:
                self.durable_commits += 1
                self.health.wrote()
            return cursor

    def run_many(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        """``sql`` once for each of ``rows``, all in one transaction (the one in progress,
        if any)."""
        with self.transaction():
            try:
                self._connection.executemany(sql, rows)
            except sqlite3.Error as exc:
                self.health.failed(exc)
                raise store_error(f"database error: {exc}", exc) from exc


    def one(self, sql: str, params: tuple[Any, ...] = ()) -> sqlite3.Row | None:
        with self._lock:
            row: sqlite3.Row | None = self.run(sql, params).fetchone()
        return row

    def all(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return list(self.run(sql, params).fetchall())

