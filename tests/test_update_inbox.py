"""The durable update inbox: a tap Telegram has handed over survives a SIGKILL, even one
confirmed while the bot waits out a 429, and is handled exactly once after the restart."""

from __future__ import annotations

import signal
import sqlite3
from pathlib import Path

from test_bot_kill import bot_process
from world import ADA, approval, make_world


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
