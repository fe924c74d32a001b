"""The agent host as a real process for tests: start it, pair it with the real bot, run
``skald-telegram ask`` processes against it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from world import ADA, BOB, TOKEN, World, bot_config, running_bot

from bot.config import parse_config
from bot.playground.stub import TelegramStub
from bot.relay.server import RelayServer
from bot.testing.clock import ShiftedClock
from skald_telegram import AsyncAgentClient, HostUnavailable

CLI = [sys.executable, "-m", "bot"]
_children: list[asyncio.subprocess.Process] = []
"""Every process a test started, killed when its world closes (a failed test included)."""


@dataclass
class Process:
    """A finished command: its exit code and what it printed."""

    code: int
    out: str
    err: str


class Host:
    """``skald-telegram agent serve`` as a subprocess on one state folder."""

    def __init__(self, state: Path, relay_url: str, *extra: str,
                 log: Path | None = None) -> None:
        self.state = state
        self.relay_url = relay_url
        self.extra = extra
        self.log = log
        """Where its log goes (None: to this process's stderr)."""
        self.process: asyncio.subprocess.Process | None = None
        self.banner = ""

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SKALD_AGENT_STATE": str(self.state)}

    async def start(self) -> None:
        with contextlib.ExitStack() as stack:
            log = stack.enter_context(self.log.open("ab")) if self.log else None
            self.process = await asyncio.create_subprocess_exec(
                *CLI, "agent", "serve", "--relay", self.relay_url, "--name", "build-host",
                *self.extra, env=self.env, stdout=asyncio.subprocess.PIPE, stderr=log,
            )
        _children.append(self.process)
        assert self.process.stdout is not None
        async with asyncio.timeout(15):
            self.banner = (await self.process.stdout.readline()).decode()
            assert "serving on" in self.banner, self.banner
            async with AsyncAgentClient(self.state) as client:
                while True:
                    with contextlib.suppress(HostUnavailable):
                        status = await client.status()
                        if status["relay"]["connected"]:
                            return
                    await asyncio.sleep(0.02)

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)

    async def stop(self) -> int | None:
        if self.process is None or self.process.returncode is not None:
            return None if self.process is None else self.process.returncode
        self.process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(10):
            return await self.process.wait()

    def client(self) -> AsyncAgentClient:
        return AsyncAgentClient(self.state)


async def run_cli(*args: str, env: dict[str, str] | None = None, stdin: bytes | None = None,
                  timeout: float = 20) -> Process:
    process = await asyncio.create_subprocess_exec(
        *CLI, *args, env=env, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(timeout):
        out, err = await process.communicate(stdin)
    assert process.returncode is not None
    return Process(process.returncode, out.decode(), err.decode())


async def start_cli(*args: str, env: dict[str, str]) -> asyncio.subprocess.Process:
    process = await asyncio.create_subprocess_exec(
        *CLI, *args, env=env, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    _children.append(process)
    return process


async def kill_children() -> None:
    while _children:
        process = _children.pop()
        if process.returncode is None:
            process.kill()
            await process.wait()


async def finished(process: asyncio.subprocess.Process, timeout: float = 20) -> Process:
    async with asyncio.timeout(timeout):
        out, err = await process.communicate()
    assert process.returncode is not None
    return Process(process.returncode, out.decode(), err.decode())


@dataclass
class HostWorld:
    """The Telegram stand-in, the relay and the bot in this process; the host outside."""

    world: World
    host: Host
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def tg(self) -> TelegramStub:
        return self.world.tg

    async def pair(self, chat_id: int = ADA) -> None:
        """``agent pair`` prints a link; ``/pair <link>`` in the chat; the command exits 0."""
        pairing = await start_cli("agent", "pair", "--wait", "20", env=self.host.env)
        assert pairing.stdout is not None
        link = (await pairing.stdout.readline()).decode().strip()
        assert link.startswith("skald-pair:v1?"), link
        self.tg.send_text(chat_id, ADA, f"/pair {link}")
        result = await finished(pairing)
        assert result.code == 0, result.err
        assert "paired with Telegram" in result.out
        await self.tg.wait_for(lambda tg: any("Paired with" in m.text
                                              for m in tg.bot_messages(chat_id)))


@contextlib.asynccontextmanager
async def host_world(tmp: Path, *host_args: str,
                     host_log: Path | None = None) -> AsyncIterator[HostWorld]:
    async with TelegramStub(token=TOKEN) as tg, RelayServer(tmp / "relay") as relay:
        tg.add_user(ADA, "Ada", "Lovelace", username="ada")
        tg.add_user(BOB, "Bob", "Builder", username="bob")
        tg.add_private_chat(ADA)
        config = parse_config(bot_config(tmp, tg.api_url), base=tmp)
        world = World(tg, relay, None, tmp, config, ShiftedClock())  # type: ignore[arg-type]
        host = Host(tmp / "agent", relay.url, *host_args, log=host_log)
        await host.start()
        try:
            async with running_bot(world):
                yield HostWorld(world, host)
        finally:
            await host.stop()
            await kill_children()


@dataclass(frozen=True)
class TcpHost:
    """An agent host serving over TCP too: its state folder, address, port and token."""

    state: Path
    address: str
    port: int
    token: str


def serve_tcp(state: Path, listen: str) -> Iterator[TcpHost]:
    """``agent serve --listen LISTEN`` as a process until the generator is closed. No relay
    listens: the API works all the same."""
    process = subprocess.Popen(
        [*CLI, "agent", "serve", "--state", str(state), "--relay", "ws://127.0.0.1:9/v1/connect",
         "--listen", listen],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env={**os.environ, "SKALD_AGENT_STATE": str(state)},
    )  # fmt: skip
    try:
        assert process.stdout is not None
        banner = process.stdout.readline()
        found = re.search(r"http://([\d.]+):(\d+)", banner)
        assert found, banner
        token = (state / "api-token").read_text(encoding="utf-8").strip()
        yield TcpHost(state, found.group(1), int(found.group(2)), token)
    finally:
        process.terminate()
        assert process.wait(timeout=10) == 0
