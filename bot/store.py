"""The bot's durable state in one SQLite file (WAL): the only place state lives.

Every multi-step change runs in one transaction (:meth:`Store.transaction`), so a SIGKILL
between any two lines leaves a state the next start can finish: cards waiting to be posted
or edited are rows with a flag, outgoing envelopes sit in the outbox until the relay says
``sent``, and the replay set is written in the same transaction as the processing of the
envelope it guards.

The audit table is append-only: this module has no statement that updates or deletes it.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.errors import StoreError

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS peers (
    agent_id TEXT PRIMARY KEY,
    relay_url TEXT NOT NULL,
    card_json TEXT NOT NULL,
    name TEXT NOT NULL,
    paired_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS bindings (
    agent_id TEXT NOT NULL,
    chat_id INTEGER NOT NULL,
    topic_id INTEGER,
    bound_at INTEGER NOT NULL,
    PRIMARY KEY (agent_id, chat_id)
);
CREATE TABLE IF NOT EXISTS chats (
    chat_id INTEGER PRIMARY KEY,
    title TEXT NOT NULL DEFAULT '',
    kind TEXT NOT NULL DEFAULT 'private',
    forbidden INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS chat_aliases (
    old_id INTEGER PRIMARY KEY,
    new_id INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS chat_admins (
    chat_id INTEGER NOT NULL,
    user_id INTEGER NOT NULL,
    name TEXT NOT NULL,
    fetched_at INTEGER NOT NULL,
    PRIMARY KEY (chat_id, user_id)
);
CREATE TABLE IF NOT EXISTS agent_state (
    agent_id TEXT PRIMARY KEY,
    last_rev INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS items (
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
);
CREATE INDEX IF NOT EXISTS items_open ON items (state, expires_at);
CREATE TABLE IF NOT EXISTS cards (
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
);
CREATE INDEX IF NOT EXISTS cards_dirty ON cards (dirty, chat_id);
CREATE TABLE IF NOT EXISTS votes (
    card_id INTEGER NOT NULL,
    user_id INTEGER NOT NULL,
    name TEXT NOT NULL,
    at INTEGER NOT NULL,
    PRIMARY KEY (card_id, user_id)
);
CREATE TABLE IF NOT EXISTS prompts (
    chat_id INTEGER NOT NULL,
    message_id INTEGER NOT NULL,
    card_id INTEGER NOT NULL,
    user_id INTEGER NOT NULL,
    PRIMARY KEY (chat_id, message_id)
);
CREATE TABLE IF NOT EXISTS decisions (
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
);
CREATE TABLE IF NOT EXISTS outbox (
    envelope_id TEXT PRIMARY KEY,
    relay_url TEXT NOT NULL,
    envelope_json TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    sent_at INTEGER
);
CREATE INDEX IF NOT EXISTS outbox_pending ON outbox (relay_url, sent_at);
CREATE TABLE IF NOT EXISTS replay (
    envelope_id TEXT PRIMARY KEY,
    ts INTEGER NOT NULL,
    seen_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS pairings (
    agent_id TEXT PRIMARY KEY,
    relay_url TEXT NOT NULL,
    card_json TEXT NOT NULL,
    chat_id INTEGER NOT NULL,
    topic_id INTEGER,
    requested_by INTEGER,
    created_at INTEGER NOT NULL,
    accepted_at INTEGER
);
CREATE TABLE IF NOT EXISTS users (
    user_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    username TEXT
);
CREATE TABLE IF NOT EXISTS updates (
    update_id INTEGER PRIMARY KEY,
    body TEXT NOT NULL,
    done INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS updates_pending ON updates (done, update_id);
CREATE TABLE IF NOT EXISTS audit (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at INTEGER NOT NULL,
    event TEXT NOT NULL,
    chat_id INTEGER,
    agent_id TEXT,
    item_id TEXT,
    user_id INTEGER,
    user_name TEXT,
    detail TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS audit_chat ON audit (chat_id, seq);
CREATE TRIGGER IF NOT EXISTS audit_no_update BEFORE UPDATE ON audit
BEGIN SELECT RAISE(ABORT, 'the audit trail is append-only'); END;
CREATE TRIGGER IF NOT EXISTS audit_no_delete BEFORE DELETE ON audit
BEGIN SELECT RAISE(ABORT, 'the audit trail is append-only'); END;
"""


