"""SIGKILL the bot process mid-work and start it again: no decision lost, none sent twice,
no duplicate card."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from conftest import eventually
from world import ADA, TOKEN, World, approval, make_world, storage_toml

from bot.protocol.payloads import ApprovalDecision
from bot.store import Store

pytestmark = pytest.mark.usefixtures("state_store")


@asynccontextmanager
async def bot_process(
    world: World, pace: float = 0.0, *, settings: str = "", name: str = ""
) -> AsyncIterator[asyncio.subprocess.Process]:
    """``python -m bot run``; ``settings`` (TOML lines) go into its ``[telegram]`` table,
    or into tables of their own after a table header. ``name``: a replica's, with a
    configuration, state folder and log of its own (``state-<name>``)."""
    suffix = f"-{name}" if name else ""
    config = world.tmp / f"skald-telegram{suffix}.toml"
    config.write_text(
        f'[state]\ndir = "{world.tmp / f"state{suffix}"}"\n{storage_toml()}'
        f'[telegram]\napi_url = "{world.tg.api_url}"\nadmins = [{ADA}]\n'
        f"chat_pace_seconds = {pace}\n{settings}"
    )
    env = {**os.environ, "TELEGRAM_BOT_TOKEN": TOKEN}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "run", "--config", str(config),
        env=env, cwd=world.tmp, stdout=asyncio.subprocess.DEVNULL,
        stderr=open(world.tmp / f"bot{suffix}.log", "ab"),  # noqa: SIM115
    )
    try:
        yield process
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


def posted_cards(db: Path | str) -> dict[str, int]:
    store = Store.open(db)
    try:
        rows = store.db.all("SELECT item_id, message_id FROM cards WHERE message_id IS NOT NULL")
    finally:
        store.close()
    return {row[0]: row[1] for row in rows}


async def test_sigkill_and_restart(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world:
        db = world.config.database
        async with bot_process(world) as process:
            await world.pair(ADA)
            for n in range(6):
                world.agent.submit_approval(approval(f"apr_k{n}"))
            await world.tg.wait_for(lambda tg: len(world.cards(ADA)) == 6, timeout=20)
            queries = [world.tap(ADA, world.card(ADA, f"apr_k{n}"), ADA, "Approve")
                       for n in range(3)]
            # Each answer comes after its decision was committed; kill at once after that,
            # whatever else (outbox flush, card edits) is in flight.
            await world.tg.wait_for(lambda tg: all(q in tg.callback_answers for q in queries))
            process.send_signal(signal.SIGKILL)
            await process.wait()

        for n in range(6, 10):
            world.agent.submit_approval(approval(f"apr_k{n}"))
        # Paced, so the kill below lands after a card was recorded and before the next one
        # is sent. (Between Telegram's answer to sendMessage and the commit of its message
        # id lies a window of a millisecond or so that no Bot API call can make atomic.)
        async with bot_process(world, pace=0.3) as process:
            await world.agent.wait_for(lambda a: len(a.decisions) == 3, timeout=20)
            await eventually(lambda: len(posted_cards(db)) >= 7, timeout=20)
            process.send_signal(signal.SIGKILL)
            await process.wait()

        async with bot_process(world):
            for n in range(3):
                await world.wait_card(ADA, f"apr_k{n}", lambda m: "Approved by" in m.text,
                                      timeout=20)
            await world.tg.wait_for(lambda tg: len(posted_cards(db)) == 10, timeout=20)
            card_items = Counter(
                next(f"apr_k{n}" for n in range(10) if f"(apr_k{n})" in m.text)
                for m in world.cards(ADA)
            )
            assert set(card_items.values()) == {1}, card_items
            received = [p for p in world.agent.received if isinstance(p, ApprovalDecision)]
            assert sorted(d.approval_id for d in received) == ["apr_k0", "apr_k1", "apr_k2"]
            # An envelope the relay had not confirmed before the kill is sent again with the
            # same id; the agent's replay set drops the copy. Nothing else is refused.
            assert all("replay" in reason for reason in world.agent.refused)
