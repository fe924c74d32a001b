"""A store that cannot write loses nothing and sends nothing twice: an envelope waits
(not acknowledged) until the store takes it, and a card goes out once.

A full disk is SQLite's ``max_page_count`` set to the pages the database has (and its last
pages filled), raised again to give the space back; a read-only state is the same file
opened read-only; a locked one has another connection holding its write lock; the agent
host's disk is full when it may write nothing at all (``RLIMIT_FSIZE`` of 0, set on the
running process)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import resource
import sqlite3
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from agenthost_world import finished, host_world, start_cli
from conftest import eventually
from test_relay_client import Peer
from world import ADA, World, approval, make_world, running_bot

from bot.errors import StoreError, StoreUnavailable
from bot.protocol.identity import Identity
from bot.relay.incoming import MAX_HANDLER_ATTEMPTS
from bot.relay.server import RelayServer
from bot.store import Store
from bot.store.db import Database

NO_LIMIT = 1073741823
"""SQLite's largest ``max_page_count``: the space is back."""
LARGE = "x" * 6000
"""An argument no page of the database has room for."""


def fill(store: Store) -> None:
    """The database may not grow by a page, and its audit trail's pages take no more row
    (every change the bot records appends one)."""
    pages = store.db.one("PRAGMA page_count")
    assert pages is not None
    store.db.run(f"PRAGMA max_page_count = {int(pages[0])}")
    for size in (1024, 128, 16, 0):
        with contextlib.suppress(StoreError):
            while True:
                store.db.run("INSERT INTO audit (at, event, detail) VALUES (0, 'ballast', ?)",
                             (json.dumps("x" * size),))


def free(store: Store) -> None:
    store.db.run(f"PRAGMA max_page_count = {NO_LIMIT}")


def messages(caplog: pytest.LogCaptureFixture, needle: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if needle in r.getMessage()]


# -- the store adapters ------------------------------------------------------------------


def test_a_full_database_fails_as_unavailable_and_takes_writes_once_space_returns(
        tmp_path: Path) -> None:
    store = Store.open(tmp_path / "state.sqlite3")
    fill(store)
    with (pytest.raises(StoreUnavailable, match="full"), store.transaction(),
          store.savepoint()):
        store.audit.append("grown", at=1, detail=LARGE)
    with pytest.raises(StoreUnavailable, match="full"):
        store.audit.append("grown", at=2, detail=LARGE)
    free(store)
    with store.transaction(), store.savepoint():  # no transaction was left open
        store.audit.append("grown", at=3, detail=LARGE)
    assert [row.event for row in store.audit.rows(newest_first=True, limit=1)] == ["grown"]
    store.close()


