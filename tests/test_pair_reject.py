"""A refused or impossible pairing says why within seconds (protocol §5 ``pair_reject``),
from Telegram and from the command line, and leaves no relay session behind."""

from __future__ import annotations

import asyncio
import contextlib
import io
import time
from pathlib import Path

from world import ADA, TOKEN, make_world, running_bot

from bot.cli import main as cli_main
from bot.protocol.identity import Identity
from bot.protocol.pairing import format_pairing_uri


def write_config(tmp: Path, api_url: str) -> Path:
    path = tmp / "skald-telegram.toml"
    path.write_text(f'[telegram]\ntoken = "{TOKEN}"\napi_url = "{api_url}"\nadmins = [{ADA}]\n'
                    f'[state]\ndir = "{tmp / "state"}"\n')
    return path


def pair_cli(config: Path, link: str) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = cli_main(["pair", "--config", str(config), "--chat", str(ADA), link])
    return code, err.getvalue()


async def test_pair_cli_says_at_once_that_a_link_was_used(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world:
        config = write_config(tmp_path, world.tg.api_url)
        link = world.agent.new_pairing_uri()
        assert (await asyncio.to_thread(pair_cli, config, link))[0] == 0
        started = time.monotonic()
        code, err = await asyncio.to_thread(pair_cli, config, link)
        assert code == 1
        assert time.monotonic() - started < 5
        assert "refused the pairing: this link was used already" in err

        async with running_bot(world) as running:  # nothing left to keep a session for
            assert [s.url for s in running.relays.statuses()] == [world.relay.url]


async def test_pair_cli_names_an_unreachable_relay_within_seconds(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world:
        config = write_config(tmp_path, world.tg.api_url)
        nobody = Identity.generate("nobody")
        link = format_pairing_uri("ws://127.0.0.1:9/v1/connect", nobody.card, bytes(16))
        started = time.monotonic()
        code, err = await asyncio.to_thread(pair_cli, config, link)
        assert code == 1
        assert time.monotonic() - started < 10
        assert "cannot reach the relay at ws://127.0.0.1:9/v1/connect" in err
        async with running_bot(world) as running:  # the failed pairing left no session
            assert running.relays.statuses() == []


async def test_pair_command_in_telegram_shows_the_agents_refusal(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, running_bot(world):
        await world.pair(ADA)
        used = world.agent.new_pairing_uri()
        world.tg.send_text(ADA, ADA, f"/pair {used}")
        await world.tg.wait_for(lambda tg: sum("Paired with" in m.text
                                               for m in tg.bot_messages(ADA)) == 2)
        started = time.monotonic()
        world.tg.send_text(ADA, ADA, f"/pair {used}")
        await world.tg.wait_for(lambda tg: any("used already" in m.text
                                               for m in tg.bot_messages(ADA)), timeout=5)
        assert time.monotonic() - started < 3
