"""An observer's alert names the approvers, even those who never wrote in the chat: their
names are read with ``getChatMember`` when an agent is bound to the chat, or before the
alert when the chat was bound with ``skald-telegram pair`` while the bot was stopped."""

from __future__ import annotations

import asyncio
from pathlib import Path

from world import ADA, BOB, DAVE, OPS_GROUP, TOKEN, approval, bot_config, make_world, running_bot

from bot.cli import main as cli_main
from bot.config import load_config, parse_config


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


async def test_observer_alert_names_approvers_of_a_chat_paired_offline(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world:
        world.tg.add_group(OPS_GROUP, "Ops", admins=[ADA], members=[BOB, DAVE])
        config = tmp_path / "skald-telegram.toml"
        config.write_text(
            f'[telegram]\ntoken = "{TOKEN}"\napi_url = "{world.tg.api_url}"\n'
            f'admins = [{ADA}]\nchat_pace_seconds = 0\n[state]\ndir = "{tmp_path / "state"}"\n'
            f'[[chats]]\nid = {OPS_GROUP}\napprovers = [{ADA}, {BOB}]\n')
        link = world.agent.new_pairing_uri()
        args = ["pair", "--config", str(config), "--chat", str(OPS_GROUP), link]
        assert await asyncio.to_thread(cli_main, args) == 0  # the bot is not running
        async with running_bot(world, load_config(config)):
            world.agent.submit_approval(approval("apr_offline"))
            card = await world.wait_card(OPS_GROUP, "apr_offline")
            answer = await world.answer_of(world.tap(OPS_GROUP, card, DAVE, "Approve"))
            assert answer["show_alert"] is True
            assert "Bob Builder" in answer["text"] and str(BOB) not in answer["text"]