@dataclass(frozen=True)
class Peer:
    """A paired agent."""

    agent_id: str
    relay_url: str
    card_json: str
    name: str


@dataclass(frozen=True)
class Binding:
    """An agent bound to a chat (and optionally a forum topic in it)."""

    agent_id: str
    chat_id: int
    topic_id: int | None


@dataclass(frozen=True)
class Pairing:
    """A pairing the bot started: which agent, through which relay, for which chat."""

    agent_id: str
    relay_url: str
    card_json: str
    chat_id: int
    topic_id: int | None
    requested_by: int | None
    created_at: int
    accepted_at: int | None


@dataclass(frozen=True)
class ItemRow:
    """An inbox item as the bot holds it."""

    agent_id: str
    item_id: str
    kind: str  # "approval" | "clarification"
    body_json: str
    state: str  # open | approved | denied | answered | expired | cancelled
    outcome_by: str | None
    outcome_at: int | None
    outcome_chat_id: int | None
    outcome_reason: str | None
    expires_at: int | None
    remind_at: int | None
    created_at: int


@dataclass(frozen=True)
class CardRow:
    """One Telegram message showing one item in one chat."""

    card_id: int
    agent_id: str
    item_id: str
    chat_id: int
    topic_id: int | None
    token: str
    message_id: int | None
    dirty: int
    """0 when the message shows the current state; otherwise a change counter."""
    attachment_sent: bool
    reminder: str  # none | sent
    posted_at: int | None


@dataclass(frozen=True)
class Vote:
    """An approver's standing approval on a card (quorum)."""

    user_id: int
    name: str
    at: int


@dataclass(frozen=True)
class DecisionRow:
    """A decision or answer the bot sent for an item."""

    decision_id: str
    agent_id: str
    item_id: str
    chat_id: int
    kind: str
    value: str
    reason: str | None
    user_id: int
    user_name: str
    at: int
    envelope_id: str


@dataclass(frozen=True)
class AuditRow:
    """One append-only audit record."""

    seq: int
    at: int
    event: str
    chat_id: int | None
    agent_id: str | None
    item_id: str | None
    user_id: int | None
    user_name: str | None
    detail: dict[str, Any]


