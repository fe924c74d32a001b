"""Shared fixtures and helpers: a real relay on a loopback port, two device identities,
and :func:`eventually` for conditions that no event announces."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from bot.protocol.identity import Identity
from bot.relay.server import RelayServer

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
