"""The bot's durable state in one SQLite file (WAL) or one PostgreSQL database
(:mod:`bot.store.postgres`), split by what it holds.

:class:`Store` gives the writers (only :mod:`bot.bridge`, the use-case layer, writes);
:meth:`Store.view` gives the same tables read-only, for the Telegram side. A crash between
any two steps leaves a state the next start can finish: cards waiting to be posted or
edited are rows with a flag, outgoing envelopes sit in the outbox until the relay says
``sent``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from bot.dburl import is_postgres_url
from bot.errors import StoreError
from bot.store.agents import Agents
from bot.store.audit import Audit
from bot.store.cards import Cards
from bot.store.chats import Chats
from bot.store.db import SCHEMA_VERSION, Database, file_version
from bot.store.digests import Digests
from bot.store.edits import Edits
from bot.store.grants import Grants
from bot.store.items import Items
from bot.store.leases import Leases
from bot.store.outbox import Outbox
from bot.store.port import StateStore, StoreView
from bot.store.sql import Sql
from bot.store.updates import Updates

__all__ = ["SCHEMA_VERSION", "StateStore", "Store", "StoreView"]


class Store:
    """The bot's state (a :class:`StateStore`): one database, one object per group of
    tables."""

    def __init__(self, db: Sql) -> None:
        self.db = db
        self.agents = Agents(db)
        self.items = Items(db)
        self.cards = Cards(db)
        self.outbox = Outbox(db)
        self.audit = Audit(db)
        self.chats = Chats(db)
        self.grants = Grants(db)
        self.updates = Updates(db)
        self.digests = Digests(db)
        self.edits = Edits(db)
        self.leases = Leases(db)

    @classmethod
    def open(cls, where: Path | str, *, migrate: bool = False) -> Store:
        """Open the database ``where`` names. A SQLite file is created if needed and its
        schema brought up to date; a PostgreSQL URL's schema must be up to date already,
        unless ``migrate`` (``skald-telegram migrate``) says to bring it there."""
        if isinstance(where, str) and is_postgres_url(where):
            from bot.store.postgres import PostgresDatabase  # psycopg is an optional extra

            return cls(PostgresDatabase.open(where, migrate=migrate))
        return cls(Database.open(Path(where)))

    @classmethod
    def migrate(cls, where: Path | str) -> tuple[str, int, int]:
        """Bring the schema of the database ``where`` names up to date: where it is (for
        messages), and its versions before and after."""
        if isinstance(where, str) and is_postgres_url(where):
            from bot.store.postgres import PostgresDatabase

            db = PostgresDatabase.connect(where)
            try:
                return db.location, *db.migrate()
            finally:
                db.close()
        before = file_version(Path(where))
        store = cls.open(where)
        try:
            return store.location, before, store.db.schema_version()
        finally:
            store.close()

    @property
    def path(self) -> Path:
        """The SQLite file (a PostgreSQL store has none)."""
        if not isinstance(self.db, Database):
            raise StoreError(f"{self.db.location} is not a file")
        return self.db.path

    @property
    def location(self) -> str:
        """The file, or the URL without its password: for messages."""
        return self.db.location

    def close(self) -> None:
        self.db.close()

    def checkpoint(self) -> None:
        """See :meth:`Database.checkpoint`: for a thread, every few seconds."""
        self.db.checkpoint()

    @contextmanager
    def transaction(self, *, durable: bool = True) -> Iterator[None]:
        """Run the block in one transaction (nested calls join the outer one); see
        :meth:`Database.transaction` for ``durable``."""
        with self.db.transaction(durable=durable):
            yield

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """See :meth:`Database.savepoint`."""
        with self.db.savepoint():
            yield

    def on_commit(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` inside every outermost transaction just before it commits."""
        self.db.before_commit = hook

    def view(self) -> StoreView:
        return StoreView(self.agents, self.items, self.cards, self.outbox, self.audit,
                         self.chats, self.grants, self.digests, self.edits)


_PROVIDED: type[StateStore] = Store
"""The store, checked by the type checker to provide :class:`StateStore`."""
