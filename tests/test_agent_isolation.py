"""One agent cannot stall the others that share the bot's relay session: a payload that
cannot be applied is that envelope's refusal, never the session's."""

from __future__ import annotations

import time
from pathlib import Path

from world import ADA, FAST_RELAY, approval, make_world

from bot.app import Bot
from bot.protocol.identity import Identity
from bot.testing.agent import Agent

POISONS = 3


async def test_a_poisoned_agent_does_not_delay_another(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world:
        other = Agent(Identity.generate("other-bot"), world.relay.url, **FAST_RELAY)
        await other.start()
        try:
            # The relay options of a real deployment: a session that fails waits seconds.
            async with Bot(world.config) as running:
                world.bot = running
                await world.pair(ADA)
                await world.pair(ADA, agent=other)
                device = next(iter(world.agent.peers))
                for n in range(POISONS):
                    # rev beyond SQLite's 64-bit integers, ahead of the other agent's item
                    world.agent.send_raw(device, "inbox_update", {
                        "rev": 2**64 + n, "approvals": [approval(f"apr_poison{n}")]})
                await world.agent.wait_for(lambda a: a.unsent == 0)
                started = time.monotonic()
                other.submit_approval(approval("apr_healthy"))
                await world.wait_card(ADA, "apr_healthy", timeout=30)
                assert time.monotonic() - started < 3.0
                assert not any("apr_poison" in m.text for m in world.tg.bot_messages(ADA))
                world.agent.submit_approval(approval("apr_after"))  # the sender still works
                await world.wait_card(ADA, "apr_after", timeout=10)
                assert running.relays.statuses()[0].reconnects == 0
        finally:
            world.bot = None
            await other.stop()
