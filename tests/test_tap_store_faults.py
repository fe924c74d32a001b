"""A tap while the bot's store cannot write is not lost: the person is told at once that
it is not recorded yet, and the tap applies by itself once the store can write (the
update stays held and is handled again, with backoff)."""

from __future__ import annotations

from pathlib import Path

from test_store_faults import fill, free
from world import ADA, approval, make_world, running_bot


async def test_a_tap_while_the_store_is_full_applies_once_space_returns(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, running_bot(world) as running:
        await world.pair(ADA)
        world.agent.submit_approval(approval("apr_full_tap"))
        card = await world.wait_card(ADA, "apr_full_tap")
        fill(running.store)
        query = world.tap(ADA, card, ADA, "✅ Approve")
        answer = await world.answer_of(query)
        assert answer["show_alert"] is True and "Not recorded yet" in answer["text"]
        assert world.agent.decisions == []
        assert [item.item_id for item, _card in running.store.items.open_in_chat(ADA)] \
            == ["apr_full_tap"]
        free(running.store)
        await world.agent.wait_for(lambda a: len(a.decisions) == 1)
        assert world.agent.decisions[0].decision == "approve"
