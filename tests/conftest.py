"""Shared fixtures and helpers: a real relay on a loopback port, two device identities,
a bridge over a real store with one paired agent, and :func:`eventually` for conditions
that no event announces."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from bot.bridge import Bridge
from bot.clock import SYSTEM_CLOCK
from bot.config import parse_config
from bot.core.model import Peer
from bot.protocol.identity import Identity
from bot.relay.server import RelayServer
from bot.store import Store

# PTB's future behaviour (RetryAfter.retry_after as a timedelta), as the command line sets it.
os.environ.setdefault("PTB_TIMEDELTA", "1")

EVENTUALLY_TIMEOUT_S = 10.0


async def eventually(condition: Callable[[], bool], timeout: float = EVENTUALLY_TIMEOUT_S) -> None:
    """Wait until ``condition()`` holds, checking every few milliseconds."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.005)


@pytest.fixture
async def relay(tmp_path: Path) -> AsyncIterator[RelayServer]:
    async with RelayServer(tmp_path / "relay") as server:
        yield server


@pytest.fixture
def alice() -> Identity:
    return Identity.generate("alice")


@pytest.fixture
def bob() -> Identity:
    return Identity.generate("bob")


@pytest.fixture
def bridge_and_agent(tmp_path: Path) -> Iterator[tuple[Bridge, Identity, Store]]:
    """A bot's bridge over a store in ``tmp_path``, and an agent paired and bound to
    chat 5."""
    device, agent = Identity.generate("bot"), Identity.generate("agent")
    store = Store.open(tmp_path / "state.sqlite3")
    config = parse_config({"telegram": {"token": "1:x", "admins": [1]},
                           "state": {"dir": str(tmp_path)}}, base=tmp_path)
    bridge = Bridge(identity=device, store=store, config=config, clock=SYSTEM_CLOCK)
    store.agents.add_peer(Peer(agent.id, "ws://relay", json.dumps(agent.card.to_json()),
                               "agent"), 0)
    store.agents.bind(agent.id, 5, None, 0)
    yield bridge, agent, store
    store.close()
