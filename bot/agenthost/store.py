"""The agent host's durable state: one SQLite file (WAL) in a 0700 folder, files 0600.

It holds the identity, the relay URL and name, ``rev``, the paired devices, the one-time
pairing secrets, every item with its outcome (and the arguments a person approved after
editing them), the grants (:mod:`bot.agenthost.grantstore`), the outbox, the replay set,
and every decision and answer received (refused ones too, with why). One process writes
it: the host. Each change of the service runs in one :meth:`AgentStore.transaction`, so a
SIGKILL leaves either all of it or none.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import stat
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Final

from bot import durable
from bot.agenthost.grants import Offer
from bot.agenthost.grantstore import GrantStore
from bot.agenthost.items import Ended, Item, Kind, State
from bot.agenthost.pairing import PairingSecret
from bot.durable import Place, Step, open_sqlite
from bot.errors import IdentityError, StoreError, store_error
from bot.protocol.encoding import b64u_decode, b64u_encode
from bot.protocol.identity import Identity, PublicCard
from bot.storefaults import StoreHealth, describe_folder

log = logging.getLogger(__name__)

DB_NAME: Final = "agent.sqlite3"
WHAT: Final = "the agent host's state folder"
SETTING: Final = "--state (or $SKALD_AGENT_STATE)"
PLACE: Final = Place("the agent host's database", WHAT, SETTING)

_MIGRATIONS: Final[tuple[Step, ...]] = (
    (
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        """CREATE TABLE devices (
            device_id TEXT PRIMARY KEY,
            card_json TEXT NOT NULL,
            platform TEXT,
            paired_at INTEGER NOT NULL
        )""",
        """CREATE TABLE pairing_secrets (
            pairing_id TEXT PRIMARY KEY,
            secret TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            expires_at INTEGER NOT NULL,
            used_at INTEGER,
            device_id TEXT
        )""",
        """CREATE TABLE items (
            item_id TEXT PRIMARY KEY,
            kind TEXT NOT NULL,
            wire_json TEXT NOT NULL,
            args_sha256 TEXT,
            grant_key TEXT,
            grant_label TEXT,
            state TEXT NOT NULL,
            reason TEXT,
            decided_by_json TEXT,
            answer TEXT,
            created_at INTEGER NOT NULL,
            expires_at INTEGER NOT NULL,
            resolved_at INTEGER
        )""",
        "CREATE INDEX items_state ON items (state, expires_at)",
        "CREATE INDEX items_resolved ON items (resolved_at)",
        """CREATE TABLE outbox (
            envelope_id TEXT PRIMARY KEY,
            relay_url TEXT NOT NULL,
            envelope_json TEXT NOT NULL,
            created_at INTEGER NOT NULL
        )""",
        "CREATE TABLE replay (envelope_id TEXT PRIMARY KEY, ts INTEGER NOT NULL)",
        "CREATE INDEX replay_ts ON replay (ts)",
        """CREATE TABLE received (
            envelope_id TEXT PRIMARY KEY,
            device_id TEXT NOT NULL,
            item_id TEXT NOT NULL,
            kind TEXT NOT NULL,
            payload_json TEXT NOT NULL,
            verdict TEXT NOT NULL,
            at INTEGER NOT NULL
        )""",
    ),
    (
        """CREATE TABLE grants (
            grant_id TEXT PRIMARY KEY,
            key TEXT NOT NULL,
            label TEXT NOT NULL,
            granted_by_json TEXT NOT NULL,
            granted_at INTEGER NOT NULL,
            expires_at INTEGER NOT NULL,
            uses INTEGER NOT NULL DEFAULT 0,
            ended_at INTEGER,
            item_id TEXT NOT NULL
        )""",
        "CREATE INDEX grants_key ON grants (key, expires_at)",
    ),
    ("ALTER TABLE items ADD COLUMN edited_json TEXT",),
    ("ALTER TABLE devices ADD COLUMN last_seen INTEGER",),
    (
        # The order items ended in, from 1; NULL for items that ended before this version
        # (updates list those by their time until a device has been told of the first).
        "ALTER TABLE items ADD COLUMN ended_seq INTEGER",
        "CREATE UNIQUE INDEX items_ended ON items (ended_seq)",
    ),
)
SCHEMA_VERSION: Final = len(_MIGRATIONS)
"""The ``user_version`` of an up-to-date file."""


def private_folder(path: Path) -> Path:
    """Create ``path`` with mode 0700 if needed; refuse one that others can open, or that
    this process cannot write in (saying why: read-only, full, someone else's)."""
    durable.private_folder(path, PLACE)
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError as exc:
        raise StoreError(unusable_folder(path, exc)) from exc
    if mode & 0o077:
        raise StoreError(f"the state folder {path} is open to group or others (mode "
                         f"{mode:04o}); fix it with: chmod 700 {path}")
    return path


def unusable_folder(path: Path, error: OSError) -> str:
    """One line for the host's state folder at ``path`` that ``error`` made unusable."""
    return str(describe_folder(WHAT, path, error, setting=SETTING))


class AgentStore:
    """The host's SQLite store; every method is one statement or one transaction."""

    def __init__(self, folder: Path) -> None:
        private_folder(folder)
        self.path = folder / DB_NAME
        self.health = StoreHealth("the agent host's database", log)
        """Whether writes succeed; the failures of the store itself are logged there."""
        self._db = open_sqlite(self.path, PLACE, _MIGRATIONS, pragmas=("foreign_keys=ON",))
        self.grants = GrantStore(self._execute)
        """The grants people gave, in the same database and transactions."""

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def transaction(self, *, durable: bool = True) -> Iterator[None]:
        """One atomic change: committed when the block ends, rolled back if it raises (or
        if the commit fails: nothing of it is kept).

        A durable commit waits for the disk. One that is not survives a killed process but
        may be lost with the machine's power (it becomes durable with the next durable
        commit): for what only records what was done already, or what a durable commit
        before it will make be done again."""
        if not durable:
            self._execute("PRAGMA synchronous=NORMAL")
        try:
            self._execute("BEGIN IMMEDIATE")
            changes = self._db.total_changes
            try:
                yield
                self._execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:  # SQLite ends it itself on a full disk or I/O
                    with suppress(sqlite3.Error):
                        self._db.execute("ROLLBACK")
                raise
        finally:
            if not durable:
                with suppress(sqlite3.Error):
                    self._db.execute("PRAGMA synchronous=FULL")
        if self._db.total_changes != changes:
            self.health.wrote()

    def _execute(self, sql: str, params: tuple[Any, ...] = ()) -> sqlite3.Cursor:
        try:
            changes = self._db.total_changes  # raises once the store is closed
            cursor = self._db.execute(sql, params)
        except sqlite3.Error as exc:
            self.health.failed(exc)
            raise store_error(f"{self.path}: {exc}", exc) from exc
        if not self._db.in_transaction and self._db.total_changes != changes:
            self.health.wrote()  # a write that committed by itself
        return cursor

    # -- meta -------------------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        row = self._execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        self._execute(
            "INSERT INTO meta (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    def forget_meta(self, key: str) -> None:
        self._execute("DELETE FROM meta WHERE key = ?", (key,))

    def load_identity(self) -> Identity | None:
        text = self.get_meta("identity")
        if text is None:
            return None
        try:
            return Identity.from_private_json(json.loads(text))
        except (ValueError, IdentityError) as exc:
            raise StoreError(f"{self.path}: the stored identity is unreadable: {exc}") from exc

    def save_identity(self, identity: Identity) -> None:
        self.set_meta("identity", json.dumps(identity.to_private_json()))

    def next_rev(self, floor: int) -> int:
        """A ``rev`` greater than every earlier one and at least ``floor`` (the clock)."""
        last = int(self.get_meta("rev") or 0)
        rev = max(last + 1, floor)
        self.set_meta("rev", str(rev))
        return rev

    # -- devices ----------------------------------------------------------------------

    def add_device(self, card: PublicCard, platform: str | None, now_ms: int) -> None:
        self._execute(
            "INSERT INTO devices (device_id, card_json, platform, paired_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (device_id) DO UPDATE SET card_json = excluded.card_json, "
            "platform = excluded.platform",
            (card.id, json.dumps(card.to_json()), platform, now_ms),
        )

    def devices(self) -> list[tuple[PublicCard, str | None, int]]:
        rows = self._execute(
            "SELECT card_json, platform, paired_at FROM devices ORDER BY paired_at"
        ).fetchall()
        return [(PublicCard.from_json(json.loads(r[0])), r[1], int(r[2])) for r in rows]

    def device_seen(self, device_id: str, now_ms: int) -> None:
        """Record that a paired device was heard from: an envelope or a delivery receipt."""
        self._execute(
            "UPDATE devices SET last_seen = MAX(COALESCE(last_seen, 0), ?) WHERE device_id = ?",
            (now_ms, device_id),
        )

    def last_seen(self) -> dict[str, int]:
        """When each paired device was last heard from (devices never heard from: absent)."""
        rows = self._execute(
            "SELECT device_id, last_seen FROM devices WHERE last_seen IS NOT NULL"
        ).fetchall()
        return {str(row[0]): int(row[1]) for row in rows}

    def remove_device(self, device_id: str) -> bool:
        return self._execute("DELETE FROM devices WHERE device_id = ?", (device_id,)).rowcount > 0

    # -- pairing secrets --------------------------------------------------------------

    def add_secret(self, secret: PairingSecret) -> None:
        self._execute(
            "INSERT INTO pairing_secrets (pairing_id, secret, created_at, expires_at) "
            "VALUES (?, ?, ?, ?)",
            (secret.pairing_id, b64u_encode(secret.secret), secret.created_ms, secret.expires_ms),
        )

    def secrets(self) -> list[PairingSecret]:
        rows = self._execute(
            "SELECT pairing_id, secret, created_at, expires_at, used_at, device_id "
            "FROM pairing_secrets ORDER BY created_at DESC"
        ).fetchall()
        return [_secret(row) for row in rows]

    def secret(self, pairing_id: str) -> PairingSecret | None:
        row = self._execute(
            "SELECT pairing_id, secret, created_at, expires_at, used_at, device_id "
            "FROM pairing_secrets WHERE pairing_id = ?",
            (pairing_id,),
        ).fetchone()
        return None if row is None else _secret(row)

    def use_secret(self, pairing_id: str, device_id: str, now_ms: int) -> None:
        self._execute(
            "UPDATE pairing_secrets SET used_at = ?, device_id = ? WHERE pairing_id = ?",
            (now_ms, device_id, pairing_id),
        )

    def forget_secrets(self, before_ms: int) -> None:
        """Drop secrets used or expired before ``before_ms``."""
        self._execute(
            "DELETE FROM pairing_secrets WHERE COALESCE(used_at, expires_at) < ?", (before_ms,)
        )

    # -- items ------------------------------------------------------------------------

    def add_item(self, item: Item, grant_key: str | None, grant_label: str | None) -> None:
        self._execute(
            "INSERT INTO items (item_id, kind, wire_json, args_sha256, grant_key, grant_label, "
            "state, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                item.item_id,
                item.kind.value,
                json.dumps(item.wire, ensure_ascii=False),
                item.args_sha256,
                grant_key,
                grant_label,
                item.state.value,
                item.created_ms,
                item.expires_ms,
            ),
        )

    def save_outcome(self, item: Item) -> None:
        """Save how an item stands; one that has ended gets the next place in the order
        items ended (kept from its first save as ended)."""
        self._execute(
            "UPDATE items SET state = ?1, reason = ?2, decided_by_json = ?3, answer = ?4, "
            "resolved_at = ?5, edited_json = ?6, ended_seq = CASE "
            "WHEN ?5 IS NULL THEN NULL WHEN ended_seq IS NOT NULL THEN ended_seq "
            "ELSE (SELECT COALESCE(MAX(ended_seq), 0) + 1 FROM items) END "
            "WHERE item_id = ?7",
            (
                item.state.value,
                item.reason,
                None if item.decided_by is None else json.dumps(item.decided_by),
                item.answer,
                item.resolved_ms,
                None if item.edited is None else json.dumps(item.edited, ensure_ascii=False),
                item.item_id,
            ),
        )

    def item(self, item_id: str) -> Item | None:
        row = self._execute(f"SELECT {_ITEM_COLUMNS} FROM items WHERE item_id = ?",
                            (item_id,)).fetchone()
        return None if row is None else _item(row)

    def open_items(self) -> list[Item]:
        rows = self._execute(
            f"SELECT {_ITEM_COLUMNS} FROM items WHERE state = 'pending' ORDER BY created_at"
        ).fetchall()
        return [_item(row) for row in rows]

    def open_load(self) -> tuple[int, int]:
        """How many items are open, and the bytes of their wire JSON."""
        row = self._execute(
            "SELECT COUNT(*), COALESCE(SUM(LENGTH(CAST(wire_json AS BLOB))), 0) FROM items "
            "WHERE state = 'pending'"
        ).fetchone()
        return int(row[0]), int(row[1])

    def recently_ended(self, limit: int, *, after: int | None = None) -> list[Ended]:
        """The ``limit`` items that ended last, newest first, as an update lists them (their
        arguments are not read); with ``after``, only those that ended after the item at
        that place in the order items ended (:meth:`last_ended`)."""
        columns = ("item_id, state, json_extract(decided_by_json, '$.name'), resolved_at, "
                   "edited_json IS NOT NULL")
        if after is None:
            rows = self._execute(
                f"SELECT {columns} FROM items WHERE resolved_at IS NOT NULL "
                "ORDER BY resolved_at DESC, ended_seq DESC LIMIT ?", (limit,)).fetchall()
        else:
            rows = self._execute(
                f"SELECT {columns} FROM items WHERE ended_seq > ? "
                "ORDER BY ended_seq DESC LIMIT ?", (after, limit)).fetchall()
        return [Ended(row[0], State(row[1]), row[2], int(row[3]), bool(row[4])) for row in rows]

    def last_ended(self) -> int:
        """The place of the item that ended last in the order items ended (0: none yet)."""
        return int(self._execute("SELECT COALESCE(MAX(ended_seq), 0) FROM items")
                   .fetchone()[0])

    def next_expiry(self) -> int | None:
        row = self._execute("SELECT MIN(expires_at) FROM items WHERE state = 'pending'").fetchone()
        return None if row[0] is None else int(row[0])

    def item_offer(self, item_id: str) -> Offer | None:
        """The grant an approval offered, if any (its key and label as stored)."""
        row = self._execute("SELECT grant_key, grant_label FROM items WHERE item_id = ?",
                            (item_id,)).fetchone()
        if row is None or not row[0]:
            return None
        return Offer(row[0], row[1] or row[0])

    # -- decisions and answers received -----------------------------------------------

    def record_received(
        self, envelope_id: str, device_id: str, item_id: str, kind: str, payload: bytes,
        verdict: str, now_ms: int,
    ) -> None:
        self._execute(
            "INSERT OR IGNORE INTO received (envelope_id, device_id, item_id, kind, payload_json, "
            "verdict, at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (envelope_id, device_id, item_id, kind, payload.decode("utf-8"), verdict, now_ms),
        )

    def received(self, item_id: str) -> list[tuple[str, str]]:
        """``(kind, verdict)`` of every decision or answer received for an item."""
        rows = self._execute(
            "SELECT kind, verdict FROM received WHERE item_id = ? ORDER BY at", (item_id,)
        ).fetchall()
        return [(str(r[0]), str(r[1])) for r in rows]

    # -- outbox and replay set --------------------------------------------------------

    def add_outgoing(self, relay_url: str, envelope: dict[str, object], now_ms: int) -> None:
        self._execute(
            "INSERT INTO outbox (envelope_id, relay_url, envelope_json, created_at) "
            "VALUES (?, ?, ?, ?)",
            (str(envelope["id"]), relay_url, json.dumps(envelope), now_ms),
        )

    def outbox_pending(self, relay_url: str) -> list[dict[str, object]]:
        rows = self._execute(
            "SELECT envelope_json FROM outbox WHERE relay_url = ? ORDER BY rowid", (relay_url,)
        ).fetchall()
        return [json.loads(row[0]) for row in rows]

    def outbox_mark_sent(self, envelope_id: str) -> None:
        self._execute("DELETE FROM outbox WHERE envelope_id = ?", (envelope_id,))

    def outbox_forget(self, envelope_ids: Iterable[str]) -> None:
        """Delete the outbox rows of envelopes the relay took (inside a transaction)."""
        for envelope_id in envelope_ids:
            self.outbox_mark_sent(envelope_id)

    def outbox_size(self) -> int:
        return int(self._execute("SELECT COUNT(*) FROM outbox").fetchone()[0])

    def seen(self, envelope_id: str) -> bool:
        row = self._execute("SELECT 1 FROM replay WHERE envelope_id = ?", (envelope_id,))
        return row.fetchone() is not None

    def remember(self, envelope_id: str, ts_ms: int) -> None:
        self._execute("INSERT OR IGNORE INTO replay (envelope_id, ts) VALUES (?, ?)",
                      (envelope_id, ts_ms))

    def forget_replay(self, before_ms: int) -> None:
        self._execute("DELETE FROM replay WHERE ts < ?", (before_ms,))


_ITEM_COLUMNS: Final = (
    "item_id, kind, wire_json, args_sha256, created_at, expires_at, state, reason, "
    "decided_by_json, answer, resolved_at, edited_json"
)


def _item(row: tuple[Any, ...]) -> Item:
    return Item(
        item_id=row[0],
        kind=Kind(row[1]),
        wire=json.loads(row[2]),
        args_sha256=row[3],
        created_ms=int(row[4]),
        expires_ms=int(row[5]),
        state=State(row[6]),
        reason=row[7],
        decided_by=None if row[8] is None else json.loads(row[8]),
        answer=row[9],
        resolved_ms=None if row[10] is None else int(row[10]),
        edited=None if row[11] is None else json.loads(row[11]),
    )


def _secret(row: tuple[Any, ...]) -> PairingSecret:
    return PairingSecret(
        pairing_id=row[0],
        secret=b64u_decode(row[1]),
        created_ms=int(row[2]),
        expires_ms=int(row[3]),
        used_ms=None if row[4] is None else int(row[4]),
        device_id=row[5],
    )
