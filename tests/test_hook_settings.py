"""``hook install`` and ``hook uninstall`` on real settings files, through the real
command line: what is there stays, the original is backed up, the hook's timeout outlasts
the approval's, and what changed is printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest


def cli(*args: str, home: Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "bot", *args], env=env, cwd=cwd or home,
                          capture_output=True, text=True, timeout=60)


def read(path: Path) -> Any:
    return json.loads(path.read_text())


def backups(path: Path) -> list[Path]:
    """The backups beside ``path``, oldest first."""
    found = path.parent.glob(f"{path.name}.bak-*")
    return sorted(found, key=lambda p: (p.name[:len(path.name) + 21], len(p.name), p.name))


def test_claude_code_install_keeps_what_is_there_and_uninstall_restores_it(
    tmp_path: Path,
) -> None:
    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir()
    original = {
        "model": "opus",
        "permissions": {"allow": ["Bash(ls:*)"]},
        "hooks": {"PermissionRequest": [
            {"matcher": "Bash", "hooks": [{"type": "command", "command": "audit.sh"}]}],
            "Stop": [{"hooks": [{"type": "command", "command": "notify.sh"}]}]},
    }
    settings.write_text(json.dumps(original, indent=4))
    done = cli("hook", "install", "claude-code", "--timeout", "120", home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert str(settings) in done.stdout and "+ PermissionRequest (matcher *)" in done.stdout
    assert "hook timeout 150 s" in done.stdout
    [backup] = backups(settings)
    assert f"backup of the replaced version: {backup}" in done.stdout
    assert read(backup) == original

    installed = read(settings)
    assert installed["model"] == "opus" and installed["permissions"] == original["permissions"]
    assert installed["hooks"]["Stop"] == original["hooks"]["Stop"]
    groups = installed["hooks"]["PermissionRequest"]
    assert groups[0] == original["hooks"]["PermissionRequest"][0]
    ours = groups[1]
    assert ours["matcher"] == "*"
    handler = ours["hooks"][0]
    assert handler["type"] == "command" and handler["timeout"] == 150
    assert "hook claude-code --timeout 120" in handler["command"]

    again = cli("hook", "install", "claude-code", "--timeout", "120", home=tmp_path)
    assert "already installed" in again.stdout
    assert read(settings) == installed

    changed = cli("hook", "install", "claude-code", "--timeout", "60", home=tmp_path)
    assert "- PermissionRequest" in changed.stdout and "hook timeout 90 s" in changed.stdout
    assert read(backup) == original and read(backups(settings)[1]) == installed

    removed = cli("hook", "uninstall", "claude-code", home=tmp_path)
    assert removed.returncode == 0 and "- PermissionRequest" in removed.stdout
    assert read(settings) == original
    assert "nothing changed" in cli("hook", "uninstall", "claude-code", home=tmp_path).stdout


@pytest.mark.parametrize(("agent", "file", "events", "timeout"), [
    ("codex", ".codex/hooks.json", ["PermissionRequest"], 330),
    ("gemini", ".gemini/settings.json", ["BeforeTool"], 330_000),
    ("cursor", ".cursor/hooks.json",
     ["beforeShellExecution", "beforeMCPExecution", "preToolUse"], 330),
])
def test_project_scope_for_each_agent(
    tmp_path: Path, agent: str, file: str, events: list[str], timeout: int
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    done = cli("hook", "install", agent, "--scope", "project", "--state", "st",
               home=tmp_path, cwd=project)
    assert done.returncode == 0, done.stderr
    settings = read(project / file)
    assert not (tmp_path / file).exists()
    assert sorted(settings["hooks"]) == sorted(events)
    for event in events:
        [entry] = settings["hooks"][event]
        handler = entry if agent == "cursor" else entry["hooks"][0]
        assert handler["timeout"] == timeout
        assert f"hook {agent} --timeout 300 --state {project / 'st'}" in handler["command"]
    if agent == "cursor":
        assert settings["version"] == 1
        assert settings["hooks"]["beforeShellExecution"][0]["failClosed"] is True
    assert "backup" not in done.stdout  # there was no original to keep
    cli("hook", "uninstall", agent, "--scope", "project", home=tmp_path, cwd=project)
    assert read(project / file) == ({"version": 1} if agent == "cursor" else {})


def test_a_broken_settings_file_is_left_alone(tmp_path: Path) -> None:
    settings = tmp_path / ".gemini" / "settings.json"
    settings.parent.mkdir()
    settings.write_text("{ not json")
    done = cli("hook", "install", "gemini", home=tmp_path)
    assert done.returncode == 1
    assert "not valid JSON" in done.stderr and "nothing was changed" in done.stderr
    assert "Traceback" not in done.stderr
    assert settings.read_text() == "{ not json"


def test_install_needs_an_agent(tmp_path: Path) -> None:
    done = cli("hook", "install", home=tmp_path)
    assert done.returncode == 2 and "needs an AGENT" in done.stderr


ODD_NUMBERS = """{
  "cleanupPeriodDays": 1.0,
  "limits": [
    1e3,
    12345678901234567890,
    -0,
    1E+2,
    0.10,
    2.5e-324,
    -1.7976931348623157e308,
    123456789012345678901234567890.123456789
  ],
  "env": {
    "A": "caf\\u00e9 \\ud83d\\ude00",
    "B": "\\ud800"
  }
}
"""


def test_odd_numbers_stay_byte_for_byte(tmp_path: Path) -> None:
    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(ODD_NUMBERS.replace('caf\\u00e9 \\ud83d\\ude00', "café 😀"))
    original = settings.read_bytes()
    assert cli("hook", "install", "claude-code", home=tmp_path).returncode == 0
    installed = settings.read_text()
    for number in ("1.0", "1e3", "12345678901234567890", "-0", "1E+2", "0.10", "2.5e-324",
                   "-1.7976931348623157e308", "123456789012345678901234567890.123456789"):
        assert f" {number}" in installed, number
    assert '"\\ud800"' in installed and "café 😀" in installed
    assert cli("hook", "uninstall", "claude-code", home=tmp_path).returncode == 0
    assert settings.read_bytes() == original


def test_a_symlinked_settings_file_stays_a_link_to_the_changed_target(tmp_path: Path) -> None:
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    target = dotfiles / "gemini.json"
    target.write_text('{\n  "theme": "dark"\n}\n')
    os.chmod(target, 0o600)
    settings = tmp_path / ".gemini" / "settings.json"
    settings.parent.mkdir()
    settings.symlink_to(Path("..") / "dotfiles" / "gemini.json")
    done = cli("hook", "install", "gemini", home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert settings.is_symlink() and os.readlink(settings) == "../dotfiles/gemini.json"
    assert read(target)["hooks"]["BeforeTool"] and read(target)["theme"] == "dark"
    assert target.stat().st_mode & 0o777 == 0o600
    [backup] = backups(settings)
    assert backup.read_text() == '{\n  "theme": "dark"\n}\n' and not backup.is_symlink()
    assert backup.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in dotfiles.iterdir()) == ["gemini.json"]  # no stray file


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o644])
def test_the_files_mode_is_kept(tmp_path: Path, mode: int) -> None:
    settings = tmp_path / ".codex" / "hooks.json"
    settings.parent.mkdir()
    settings.write_text("{}\n")
    os.chmod(settings, mode)
    assert cli("hook", "install", "codex", home=tmp_path).returncode == 0
    assert settings.stat().st_mode & 0o777 == mode
    assert cli("hook", "uninstall", "codex", home=tmp_path).returncode == 0
    assert settings.stat().st_mode & 0o777 == mode
    assert all(b.stat().st_mode & 0o777 == mode for b in backups(settings))


@pytest.mark.parametrize(("text", "why"), [
    ('{"model": "opus", "model": "sonnet"}', 'the key "model" appears twice'),
    ('{"hooks": {"Stop": [], "Stop": [{"hooks": []}]}}', 'the key "Stop" appears twice'),
    ('{"a": [{"x": 1, "y": 2, "x": 1}]}', 'the key "x" appears twice'),
    ('{"limit": 1e400}', "the number 1e400 is beyond what the agent can read"),
    ('{"limit": -1' + "0" * 400 + "}", "is beyond what the agent can read"),
    ('{"limit": NaN}', "NaN is not JSON"),
    ('{"limit": -Infinity}', "-Infinity is not JSON"),
    ('{\n  // the model\n  "model": "opus"\n}', "comments and trailing commas"),
    ('{"model": "opus",}', "comments and trailing commas"),
    ('{"model": "opus"} {}', "not valid JSON"),
    ("[1, 2]", "not a JSON object"),
    ("\ufeff{}", "not valid JSON"),
])
@pytest.mark.parametrize("command", ["install", "uninstall"])
def test_a_file_that_cannot_be_rewritten_losslessly_is_refused_untouched(
    tmp_path: Path, text: str, why: str, command: str,
) -> None:
    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(text, encoding="utf-8")
    os.utime(settings, (1_000_000_000, 1_000_000_000))
    done = cli("hook", command, "claude-code", home=tmp_path)
    assert done.returncode == 1
    assert why in done.stderr and "nothing was changed" in done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert settings.read_text(encoding="utf-8") == text
    assert settings.stat().st_mtime == 1_000_000_000
    assert [p.name for p in settings.parent.iterdir()] == ["settings.json"]


def test_every_replaced_version_is_kept_and_no_backup_is_overwritten(tmp_path: Path) -> None:
    settings = tmp_path / ".cursor" / "hooks.json"
    settings.parent.mkdir()
    settings.write_text('{"version": 1}')
    versions = [settings.read_text()]
    squatter = settings.with_name(f"hooks.json.bak-{_stamp()}")
    squatter.write_text("an earlier backup")
    for args in (["--timeout", "60"], ["--timeout", "90"], ["--timeout", "90"], []):
        assert cli("hook", "install", "cursor", *args, home=tmp_path).returncode == 0
        if settings.read_text() != versions[-1]:
            versions.append(settings.read_text())
    assert cli("hook", "uninstall", "cursor", home=tmp_path).returncode == 0
    assert squatter.read_text() == "an earlier backup"
    kept = [b.read_text() for b in backups(settings) if b != squatter]
    assert kept == versions  # the third install changed nothing, so kept nothing
    assert len(set(b.name for b in backups(settings))) == len(versions) + 1


def _stamp() -> str:
    from datetime import UTC, datetime

    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")


def test_install_pins_the_agent_host_folder_named_by_the_environment(tmp_path: Path) -> None:
    state = tmp_path / "elsewhere" / "agent"
    env = {**os.environ, "HOME": str(tmp_path), "SKALD_AGENT_STATE": str(state)}
    done = subprocess.run([sys.executable, "-m", "bot", "hook", "install", "gemini"], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    [entry] = read(tmp_path / ".gemini" / "settings.json")["hooks"]["BeforeTool"]
    assert f"--state {state}" in entry["hooks"][0]["command"]
