"""The README's commands, the Dockerfile and the compose file say what the code does."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest

from bot import __version__
from bot.cli import build_parser, main

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _shell_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, flags=re.DOTALL)


def _readme_commands() -> list[list[str]]:
    """Every ``skald-telegram …`` invocation in the README, in code blocks or inline."""
    found: list[str] = []
    for block in _shell_blocks(README):
        for line in block.splitlines():
            for part in line.split("#")[0].split("&&"):
                if part.strip().startswith("skald-telegram"):
                    found.append(part.strip())
    for line in README.splitlines():
        if not line.startswith("|"):  # table rows are synopses, not commands
            found += re.findall(r"`(skald-telegram [^`]*)`", line)
    return [shlex.split(command.replace("…", "x"))[1:] for command in found]


def test_readme_gives_the_two_commands_and_ci_runs_the_test_one() -> None:
    blocks = [b.strip() for b in _shell_blocks(README)]
    assert "pip install . && skald-telegram demo" in blocks
    assert "pip install -e '.[test]' && python -m pytest" in blocks
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "\npip install -e '.[test]' && python -m pytest\n" in ci


@pytest.mark.parametrize("argv", _readme_commands(), ids=" ".join)
def test_every_readme_command_parses(argv: list[str]) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    assert args.command is not None


def test_every_subcommand_is_documented() -> None:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command")
    for name in subparsers.choices:  # type: ignore[union-attr]
        assert f"skald-telegram {name}" in README, name


def test_version_and_identity_and_render(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert __version__ in capsys.readouterr().out
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SKALD_TELEGRAM_CONFIG", raising=False)
    monkeypatch.delenv("SKALD_TELEGRAM_STATE_DIR", raising=False)
    assert main(["identity"]) == 0
    card = capsys.readouterr().out
    assert '"id"' in card and '"kx_pub"' in card and "seed" not in card
    assert (tmp_path / "state" / "identity.json").stat().st_mode & 0o777 == 0o600
    example = ROOT / "tests" / "data" / "render-example.json"
    assert main(["render", str(example), "--chat-type", "group"]) == 0
    assert "sk-live-51H8xQ2eZvKYlo2C" not in capsys.readouterr().out


def test_health_reports_a_missing_or_stale_status(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SKALD_TELEGRAM_STATE_DIR", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    assert main(["health"]) == 1
    assert "is the bot running" in capsys.readouterr().out
    from bot.health import write_status

    write_status(tmp_path / "status.json",
                 {"pid": os.getpid(), "relays": [{"url": "ws://r", "connected": True}]})
    assert main(["health"]) == 0


def test_dockerfile_runs_as_non_root_from_a_pinned_base_with_a_real_entry_point() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    bases = re.findall(r"^FROM\s+(\S+)", dockerfile, flags=re.MULTILINE)
    assert len(bases) >= 2, "multi-stage build"
    for base in bases:
        assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim-\w+", base), base
    users = re.findall(r"^USER\s+(\S+)", dockerfile, flags=re.MULTILINE)
    assert users and users[-1] not in ("root", "0")
    assert re.search(r"^VOLUME\s+\[\"/state\"\]", dockerfile, flags=re.MULTILINE)
    parser = build_parser()
    for instruction in ("CMD", "HEALTHCHECK"):
        match = re.search(rf"^{instruction}\b.*?(\[.*?\])\s*$", dockerfile,
                          flags=re.MULTILINE | re.DOTALL)
        assert match, instruction
        argv = [part.strip().strip('"') for part in match.group(1).strip("[]").split(",")]
        assert argv[0] == "skald-telegram"
        assert parser.parse_args(argv[1:]).command in ("run", "health")
    compose = (ROOT / "compose.yaml").read_text(encoding="utf-8")
    assert "skald-telegram" in compose and "relay" in compose
    for command in re.findall(r'command: \[(.*?)\]', compose):
        argv = [part.strip().strip('"') for part in command.split(",")]
        assert parser.parse_args(argv[1:]).command == "relay"
