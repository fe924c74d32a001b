"""Every SQLite store opens the same way: files private from the start, the schema's version
in ``PRAGMA user_version``, migration steps in transactions, and files written by earlier
versions keep opening with their data.

``tests/data/formats/*-811d323.sqlite3.gz`` are files the bot, the relay and the agent
host wrote before their stores shared :mod:`bot.durable` (the bot kept its version in a
``meta`` table then), each with a little data in it.
"""

from __future__ import annotations

import gzip
import sqlite3
import stat
from pathlib import Path

import pytest

from bot import durable
from bot.agenthost.store import DB_NAME as AGENT_DB
from bot.agenthost.store import SCHEMA_VERSION as AGENT_VERSION
from bot.agenthost.store import AgentStore
from bot.errors import StoreError, StoreUnavailable
from bot.relay.queue import DB_NAME as QUEUE_DB
from bot.relay.queue import SCHEMA_VERSION as QUEUE_VERSION
from bot.relay.queue import RelayQueue
from bot.store import SCHEMA_VERSION, Store

FORMATS = Path(__file__).parent / "data" / "formats"
PLACE = durable.Place("the test database", "the test folder", "--test")


def old_file(path: Path, name: str) -> Path:
    """The file an earlier version wrote, as it left it (readable by others, as the relay
    left its queue)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.decompress((FORMATS / f"{name}-811d323.sqlite3.gz").read_bytes()))
    path.chmod(0o644)
    return path


def user_version(path: Path) -> int:
    db = sqlite3.connect(path)
    try:
        return int(db.execute("PRAGMA user_version").fetchone()[0])
    finally:
        db.close()


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_bots_old_file_opens_with_its_data_and_its_version_in_user_version(
    tmp_path: Path,
) -> None:
    path = old_file(tmp_path / "state" / "state.sqlite3", "bot")
    store = Store.open(path)
    try:
        assert [(r.event, r.detail) for r in store.audit.rows()] == [("tap", {"allowed": False})]
        assert store.chats.title(5) == "ops"
        assert store.db.schema_version() == SCHEMA_VERSION
        assert store.db.one("SELECT name FROM sqlite_master WHERE name = 'meta'") is None
    finally:
        store.close()
    assert mode(path) == 0o600
    reopened = Store.open(path)
    assert reopened.chats.title(5) == "ops"
    reopened.close()


def test_the_relays_old_queue_opens_with_its_envelopes(tmp_path: Path) -> None:
    path = old_file(tmp_path / QUEUE_DB, "relay")
    queue = RelayQueue.open(tmp_path)
    try:
        assert [(q.envelope_id, q.body) for q in queue.pending("alice")] == [
            ("e1", '{"id":"e1"}')]
    finally:
        queue.close()
    assert user_version(path) == QUEUE_VERSION
    assert mode(path) == 0o600


def test_the_agent_hosts_old_file_opens_with_its_state(tmp_path: Path) -> None:
    folder = tmp_path / "agent"
    folder.mkdir(mode=0o700)
    path = old_file(folder / AGENT_DB, "agent")
    store = AgentStore(folder)
    try:
        assert store.get_meta("rev") == "5"
        assert store.outbox_pending("wss://relay.example") == [{"id": "e1", "v": 1}]
        assert [item.edited for item in store.open_items()] == [
            None for _ in store.open_items()]  # the column edits are kept in was added
        assert store.last_seen() == {}  # devices gained a last-seen time, unknown yet
        assert store.last_ended() == 0  # items that ended before have no place in the order
    finally:
        store.close()
    assert user_version(path) == AGENT_VERSION
    assert mode(path) == 0o600


def test_new_files_are_private_from_the_start_with_their_version(tmp_path: Path) -> None:
    Store.open(tmp_path / "bot" / "state.sqlite3").close()
    RelayQueue.open(tmp_path / "relay").close()
    AgentStore(tmp_path / "agent").close()
    for folder, name, version in (("bot", "state.sqlite3", SCHEMA_VERSION),
                                  ("relay", QUEUE_DB, QUEUE_VERSION),
                                  ("agent", AGENT_DB, AGENT_VERSION)):
        assert mode(tmp_path / folder) == 0o700
        assert mode(tmp_path / folder / name) == 0o600
        assert user_version(tmp_path / folder / name) == version


def test_the_steps_a_file_needs_run_in_one_transaction_and_a_failure_leaves_it_as_it_was(
    tmp_path: Path,
) -> None:
    path = tmp_path / "db" / "test.sqlite3"
    durable.open_sqlite(path, PLACE, [("CREATE TABLE a (x INTEGER)",)]).close()
    steps: list[durable.Step] = [
        ("CREATE TABLE a (x INTEGER)",),
        ("INSERT INTO a VALUES (1)",),
        ("CREATE TABLE b (y INTEGER)", "INSERT INTO nowhere VALUES (3)"),
    ]
    with pytest.raises(StoreError, match="no such table: nowhere"):
        durable.open_sqlite(path, PLACE, steps)
    assert user_version(path) == 1
    connection = sqlite3.connect(path)
    assert connection.execute("SELECT x FROM a").fetchall() == []
    assert connection.execute("SELECT name FROM sqlite_master WHERE name = 'b'").fetchall() == []
    connection.close()
    steps[2] = ("CREATE TABLE b (y INTEGER)", "INSERT INTO b VALUES (3)")
    connection = durable.open_sqlite(path, PLACE, steps)
    assert connection.execute("SELECT x FROM a").fetchall() == [(1,)]
    assert connection.execute("SELECT y FROM b").fetchall() == [(3,)]
    assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    connection.close()
    assert user_version(path) == 3


def test_a_step_may_hold_a_semicolon_inside_a_statement(tmp_path: Path) -> None:
    path = tmp_path / "test.sqlite3"
    steps: list[durable.Step] = [(
        "CREATE TABLE log (x TEXT)",
        "CREATE TRIGGER keep BEFORE DELETE ON log BEGIN SELECT RAISE(ABORT, 'kept; always');"
        " END",
        "INSERT INTO log VALUES ('a; b')",
    )]
    connection = durable.open_sqlite(path, PLACE, steps)
    try:
        assert connection.execute("SELECT x FROM log").fetchall() == [("a; b",)]
        with pytest.raises(sqlite3.IntegrityError, match="kept; always"):
            connection.execute("DELETE FROM log")
    finally:
        connection.close()


def test_a_file_from_a_newer_version_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "test.sqlite3"
    durable.open_sqlite(path, PLACE, [("CREATE TABLE a (x)",), ()]).close()
    with pytest.raises(StoreError, match=r"written by a newer skald-telegram \(schema version "
                                         r"2; this one knows 1 at most\)"):
        durable.open_sqlite(path, PLACE, [("CREATE TABLE a (x)",)])


@pytest.mark.parametrize("store", ["bot", "relay", "agent"])
def test_each_store_says_the_same_of_a_file_that_is_not_a_database(
    tmp_path: Path, store: str
) -> None:
    folder = tmp_path / store
    folder.mkdir(mode=0o700)
    name = {"bot": "state.sqlite3", "relay": QUEUE_DB, "agent": AGENT_DB}[store]
    (folder / name).write_bytes(b"not a database, " * 512)
    with pytest.raises(StoreUnavailable, match=r"is not a SQLite database .*; fix: restore it"):
        if store == "bot":
            Store.open(folder / name)
        elif store == "relay":
            RelayQueue.open(folder)
        else:
            AgentStore(folder)
