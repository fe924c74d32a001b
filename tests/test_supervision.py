"""Every background task is supervised: a failure is restarted with backoff, repeated
failure stops the bot with an error, and the status file and ``health`` tell."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from pathlib import Path

import pytest
from conftest import eventually
from world import ADA, approval, make_world, running_bot

from bot.app import Bot, run_until_signalled
from bot.errors import BotFailed, StoreError, StoreUnavailable
from bot.health import RELAY_GRACE_S, check_status, write_status
from bot.supervisor import Supervisor


def fast_supervisor(max_failures: int = 5) -> Supervisor:
    return Supervisor(backoff_initial=0.02, backoff_max=0.1, max_failures=max_failures)


async def test_a_failing_task_is_restarted_and_one_that_keeps_failing_is_given_up() -> None:
    supervisor = fast_supervisor(max_failures=3)
    runs = {"flaky": 0, "broken": 0}

    async def flaky() -> None:
        runs["flaky"] += 1
        if runs["flaky"] <= 2:
            raise StoreError("database is locked")
        await asyncio.Event().wait()

    async def broken() -> None:
        runs["broken"] += 1
        raise RuntimeError("always")

    supervisor.start("flaky", flaky)
    await eventually(lambda: runs["flaky"] == 3)
    assert supervisor.states["flaky"].alive and supervisor.states["flaky"].restarts == 2
    assert not supervisor.failed.is_set()
    supervisor.start("broken", broken)
    await asyncio.wait_for(supervisor.failed.wait(), 5)
    assert runs["broken"] == 3
    assert supervisor.liveness()["broken"]["alive"] is False
    assert supervisor.reason is not None and "broken failed 3 times" in supervisor.reason
    await supervisor.stop()


async def test_a_task_stopped_by_an_unavailable_store_is_waited_for_not_given_up() -> None:
    supervisor = fast_supervisor(max_failures=2)
    runs = 0

    async def waiting_for_the_database() -> None:
        nonlocal runs
        runs += 1
        if runs <= 5:
            raise StoreUnavailable("cannot reach postgresql://bot@db/bot")
        await asyncio.Event().wait()

    supervisor.start("card worker", waiting_for_the_database)
    await eventually(lambda: runs == 6)
    assert not supervisor.failed.is_set() and supervisor.states["card worker"].alive
    await supervisor.stop()


def break_the_workers_query(database: Path) -> None:
    """Rename a column only the card worker's loop reads: its query fails (a StoreError)
    while agents' items are still stored."""
    with sqlite3.connect(database) as db:
        db.execute("ALTER TABLE chats RENAME COLUMN forbidden TO forbidden_away")


def mend_the_workers_query(database: Path) -> None:
    with sqlite3.connect(database) as db:
        db.execute("ALTER TABLE chats RENAME COLUMN forbidden_away TO forbidden")


async def test_the_card_worker_survives_a_store_error(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world:
        database = tmp_path / "state" / "skald-telegram.sqlite3"
        async with Bot(world.config, supervisor=fast_supervisor(max_failures=1000)) as running:
            world.bot = running
            await world.pair(ADA)
            break_the_workers_query(database)
            world.agent.submit_approval(approval("apr_survive"))
            await eventually(lambda: running.supervisor.states["card worker"].restarts >= 2)
            mend_the_workers_query(database)
            await world.wait_card(ADA, "apr_survive", timeout=10)
            assert running.supervisor.states["card worker"].alive
            await eventually(lambda: json.loads((tmp_path / "state" / "status.json")
                                                .read_text())["tasks"]["card worker"]
                             ["restarts"] >= 2)
            world.bot = None


async def test_a_worker_that_keeps_failing_stops_the_bot_with_an_error(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world:
        database = tmp_path / "state" / "skald-telegram.sqlite3"
        async with running_bot(world):
            await world.pair(ADA)
        status = tmp_path / "state" / "status.json"
        bot = asyncio.create_task(
            run_until_signalled(world.config, supervisor=fast_supervisor(max_failures=3)))
        await eventually(status.exists)
        break_the_workers_query(database)
        world.agent.submit_approval(approval("apr_never"))
        with pytest.raises(BotFailed, match="card worker failed 3 times"):
            await asyncio.wait_for(bot, 20)
        assert not status.exists()  # stopped: nobody takes it for running


def test_health_fails_for_a_dead_task_or_no_relay_past_the_grace(tmp_path: Path) -> None:
    import os

    path = tmp_path / "status.json"
    now = time.time()
    relay = {"url": "ws://r", "connected": True, "alive": True, "since": now - 1000}
    write_status(path, {"pid": os.getpid(), "tasks": {"timers": {"alive": True}},
                        "relays": [relay]})
    assert check_status(path)[0]
    write_status(path, {"pid": os.getpid(), "tasks": {"card worker": {"alive": False}},
                        "relays": [relay]})
    healthy, detail = check_status(path)
    assert not healthy and "card worker" in detail
    down = {**relay, "connected": False, "since": now - RELAY_GRACE_S - 5}
    write_status(path, {"pid": os.getpid(), "tasks": {}, "relays": [down]})
    healthy, detail = check_status(path)
    assert not healthy and "no relay connected" in detail
    write_status(path, {"pid": os.getpid(), "tasks": {},
                        "relays": [{**down, "since": now - 10}]})
    assert check_status(path)[0]  # within the grace period
