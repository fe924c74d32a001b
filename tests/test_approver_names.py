"""An observer's alert names the approvers, even those who never wrote in the chat: their
names are read with ``getChatMember`` when an agent is bound to the chat."""

from __future__ import annotations

from pathlib import Path

from world import ADA, BOB, DAVE, OPS_GROUP, approval, bot_config, make_world, running_bot

from bot.config import parse_config


async def test_observer_alert_names_approvers_who_never_spoke(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world:
        world.tg.add_group(OPS_GROUP, "Ops", admins=[ADA], members=[BOB, DAVE])
        data = bot_config(tmp_path, world.tg.api_url)
        data["chats"] = [{"id": OPS_GROUP, "approvers": [ADA, BOB]}]
        async with running_bot(world, parse_config(data, base=tmp_path)):
            await world.pair(OPS_GROUP)  # Bob has never written anything
            world.agent.submit_approval(approval("apr_names"))
            card = await world.wait_card(OPS_GROUP, "apr_names")
            answer = await world.answer_of(world.tap(OPS_GROUP, card, DAVE, "Approve"))
            assert answer["show_alert"] is True
            assert "Bob Builder" in answer["text"] and str(BOB) not in answer["text"]
