"""A store that fails while the process runs: logged as ERROR with its cause at most once
a minute (on the injected clock), reported by ``skald-telegram health`` from the running
bot's status file, and back to ok once a write succeeds.

The store is made to fail with ``PRAGMA max_page_count``: SQLite then answers every write
that needs a new page with ``SQLITE_FULL``, as on a full disk.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from conftest import eventually
from test_unusable_state import unshare_command
from world import ADA, approval, make_world, running_bot

from bot.errors import StoreError
from bot.health import check_status, write_status
from bot.store import Store
from bot.storefaults import LOG_EVERY_S, QUIET_S, StoreHealth
from bot.testing.clock import ShiftedClock

ROOT = Path(__file__).resolve().parent.parent


def disk_full(store: Store) -> None:
    """From now on, a write that needs one more page of the file fails: SQLITE_FULL (the
    file is first compacted, so that no free page is left in it)."""
    store.db.run("VACUUM")
    (pages,) = store.db.one("PRAGMA page_count") or (0,)
    store.db.run(f"PRAGMA max_page_count = {pages}")


def large_approval(item_id: str) -> dict[str, object]:
    """An approval whose arguments need new pages of the file to be stored."""
    return approval(item_id, arguments={"to": "mario@acme.com", "body": "x" * 20_000})


def space_again(store: Store) -> None:
    store.db.run("PRAGMA max_page_count = 1073741823")


def fill(store: Store, rows: int = 1) -> None:
    """Writes that need new pages (the audit trail grows)."""
    for _ in range(rows):
        store.audit.append("test", at=0, padding="x" * 5000)


def full_error(tmp: Path) -> sqlite3.Error:
    db = sqlite3.connect(tmp / "full.sqlite3")
    db.execute("PRAGMA max_page_count = 1")
    try:
        db.execute("CREATE TABLE t (x)")
    except sqlite3.Error as exc:
        return exc
    raise AssertionError("the write did not fail")


def errors(caplog: pytest.LogCaptureFixture, logger: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == logger and r.levelno == logging.ERROR]


def test_failures_are_logged_with_their_cause_at_most_once_a_minute(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ShiftedClock()
    changes: list[str] = []
    health = StoreHealth("the test store", logging.getLogger("test.store"), clock=clock,
                         on_change=lambda: changes.append(health.summary()))
    error = full_error(tmp_path)
    started = clock.time()
    failing = f"failing since {datetime.fromtimestamp(started, UTC):%H:%M} UTC " \
              "(database or disk is full)"
    with caplog.at_level(logging.INFO, logger="test.store"):
        health.failed(error)
        for _ in range(5):
            clock.advance(10)
            health.failed(error)
        assert errors(caplog, "test.store") == ["the test store is failing: database or disk "
                                                "is full"]
        assert health.summary() == failing
        assert health.status() == {"failing_since": pytest.approx(started, abs=1),
                                   "cause": "database or disk is full"}
        clock.advance(LOG_EVERY_S - 50)
        health.failed(error)
        assert errors(caplog, "test.store")[1:] == [
            "the test store is failing: database or disk is full (6 failures in the last 60 s)"]

        health.wrote()  # one write that succeeds is not yet the store back
        assert health.summary() == failing
        clock.advance(QUIET_S)
        assert health.summary() == "ok" and health.status()["failing_since"] is None
        assert "the test store writes again (it failed for 60 s)" in caplog.text

        # A store that fails now and then is failing, and logged no more often.
        for _ in range(5):
            clock.advance(5)
            health.failed(error)
            health.wrote()
        assert health.summary().startswith("failing since")
        assert len(errors(caplog, "test.store")) == 2
    # Told of each change, to rewrite the status file at once.
    assert changes == [failing, "ok", health.summary()]


def test_the_database_counts_failures_of_the_store_not_of_the_data(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "state.sqlite3")
    try:
        with pytest.raises(StoreError):
            store.db.run("INSERT INTO users (user_id, name) VALUES (1, NULL)")
        assert store.db.health.failing_since is None  # a constraint: the data, not the store
        disk_full(store)
        with pytest.raises(StoreError):
            fill(store, 20)
        assert store.db.health.cause == "database or disk is full"
        with pytest.raises(StoreError), store.transaction():
            fill(store, 20)
        assert store.db.health.failing_since is not None
        space_again(store)
        store.db.one("SELECT COUNT(*) FROM audit")  # a read says nothing of writes
        store.db.health.clock = clock = ShiftedClock()
        clock.advance(QUIET_S)
        assert store.db.health.failing_since is not None
        with store.transaction():
            fill(store)
        assert store.db.health.summary() == "ok"
    finally:
        store.close()


def test_a_transaction_that_sqlite_rolled_back_goes_no_further(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "state.sqlite3")
    try:
        count = "SELECT COUNT(*) FROM audit"
        before = store.db.one(count)[0]  # type: ignore[index]
        disk_full(store)
        with pytest.raises(StoreError, match="transaction in progress was rolled back"), \
                store.transaction():
            store.audit.append("first", at=0)
            with pytest.raises(StoreError, match="database or disk is full"), \
                    store.savepoint():  # as one envelope of a delivery is applied
                fill(store, 20)
            store.audit.append("after", at=0)  # would commit by itself
        space_again(store)
        assert store.db.one(count)[0] == before  # type: ignore[index]
    finally:
        store.close()


def health_command(config: Path, tmp: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bot", "health", "--config", str(config)],
                          cwd=tmp, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


async def test_health_reports_a_failing_store_of_the_running_bot_until_it_writes_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from test_health_status import write_config

    async with make_world(tmp_path) as world, running_bot(world) as running:
        config = write_config(tmp_path, world.tg.api_url)
        await world.pair(ADA)
        world.agent.submit_approval(approval("apr_before"))
        await world.wait_card(ADA, "apr_before")
        status = world.config.status_path
        await eventually(lambda: check_status(status)[0])

        with caplog.at_level(logging.ERROR, logger="bot.store.db"):
            disk_full(running.store)
            for number in range(3):  # the agent's updates cannot be stored
                world.agent.submit_approval(large_approval(f"apr_full_{number}"))
            await eventually(lambda: not check_status(status)[0], timeout=20)
            _, detail = check_status(status)
            assert detail.startswith("store: failing since ")
            assert detail.endswith(" UTC (database or disk is full)")
            result = await asyncio.to_thread(health_command, config, tmp_path)
            assert result.returncode == 1 and result.stdout.strip() == detail
            await asyncio.sleep(0.5)
            failures = errors(caplog, "bot.store.db")
            assert failures == [f"the state database {running.store.path} is failing: "
                                "database or disk is full"]

            world.clock.advance(LOG_EVERY_S)
            world.agent.submit_approval(large_approval("apr_full_later"))
            await eventually(lambda: len(errors(caplog, "bot.store.db")) == 2)
            assert failures[0] in errors(caplog, "bot.store.db")[1]

        space_again(running.store)
        world.agent.submit_approval(approval("apr_after"))
        await world.wait_card(ADA, "apr_after", timeout=20)
        world.clock.advance(QUIET_S)  # and no write failed meanwhile
        world.agent.submit_approval(approval("apr_after_quiet"))
        await world.wait_card(ADA, "apr_after_quiet", timeout=20)
        await eventually(lambda: check_status(status)[0])
        result = await asyncio.to_thread(health_command, config, tmp_path)
        assert result.returncode == 0, result.stdout


def test_a_full_disk_still_lets_the_status_file_say_so(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    write_status(state / "status.json", {"pid": os.getpid(), "store": {"failing_since": None}})
    script = ("import sys; from pathlib import Path; from bot.health import write_status;"
              "write_status(Path(sys.argv[1]), {'pid': 1, 'store': {'failing_since': 60.0,"
              " 'cause': 'database or disk is full'}})")
    # The status file as the bot left it, on a tmpfs that is then filled.
    saved = tmp_path / "saved.json"
    fill_then_write = (
        f'cp "$0/status.json" {saved} && mount -t tmpfs -o size=64k,mode=0700 tmpfs "$0"'
        f' && cp {saved} "$0/status.json" && (head -c 1048576 /dev/zero > "$0/filler";'
        ' true) 2> /dev/null && "$@" && ! test -e "$0/status.tmp" && cat "$0/status.json"')
    result = subprocess.run(
        unshare_command(fill_then_write, state,
                        [sys.executable, "-c", script, str(state / "status.json")]),
        capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    assert '"cause": "database or disk is full"' in result.stdout


async def test_the_relay_reports_a_failing_queue_on_its_health_path(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from test_relay_server import envelope, send, session

    from bot.protocol.identity import Identity
    from bot.relay.queue import DB_NAME
    from bot.relay.server import RelayServer

    alice, bob = Identity.generate("alice"), Identity.generate("bob")
    clock = ShiftedClock()
    async with RelayServer(tmp_path / "relay", clock=clock) as relay, \
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{relay.port}") as http:
        assert (await http.get("/health")).text == "ok\n"
        ws = await session(relay.url, alice)

        async def sent(number: int) -> dict[str, object]:
            env = envelope(alice, bob, number)
            await send(ws, {"type": "send", "envelope": env})
            async with asyncio.timeout(20):  # a write waits 5 s for the lock
                answer: dict[str, object] = json.loads(await ws.recv())
            return answer

        # Another process holds the queue's write lock: each write fails after waiting.
        blocker = sqlite3.connect(tmp_path / "relay" / DB_NAME, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        with caplog.at_level(logging.ERROR, logger="bot.relay.server"):
            for number in range(2):
                assert (await sent(number))["type"] == "error"
        assert errors(caplog, "bot.relay.server") == [
            "the relay queue is failing: database is locked"]
        answer = await http.get("/health")
        assert answer.status_code == 503
        assert answer.text.startswith("store: failing since ")
        assert answer.text.endswith(" UTC (database is locked)\n")

        blocker.rollback()
        blocker.close()
        assert (await sent(3))["type"] == "sent"
        assert (await http.get("/health")).status_code == 503  # not yet a quiet spell
        clock.advance(QUIET_S)
        assert (await sent(4))["type"] == "sent"
        assert (await http.get("/health")).text == "ok\n"
        assert "the relay queue writes again" in caplog.text
        await ws.close()


def test_the_agent_host_store_logs_its_failures_once_and_recovers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from bot.agenthost.store import DB_NAME, AgentStore

    store = AgentStore(tmp_path / "agent")
    store.health.clock = clock = ShiftedClock()
    blocker = sqlite3.connect(tmp_path / "agent" / DB_NAME, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        with caplog.at_level(logging.INFO, logger="bot.agenthost.store"):
            with pytest.raises(StoreError, match="database is locked"):
                store.set_meta("relay_url", "ws://127.0.0.1:9/v1/connect")
            assert errors(caplog, "bot.agenthost.store") == [
                "the agent host's database is failing: database is locked"]
            blocker.rollback()
            clock.advance(QUIET_S)
            with store.transaction():
                store.set_meta("relay_url", "ws://127.0.0.1:9/v1/connect")
            assert store.health.summary() == "ok"
        assert "the agent host's database writes again" in caplog.text
    finally:
        blocker.close()
        store.close()
