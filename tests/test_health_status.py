"""``health`` and ``pair`` believe the status file only while its bot process lives: a
clean stop removes it, and a killed bot's file names a process that is gone."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

from conftest import eventually
from world import ADA, TOKEN, make_world

ROOT = Path(__file__).resolve().parent.parent


def write_config(tmp: Path, api_url: str) -> Path:
    config = tmp / "skald-telegram.toml"
    config.write_text(f'[telegram]\ntoken = "{TOKEN}"\napi_url = "{api_url}"\n'
                      f'admins = [{ADA}]\n[state]\ndir = "{tmp / "state"}"\n')
    return config


def cli(args: list[str], tmp: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bot", *args], cwd=tmp, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})


async def start_bot(config: Path, tmp: Path) -> asyncio.subprocess.Process:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "run", "--config", str(config), cwd=tmp,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    await eventually(lambda: (tmp / "state" / "status.json").exists(), timeout=20)
    return process


async def test_health_and_pair_do_not_trust_the_status_of_a_stopped_bot(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world:
        config = write_config(tmp_path, world.tg.api_url)
        process = await start_bot(config, tmp_path)
        healthy = await asyncio.to_thread(cli, ["health", "--config", str(config)], tmp_path)
        assert healthy.returncode == 0, healthy.stdout
        link = world.agent.new_pairing_uri()
        busy = await asyncio.to_thread(
            cli, ["pair", "--config", str(config), "--chat", str(ADA), link], tmp_path)
        assert busy.returncode == 1 and "the bot is running" in busy.stderr

        process.send_signal(signal.SIGTERM)
        assert await process.wait() == 0
        assert not (tmp_path / "state" / "status.json").exists()
        stopped = await asyncio.to_thread(cli, ["health", "--config", str(config)], tmp_path)
        assert stopped.returncode == 1
        paired = await asyncio.to_thread(
            cli, ["pair", "--config", str(config), "--chat", str(ADA), link], tmp_path)
        assert paired.returncode == 0, paired.stderr

        process = await start_bot(config, tmp_path)
        process.send_signal(signal.SIGKILL)
        await process.wait()
        assert (tmp_path / "state" / "status.json").exists()
        killed = await asyncio.to_thread(cli, ["health", "--config", str(config)], tmp_path)
        assert killed.returncode == 1
        assert f"process {process.pid}" in killed.stdout and "not running" in killed.stdout
