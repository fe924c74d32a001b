"""The state folder: private from the first byte, and every way it can be unusable said in
one line (folder, user, fix) by each subcommand that touches it, as real processes."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import eventually
from world import ADA, TOKEN, approval, make_world

ROOT = Path(__file__).resolve().parent.parent
OTHER_UID = 65534


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def cli(args: list[str], tmp: Path, *, unprivileged: bool = False,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``skald-telegram ARGS`` as a real process. ``unprivileged``: without root's
    power to ignore file permissions (as the non-root user of a container is)."""
    command = [sys.executable, "-m", "bot", *args]
    if unprivileged and os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        assert setpriv, "setpriv is needed to test permissions as root"
        command = [setpriv, "--bounding-set=-all", "--inh-caps=-all", *command]
    return subprocess.run(
        command, cwd=tmp, capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )


def foreign_folder(path: Path) -> Path:
    """A folder this process may not use: owned by someone else (as root) or mode 000."""
    path.mkdir(mode=0o700)
    if os.geteuid() == 0:
        os.chown(path, OTHER_UID, OTHER_UID)
    else:
        path.chmod(0)
    return path


def write_config(tmp: Path, state: Path, api_url: str = "http://127.0.0.1:9") -> Path:
    config = tmp / "skald-telegram.toml"
    config.write_text(f'[telegram]\ntoken = "{TOKEN}"\napi_url = "{api_url}"\n'
                      f'admins = [{ADA}]\nchat_pace_seconds = 0\n[state]\ndir = "{state}"\n')
    return config


@pytest.mark.parametrize("command", [["run"], ["identity"], ["audit"], ["pair", "--chat", "1",
                                     "skald-pair:v1?x"]])
def test_an_unusable_state_folder_is_one_line_naming_folder_user_and_fix(
    tmp_path: Path, command: list[str]
) -> None:
    state = foreign_folder(tmp_path / "state")
    config = write_config(tmp_path, state)
    if command[0] == "pair":  # a valid link, so that pair reaches the state folder
        from bot.protocol.identity import Identity
        from bot.protocol.pairing import format_pairing_uri
        link = format_pairing_uri("ws://127.0.0.1:9/v1/connect", Identity.generate("a").card,
                                  bytes(16))
        command = [*command[:-1], link]
    result = cli([command[0], "--config", str(config), *command[1:]], tmp_path,
                 unprivileged=True)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert str(state) in lines[0] and "chown" in lines[0] and "chmod 700" in lines[0]
    assert ("user root" in lines[0]) or (f"user {os.environ.get('USER', '')}" in lines[0])


@pytest.mark.parametrize("command", ["run", "identity", "audit"])
def test_a_state_dir_that_is_a_file_is_one_line(tmp_path: Path, command: str) -> None:
    state = tmp_path / "state"
    state.write_text("not a folder")
    result = cli([command, "--config", str(write_config(tmp_path, state))], tmp_path)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert f"{state} is a file" in result.stderr


def test_doctor_fails_for_a_folder_it_cannot_create_or_use(tmp_path: Path) -> None:
    parent = foreign_folder(tmp_path / "root-owned")
    result = cli(["doctor", "--config", str(write_config(tmp_path, parent / "state"))],
                 tmp_path, unprivileged=True)
    assert result.returncode == 1
    assert f"✗ state folder: {parent / 'state'} does not exist and user" in result.stdout
    assert "chown" in result.stdout and "Traceback" not in result.stderr

    state = foreign_folder(tmp_path / "state")
    result = cli(["doctor", "--config", str(write_config(tmp_path, state))], tmp_path,
                 unprivileged=True)
    assert result.returncode == 1
    assert f"✗ state folder: {state} is not readable and writable by user" in result.stdout
    assert "Traceback" not in result.stderr


def test_audit_without_a_database_says_so(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    result = cli(["audit", "--config", str(write_config(tmp_path, state))], tmp_path)
    assert result.returncode == 1
    assert f"no database at {state / 'skald-telegram.sqlite3'}" in result.stderr
    assert not (state / "skald-telegram.sqlite3").exists()


async def test_state_files_are_private_even_with_a_permissive_umask(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world:
        state = tmp_path / "state"
        config = write_config(tmp_path, state, world.tg.api_url)
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot", "run", "--config", str(config), cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(ROOT)}, preexec_fn=lambda: os.umask(0o022),
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )
        try:
            await world.pair(ADA)
            world.agent.submit_approval(approval("apr_private"))
            await world.wait_card(ADA, "apr_private", timeout=20)
            database = state / "skald-telegram.sqlite3"
            files = [database, database.with_name(database.name + "-wal"),
                     database.with_name(database.name + "-shm"), state / "status.json",
                     state / "identity.json"]
            await eventually(lambda: all(p.exists() for p in files), timeout=20)
            assert mode(state) == 0o700
            assert {p.name: mode(p) for p in files} == {p.name: 0o600 for p in files}
        finally:
            process.send_signal(signal.SIGTERM)
            await process.wait()


async def test_doctor_fails_when_folder_or_database_is_readable_by_others(
    tmp_path: Path,
) -> None:
    from bot.doctor import diagnose
    from bot.store import Store

    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    Store.open(state / "skald-telegram.sqlite3").close()
    config = write_config(tmp_path, state)
    (state / "skald-telegram.sqlite3").chmod(0o644)
    checks = {c.name: c for c in await diagnose(str(config), environ={})}
    assert not checks["database"].ok
    assert checks["database"].fix == f"chmod 600 {state / 'skald-telegram.sqlite3'}"
    state.chmod(0o755)
    checks = {c.name: c for c in await diagnose(str(config), environ={})}
    assert not checks["state folder"].ok
    assert checks["state folder"].fix == f"chmod 700 {state}"


async def test_pair_names_the_device_as_the_running_bot_does(tmp_path: Path) -> None:
    from bot.cli import main as cli_main
    from bot.keyfile import load_identity

    async with make_world(tmp_path) as world:
        config = write_config(tmp_path, tmp_path / "state", world.tg.api_url)
        code = await asyncio.to_thread(cli_main, [
            "pair", "--config", str(config), "--chat", str(ADA),
            world.agent.new_pairing_uri()])
        assert code == 0
        name = load_identity(tmp_path / "state" / "identity.json").name
        assert name == "Telegram @skald_test_bot"
