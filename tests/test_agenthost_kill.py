"""SIGKILL of the agent host while ten ``ask`` processes wait, and decisions tapped while
it is down: after a restart every waiting ``ask`` (or a new ``ask --item ID``) gets the
decision that was tapped, and no item is decided twice."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from agenthost_world import finished, host_world, start_cli
from world import ADA

ASKS = 10


async def test_sigkill_while_asks_wait_then_decisions_while_down(tmp_path: Path) -> None:
    async with host_world(tmp_path) as hw:
        await hw.pair()
        env = hw.host.env
        asks = await asyncio.gather(*(
            start_cli("ask", "--tool", f"step_{n}", "--arg", f"n={n}", "--json", env=env)
            for n in range(ASKS)
        ))
        await hw.tg.wait_for(lambda tg: len(hw.world.cards(ADA)) == ASKS, timeout=60)
        async with hw.host.client() as client:
            open_items = {item["summary"]: item["item_id"] for item in await client.items()}
        assert len(open_items) == ASKS

        hw.host.kill()
        assert await hw.host.process.wait() == -9  # type: ignore[union-attr]
        lost = asks[:2]  # these waiters die too; `ask --item` takes over
        for ask in lost:
            ask.kill()
            await ask.wait()

        queries = []
        for n in range(ASKS):
            card = hw.world.card(ADA, f"step_{n}(")
            queries.append(hw.world.tap(ADA, card, ADA, "Approve" if n % 2 == 0 else "❌ Deny"))
        for query in queries:
            await hw.world.answer_of(query)

        await hw.host.start()
        again = [await start_cli("ask", "--item", open_items[f"step_{n}({n})"], env=env)
                 for n in range(2)]
        results = await asyncio.gather(*(finished(p, timeout=60) for p in [*again, *asks[2:]]))
        assert [r.code for r in results] == [n % 2 for n in range(ASKS)], [
            r.err for r in results]
        for n, result in enumerate(results):
            assert ("approved" if n % 2 == 0 else "denied") in result.out

        with sqlite3.connect(hw.host.state / "agent.sqlite3") as db:
            accepted = db.execute(
                "SELECT item_id, COUNT(*) FROM received WHERE verdict = 'accepted' "
                "GROUP BY item_id").fetchall()
        assert sorted(item for item, _ in accepted) == sorted(open_items.values())
        assert all(count == 1 for _, count in accepted)
        for n in range(ASKS):
            word = "Approved by" if n % 2 == 0 else "Denied by"
            card = await hw.world.wait_card(ADA, f"step_{n}(", lambda m, w=word: w in m.text)
            assert card.buttons() == []
