"""Whether a request reached a device: the relay's ``delivered`` receipt at the agent
host, each device's last-seen time, and what ``ask`` says on stderr while it waits (the
waiting line on a terminal only; "not picked up" when no device holds the request)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
from datetime import datetime, timedelta
from pathlib import Path

from agenthost_world import CLI, HostWorld, Process, finished, host_world, run_cli, start_cli
from tapping import approve
from world import ADA

NOTICE = {"SKALD_PICKUP_NOTICE_S": "0.3"}
HOOK_FIXTURES = Path(__file__).parent / "fixtures" / "hooks"


WAITING = r"waiting for approval in Telegram: {} \(apr_[\w-]+\); Ctrl-C withdraws it"


async def ask_on_a_terminal(*args: str, env: dict[str, str]) -> tuple[
        asyncio.subprocess.Process, int]:
    """``ask`` with its stderr on a pseudo-terminal; the process and the terminal's end."""
    master, slave = os.openpty()
    process = await asyncio.create_subprocess_exec(
        *CLI, "ask", *args, env=env, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=slave,
    )
    os.close(slave)
    return process, master


async def shown_on_terminal(process: asyncio.subprocess.Process, master: int) -> str:
    """What ``process`` wrote to the terminal whose end is ``master``, once it exited 0."""
    async with asyncio.timeout(20):
        await process.communicate()
    shown = read_terminal(master)
    assert process.returncode == 0, shown
    return shown


def read_terminal(master: int) -> str:
    chunks = []
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the other end is closed and drained
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    return b"".join(chunks).decode()


async def test_a_device_online_picks_the_request_up_and_is_seen(tmp_path: Path) -> None:
    async with host_world(tmp_path) as hw:
        async with hw.host.client() as client:
            assert (await client.status())["devices"] == []
            await hw.pair()
            [device] = (await client.status())["devices"]
            paired_seen = device["last_seen"]
            assert paired_seen is not None  # its pair request
            process, master = await ask_on_a_terminal(
                "--tool", "deploy", "--arg", "env=production", env={**hw.host.env, **NOTICE})
            card = await hw.world.wait_card(ADA, "deploy(production)")
            [item] = await client.items()
            # The bot acknowledged the update that carried it: the relay told the host.
            for _ in range(100):
                outcome = await client.outcome(item["item_id"])
                if outcome.picked_up:
                    break
                await asyncio.sleep(0.05)
            assert outcome.picked_up is True
            [device] = (await client.status())["devices"]
            assert device["last_seen"] > paired_seen
            await asyncio.sleep(0.6)  # past the notice's time
            hw.world.tap(ADA, card, ADA, "Approve")
        shown = await shown_on_terminal(process, master)
        assert re.search(WAITING.format(r"deploy\(production\)"), shown), shown
        assert "not picked up" not in shown
        status = await run_cli("agent", "status", env=hw.host.env)
        assert re.search(r"Telegram .*, last seen \S+ \(\d+ s ago\)", status.out), status.out
        async with hw.host.client() as client:
            [device] = (await client.status())["devices"]
        await hw.host.stop()  # kept by the host: a restart does not forget it
        await hw.host.start()
        async with hw.host.client() as client:
            [again] = (await client.status())["devices"]
        kept = datetime.fromisoformat(again["last_seen"])
        # Receipts are written at most once a second: the time kept is at most that old.
        assert timedelta(0) <= datetime.fromisoformat(device["last_seen"]) - kept <= timedelta(
            seconds=1)


