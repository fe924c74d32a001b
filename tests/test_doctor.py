"""``skald-telegram doctor``: every check passing on a real paired setup, and each one
failing with its fix on a broken config, a wrong token, an unreachable relay, a key file
readable by others and a world-writable state folder."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from world import ADA, TOKEN, World, make_world, running_bot

from bot.cli import main as cli_main
from bot.doctor import Check, diagnose, format_checks
from bot.playground.stub import TelegramStub


def write_config(tmp: Path, api_url: str, token: str = TOKEN) -> Path:
    path = tmp / "skald-telegram.toml"
    path.write_text(
        f'[telegram]\ntoken = "{token}"\napi_url = "{api_url}"\nadmins = [{ADA}]\n'
        f'[state]\ndir = "{tmp / "state"}"\n'
    )
    return path


async def paired(world: World) -> None:
    """Leave a real state folder behind: identity, database and a paired agent."""
    async with running_bot(world):
        await world.pair(ADA)


def by_name(checks: list[Check]) -> dict[str, Check]:
    return {check.name: check for check in checks}


async def test_doctor_passes_on_a_paired_setup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("TELEGRAM_BOT_TOKEN", raising=False)
    async with make_world(tmp_path) as world:
        await paired(world)
        config = write_config(tmp_path, world.tg.api_url)
        relay_url = world.relay.url
        code = await asyncio.to_thread(cli_main, ["doctor", "--config", str(config)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "✗" not in out and TOKEN not in out
    assert f"✓ config: {config} is valid" in out
    assert "✓ token: @skald_test_bot" in out
    assert f"✓ relay {relay_url}: reachable; authentication works" in out
    assert "✓ key file:" in out and "mode 0600" in out
    assert "✓ database:" in out and "(schema 2)" in out
    assert "✓ state folder:" in out
    assert len(out.splitlines()) == 6


async def test_doctor_passes_before_the_first_run(tmp_path: Path) -> None:
    async with TelegramStub(token=TOKEN) as tg:
        checks = by_name(await diagnose(str(write_config(tmp_path, tg.api_url)), environ={}))
    assert all(check.ok for check in checks.values()), format_checks(checks.values())
    assert "will be created on first run" in checks["key file"].detail
    assert "will be created on first run" in checks["database"].detail
    assert "no agent paired yet" in checks["relays"].detail


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("[telegram\ntoken = 1\n", "is not valid TOML"),
        ('[telegram]\ntokn = "123:abc"\n', "telegram.tokn: unknown setting"),
    ],
)
def test_doctor_fails_on_a_broken_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, error: str
) -> None:
    config = tmp_path / "broken.toml"
    config.write_text(text)
    assert cli_main(["doctor", "--config", str(config)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("✗ config: ") and error in lines[0]
    assert lines[1] == (f"    fix: edit {config} "
                        "(see the configuration reference in docs/configuration.md)")
    assert len(lines) == 2


async def test_doctor_fails_on_a_wrong_token(tmp_path: Path) -> None:
    wrong = "123456:not-the-right-secret"
    async with TelegramStub(token=TOKEN) as tg:
        checks = await diagnose(str(write_config(tmp_path, tg.api_url, wrong)), environ={})
    token = by_name(checks)["token"]
    assert not token.ok
    assert token.detail == f"the Bot API at {tg.api_url} refused the token"
    assert token.fix is not None and "@BotFather" in token.fix
    assert "not-the-right-secret" not in format_checks(checks)


async def test_doctor_fails_on_an_unreachable_relay(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world:
        await paired(world)
        relay_url = world.relay.url
        await world.relay.close()
        checks = await diagnose(str(write_config(tmp_path, world.tg.api_url)), environ={})
    relay = by_name(checks)[f"relay {relay_url}"]
    assert not relay.ok
    assert relay.detail.startswith("cannot connect")
    assert relay.fix is not None and "check that the relay runs" in relay.fix
    assert [c.name for c in checks if not c.ok] == [relay.name]


@pytest.mark.parametrize(
    ("target", "mode", "check", "fix"),
    [
        ("state/identity.json", 0o644, "key file", "chmod 600 {path}"),
        ("state", 0o777, "state folder", "chmod 700 {path}"),
    ],
)
async def test_doctor_fails_on_loose_permissions(
    tmp_path: Path, target: str, mode: int, check: str, fix: str
) -> None:
    async with make_world(tmp_path) as world:
        await paired(world)
        path = tmp_path / target
        path.chmod(mode)
        checks = await diagnose(str(write_config(tmp_path, world.tg.api_url)), environ={})
    failed = [c for c in checks if not c.ok]
    assert [c.name for c in failed] == [check]
    assert f"mode {mode:04o}" in failed[0].detail
    assert failed[0].fix == fix.format(path=path)
    printed = format_checks(checks)
    assert f"✗ {check}: " in printed and f"    fix: {fix.format(path=path)}" in printed
