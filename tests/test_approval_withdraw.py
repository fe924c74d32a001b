"""A request interrupted before the agent host answered its submit (a hook stopped by a
signal just then) still takes its card back: the host may have made the item already."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from agenthost_world import CLI
from conftest import eventually

from bot.integrations.approval import ask_person
from skald_telegram import AsyncAgentClient


@contextlib.asynccontextmanager
async def tcp_host(state: Path) -> AsyncIterator[tuple[asyncio.subprocess.Process, str, str]]:
    """``agent serve --listen`` (no relay listens: the API works all the same): the
    process, its URL and its token."""
    process = await asyncio.create_subprocess_exec(
        *CLI, "agent", "serve", "--state", str(state), "--relay", "ws://127.0.0.1:9/v1/connect",
        "--listen", "127.0.0.1:0", stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL, env={**os.environ, "SKALD_AGENT_STATE": str(state)},
    )  # fmt: skip
    try:
        assert process.stdout is not None
        async with asyncio.timeout(30):
            banner = (await process.stdout.readline()).decode()
        found = re.search(r"(http://[\d.]+:\d+)", banner)
        assert found, banner
        token = (state / "api-token").read_text(encoding="utf-8").strip()
        yield process, found.group(1), token
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGCONT)
            process.kill()
        await process.wait()


def unread_request_bytes(port: int) -> int:
    """Bytes waiting unread on the host's side of an open connection to ``port``."""
    total = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local_port = int(fields[1].split(":")[1], 16)
        if local_port == port and fields[3] == "01":  # established
            total += int(fields[4].split(":")[1], 16)
    return total


async def test_a_request_stopped_before_the_host_answered_is_withdrawn(tmp_path: Path) -> None:
    async with tcp_host(tmp_path / "agent") as (process, url, token):
        port = int(url.rsplit(":", 1)[1])
        process.send_signal(signal.SIGSTOP)  # the host takes the request, answers nothing yet
        asking = asyncio.create_task(ask_person(
            lambda: AsyncAgentClient(url=url, token=token), tool="Bash",
            summary="Run: rm -rf build", arguments={"command": "rm -rf build"}, blocks=[],
            timeout=300,
        ))
        await eventually(lambda: unread_request_bytes(port) > 0)
        asking.cancel()  # the hook is stopped by a signal
        for _ in range(20):
            await asyncio.sleep(0)
        process.send_signal(signal.SIGCONT)
        with pytest.raises(asyncio.CancelledError):
            await asking
        async with AsyncAgentClient(url=url, token=token) as client:
            assert await client.items() == []