async def test_no_device_online_is_said_and_require_device_exits_3(tmp_path: Path) -> None:
    async with host_world(tmp_path) as hw:
        await hw.pair()
        assert hw.world.bot is not None
        await hw.world.bot.relays.stop()  # the only device goes offline
        env = {**hw.host.env, **NOTICE}

        waiting = await start_cli("ask", "--tool", "deploy", "--timeout", "1.5", env=env)
        result: Process = await finished(waiting)
        assert result.code == 2, result.err  # it said so and waited on, to the timeout
        assert re.search(r"skald-telegram ask: not picked up by any device yet; "
                         r"Telegram \S+ last seen \d+ s ago", result.err), result.err
        assert "waiting for approval" not in result.err  # stderr is a pipe here

        required = await start_cli("ask", "--tool", "deploy", "--require-device",
                                   "--timeout", "60", env=env)
        result = await finished(required, timeout=10)
        assert result.code == 3, result.err
        assert "not picked up by any device yet" in result.err
        assert "withdrawn: no device picked it up" in result.err
        async with hw.host.client() as client:
            assert await client.items() == []  # withdrawn


async def test_ask_waits_on_when_the_host_is_away_as_it_would_tell(tmp_path: Path) -> None:
    """The host restarting when ``ask`` would look whether a device picked the request up:
    ``ask`` cannot say, and waits on for the person's decision instead of ending."""
    async with host_world(tmp_path) as hw:
        await hw.pair()
        bot = hw.world.bot
        assert bot is not None
        await bot.relays.stop()  # unseen: the notice would be said
        waiting = await start_cli("ask", "--tool", "deploy", "--json",
                                  env={**hw.host.env, "SKALD_PICKUP_NOTICE_S": "1"})
        async with hw.host.client() as client:
            for _ in range(200):
                if await client.items():
                    break
                await asyncio.sleep(0.02)
        hw.host.kill()
        assert hw.host.process is not None
        await hw.host.process.wait()
        await asyncio.sleep(1.5)  # past the notice's time, the host away
        assert waiting.returncode is None
        await hw.host.start()
        bot.relays.ensure_all()
        await approve(hw, "deploy")
        result = await finished(waiting)
        assert result.code == 0 and '"approved"' in result.out, result.err


async def start_hook(hw: HostWorld, stderr: int,
                     event_name: str = "PreToolUse-Bash") -> asyncio.subprocess.Process:
    """The Claude Code hook on a Bash event, its stderr on ``stderr``."""
    event = (HOOK_FIXTURES / "claude-code" / f"{event_name}.json").read_bytes()
    process = await asyncio.create_subprocess_exec(
        *CLI, "hook", "claude-code", "--state", str(hw.host.state),
        env={**hw.host.env, **NOTICE}, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=stderr,
    )
    assert process.stdin is not None
    process.stdin.write(event)
    await process.stdin.drain()
    process.stdin.close()
    return process


async def test_a_hook_says_it_waits_on_a_terminal_only(tmp_path: Path) -> None:
    async with host_world(tmp_path) as hw:
        await hw.pair()
        master, slave = os.openpty()
        on_terminal = await start_hook(hw, slave, "PermissionRequest-Bash")
        os.close(slave)
        await approve(hw, "Claude Code wants to run: curl")
        shown = await shown_on_terminal(on_terminal, master)
        assert re.search("skald-telegram hook: " + WAITING.format("Claude Code wants to run: "
                                                                  "curl .*"), shown), shown
        assert "sk-live-123456789" not in shown  # masked, as on the card

        on_pipe = await start_hook(hw, asyncio.subprocess.PIPE)
        await approve(hw, "Claude Code wants to run: rm -rf build")
        result = await finished(on_pipe)
        assert result.code == 0 and result.err == "", result.err


async def test_a_hook_says_when_no_device_picked_the_request_up(tmp_path: Path) -> None:
    async with host_world(tmp_path) as hw:
        await hw.pair()
        assert hw.world.bot is not None
        await hw.world.bot.relays.stop()
        hook = await start_hook(hw, asyncio.subprocess.PIPE)
        await asyncio.sleep(1.0)  # past the notice's time: it waits on
        assert hook.returncode is None
        hook.send_signal(signal.SIGTERM)
        result = await finished(hook)
        assert result.code == 0 and '"deny"' in result.out, result.out
        assert re.search(r"skald-telegram hook: not picked up by any device yet; "
                         r"Telegram \S+ last seen \d+ s ago", result.err), result.err