def test_a_read_only_database_fails_as_unavailable_and_a_bad_statement_does_not(
        tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite3"
    Store.open(path).close()
    read_only = Store(Database(sqlite3.connect(f"file:{path}?mode=ro", uri=True,
                                               isolation_level=None), path))
    with pytest.raises(StoreUnavailable, match="readonly"):
        read_only.audit.append("tap", at=1)
    with pytest.raises(StoreError) as refused:
        read_only.db.run("SELECT no_such_column FROM audit")
    assert not isinstance(refused.value, StoreUnavailable)
    read_only.close()


# -- the relay client --------------------------------------------------------------------


async def test_an_envelope_waits_for_a_failing_store_however_many_times_it_takes(
        relay: RelayServer, alice: Identity, bob: Identity,
        caplog: pytest.LogCaptureFixture) -> None:
    attempts: list[object] = []
    failures = 3 * MAX_HANDLER_ATTEMPTS

    async def store_fails_for_a_while(envelope: dict[str, object]) -> None:
        attempts.append(envelope["id"])
        if len(attempts) <= failures:
            raise StoreUnavailable("database or disk is full")
        applied.append(envelope["id"])

    applied: list[object] = []
    a = Peer(relay.url, alice)
    b = Peer(relay.url, bob, handler=store_fails_for_a_while, backoff_max=0.05)
    a.start()
    b.start()
    sent = a.send(bob)
    await eventually(lambda: applied == [sent["id"]])
    assert attempts == [sent["id"]] * (failures + 1)
    assert messages(caplog, "dropped") == []
    assert len(messages(caplog, "not handled yet, the store failed")) == failures
    await a.stop()
    await b.stop()


# -- the bot -----------------------------------------------------------------------------


async def test_a_full_bot_applies_what_arrived_once_space_returns_without_a_restart(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    async with make_world(tmp_path) as world, running_bot(world) as running:
        await world.pair(ADA)
        fill(running.store)
        full_from = len(caplog.records)
        world.agent.submit_approval(approval("apr_full1", arguments={"text": LARGE}))
        bad = world.agent.send_raw(running.bridge.identity.id, "inbox_update", {"rev": "x"})
        world.agent.submit_approval(approval("apr_full2", arguments={"text": LARGE}))
        # Delivered again and again: more times than an envelope that fails is allowed.
        failed = f"session closed: {running.bridge.identity.id} (code 1011)"
        await eventually(lambda: len(messages(caplog, failed)) > MAX_HANDLER_ATTEMPTS)
        assert world.cards(ADA) == []
        while_full = [r.getMessage() for r in caplog.records[full_from:]]
        assert not [line for line in while_full if line.startswith(("applied", "dropped"))]
        free(running.store)
        await world.wait_card(ADA, "apr_full1")
        await world.wait_card(ADA, "apr_full2")
        posts = [call for call in world.tg.calls("sendMessage")
                 if "apr_full" in str(call.params.get("text"))]
        assert len(posts) == 2
        assert len(messages(caplog, f"dropped envelope {bad[:12]}")) == 1


def on_send(world: World, act: Callable[[], None]) -> None:
    """Run ``act`` while Telegram takes the next ``sendMessage``, before it answers."""
    handlers = world.tg.api.handlers
    original: Callable[[dict[str, Any]], Awaitable[Any]] = handlers["sendmessage"]

    @functools.wraps(original)
    async def send_and_act(params: dict[str, Any]) -> Any:
        handlers["sendmessage"] = original
        result = await original(params)
        act()
        return result

    handlers["sendmessage"] = send_and_act


async def cards_parked(world: World, caplog: pytest.LogCaptureFixture, *item_ids: str) -> None:
    """Plan a card for each item while Telegram refuses them (500): each waits its turn."""
    world.tg.fail_next("sendMessage", error_code=500, description="Internal Server Error",
                       times=len(item_ids))
    for item_id in item_ids:
        world.agent.submit_approval(approval(item_id))
    await eventually(lambda: len(messages(caplog, "could not update card")) == len(item_ids))


async def turns(world: World, count: int) -> None:
    """Let every parked card have ``count`` more turns."""
    for _ in range(count):
        world.clock.advance(60)
        await asyncio.sleep(0.2)


async def test_a_card_whose_record_fails_after_the_send_is_recorded_not_sent_again(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async with make_world(tmp_path) as world, running_bot(world) as running:
        await world.pair(ADA)
        await cards_parked(world, caplog, "apr_sent1", "apr_sent2")
        on_send(world, lambda: fill(running.store))
        await turns(world, 1)
        await eventually(lambda: len(world.cards(ADA)) >= 1)
        await turns(world, 4)  # the store is still full at each of them
        assert len(world.cards(ADA)) == 1
        assert messages(caplog, "could not be recorded yet")
        free(running.store)
        await turns(world, 1)
        second = await world.wait_card(ADA, "apr_sent2")
        first = world.card(ADA, "apr_sent1")  # once each
        assert len(world.cards(ADA)) == 2
        shown = {card.item_id: card.message_id
                 for _item, card in running.store.items.open_in_chat(ADA)}
        assert shown == {"apr_sent1": first.message_id, "apr_sent2": second.message_id}


async def test_an_activity_note_whose_record_fails_is_recorded_not_sent_again(
        tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, running_bot(world) as running:
        await world.pair(ADA)

        def notes() -> list[str]:
            return [m.text for m in world.tg.bot_messages(ADA) if m.text.startswith("Ran")]

        with contextlib.ExitStack() as held:
            on_send(world, lambda: held.enter_context(write_locked(running.store)))
            world.agent.send_activity([{"id": "act_once", "tool": "Bash", "summary": "ls",
                                        "grant_id": None}])
            await eventually(lambda: len(notes()) >= 1)
            await turns(world, 4)  # the store still cannot write at each of them
            assert len(notes()) == 1
        await turns(world, 1)
        await eventually(lambda: running.bridge.view.grants.dirty_notes(ADA) == [])
        assert len(notes()) == 1


@contextlib.contextmanager
def write_locked(store: Store) -> Iterator[None]:
    """Another connection holds the database's write lock: every write of the bot fails
    within 50 ms (``database is locked``)."""
    store.db.run("PRAGMA busy_timeout = 50")
    other = sqlite3.connect(store.path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        other.execute("ROLLBACK")
        other.close()
        store.db.run("PRAGMA busy_timeout = 5000")


async def test_a_bot_whose_store_cannot_write_sends_no_card_until_it_can(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async with make_world(tmp_path) as world, running_bot(world) as running:
        await world.pair(ADA)
        await cards_parked(world, caplog, "apr_locked")
        with write_locked(running.store):
            await turns(world, 3)
            assert len(messages(caplog, "database is locked")) >= 3
            assert world.cards(ADA) == []
        await turns(world, 1)
        await world.wait_card(ADA, "apr_locked")
        assert len(world.cards(ADA)) == 1


# -- the agent host ----------------------------------------------------------------------


def disk_full(pid: int, full: bool) -> None:
    """Let the process write nothing to any file (``RLIMIT_FSIZE`` of 0), or anything."""
    _, hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (0 if full else hard, hard))


async def test_a_decision_reaching_a_full_agent_host_applies_once_space_returns(
        tmp_path: Path) -> None:
    log = tmp_path / "host.log"
    async with host_world(tmp_path, host_log=log) as hw:
        await hw.pair()
        ask = await start_cli("ask", "--tool", "deploy", "--arg", "env=prod", "--json",
                              env=hw.host.env)
        card = await hw.world.wait_card(ADA, "deploy(", timeout=30)
        assert hw.host.process is not None
        disk_full(hw.host.process.pid, True)
        query = hw.world.tap(ADA, card, ADA, "Approve")
        await hw.world.answer_of(query)
        bridge = hw.world.running.bridge
        await eventually(lambda: bridge.view.outbox.depth() == 0)  # the relay has it
        # The host's reconnection backoff (0.5 s doubling) lets it try at least
        # MAX_HANDLER_ATTEMPTS times in this while: as many as once dropped the decision.
        await asyncio.sleep(9)
        assert ask.returncode is None
        disk_full(hw.host.process.pid, False)
        result = await finished(ask, timeout=60)
        assert result.code == 0, result.err
        assert "approved" in result.out
        with sqlite3.connect(hw.host.state / "agent.sqlite3") as db:
            verdicts = db.execute("SELECT verdict FROM received").fetchall()
        assert verdicts == [("accepted",)]
        text = log.read_text()
        assert text.count("approved by device") == 1
