"""The bot's PostgreSQL server goes away while the bot runs: it is waited out as SQLite's
full disk is. A tap is held (Telegram keeps it until it can be stored) and applies once
the server is back, a request that arrived meanwhile gets its card then, nothing is decided
twice, and the bot recovers by itself."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import world
from conftest import OwnServer
from world import ADA, approval, make_world, running_bot

from bot.errors import StoreUnavailable


async def test_the_server_stopped_while_the_bot_runs_loses_no_decision(
    tmp_path: Path, own_postgres: OwnServer,
) -> None:
    world.STORAGE_URL = own_postgres.database
    try:
        async with make_world(tmp_path) as w, running_bot(w) as running:
            await w.pair(ADA)
            w.agent.submit_approval(approval("apr_before"))
            card = await w.wait_card(ADA, "apr_before")

            own_postgres.stop()
            with pytest.raises(StoreUnavailable):
                running.store.items.open_count()
            # Not confirmed to Telegram while it cannot be stored: Telegram keeps the tap.
            w.tap(ADA, card, ADA, "✅ Approve")
            w.agent.submit_approval(approval("apr_during"))
            await asyncio.sleep(2)
            assert w.agent.decisions == []
            assert len(w.cards(ADA)) == 1  # no card posted that cannot be recorded

            own_postgres.start()
            await w.agent.wait_for(lambda a: len(a.decisions) == 1, timeout=30)
            assert (w.agent.decisions[0].approval_id, w.agent.decisions[0].decision) \
                == ("apr_before", "approve")
            await w.wait_card(ADA, "apr_during", timeout=30)
            await w.wait_card(ADA, "apr_before", lambda m: "Approved by" in m.text,
                              timeout=30)
            assert len(w.cards(ADA)) == 2  # none posted twice
    finally:
        world.STORAGE_URL = None
    assert len(w.agent.decisions) == 1