class Store:
    """The SQLite store. Methods are synchronous and short; call them from the event loop."""

    def __init__(self, connection: sqlite3.Connection, path: Path) -> None:
        self._db = connection
        self.path = path
        self._depth = 0
        self.before_commit: Callable[[], None] = lambda: None
        """Runs inside every outermost transaction just before it commits."""

    @classmethod
    def open(cls, path: Path) -> Store:
        """Open (creating if needed) the database at ``path`` and bring its schema up to date."""
        try:
            _create_private(path)
            connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            connection.row_factory = sqlite3.Row
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=FULL")
            connection.execute("PRAGMA busy_timeout=5000")
            connection.executescript(_SCHEMA)
            version = connection.execute(
                "SELECT value FROM meta WHERE key = 'schema_version'"
            ).fetchone()
            if version is None:
                connection.execute(
                    "INSERT INTO meta (key, value) VALUES ('schema_version', ?)",
                    (str(SCHEMA_VERSION),),
                )
            elif int(version["value"]) > SCHEMA_VERSION:
                raise StoreError(
                    f"{path} was written by a newer skald-telegram "
                    f"(schema {version['value']}, this one knows {SCHEMA_VERSION})"
                )
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"cannot open the state database {path}: {exc}") from exc
        return cls(connection, path)

    def close(self) -> None:
        self._db.close()

    def schema_version(self) -> int:
        row = self._one("SELECT value FROM meta WHERE key = 'schema_version'")
        return int(row["value"]) if row else 0

    # -- plumbing -------------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Run the block in one transaction (nested calls join the outer one)."""
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise StoreError(f"cannot start a transaction: {exc}") from exc
        self._depth = 1
        try:
            yield
        except BaseException:
            self._depth = 0
            self._db.execute("ROLLBACK")
            raise
        try:
            self.before_commit()
        except BaseException:
            self._depth = 0
            self._db.execute("ROLLBACK")
            raise
        self._depth = 0
        try:
            self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            raise StoreError(f"cannot commit: {exc}") from exc

    def _run(self, sql: str, params: tuple[Any, ...] = ()) -> sqlite3.Cursor:
        try:
            return self._db.execute(sql, params)
        except sqlite3.Error as exc:
            raise StoreError(f"database error: {exc}") from exc

    def _one(self, sql: str, params: tuple[Any, ...] = ()) -> sqlite3.Row | None:
        row: sqlite3.Row | None = self._run(sql, params).fetchone()
        return row

    def _all(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        return list(self._run(sql, params).fetchall())

    # -- relay: outbox and replay set -------------------------------------------------------

    def outbox_add(self, relay_url: str, envelope: dict[str, object], now_ms: int) -> None:
        self._run(
            "INSERT OR IGNORE INTO outbox (envelope_id, relay_url, envelope_json, created_at)"
            " VALUES (?, ?, ?, ?)",
            (envelope["id"], relay_url, json.dumps(envelope), now_ms),
        )

    def outbox_pending(self, relay_url: str) -> list[dict[str, object]]:
        rows = self._all(
            "SELECT envelope_json FROM outbox WHERE relay_url = ? AND sent_at IS NULL"
            " ORDER BY created_at, rowid",
            (relay_url,),
        )
        return [json.loads(row["envelope_json"]) for row in rows]

    def outbox_mark_sent(self, envelope_id: str, now_ms: int) -> bool:
        """The relay took the envelope; False if it was already marked."""
        cursor = self._run(
            "UPDATE outbox SET sent_at = ? WHERE envelope_id = ? AND sent_at IS NULL",
            (now_ms, envelope_id),
        )
        return cursor.rowcount == 1

    def outbox_depth(self) -> int:
        row = self._one("SELECT count(*) AS n FROM outbox WHERE sent_at IS NULL")
        return int(row["n"]) if row else 0

    def replay_seen(self, envelope_id: str) -> bool:
        return self._one("SELECT 1 FROM replay WHERE envelope_id = ?", (envelope_id,)) is not None

    def replay_remember(self, envelope_id: str, ts_ms: int, now_ms: int) -> None:
        self._run(
            "INSERT OR IGNORE INTO replay (envelope_id, ts, seen_at) VALUES (?, ?, ?)",
            (envelope_id, ts_ms, now_ms),
        )

    def replay_forget_before(self, cutoff_ms: int) -> int:
        """Drop replay entries first seen before ``cutoff_ms`` (retention: 30 days)."""
        return self._run("DELETE FROM replay WHERE seen_at < ?", (cutoff_ms,)).rowcount

    def replay_guard(self) -> _StoreReplayGuard:
        """This store's replay set as a :class:`bot.protocol.replay.ReplayGuard`."""
        return _StoreReplayGuard(self)

    # -- peers, bindings, chats -------------------------------------------------------------

    def add_peer(self, peer: Peer, now_ms: int) -> None:
        self._run(
            "INSERT INTO peers (agent_id, relay_url, card_json, name, paired_at)"
            " VALUES (?, ?, ?, ?, ?) ON CONFLICT (agent_id) DO UPDATE SET"
            " relay_url = excluded.relay_url, card_json = excluded.card_json,"
            " name = excluded.name",
            (peer.agent_id, peer.relay_url, peer.card_json, peer.name, now_ms),
        )

    def peers(self) -> list[Peer]:
        rows = self._all("SELECT agent_id, relay_url, card_json, name FROM peers ORDER BY rowid")
        return [Peer(**dict(row)) for row in rows]

    def peer(self, agent_id: str) -> Peer | None:
        row = self._one(
            "SELECT agent_id, relay_url, card_json, name FROM peers WHERE agent_id = ?",
            (agent_id,),
        )
        return Peer(**dict(row)) if row else None

    def bind(self, agent_id: str, chat_id: int, topic_id: int | None, now_ms: int) -> None:
        self._run(
            "INSERT INTO bindings (agent_id, chat_id, topic_id, bound_at) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (agent_id, chat_id) DO UPDATE SET topic_id = excluded.topic_id",
            (agent_id, chat_id, topic_id, now_ms),
        )

    def unbind(self, agent_id: str, chat_id: int) -> None:
        """Remove a binding; the agent's cards in the chat are marked for editing."""
        self._run("DELETE FROM bindings WHERE agent_id = ? AND chat_id = ?", (agent_id, chat_id))
        self._run(
            "UPDATE cards SET dirty = dirty + 1 WHERE agent_id = ? AND chat_id = ?",
            (agent_id, chat_id),
        )

    def is_bound(self, agent_id: str, chat_id: int) -> bool:
        row = self._one(
            "SELECT 1 FROM bindings WHERE agent_id = ? AND chat_id = ?", (agent_id, chat_id)
        )
        return row is not None

    def bindings_for_agent(self, agent_id: str) -> list[Binding]:
        rows = self._all(
            "SELECT agent_id, chat_id, topic_id FROM bindings WHERE agent_id = ? ORDER BY rowid",
            (agent_id,),
        )
        return [Binding(**dict(row)) for row in rows]

    def bindings_for_chat(self, chat_id: int) -> list[Binding]:
        rows = self._all(
            "SELECT agent_id, chat_id, topic_id FROM bindings WHERE chat_id = ? ORDER BY rowid",
            (chat_id,),
        )
        return [Binding(**dict(row)) for row in rows]

    def note_chat(self, chat_id: int, title: str, kind: str) -> None:
        self._run(
            "INSERT INTO chats (chat_id, title, kind) VALUES (?, ?, ?) ON CONFLICT (chat_id)"
            " DO UPDATE SET title = excluded.title, kind = excluded.kind"
            " WHERE title != excluded.title OR kind != excluded.kind",
            (chat_id, title, kind),
        )

    def chat_title(self, chat_id: int) -> str:
        row = self._one("SELECT title FROM chats WHERE chat_id = ?", (chat_id,))
        return str(row["title"]) if row else ""

    def set_chat_forbidden(self, chat_id: int, forbidden: bool) -> None:
        self._run(
            "INSERT INTO chats (chat_id, forbidden) VALUES (?, ?)"
            " ON CONFLICT (chat_id) DO UPDATE SET forbidden = excluded.forbidden",
            (chat_id, int(forbidden)),
        )

    def chat_forbidden(self, chat_id: int) -> bool:
        row = self._one("SELECT forbidden FROM chats WHERE chat_id = ?", (chat_id,))
        return bool(row["forbidden"]) if row else False

    def migrate_chat(self, old_id: int, new_id: int) -> None:
        """Move a chat's bindings, cards, prompts and settings to its new (supergroup) id."""
        with self.transaction():
            for table in ("bindings", "cards", "prompts", "chat_admins"):
                self._run(f"UPDATE OR REPLACE {table} SET chat_id = ? WHERE chat_id = ?",
                          (new_id, old_id))
            self._run("UPDATE decisions SET chat_id = ? WHERE chat_id = ?", (new_id, old_id))
            self._run("UPDATE items SET outcome_chat_id = ? WHERE outcome_chat_id = ?",
                      (new_id, old_id))
            self._run(
                "INSERT OR REPLACE INTO chats (chat_id, title, kind, forbidden)"
                " SELECT ?, title, 'supergroup', 0 FROM chats WHERE chat_id = ?",
                (new_id, old_id),
            )
            self._run("INSERT OR REPLACE INTO chat_aliases (old_id, new_id) VALUES (?, ?)",
                      (old_id, new_id))

    def former_chat_ids(self, chat_id: int) -> list[int]:
        """The ids a chat had before it became a supergroup (its settings and history)."""
        rows = self._all("SELECT old_id FROM chat_aliases WHERE new_id = ?", (chat_id,))
        return [int(r["old_id"]) for r in rows]

    def set_chat_admins(self, chat_id: int, admins: dict[int, str], now_ms: int) -> None:
        with self.transaction():
            self._run("DELETE FROM chat_admins WHERE chat_id = ?", (chat_id,))
            for user_id, name in admins.items():
                self._run(
                    "INSERT INTO chat_admins (chat_id, user_id, name, fetched_at)"
                    " VALUES (?, ?, ?, ?)",
                    (chat_id, user_id, name, now_ms),
                )

    def chat_admins(self, chat_id: int) -> tuple[dict[int, str], int | None]:
        """The cached administrators of a chat and when they were fetched (None: never)."""
        rows = self._all(
            "SELECT user_id, name, fetched_at FROM chat_admins WHERE chat_id = ?", (chat_id,)
        )
        if not rows:
            return {}, None
        return {int(r["user_id"]): str(r["name"]) for r in rows}, int(rows[0]["fetched_at"])

    def forget_chat_admins(self, chat_id: int) -> None:
        self._run("DELETE FROM chat_admins WHERE chat_id = ?", (chat_id,))

    # -- agents' revisions and items --------------------------------------------------------

    def last_rev(self, agent_id: str) -> int | None:
        row = self._one("SELECT last_rev FROM agent_state WHERE agent_id = ?", (agent_id,))
        return int(row["last_rev"]) if row else None

    def last_update_at(self, agent_id: str) -> int | None:
        row = self._one("SELECT updated_at FROM agent_state WHERE agent_id = ?", (agent_id,))
        return int(row["updated_at"]) if row else None

    def set_rev(self, agent_id: str, rev: int, now_ms: int) -> None:
        self._run(
            "INSERT INTO agent_state (agent_id, last_rev, updated_at) VALUES (?, ?, ?)"
            " ON CONFLICT (agent_id) DO UPDATE SET last_rev = excluded.last_rev,"
            " updated_at = excluded.updated_at",
            (agent_id, rev, now_ms),
        )

    def add_item(
        self,
        agent_id: str,
        item_id: str,
        kind: str,
        body_json: str,
        *,
        expires_at: int | None,
        remind_at: int | None,
        now_ms: int,
    ) -> bool:
        """Insert a new open item; False if the bot already holds it (in any state)."""
        cursor = self._run(
            "INSERT OR IGNORE INTO items (agent_id, item_id, kind, body_json, expires_at,"
            " remind_at, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (agent_id, item_id, kind, body_json, expires_at, remind_at, now_ms),
        )
        return cursor.rowcount == 1

    def item(self, agent_id: str, item_id: str) -> ItemRow | None:
        row = self._one(
            "SELECT * FROM items WHERE agent_id = ? AND item_id = ?", (agent_id, item_id)
        )
        return ItemRow(**dict(row)) if row else None

    def open_item_ids(self, agent_id: str) -> set[str]:
        rows = self._all(
            "SELECT item_id FROM items WHERE agent_id = ? AND state = 'open'", (agent_id,)
        )
        return {str(r["item_id"]) for r in rows}

    def has_item(self, agent_id: str, item_id: str) -> bool:
        row = self._one(
            "SELECT 1 FROM items WHERE agent_id = ? AND item_id = ?", (agent_id, item_id)
        )
        return row is not None

    def close_item(
        self,
        agent_id: str,
        item_id: str,
        *,
        state: str,
        by: str | None,
        at: int | None,
        chat_id: int | None = None,
        reason: str | None = None,
    ) -> bool:
        """Move an open item to a final state and mark its cards for editing.

        Returns False (and changes nothing) when the item is not open: the first decision
        anywhere wins.
        """
        cursor = self._run(
            "UPDATE items SET state = ?, outcome_by = ?, outcome_at = ?, outcome_chat_id = ?,"
            " outcome_reason = ? WHERE agent_id = ? AND item_id = ? AND state = 'open'",
            (state, by, at, chat_id, reason, agent_id, item_id),
        )
        if cursor.rowcount != 1:
            return False
        self._run(
            "UPDATE cards SET dirty = dirty + 1 WHERE agent_id = ? AND item_id = ?",
            (agent_id, item_id),
        )
        return True

    def open_items_expired(self, now_ms: int) -> list[ItemRow]:
        rows = self._all(
            "SELECT * FROM items WHERE state = 'open' AND expires_at IS NOT NULL"
            " AND expires_at <= ?",
            (now_ms,),
        )
        return [ItemRow(**dict(r)) for r in rows]

    def next_expiry(self) -> int | None:
        row = self._one(
            "SELECT min(expires_at) AS t FROM items WHERE state = 'open'"
            " AND expires_at IS NOT NULL"
        )
        return int(row["t"]) if row and row["t"] is not None else None

    def open_items_for_chat(self, chat_id: int) -> list[tuple[ItemRow, CardRow]]:
        rows = self._all(
            "SELECT c.card_id FROM cards c JOIN items i"
            " ON i.agent_id = c.agent_id AND i.item_id = c.item_id"
            " WHERE c.chat_id = ? AND i.state = 'open' ORDER BY i.created_at, c.card_id",
            (chat_id,),
        )
        result = []
        for row in rows:
            card = self.card(int(row["card_id"]))
            if card is not None:
                item = self.item(card.agent_id, card.item_id)
                if item is not None:
                    result.append((item, card))
        return result

    def open_item_count(self) -> int:
        row = self._one("SELECT count(*) AS n FROM items WHERE state = 'open'")
        return int(row["n"]) if row else 0

    # -- cards ------------------------------------------------------------------------------

    def add_card(
        self, agent_id: str, item_id: str, chat_id: int, topic_id: int | None, token: str
    ) -> bool:
        """Plan a card for an item in a chat; False if that chat already has one."""
        cursor = self._run(
            "INSERT OR IGNORE INTO cards (agent_id, item_id, chat_id, topic_id, token)"
            " VALUES (?, ?, ?, ?, ?)",
            (agent_id, item_id, chat_id, topic_id, token),
        )
        return cursor.rowcount == 1

    def card(self, card_id: int) -> CardRow | None:
        row = self._one("SELECT * FROM cards WHERE card_id = ?", (card_id,))
        return _card(row) if row else None

    def card_by_token(self, token: str) -> CardRow | None:
        row = self._one("SELECT * FROM cards WHERE token = ?", (token,))
        return _card(row) if row else None

    def card_by_message(self, chat_id: int, message_id: int) -> CardRow | None:
        row = self._one(
            "SELECT * FROM cards WHERE chat_id = ? AND message_id = ?", (chat_id, message_id)
        )
        return _card(row) if row else None

    def dirty_cards(self, chat_id: int, limit: int = 100) -> list[CardRow]:
        """Cards of a chat that do not show their current state yet, oldest first."""
        rows = self._all(
            "SELECT * FROM cards WHERE dirty > 0 AND chat_id = ? ORDER BY card_id LIMIT ?",
            (chat_id, limit),
        )
        return [_card(r) for r in rows]

    def chats_with_dirty_cards(self) -> list[int]:
        """Chats (not marked forbidden) with cards waiting to be posted or edited."""
        rows = self._all(
            "SELECT DISTINCT c.chat_id FROM cards c LEFT JOIN chats h ON h.chat_id = c.chat_id"
            " WHERE c.dirty > 0 AND coalesce(h.forbidden, 0) = 0"
        )
        return [int(r["chat_id"]) for r in rows]

    def card_posted(self, card_id: int, message_id: int, now_ms: int) -> None:
        self._run(
            "UPDATE cards SET message_id = ?, posted_at = ? WHERE card_id = ?",
            (message_id, now_ms, card_id),
        )

    def card_clear_topic(self, card_id: int) -> None:
        """Post the card in the chat itself (its forum topic is gone)."""
        self._run("UPDATE cards SET topic_id = NULL WHERE card_id = ?", (card_id,))

    def card_posted_reset(self, card_id: int) -> None:
        """The card's message is gone: post it again (with its attachment)."""
        self._run(
            "UPDATE cards SET message_id = NULL, attachment_sent = 0, dirty = dirty + 1"
            " WHERE card_id = ?",
            (card_id,),
        )

    def card_clean(self, card_id: int, generation: int) -> bool:
        """Mark a card as shown, unless it changed again since ``generation`` was read."""
        cursor = self._run(
            "UPDATE cards SET dirty = 0 WHERE card_id = ? AND dirty = ?", (card_id, generation)
        )
        return cursor.rowcount == 1

    def card_dirty(self, card_id: int) -> None:
        self._run("UPDATE cards SET dirty = dirty + 1 WHERE card_id = ?", (card_id,))

    def card_attachment_sent(self, card_id: int) -> None:
        self._run("UPDATE cards SET attachment_sent = 1 WHERE card_id = ?", (card_id,))

    def set_card_reminder(self, card_id: int, state: str) -> None:
        self._run("UPDATE cards SET reminder = ? WHERE card_id = ?", (state, card_id))

    def cards_due_reminder(self, now_ms: int) -> list[CardRow]:
        rows = self._all(
            "SELECT c.* FROM cards c JOIN items i"
            " ON i.agent_id = c.agent_id AND i.item_id = c.item_id"
            " WHERE i.state = 'open' AND i.remind_at IS NOT NULL AND i.remind_at <= ?"
            " AND c.reminder = 'none' AND c.message_id IS NOT NULL",
            (now_ms,),
        )
        return [_card(r) for r in rows]

    def next_reminder(self) -> int | None:
        row = self._one(
            "SELECT min(i.remind_at) AS t FROM cards c JOIN items i"
            " ON i.agent_id = c.agent_id AND i.item_id = c.item_id"
            " WHERE i.state = 'open' AND i.remind_at IS NOT NULL AND c.reminder = 'none'"
            " AND c.message_id IS NOT NULL"
        )
        return int(row["t"]) if row and row["t"] is not None else None

    # -- votes (quorum) and prompts ---------------------------------------------------------

    def votes(self, card_id: int) -> list[Vote]:
        rows = self._all(
            "SELECT user_id, name, at FROM votes WHERE card_id = ? ORDER BY at, user_id",
            (card_id,),
        )
        return [Vote(**dict(r)) for r in rows]

    def add_vote(self, card_id: int, user_id: int, name: str, at: int) -> None:
        self._run(
            "INSERT OR IGNORE INTO votes (card_id, user_id, name, at) VALUES (?, ?, ?, ?)",
            (card_id, user_id, name, at),
        )
        self.card_dirty(card_id)

    def remove_vote(self, card_id: int, user_id: int) -> None:
        self._run("DELETE FROM votes WHERE card_id = ? AND user_id = ?", (card_id, user_id))
        self.card_dirty(card_id)

    def add_prompt(
        self, chat_id: int, message_id: int, card_id: int, user_id: int
    ) -> None:
        self._run(
            "INSERT OR REPLACE INTO prompts (chat_id, message_id, card_id, user_id)"
            " VALUES (?, ?, ?, ?)",
            (chat_id, message_id, card_id, user_id),
        )

    def prompt(self, chat_id: int, message_id: int) -> tuple[int, int] | None:
        """(card_id, user_id) of a deny-reason prompt (a ForceReply) the bot sent."""
        row = self._one(
            "SELECT card_id, user_id FROM prompts WHERE chat_id = ? AND message_id = ?",
            (chat_id, message_id),
        )
        return (int(row["card_id"]), int(row["user_id"])) if row else None

    # -- decisions --------------------------------------------------------------------------

    def add_decision(self, decision: DecisionRow) -> None:
        self._run(
            "INSERT INTO decisions (decision_id, agent_id, item_id, chat_id, kind, value,"
            " reason, user_id, user_name, at, envelope_id)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                decision.decision_id,
                decision.agent_id,
                decision.item_id,
                decision.chat_id,
                decision.kind,
                decision.value,
                decision.reason,
                decision.user_id,
                decision.user_name,
                decision.at,
                decision.envelope_id,
            ),
        )

    def decision_by_envelope(self, envelope_id: str) -> DecisionRow | None:
        row = self._one("SELECT * FROM decisions WHERE envelope_id = ?", (envelope_id,))
        return DecisionRow(**dict(row)) if row else None

    # -- pairings in progress and known users ----------------------------------------------

    def add_pairing(
        self,
        agent_id: str,
        relay_url: str,
        card_json: str,
        *,
        chat_id: int,
        topic_id: int | None,
        requested_by: int | None,
        now_ms: int,
    ) -> None:
        self._run(
            "INSERT OR REPLACE INTO pairings (agent_id, relay_url, card_json, chat_id, topic_id,"
            " requested_by, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (agent_id, relay_url, card_json, chat_id, topic_id, requested_by, now_ms),
        )

    def pending_pairings(self, since_ms: int) -> list[Pairing]:
        """Pairings started at or after ``since_ms`` that the agent has not accepted yet."""
        rows = self._all(
            "SELECT * FROM pairings WHERE accepted_at IS NULL AND created_at >= ?"
            " ORDER BY created_at",
            (since_ms,),
        )
        return [Pairing(**dict(row)) for row in rows]

    def pairing(self, agent_id: str) -> Pairing | None:
        row = self._one("SELECT * FROM pairings WHERE agent_id = ?", (agent_id,))
        return Pairing(**dict(row)) if row else None

    def pairing_accepted(self, agent_id: str, now_ms: int) -> None:
        self._run(
            "UPDATE pairings SET accepted_at = ? WHERE agent_id = ?", (now_ms, agent_id)
        )

    def note_user(self, user_id: int, name: str, username: str | None) -> None:
        self._run(
            "INSERT INTO users (user_id, name, username) VALUES (?, ?, ?) ON CONFLICT (user_id)"
            " DO UPDATE SET name = excluded.name, username = excluded.username"
            " WHERE name != excluded.name OR username IS NOT excluded.username",
            (user_id, name, username),
        )

    def user_name(self, user_id: int) -> str | None:
        row = self._one("SELECT name FROM users WHERE user_id = ?", (user_id,))
        return str(row["name"]) if row else None

    # -- the durable inbox of Telegram updates (bot.tg.update_inbox) -----------------------

    def updates_add(self, update_id: int, body: str) -> None:
        """Hold an update fetched from Telegram (a copy delivered again is ignored)."""
        self._run("INSERT OR IGNORE INTO updates (update_id, body) VALUES (?, ?)",
                  (update_id, body))

    def updates_pending(self, limit: int = 100) -> list[tuple[int, str]]:
        """Updates held and not handled yet, oldest first."""
        rows = self._all("SELECT update_id, body FROM updates WHERE done = 0"
                         " ORDER BY update_id LIMIT ?", (limit,))
        return [(int(r["update_id"]), str(r["body"])) for r in rows]

    def update_done(self, update_id: int) -> None:
        self._run("UPDATE updates SET done = 1, body = '' WHERE update_id = ?", (update_id,))

    def updates_next_offset(self) -> int | None:
        """The ``getUpdates`` offset that confirms every update held (None: none held)."""
        row = self._one("SELECT max(update_id) AS m FROM updates")
        return int(row["m"]) + 1 if row and row["m"] is not None else None

    def updates_prune(self) -> None:
        """Forget handled updates but the newest (it keeps the offset)."""
        self._run("DELETE FROM updates WHERE done = 1 AND update_id <"
                  " (SELECT max(update_id) FROM updates)")

    # -- audit (append-only) ----------------------------------------------------------------

    def audit(
        self,
        event: str,
        *,
        at: int,
        chat_id: int | None = None,
        agent_id: str | None = None,
        item_id: str | None = None,
        user_id: int | None = None,
        user_name: str | None = None,
        **detail: object,
    ) -> None:
        self._run(
            "INSERT INTO audit (at, event, chat_id, agent_id, item_id, user_id, user_name,"
            " detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (at, event, chat_id, agent_id, item_id, user_id, user_name,
             json.dumps(detail, ensure_ascii=False, sort_keys=True)),
        )

    def audit_rows(
        self,
        *,
        chat_id: int | None = None,
        since_ms: int | None = None,
        events: tuple[str, ...] | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[AuditRow]:
        where: list[str] = ["1 = 1"]
        params: list[object] = []
        if chat_id is not None:
            # A record about an item without a chat of its own (it expired, or was
            # resolved elsewhere) belongs to every chat the item was shown in.
            chat_ids = [chat_id, *self.former_chat_ids(chat_id)]
            marks = ", ".join("?" for _ in chat_ids)
            where.append(
                f"(chat_id IN ({marks}) OR (chat_id IS NULL AND item_id IS NOT NULL AND EXISTS"
                " (SELECT 1 FROM cards c WHERE c.agent_id = audit.agent_id"
                f" AND c.item_id = audit.item_id AND c.chat_id IN ({marks}))))"
            )
            params.extend(chat_ids * 2)
        if since_ms is not None:
            where.append("at >= ?")
            params.append(since_ms)
        if events:
            where.append(f"event IN ({', '.join('?' for _ in events)})")
            params.extend(events)
        order = "DESC" if newest_first else "ASC"
        sql = f"SELECT * FROM audit WHERE {' AND '.join(where)} ORDER BY seq {order}"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        rows = self._all(sql, tuple(params))
        return [
            AuditRow(
                seq=r["seq"], at=r["at"], event=r["event"], chat_id=r["chat_id"],
                agent_id=r["agent_id"], item_id=r["item_id"], user_id=r["user_id"],
                user_name=r["user_name"], detail=json.loads(r["detail"]),
            )
            for r in rows
        ]


class _StoreReplayGuard:
    """Adapts :class:`Store` to the protocol core's ``ReplayGuard``."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def seen(self, envelope_id: str) -> bool:
        return self._store.replay_seen(envelope_id)


def is_store_failure(error: BaseException) -> bool:
    """Whether ``error`` is the database failing (locked, full, I/O), as opposed to data it
    refused (a constraint, a value out of range): only the first is worth retrying."""
    if not isinstance(error, StoreError):
        return False
    cause = error.__cause__
    return not isinstance(cause, sqlite3.IntegrityError | sqlite3.DataError
                          | sqlite3.InterfaceError | sqlite3.ProgrammingError)


def _create_private(path: Path) -> None:
    """Create the database file 0600 in a 0700 folder before SQLite does, so decrypted
    items are never readable by others (SQLite gives ``-wal`` and ``-shm`` the same mode)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def _card(row: sqlite3.Row) -> CardRow:
    values = dict(row)
    values["attachment_sent"] = bool(values["attachment_sent"])
    return CardRow(**values)
