"""The durable update inbox: a tap Telegram has handed over survives a SIGKILL, even one
confirmed while the bot waits out a 429, and is handled exactly once after the restart."""

from __future__ import annotations

import signal
import sqlite3
from pathlib import Path

from test_bot_kill import bot_process
from world import ADA, FAST_RELAY, approval, make_world, running_bot

from bot.protocol.identity import Identity
from bot.store import Store
from bot.testing.agent import Agent


def taps_recorded(database: Path, item_id: str) -> int:
    with sqlite3.connect(database) as db:
        row = db.execute("SELECT count(*) FROM audit WHERE event = 'tap' AND item_id = ?",
                         (item_id,)).fetchone()
    return int(row[0])


async def test_a_tap_confirmed_behind_a_429_survives_sigkill(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world:
        database = tmp_path / "state" / "skald-telegram.sqlite3"
        async with bot_process(world) as process:
            await world.pair(ADA)
            world.agent.submit_approval(approval("apr_durable"))
            card = await world.wait_card(ADA, "apr_durable", timeout=20)

            # The reply to /help gets a 429: the bot holds every request for 5 s, and
            # the updates after /help wait for its handler.
            world.tg.rate_limit_storm(times=1, retry_after=5)
            sends = len(world.tg.calls("sendMessage"))
            help_update = world.tg.send_text(ADA, ADA, "/help")
            await world.tg.wait_for(lambda tg: len(tg.calls("sendMessage")) > sends)
            query = world.tap(ADA, card, ADA, "Approve")
            tap_update_id = help_update["update_id"] + 1
            # Telegram has handed the tap over: a getUpdates call confirmed it.
            await world.tg.wait_for(lambda tg: any(
                (call.params.get("offset") or 0) > tap_update_id
                for call in tg.calls("getUpdates")))
            process.send_signal(signal.SIGKILL)
            await process.wait()
        assert query not in world.tg.callback_answers  # it was not handled before the kill
        assert world.agent.decisions == []

        async with bot_process(world):
            await world.agent.wait_for(lambda a: len(a.decisions) == 1, timeout=20)
            await world.wait_card(ADA, "apr_durable", lambda m: "Approved by" in m.text,
                                  timeout=20)
            await world.tg.wait_for(lambda tg: query in tg.callback_answers, timeout=20)
            await world.tg.wait_for(lambda tg: any(  # /help, interrupted, is answered too
                "How this works" in m.text for m in tg.bot_messages(ADA)), timeout=20)
        assert world.agent.decisions[0].approval_id == "apr_durable"
        assert taps_recorded(database, "apr_durable") == 1  # handled exactly once


async def test_a_pair_update_is_handled_only_with_its_pairing_row(tmp_path: Path) -> None:
    """``/pair`` waits for its agent apart from the other updates, but its update counts
    as handled only in the transaction that writes the pairing: a kill before that
    commit leaves the ``/pair`` to be handled again."""
    database = tmp_path / "state" / "skald-telegram.sqlite3"
    database.parent.mkdir(mode=0o700)
    Store.open(database).close()
    with sqlite3.connect(database) as db:  # notes what the store held at each marking
        db.executescript(
            "CREATE TABLE pair_marks (update_id INTEGER, pairings INTEGER);"
            "CREATE TRIGGER pair_marked AFTER UPDATE OF done ON updates"
            " WHEN NEW.done = 1 AND OLD.body LIKE '%/pair %' BEGIN"
            " INSERT INTO pair_marks SELECT NEW.update_id, count(*) FROM pairings; END;")
    async with make_world(tmp_path) as world, running_bot(world):
        late = Agent(Identity.generate("late"), world.relay.url, **FAST_RELAY)
        world.tg.send_text(ADA, ADA, f"/pair {late.new_pairing_uri()}")
        world.tg.send_text(ADA, ADA, "/help")  # not held up by the pairing in progress
        await world.tg.wait_for(lambda tg: any(
            "How this works" in m.text for m in tg.bot_messages(ADA)))
        await late.start()  # the agent answers only now
        try:
            await world.tg.wait_for(lambda tg: any(
                "Paired with" in m.text for m in tg.bot_messages(ADA)))
        finally:
            await late.stop()
    with sqlite3.connect(database) as db:
        marks = db.execute("SELECT pairings FROM pair_marks").fetchall()
    assert marks == [(1,)]


async def test_each_update_is_marked_handled_once_a_tap_in_its_own_commit(
    tmp_path: Path,
) -> None:
    """A tap's update is marked handled in the tap's transaction, and not again after it
    (that would be a second commit, waiting for the disk, on the event loop); an update
    whose handler changes nothing is marked once too."""
    database = tmp_path / "state" / "skald-telegram.sqlite3"
    database.parent.mkdir(mode=0o700)
    Store.open(database).close()
    with sqlite3.connect(database) as db:  # notes every marking, and the taps then recorded
        db.executescript(
            "CREATE TABLE marks (update_id INTEGER, taps INTEGER);"
            "CREATE TRIGGER marked AFTER UPDATE OF done ON updates WHEN NEW.done = 1 BEGIN"
            " INSERT INTO marks SELECT NEW.update_id, count(*) FROM audit"
            " WHERE event = 'tap'; END;")
    async with make_world(tmp_path) as world, running_bot(world):
        await world.pair(ADA)
        world.agent.submit_approval(approval("apr_once"))
        card = await world.wait_card(ADA, "apr_once")
        help_update = world.tg.send_text(ADA, ADA, "/help")
        await world.tg.wait_for(lambda tg: any(
            "How this works" in m.text for m in tg.bot_messages(ADA)))
        world.tap(ADA, card, ADA, "Approve")
        await world.agent.wait_for(lambda a: len(a.decisions) == 1)
        await world.wait_card(ADA, "apr_once", lambda m: "Approved by" in m.text)
    with sqlite3.connect(database) as db:
        marks = db.execute("SELECT update_id, taps FROM marks ORDER BY rowid").fetchall()
    tap_update_id = help_update["update_id"] + 1
    assert [update_id for update_id, _ in marks] == sorted({u for u, _ in marks})
    assert (help_update["update_id"], 0) in marks
    assert (tap_update_id, 1) in marks  # marked with the tap it recorded
