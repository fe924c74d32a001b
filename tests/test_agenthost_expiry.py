"""The agent host's expiry loop while its store fails: it keeps its pace (a tick, not a
spin), stays alive, and the failure is logged by the store's health, with its cause, at
most once a minute. The store is made to fail as a full disk does, with
``PRAGMA max_page_count``."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.agenthost.service import AgentHost
from bot.agenthost.store import AgentStore
from bot.protocol.identity import Identity
from bot.storefaults import LOG_EVERY_S
from bot.testing.clock import ShiftedClock

RELAY = "ws://127.0.0.1:9/v1/connect"


def _never_yielded(signum: int, frame: object) -> None:
    raise RuntimeError("the expiry loop spun without yielding to the event loop")


@pytest.fixture
async def full_host(tmp_path: Path) -> AsyncIterator[tuple[AgentHost, ShiftedClock]]:
    """A host with one paired device and an approval due in a second, on a full disk."""
    clock = ShiftedClock()
    store = AgentStore(tmp_path / "agent")
    store.add_device(Identity.generate("phone").card, "telegram", clock.now_ms())
    host = AgentHost(store, Identity.generate("laptop"), RELAY, clock=clock,
                     on_relay=lambda: True)
    host.submit_approval(tool="deploy", summary=None, arguments={"env": "x" * 3000},
                         blocks=None, timeout_s=1)
    store._db.execute("VACUUM")
    (pages,) = store._db.execute("PRAGMA page_count").fetchone()
    store._db.execute(f"PRAGMA max_page_count = {pages}")
    yield host, clock
    store.close()


async def test_a_failing_store_is_logged_once_a_minute_and_retried_each_tick(
    full_host: tuple[AgentHost, ShiftedClock], caplog: pytest.LogCaptureFixture
) -> None:
    host, clock = full_host
    caplog.set_level(logging.DEBUG, logger="bot.agenthost")
    loop = asyncio.create_task(host.expiry.run())
    previous = signal.signal(signal.SIGALRM, _never_yielded)
    signal.alarm(20)  # a loop that never yields cannot be stopped otherwise
    try:
        for _ in range(5):
            clock.advance(1.0)
            await asyncio.sleep(0.05)
        attempts = [r for r in caplog.records if r.getMessage().startswith("cannot expire")]
        assert 4 <= len(attempts) <= 7  # once a tick, not as fast as the loop can spin
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert errors == ["the agent host's database is failing: database or disk is full"]
        clock.advance(LOG_EVERY_S)
        await asyncio.sleep(0.05)
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 2 and errors[1].startswith(
            "the agent host's database is failing: database or disk is full (")
        assert not loop.done()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        loop.cancel()
        with pytest.raises(asyncio.CancelledError):
            await loop
